"""`python -m deploy.noderoutes`: the pod network across the cluster's nodes, like flannel's host-gw.

`pyk8s up` runs one per cluster: it watches Nodes and, in each real node's network namespace, routes
every other node's spec.podCIDR via that node's InternalIP on the node segment, and removes the routes
of nodes that are gone. On machines (deploy/systemd) each machine runs its own with `--node-name`,
which does the same in the agent's own network namespace for that one node. With `--host-routes` it
routes every node's pod CIDR from the host too, because the apiserver must reach pod IPs directly, as
upstream's does (services/proxy, pods/proxy), with `--service-cidr` the Service CIDR via one node, so
the host reaches ClusterIPs, and with `--load-balancer-routes` each LoadBalancer address of a pool via a
node that answers it. Its routes carry a protocol number of their own, so it finds and replaces only
what it wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import sys
from pathlib import Path
from typing import Any

import orjson
import structlog

from services.client import Client, gvr
from services.informers import Informer
from services.runtime import base_parser, client_config, run, setup_logging, start_health

log = structlog.get_logger("noderoutes")

NODES = gvr("v1", "nodes", namespaced=False)
SERVICES = gvr("v1", "services")
ENDPOINT_SLICES = gvr("discovery.k8s.io/v1", "endpointslices")
ROUTE_PROTO = "77"
DEBOUNCE = 0.05

Obj = dict[str, Any]


def parser() -> argparse.ArgumentParser:
    p = base_parser("pyk8s-noderoutes", "Routes each node's pod CIDR to it from every other node.")
    p.add_argument("--netns", action="append", default=[], metavar="NODE=NETNS",
                   help="a real node and the network namespace it lives in (repeat per node)")
    p.add_argument("--node-name", default="",
                   help="route for this node in the agent's own network namespace (one agent per machine)")
    p.add_argument("--node-subnet", default="0.0.0.0/0",
                   help="the node segment: only nodes with an InternalIP in it are routed to (default: any)")
    p.add_argument("--host-routes", action="store_true",
                   help="also route every node's pod CIDR from the host's own network namespace")
    p.add_argument("--service-cidr", default="",
                   help="with --host-routes, also route the Service CIDR from the host to one node, whose "
                        "kube-proxy answers ClusterIPs (as kind users route it by hand)")
    p.add_argument("--load-balancer-routes", action="store_true",
                   help="with --host-routes, also route each LoadBalancer address that is no node's from the host "
                        "to a node that answers it (with externalTrafficPolicy Local, one with an endpoint), as a "
                        "layer-2 load balancer announces it")
    p.add_argument("--resync", type=float, default=10.0, help="seconds between full resyncs")
    return p


def routes_by_node(nodes: list[Obj], subnet: ipaddress.IPv4Network) -> dict[str, tuple[str, list[str]]]:
    """node name -> (InternalIP on the segment, its pod CIDRs), for nodes that have both."""
    out = {}
    for node in nodes:
        spec = node.get("spec") or {}
        cidrs = list(spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []))
        ips = [a.get("address", "") for a in (node.get("status") or {}).get("addresses") or []
               if a.get("type") == "InternalIP"]
        on_segment = [ip for ip in ips if _in(ip, subnet)]
        cidrs = [c for c in cidrs if ipaddress.ip_network(c, strict=False).version == 4]
        if on_segment and cidrs:
            out[node["metadata"]["name"]] = (on_segment[0], cidrs)
    return out


def _in(ip: str, subnet: ipaddress.IPv4Network) -> bool:
    try:
        return ipaddress.ip_address(ip) in subnet
    except ValueError:
        return False


def desired_for(node: str, table: dict[str, tuple[str, list[str]]]) -> dict[str, str]:
    """pod CIDR -> gateway, for every node but `node` itself (its own CIDR sits on its CNI bridge)."""
    return {cidr: ip for other, (ip, cidrs) in table.items() if other != node for cidr in cidrs}


def host_routes(table: dict[str, tuple[str, list[str]]], service_cidr: str = "") -> dict[str, str]:
    """What the host routes: every node's pod CIDRs, and the Service CIDR via the first node by name."""
    out = desired_for("", table)
    if service_cidr and table:
        out[service_cidr] = table[min(table)][0]
    return out


def lb_routes(services: list[Obj], slices: list[Obj], table: dict[str, tuple[str, list[str]]]) -> dict[str, str]:
    """LoadBalancer ingress address -> the node IP to route it via, for addresses that are no node's own:
    the first node by name, or with externalTrafficPolicy Local the first with a ready endpoint."""
    node_ips = {ip for ip, _ in table.values()}
    local: dict[str, set[str]] = {}
    for sl in slices:
        meta = sl.get("metadata") or {}
        svc = (meta.get("labels") or {}).get("kubernetes.io/service-name")
        for ep in sl.get("endpoints") or [] if svc else []:
            if (ep.get("conditions") or {}).get("ready") is not False and ep.get("nodeName"):
                local.setdefault(f"{meta.get('namespace', '')}/{svc}", set()).add(ep["nodeName"])
    out = {}
    for svc in services:
        spec, meta = svc.get("spec") or {}, svc.get("metadata") or {}
        if spec.get("type") != "LoadBalancer":
            continue
        candidates = sorted(table)
        if spec.get("externalTrafficPolicy") == "Local":
            candidates = [n for n in candidates if n in local.get(f"{meta.get('namespace', '')}/{meta.get('name')}",
                                                                  set())]
        if not candidates:
            continue
        for ingress in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
            ip = ingress.get("ip") or ""
            if ip and ":" not in ip and ip not in node_ips:
                out[ip] = table[candidates[0]][0]
    return out


def route_batch(current: dict[str, str], desired: dict[str, str]) -> list[str]:
    """`ip -batch` lines turning `current` into `desired`."""
    lines = [f"route replace {cidr} via {gw} proto {ROUTE_PROTO}" for cidr, gw in sorted(desired.items())
             if current.get(cidr) != gw]
    lines += [f"route delete {cidr} proto {ROUTE_PROTO}" for cidr in sorted(current) if cidr not in desired]
    return lines


async def _ip(netns: str | None, *args: str, stdin: bytes | None = None) -> str:
    """`ip` in a node's namespace, or in the host's own when `netns` is None."""
    where = ("-n", netns) if netns else ()
    proc = await asyncio.create_subprocess_exec(
        "ip", *where, *args, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate(stdin)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(where)} {' '.join(args)}: {err.decode(errors='replace').strip()}")
    return out.decode()


def netns_exists(netns: str) -> bool:
    """A node that is down has no namespace; its routes come back with it on the next resync."""
    return Path("/var/run/netns", netns).exists()


class RouteSync:
    def __init__(self, informer: Informer, netns: dict[str, str], subnet: ipaddress.IPv4Network,
                 host: bool = False, service_cidr: str = "", services: Informer | None = None,
                 slices: Informer | None = None, local_node: str = "") -> None:
        self.informer = informer
        self.services = services
        self.slices = slices
        self.netns = netns
        self.subnet = subnet
        self.host = host
        self.service_cidr = service_cidr
        self.local_node = local_node
        self.synced = False

    async def sync(self) -> None:
        table = routes_by_node(self.informer.list(), self.subnet)
        syncs = [self.sync_node(node, ns, table) for node, ns in self.netns.items()]
        if self.host:
            wanted = host_routes(table, self.service_cidr)
            if self.services is not None and self.slices is not None:
                wanted.update(lb_routes(self.services.list(), self.slices.list(), table))
            syncs.append(self.apply(None, "host", wanted))
        if self.local_node:
            syncs.append(self.apply(None, self.local_node, desired_for(self.local_node, table)))
        results = await asyncio.gather(*syncs, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for error in errors:
            log.warning("route sync failed", error=str(error))
        self.synced = self.synced or not errors

    async def sync_node(self, node: str, netns: str, table: dict[str, tuple[str, list[str]]]) -> None:
        if not netns_exists(netns):
            return
        await self.apply(netns, node, desired_for(node, table))

    async def apply(self, netns: str | None, node: str, desired: dict[str, str]) -> None:
        """Make the routes this process owns in `netns` (None: the host) exactly `desired`."""
        raw = await _ip(netns, "-j", "-4", "route", "show", "proto", ROUTE_PROTO)
        current = {r["dst"]: r.get("gateway", "") for r in orjson.loads(raw or "[]") if "dst" in r}
        lines = route_batch(current, desired)
        if lines:
            await _ip(netns, "-batch", "-", stdin="\n".join(lines).encode() + b"\n")
            log.info("routes updated", node=node, netns=netns or "host", changes=lines)


async def main_async(args: argparse.Namespace) -> None:
    netns = dict(item.split("=", 1) for item in args.netns)
    client = Client(client_config(args, "pyk8s-noderoutes"))
    informer = Informer(client, NODES)
    extra = [Informer(client, SERVICES), Informer(client, ENDPOINT_SLICES)] if args.load_balancer_routes else []
    routes = RouteSync(informer, netns, ipaddress.IPv4Network(args.node_subnet), host=args.host_routes,
                       service_cidr=args.service_cidr, services=extra[0] if extra else None,
                       slices=extra[1] if extra else None, local_node=args.node_name)
    wake = asyncio.Event()
    informer.add_event_handler(lambda _n: wake.set(), lambda _o, _n: wake.set(), lambda _n: wake.set())
    if extra:
        services, slices = extra

        def service_changed(*objs: Obj) -> None:
            if any(((o or {}).get("spec") or {}).get("type") == "LoadBalancer" for o in objs):
                wake.set()

        def slice_changed(*objs: Obj) -> None:
            """Only a Local LoadBalancer's endpoints move its route; other slices churn without a sync."""
            for sl in objs:
                meta = sl.get("metadata") or {}
                svc = services.get((meta.get("labels") or {}).get("kubernetes.io/service-name", ""),
                                   meta.get("namespace"))
                spec = (svc or {}).get("spec") or {}
                if spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local":
                    wake.set()

        services.add_event_handler(service_changed, service_changed, service_changed)
        slices.add_event_handler(slice_changed, slice_changed, slice_changed)
    health = await start_health(args)
    if health is not None:
        health.add_readyz_check("routes", lambda: routes.synced)
    for watched in (informer, *extra):
        watched.start()
    log.info("starting node route sync", nodes=sorted(netns) or [args.node_name], subnet=args.node_subnet)
    try:
        for watched in (informer, *extra):
            await watched.wait_for_sync()
        while True:
            await asyncio.sleep(DEBOUNCE)
            wake.clear()
            await routes.sync()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(args.resync):
                    await wake.wait()
    finally:
        for watched in (informer, *extra):
            await watched.stop()
        await client.close()
        if health is not None:
            await health.stop()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging(args)
    return run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
