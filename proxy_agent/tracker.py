"""The proxy's model of the cluster: service ports and their endpoints, built from Services and
EndpointSlices, plus a change tracker that remembers which Services need their rules rewritten
(upstream's ServiceChangeTracker / EndpointsChangeTracker, folded into one).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Any, NamedTuple

Obj = dict[str, Any]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
DEFAULT_AFFINITY_TIMEOUT = 10800


@dataclass(frozen=True, slots=True, order=True)
class ServicePortName:
    """One port of one Service; its string form is what upstream hashes into chain names."""

    namespace: str
    name: str
    port: str = ""
    protocol: str = "TCP"

    @property
    def service(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}:{self.port}" if self.port else f"{self.namespace}/{self.name}"

    @property
    def key(self) -> tuple[str, str, str, str]:
        """The sort key as a plain tuple: sorting 10,000 ports by it avoids the dataclass __lt__."""
        return self.namespace, self.name, self.port, self.protocol


@dataclass(frozen=True, slots=True)
class ServicePort:
    """What the rules need of one Service port."""

    name: ServicePortName
    cluster_ip: str
    port: int
    protocol: str
    node_port: int = 0
    affinity_timeout: int = 0
    external_local: bool = False
    internal_local: bool = False
    health_check_node_port: int = 0
    external_ips: tuple[str, ...] = ()

    @property
    def proto(self) -> str:
        return self.protocol.lower()

    @property
    def external(self) -> bool:
        return bool(self.node_port or self.external_ips)


class Endpoint(NamedTuple):
    """One backend address of one Service port, with its EndpointSlice conditions (a tuple: 50,000
    of them are built on every full sync)."""

    ip: str
    port: int
    ready: bool = True
    serving: bool = True
    terminating: bool = False
    node_name: str = ""
    hostname: str = ""

    def __str__(self) -> str:
        return f"{self.ip}:{self.port}"


def service_ports(svc: Obj) -> dict[ServicePortName, ServicePort]:
    """The proxied ports of a Service; headless, ExternalName and IP-less Services proxy nothing."""
    spec = svc.get("spec") or {}
    meta = svc.get("metadata") or {}
    cluster_ip = spec.get("clusterIP") or ""
    if spec.get("type") == "ExternalName" or cluster_ip in ("", "None") or ":" in cluster_ip:
        return {}
    affinity = 0
    if spec.get("sessionAffinity") == "ClientIP":
        cfg = (spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}
        affinity = int(cfg.get("timeoutSeconds") or DEFAULT_AFFINITY_TIMEOUT)
    svc_type = spec.get("type") or "ClusterIP"
    external_local = spec.get("externalTrafficPolicy") == "Local" and svc_type in ("NodePort", "LoadBalancer")
    external_ips = tuple(ip for ip in spec.get("externalIPs") or [] if ":" not in ip)
    if svc_type == "LoadBalancer":
        external_ips += load_balancer_ips(svc, external_ips)
    out: dict[ServicePortName, ServicePort] = {}
    for port in spec.get("ports") or []:
        protocol = port.get("protocol") or "TCP"
        spn = ServicePortName(
            meta.get("namespace", ""), meta.get("name", ""), port.get("name") or "", protocol
        )
        out[spn] = ServicePort(
            name=spn,
            cluster_ip=cluster_ip,
            port=int(port["port"]),
            protocol=protocol,
            node_port=int(port.get("nodePort") or 0) if svc_type in ("NodePort", "LoadBalancer") else 0,
            affinity_timeout=affinity,
            external_local=external_local,
            internal_local=spec.get("internalTrafficPolicy") == "Local",
            health_check_node_port=int(spec.get("healthCheckNodePort") or 0) if external_local else 0,
            external_ips=external_ips,
        )
    return out


def load_balancer_ips(svc: Obj, skip: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The IPv4 `status.loadBalancer.ingress` addresses the proxy answers on, as upstream's: all but those
    with `ipMode: Proxy`, whose load balancer delivers to the node itself."""
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return tuple(dict.fromkeys(i["ip"] for i in ingress if i.get("ip") and ":" not in i["ip"]
                               and i.get("ipMode") != "Proxy" and i["ip"] not in skip))


def slice_endpoints(slices: list[Obj]) -> dict[tuple[str, str], list[Endpoint]]:
    """Endpoints per (port name, protocol) merged over a Service's IPv4 slices, deduplicated by ip:port."""
    merged: dict[tuple[str, str], dict[tuple[str, int], Endpoint]] = {}
    for sl in slices:
        if sl.get("addressType", "IPv4") != "IPv4":
            continue
        for port in sl.get("ports") or []:
            if port.get("port") is None:
                continue
            key = (port.get("name") or "", port.get("protocol") or "TCP")
            bucket = merged.setdefault(key, {})
            number = int(port["port"])
            for ep in sl.get("endpoints") or []:
                addresses = ep.get("addresses")
                if not addresses:
                    continue
                cond = ep.get("conditions") or {}
                ready = cond.get("ready") is not False
                serving = cond.get("serving")
                endpoint = Endpoint(
                    addresses[0],
                    number,
                    ready,
                    ready if serving is None else bool(serving),
                    bool(cond.get("terminating")),
                    ep.get("nodeName") or "",
                    ep.get("hostname") or "",
                )
                bucket.setdefault((endpoint.ip, number), endpoint)
    return {key: sorted(b.values(), key=_ep_order) for key, b in merged.items()}


def _ep_order(ep: Endpoint) -> tuple[bytes, int]:
    return socket.inet_aton(ep.ip), ep.port


def usable(endpoints: list[Endpoint]) -> list[Endpoint]:
    """Ready endpoints, or when none is ready the serving-and-terminating ones (upstream's fallback)."""
    ready = [ep for ep in endpoints if ep.ready]
    return ready or [ep for ep in endpoints if ep.serving and ep.terminating]


@dataclass(slots=True)
class ProxyState:
    """Everything a backend renders rules from."""

    node_name: str = ""
    cluster_cidr: str = ""
    masquerade_all: bool = False
    node_ips: tuple[str, ...] = ()
    nodeport_addresses: tuple[str, ...] = ()
    services: dict[ServicePortName, ServicePort] = field(default_factory=dict)
    endpoints: dict[ServicePortName, list[Endpoint]] = field(default_factory=dict)

    def cluster_endpoints(self, sp: ServicePort) -> list[Endpoint]:
        """Endpoints for traffic to the ClusterIP (only this node's ones with internalTrafficPolicy Local)."""
        eps = usable(self.endpoints.get(sp.name, []))
        return [ep for ep in eps if ep.node_name == self.node_name] if sp.internal_local else eps

    def local_endpoints(self, sp: ServicePort) -> list[Endpoint]:
        return [ep for ep in usable(self.endpoints.get(sp.name, [])) if ep.node_name == self.node_name]

    def nodeport_ips(self) -> list[str] | None:
        """Node addresses NodePorts listen on, or None for every local address (no --nodeport-addresses)."""
        if not self.nodeport_addresses:
            return None
        nets = [ipaddress.ip_network(c, strict=False) for c in self.nodeport_addresses if ":" not in c]
        return [ip for ip in self.node_ips if any(ipaddress.ip_address(ip) in n for n in nets)]


class ChangeTracker:
    """Caches Services and EndpointSlices and records which Services changed since the last take()."""

    def __init__(self) -> None:
        self.services: dict[str, Obj] = {}
        self.slices: dict[str, dict[str, Obj]] = {}
        self._changed: set[str] = set()

    def service_update(self, old: Obj | None, new: Obj | None) -> bool:
        """Record an add/update/delete; False when nothing the proxy cares about changed."""
        obj = new if new is not None else old
        assert obj is not None
        key = f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
        before = self.services.get(key)
        if new is None:
            self.services.pop(key, None)
        else:
            self.services[key] = new
        if before is not None and new is not None and service_ports(before) == service_ports(new):
            return False
        self._changed.add(key)
        return True

    def slice_update(self, sl: Obj, deleted: bool = False) -> bool:
        meta = sl.get("metadata") or {}
        svc = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if not svc:
            return False
        key = f"{meta.get('namespace', '')}/{svc}"
        bucket = self.slices.setdefault(key, {})
        if deleted:
            bucket.pop(meta["name"], None)
            if not bucket:
                del self.slices[key]
        else:
            bucket[meta["name"]] = sl
        self._changed.add(key)
        return True

    def pending(self) -> bool:
        return bool(self._changed)

    def take(self) -> set[str]:
        """The Services (namespace/name) whose rules must be rewritten; resets the record."""
        changed, self._changed = self._changed, set()
        return changed

    def apply(self, state: ProxyState, changed: set[str] | None) -> None:
        """Bring `state` up to date for the changed Services (all of them when `changed` is None)."""
        keys = set(self.services) | set(self.slices) if changed is None else changed
        if changed is None:
            state.services.clear()
            state.endpoints.clear()
        else:
            for spn in [s for s in state.services if s.service in keys]:
                del state.services[spn]
            for spn in [s for s in state.endpoints if s.service in keys]:
                del state.endpoints[spn]
        for key in keys:
            svc = self.services.get(key)
            ports = service_ports(svc) if svc is not None else {}
            state.services.update(ports)
            if not ports:
                continue
            by_port = slice_endpoints(list(self.slices.get(key, {}).values()))
            for spn in ports:
                eps = by_port.get((spn.port, spn.protocol))
                if eps:
                    state.endpoints[spn] = eps
