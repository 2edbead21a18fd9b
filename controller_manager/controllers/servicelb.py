"""Service load-balancer controller, as k3s's ServiceLB: LoadBalancer Services get an address and
`status.loadBalancer.ingress`, and every node's kube-proxy answers on it (it programs ingress IPs as
it does external IPs).

Without --service-lb-pool the addresses are the nodes' InternalIPs (all Ready nodes; with
`externalTrafficPolicy: Local`, only those with a ready endpoint, which is what a load balancer
polling the healthCheckNodePort would keep). Two such Services cannot share a port: the older one
keeps it and the newer waits, with a warning event, as ServiceLB's pods would stay Pending. With a
pool each Service gets an address of its own: the one it already has, else `spec.loadBalancerIP` when
free, else the lowest free one. Services of another `loadBalancerClass` are left alone.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Iterable, Iterator
from typing import Any

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from controller_manager.resources import NODES
from services.client import NotFound, gvr
from services.informers import meta_namespace_key

NAME = "pyk8s-service-lb"
DISABLED_BY_DEFAULT = True
#: The class this controller implements besides the default (no class at all).
LB_CLASS = "pyk8s.io/service-lb"

SERVICES = gvr("v1", "services")
ENDPOINT_SLICES = gvr("discovery.k8s.io/v1", "endpointslices")

Obj = dict[str, Any]


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service-lb-pool", default="",
                        help="comma-separated CIDRs or first-last ranges LoadBalancer addresses come from; "
                             "empty: the nodes' InternalIPs")


def new(ctx: ControllerContext) -> ServiceLBController:
    return ServiceLBController(ctx)


def parse_pool(text: str) -> list[ipaddress.IPv4Address]:
    """Every address of the pool, in order (a CIDR's network and broadcast addresses excluded)."""
    out: list[ipaddress.IPv4Address] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        if "-" in item:
            first, last = (ipaddress.IPv4Address(p.strip()) for p in item.split("-", 1))
            out += [ipaddress.IPv4Address(i) for i in range(int(first), int(last) + 1)]
        else:
            net = ipaddress.IPv4Network(item, strict=False)
            out += list(net.hosts()) if net.num_addresses > 2 else list(net)
    return out


def ours(svc: Obj) -> bool:
    """A LoadBalancer Service of no class or of ours."""
    spec = svc.get("spec") or {}
    return spec.get("type") == "LoadBalancer" and spec.get("loadBalancerClass") in (None, LB_CLASS)


def _ports(svc: Obj) -> set[tuple[str, int]]:
    return {(p.get("protocol") or "TCP", int(p["port"])) for p in (svc.get("spec") or {}).get("ports") or []}


def _age(svc: Obj) -> tuple[str, str, str]:
    meta = svc.get("metadata") or {}
    return meta.get("creationTimestamp") or "", meta.get("namespace", ""), meta.get("name", "")


def _current_ips(svc: Obj) -> list[str]:
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [i["ip"] for i in ingress if i.get("ip")]


def node_ips(nodes: Iterable[Obj]) -> dict[str, str]:
    """Ready nodes' InternalIPv4, by node name."""
    out = {}
    for node in nodes:
        status = node.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        ip = next((a["address"] for a in status.get("addresses") or []
                   if a.get("type") == "InternalIP" and ":" not in a.get("address", "")), "")
        if ready and ip:
            out[node["metadata"]["name"]] = ip
    return out


def local_endpoint_nodes(slices: Iterable[Obj]) -> dict[str, set[str]]:
    """namespace/service -> nodes with a ready endpoint of it."""
    out: dict[str, set[str]] = {}
    for sl in slices:
        meta = sl.get("metadata") or {}
        svc = (meta.get("labels") or {}).get("kubernetes.io/service-name")
        if not svc:
            continue
        for ep in sl.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready") is not False and ep.get("nodeName"):
                out.setdefault(f"{meta.get('namespace', '')}/{svc}", set()).add(ep["nodeName"])
    return out


def allocate(services: Iterable[Obj], nodes: Iterable[Obj], slices: Iterable[Obj],
             pool: list[ipaddress.IPv4Address]) -> dict[str, list[str] | str]:
    """Every Service of ours by key: its ingress IPs, or a string saying why it has none."""
    mine = sorted((s for s in services if ours(s)), key=_age)
    out: dict[str, list[str] | str] = {}
    if pool:
        free = {str(ip) for ip in pool}
        taken: dict[str, str] = {}
        for svc in mine:  # those that have an address of the pool keep it
            key = meta_namespace_key(svc)
            keep = next((ip for ip in _current_ips(svc) if ip in free and ip not in taken), None)
            if keep:
                taken[keep] = key
                out[key] = [keep]
        order = [str(ip) for ip in pool]
        for svc in mine:
            key = meta_namespace_key(svc)
            if key in out:
                continue
            wanted = (svc.get("spec") or {}).get("loadBalancerIP") or ""
            if wanted:
                if wanted not in free:
                    out[key] = f"loadBalancerIP {wanted} is not in the pool"
                elif wanted in taken:
                    out[key] = f"loadBalancerIP {wanted} is used by {taken[wanted]}"
                else:
                    taken[wanted] = key
                    out[key] = [wanted]
                continue
            ip = next((ip for ip in order if ip not in taken), None)
            if ip is None:
                out[key] = "no address left in the pool"
            else:
                taken[ip] = key
                out[key] = [ip]
        return out
    ips = node_ips(nodes)
    local = local_endpoint_nodes(slices)
    claimed: dict[tuple[str, int], str] = {}
    for svc in mine:
        key = meta_namespace_key(svc)
        clash = sorted(f"{proto}/{port} of {claimed[(proto, port)]}" for proto, port in _ports(svc)
                       if (proto, port) in claimed)
        if clash:
            out[key] = f"the node addresses' port {', '.join(clash)} is taken"
            continue
        claimed.update(dict.fromkeys(_ports(svc), key))
        names = sorted(ips)
        if (svc.get("spec") or {}).get("externalTrafficPolicy") == "Local":
            names = [n for n in names if n in local.get(key, set())]
        out[key] = sorted({ips[n] for n in names}, key=lambda ip: ipaddress.IPv4Address(ip))
    return out


class ServiceLBController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.pool = parse_pool(str(ctx.option("service_lb_pool", "") or ""))
        self.services = ctx.informer(SERVICES)
        self.nodes = ctx.informer(NODES)
        self.slices = ctx.informer(ENDPOINT_SLICES)
        self.recorder = ctx.recorder("service-lb-controller")
        super().__init__(NAME, [self.services, self.nodes, self.slices])
        self.services.add_event_handler(self._all, lambda _o, _n: self._all(), self._all)
        self.nodes.add_event_handler(self._all, self._node_changed, self._all)
        self.slices.add_event_handler(self._all, lambda _o, _n: self._all(), self._all)

    def _all(self, *_args: Any) -> None:
        """Allocation is over all Services together: a change to one can free or take another's address."""
        for svc in self._candidates():
            self.enqueue(svc)

    def _candidates(self) -> Iterator[Obj]:
        for svc in self.services.list():
            if ours(svc) or (_current_ips(svc) and (svc.get("spec") or {}).get("loadBalancerClass") is None):
                yield svc

    def _node_changed(self, old: Obj, new: Obj) -> None:
        if node_ips([old]) != node_ips([new]):
            self._all()

    async def sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        svc = self.services.get(name, namespace)
        if svc is None:
            return
        plan = allocate(self.services.list(), self.nodes.list(), self.slices.list(), self.pool)
        wanted = plan.get(key)
        if wanted is None and not ours(svc) and (svc.get("spec") or {}).get("loadBalancerClass") is None:
            wanted = []  # no longer a LoadBalancer: the address goes back
        if wanted is None:
            return
        if isinstance(wanted, str):
            if _current_ips(svc):
                await self._write(svc, [])
            self.recorder.warning(svc, "SyncLoadBalancerFailed", f"Error syncing load balancer: {wanted}")
            return
        if _current_ips(svc) == wanted:
            return
        if wanted:
            self.recorder.normal(svc, "EnsuringLoadBalancer", "Ensuring load balancer")
        await self._write(svc, wanted)
        if wanted:
            self.recorder.normal(svc, "EnsuredLoadBalancer", "Ensured load balancer")
        self.log.info("load balancer status written", service=key, ingress=wanted)

    async def _write(self, svc: Obj, ips: list[str]) -> None:
        meta = svc["metadata"]
        ingress = [{"ip": ip, "ipMode": "VIP"} for ip in ips] or None  # null: `loadBalancer: {}`, as upstream
        try:
            await self.client.patch_status(SERVICES, meta["name"], {"status": {"loadBalancer": {"ingress": ingress}}},
                                           meta.get("namespace"))
        except NotFound:
            return
