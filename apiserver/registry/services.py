"""Services: defaults, validation, type-change rules, and allocation of cluster IPs and
node ports from the configured ranges.

Allocated values are recorded as etcd keys below the storage root (`ranges/serviceips/<ip>`,
`ranges/servicenodeports/<port>`) that the store creates and deletes in
the same transaction as the Service, so two writers can never get the same value.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Callable
from typing import Any

from apiserver.registry.base import MetaStrategy, child, get, setdefault
from apiserver.registry.service_status import default_load_balancer_status, validate_load_balancer_status
from apiserver.registry.strategy import Allocation, Cause, Obj
from services.api import errors
from services.api import validation as v

IP_PREFIX = "ranges/serviceips/"
NODE_PORT_PREFIX = "ranges/servicenodeports/"
SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
SESSION_AFFINITIES = ("ClientIP", "None")
TRAFFIC_POLICIES = ("Cluster", "Local")
PORT_PROTOCOLS = ("SCTP", "TCP", "UDP")
IP_FAMILY_POLICIES = ("SingleStack", "PreferDualStack", "RequireDualStack")
DEFAULT_CLIENT_IP_TIMEOUT = 10800


def needs_cluster_ip(svc: Obj | None) -> bool:
    return svc is not None and get(svc, "spec", "type", default="ClusterIP") != "ExternalName"


def needs_node_ports(svc: Obj | None) -> bool:
    if svc is None:
        return False
    kind = get(svc, "spec", "type", default="ClusterIP")
    if kind == "NodePort":
        return True
    return kind == "LoadBalancer" and get(svc, "spec", "allocateLoadBalancerNodePorts", default=True) is not False


def needs_health_check_port(svc: Obj | None) -> bool:
    return (
        svc is not None
        and get(svc, "spec", "type") == "LoadBalancer"
        and get(svc, "spec", "externalTrafficPolicy") == "Local"
    )


def is_headless(svc: Obj) -> bool:
    return get(svc, "spec", "clusterIP") == "None"


def _cluster_ips(svc: Obj | None) -> list[str]:
    if svc is None or not needs_cluster_ip(svc):
        return []
    spec = svc.get("spec") or {}
    ips = list(spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else []))
    return [ip for ip in ips if ip and ip != "None"]


def _node_ports(svc: Obj | None) -> set[int]:
    if svc is None:
        return set()
    ports = {p["nodePort"] for p in get(svc, "spec", "ports", default=[]) if p.get("nodePort")}
    health = get(svc, "spec", "healthCheckNodePort")
    if health:
        ports.add(health)
    return ports


def allocation_keys(svc: Obj | None) -> set[str]:
    """Every range key a stored Service holds."""
    return {IP_PREFIX + ip for ip in _cluster_ips(svc)} | {NODE_PORT_PREFIX + str(p) for p in _node_ports(svc)}


def range_offset(size: int, low: int, high: int, step: int) -> int:
    """Size of the static band at the bottom of a range that dynamic allocation avoids
    while the rest has room (KEP-3070 for IPs, KEP-3668 for node ports)."""
    if size < low:
        return 0
    return max(low, min(high, size // step))


def pick_free(size: int, offset: int, is_free: Callable[[int], bool]) -> int | None:
    """A random free index: the upper (dynamic) band first, then the static band."""
    for lo, hi in ((offset, size), (0, offset)):
        if hi <= lo:
            continue
        start = random.randrange(lo, hi)
        width = hi - lo
        for i in range(width):
            idx = lo + (start - lo + i) % width
            if is_free(idx):
                return idx
    return None


class ServiceStrategy(MetaStrategy):
    name_fn = staticmethod(v.name_is_dns1035_label)

    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        setdefault(spec, "type", "ClusterIP")
        default_load_balancer_status(obj)
        setdefault(spec, "sessionAffinity", "None")
        if spec["sessionAffinity"] == "ClientIP":
            client_ip = child(spec, "sessionAffinityConfig", "clientIP")
            setdefault(client_ip, "timeoutSeconds", DEFAULT_CLIENT_IP_TIMEOUT)
        for port in spec.get("ports") or []:
            if not isinstance(port, dict):
                continue
            setdefault(port, "protocol", "TCP")
            if port.get("targetPort") in (None, 0, ""):
                port["targetPort"] = port.get("port")
        kind = spec["type"]
        if kind in ("NodePort", "LoadBalancer"):
            setdefault(spec, "externalTrafficPolicy", "Cluster")
        if kind == "LoadBalancer":
            setdefault(spec, "allocateLoadBalancerNodePorts", True)
        if kind == "ExternalName":
            return
        setdefault(spec, "internalTrafficPolicy", "Cluster")
        if spec.get("clusterIP") and not spec.get("clusterIPs"):
            spec["clusterIPs"] = [spec["clusterIP"]]
        elif spec.get("clusterIPs") and not spec.get("clusterIP"):
            spec["clusterIP"] = spec["clusterIPs"][0]
        if spec.get("clusterIP") == "None" and not spec.get("selector"):
            setdefault(spec, "ipFamilyPolicy", "RequireDualStack")
        else:
            setdefault(spec, "ipFamilyPolicy", "SingleStack")
        if not spec.get("ipFamilies"):
            spec["ipFamilies"] = ["IPv4"]

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"loadBalancer": {}}

    def validate_status_update(self, new: Obj, old: Obj) -> list[Cause]:
        return validate_load_balancer_status(new)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        super().prepare_for_update(new, old)
        _drop_type_dependent_fields(new, old)
        _patch_allocated_values(new, old)

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        kind = spec.get("type") or ""
        if kind not in SERVICE_TYPES:
            causes.append(v.not_supported("spec.type", kind, SERVICE_TYPES))
        ports = spec.get("ports") or []
        if not ports and not is_headless(obj) and kind != "ExternalName":
            causes.append(v.required("spec.ports"))
        causes.extend(_validate_ports(ports, kind))
        causes.extend(v.validate_labels(spec.get("selector"), "spec.selector"))
        affinity = spec.get("sessionAffinity") or ""
        if affinity not in SESSION_AFFINITIES:
            causes.append(v.not_supported("spec.sessionAffinity", affinity, SESSION_AFFINITIES))
        if kind == "ExternalName":
            name = spec.get("externalName") or ""
            if not name:
                causes.append(v.required("spec.externalName"))
            else:
                causes.extend(v.invalid("spec.externalName", name, m)
                              for m in v.is_dns1123_subdomain(name.removesuffix(".")))
            if spec.get("clusterIPs") or spec.get("clusterIP"):
                causes.append(v.forbidden("spec.clusterIPs", "may not be set for ExternalName services"))
        else:
            for i, ip in enumerate(spec.get("clusterIPs") or []):
                if ip == "None":
                    continue
                try:
                    ipaddress.ip_address(ip)
                except ValueError:
                    causes.append(v.invalid(f"spec.clusterIPs[{i}]", ip,
                                            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
            if spec.get("clusterIP") and spec.get("clusterIPs") and spec["clusterIP"] != spec["clusterIPs"][0]:
                causes.append(v.invalid("spec.clusterIPs", spec["clusterIPs"], "first value must match `clusterIP`"))
            policy = spec.get("ipFamilyPolicy")
            if policy is not None and policy not in IP_FAMILY_POLICIES:
                causes.append(v.not_supported("spec.ipFamilyPolicy", policy, IP_FAMILY_POLICIES))
        etp = spec.get("externalTrafficPolicy")
        if etp is not None:
            if kind not in ("NodePort", "LoadBalancer"):
                causes.append(v.invalid("spec.externalTrafficPolicy", etp,
                                        "may only be set when `type` is 'NodePort' or 'LoadBalancer'"))
            elif etp not in TRAFFIC_POLICIES:
                causes.append(v.not_supported("spec.externalTrafficPolicy", etp, TRAFFIC_POLICIES))
        itp = spec.get("internalTrafficPolicy")
        if itp is not None and itp not in TRAFFIC_POLICIES:
            causes.append(v.not_supported("spec.internalTrafficPolicy", itp, TRAFFIC_POLICIES))
        if spec.get("healthCheckNodePort") and not needs_health_check_port(obj):
            causes.append(v.invalid("spec.healthCheckNodePort", spec["healthCheckNodePort"],
                                    "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` "
                                    "is 'Local'"))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        if needs_cluster_ip(new) and needs_cluster_ip(old) and get(old, "spec", "clusterIP"):
            causes.extend(v.validate_immutable(get(new, "spec", "clusterIP", default=""),
                                               get(old, "spec", "clusterIP"), "spec.clusterIP"))
        return causes

    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        fields["spec.clusterIP"] = get(obj, "spec", "clusterIP", default="")
        fields["spec.type"] = get(obj, "spec", "type", default="")
        return fields

    async def allocate(self, ctx: Any, obj: Obj, old: Obj | None) -> Allocation:
        meta = obj.get("metadata") or {}
        owner = f"{meta.get('namespace', '')}/{meta.get('name', '')}".encode()
        held = allocation_keys(old)
        alloc = Allocation()
        if needs_cluster_ip(obj):
            await self._allocate_ip(ctx, obj, held, owner, alloc)
        if needs_node_ports(obj) or needs_health_check_port(obj):
            await self._allocate_node_ports(ctx, obj, held, owner, alloc)
        alloc.delete = sorted(held - allocation_keys(obj))
        return alloc

    async def _allocate_ip(self, ctx: Any, obj: Obj, held: set[str], owner: bytes, alloc: Allocation) -> None:
        spec = obj["spec"]
        requested = spec.get("clusterIP") or ""
        if requested == "None":
            spec["clusterIPs"] = ["None"]
            return
        cidr: ipaddress.IPv4Network = ctx.service_cidr
        if requested:
            if IP_PREFIX + requested in held:
                return
            taken = await ctx.taken(IP_PREFIX)
            why = ""
            try:
                addr = ipaddress.ip_address(requested)
            except ValueError:
                why = f"the provided IP ({requested}) is not in the valid range. The range of valid IPs is {cidr}"
            else:
                if addr not in cidr or addr in (cidr.network_address, cidr.broadcast_address):
                    why = f"the provided IP ({requested}) is not in the valid range. The range of valid IPs is {cidr}"
                elif IP_PREFIX + str(addr) in taken:
                    why = "provided IP is already allocated"
            if why:
                raise self._invalid(obj, [v.invalid("spec.clusterIPs", spec.get("clusterIPs") or [requested],
                                                    f"failed to allocate IP {requested}: {why}")])
            alloc.create[IP_PREFIX + str(addr)] = owner
            return
        taken = await ctx.taken(IP_PREFIX)
        base = int(cidr.network_address) + 1
        size = max(cidr.num_addresses - 2, 0)
        offset = range_offset(cidr.num_addresses, 16, 256, 16)
        idx = pick_free(size, offset, lambda i: IP_PREFIX + str(ipaddress.ip_address(base + i)) not in taken)
        if idx is None:
            raise errors.internal("failed to allocate a serviceIP: range is full")
        ip = str(ipaddress.ip_address(base + idx))
        spec["clusterIP"] = ip
        spec["clusterIPs"] = [ip]
        alloc.create[IP_PREFIX + ip] = owner

    async def _allocate_node_ports(
        self, ctx: Any, obj: Obj, held: set[str], owner: bytes, alloc: Allocation
    ) -> None:
        spec = obj["spec"]
        first, last = ctx.node_port_range
        taken = await ctx.taken(NODE_PORT_PREFIX)
        mine: set[int] = set()
        causes: list[Cause] = []

        def claim(port: int, path: str) -> None:
            key = NODE_PORT_PREFIX + str(port)
            if port in mine or key in held:
                mine.add(port)
                return
            if not first <= port <= last:
                causes.append(v.invalid(path, port, "provided port is not in the valid range. "
                                                     f"The range of valid ports is {first}-{last}"))
            elif key in taken:
                causes.append(v.invalid(path, port, "provided port is already allocated"))
            else:
                mine.add(port)
                alloc.create[key] = owner

        def fresh() -> int:
            size = last - first + 1
            offset = range_offset(size, 16, 128, 32)
            idx = pick_free(size, offset,
                            lambda i: first + i not in mine and NODE_PORT_PREFIX + str(first + i) not in taken)
            if idx is None:
                raise errors.internal("failed to allocate a nodePort: range is full")
            port = first + idx
            mine.add(port)
            alloc.create[NODE_PORT_PREFIX + str(port)] = owner
            return port

        ports = spec.get("ports") or []
        if needs_node_ports(obj):
            for i, port in enumerate(ports):
                if port.get("nodePort"):
                    claim(port["nodePort"], f"spec.ports[{i}].nodePort")
            if causes:
                raise self._invalid(obj, causes)
            for port in ports:
                if not port.get("nodePort"):
                    same = [p["nodePort"] for p in ports if p.get("nodePort") and p.get("port") == port.get("port")
                            and p.get("protocol") != port.get("protocol")]
                    port["nodePort"] = same[0] if same else fresh()
        if needs_health_check_port(obj):
            health = spec.get("healthCheckNodePort")
            if health:
                claim(health, "spec.healthCheckNodePort")
                if causes:
                    raise self._invalid(obj, causes)
            else:
                spec["healthCheckNodePort"] = fresh()

    def _invalid(self, obj: Obj, causes: list[Cause]) -> errors.StatusError:
        return errors.invalid(self.resource.kind, self.resource.group, get(obj, "metadata", "name", default=""),
                              causes)

    def release(self, obj: Obj) -> list[str]:
        return sorted(allocation_keys(obj))


def _validate_ports(ports: list[Obj], kind: str) -> list[Cause]:
    causes: list[Cause] = []
    names: set[str] = set()
    seen: set[tuple[Any, Any]] = set()
    for i, port in enumerate(ports):
        path = f"spec.ports[{i}]"
        name = port.get("name") or ""
        if len(ports) > 1 and not name:
            causes.append(v.required(f"{path}.name"))
        elif name:
            causes.extend(v.invalid(f"{path}.name", name, m) for m in v.is_dns1123_label(name))
            if name in names:
                causes.append(v.duplicate(f"{path}.name", name))
            names.add(name)
        number = port.get("port")
        causes.extend(v.invalid(f"{path}.port", number, m) for m in v.is_valid_port_num(number))
        protocol = port.get("protocol") or ""
        if not protocol:
            causes.append(v.required(f"{path}.protocol"))
        elif protocol not in PORT_PROTOCOLS:
            causes.append(v.not_supported(f"{path}.protocol", protocol, PORT_PROTOCOLS))
        target = port.get("targetPort")
        if isinstance(target, str):
            causes.extend(v.invalid(f"{path}.targetPort", target, m) for m in v.is_valid_port_name(target))
        elif target is not None:
            causes.extend(v.invalid(f"{path}.targetPort", target, m) for m in v.is_valid_port_num(target))
        node_port = port.get("nodePort")
        if node_port and kind == "ClusterIP":
            causes.append(v.forbidden(f"{path}.nodePort", "may not be used when `type` is 'ClusterIP'"))
        key = (number, protocol)
        if key in seen:
            causes.append(v.duplicate(path, {"port": number, "protocol": protocol}))
        seen.add(key)
    return causes


def _drop_type_dependent_fields(new: Obj, old: Obj) -> None:
    """When the type changes, fields the new type cannot have are cleared if the client left them as they were."""
    spec = child(new, "spec")
    old_spec = old.get("spec") or {}
    if needs_cluster_ip(old) and not needs_cluster_ip(new):
        if spec.get("clusterIP") in (None, "", old_spec.get("clusterIP")):
            for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"):
                spec.pop(key, None)
    if needs_node_ports(old) and not needs_node_ports(new):
        old_ports = {(p.get("port"), p.get("protocol")): p.get("nodePort") for p in old_spec.get("ports") or []}
        for port in spec.get("ports") or []:
            if port.get("nodePort") == old_ports.get((port.get("port"), port.get("protocol"))):
                port.pop("nodePort", None)
    if needs_health_check_port(old) and not needs_health_check_port(new):
        if spec.get("healthCheckNodePort") == old_spec.get("healthCheckNodePort"):
            spec.pop("healthCheckNodePort", None)
    if spec.get("type") not in ("NodePort", "LoadBalancer"):
        if spec.get("externalTrafficPolicy") == old_spec.get("externalTrafficPolicy"):
            spec.pop("externalTrafficPolicy", None)
    if spec.get("type") != "LoadBalancer":
        for key in ("allocateLoadBalancerNodePorts", "loadBalancerClass"):
            if spec.get(key) == old_spec.get(key):
                spec.pop(key, None)


def _patch_allocated_values(new: Obj, old: Obj) -> None:
    """Allocated values an update body left out (kubectl apply of the original manifest) are kept."""
    spec = child(new, "spec")
    old_spec = old.get("spec") or {}
    if needs_cluster_ip(old) and needs_cluster_ip(new) and not spec.get("clusterIP"):
        if old_spec.get("clusterIP"):
            spec["clusterIP"] = old_spec["clusterIP"]
            spec["clusterIPs"] = list(old_spec.get("clusterIPs") or [old_spec["clusterIP"]])
    if needs_node_ports(old) and needs_node_ports(new):
        by_name = {p.get("name", ""): p["nodePort"] for p in old_spec.get("ports") or [] if p.get("nodePort")}
        used = {p["nodePort"] for p in spec.get("ports") or [] if p.get("nodePort")}
        for port in spec.get("ports") or []:
            previous = by_name.get(port.get("name", ""))
            if not port.get("nodePort") and previous and previous not in used:
                port["nodePort"] = previous
                used.add(previous)
    if needs_health_check_port(old) and needs_health_check_port(new) and not spec.get("healthCheckNodePort"):
        if old_spec.get("healthCheckNodePort"):
            spec["healthCheckNodePort"] = old_spec["healthCheckNodePort"]
