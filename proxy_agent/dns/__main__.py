"""`python -m proxy_agent.dns`: the cluster DNS server (the role CoreDNS plays upstream)."""

from __future__ import annotations

import argparse
import asyncio
import sys

import structlog

from proxy_agent.dns.server import DNSServer, read_resolv_conf
from proxy_agent.dns.zone import ClusterZone
from services.client import GVR, Client
from services.informers import SharedInformerFactory
from services.runtime import HealthServer, base_parser, client_config, run, setup_logging

log = structlog.get_logger("proxy_agent.dns")

SERVICES = GVR("", "v1", "services")
ENDPOINT_SLICES = GVR("discovery.k8s.io", "v1", "endpointslices")


def parser() -> argparse.ArgumentParser:
    p = base_parser("cluster-dns", "Serves the cluster DNS zone from Services and EndpointSlices.")
    p.set_defaults(bind_address="0.0.0.0")
    p.add_argument("--port", type=int, default=53, help="DNS port (UDP and TCP)")
    p.add_argument("--cluster-domain", default="cluster.local")
    p.add_argument("--resolv-conf", default="/etc/resolv.conf", help="upstream resolvers for other names")
    p.add_argument("--ttl", type=int, default=5)
    p.add_argument("--health-port", type=int, default=8080, help="/healthz, /readyz and /metrics; 0 disables")
    p.add_argument("--health-bind-address", default="127.0.0.1")
    return p


async def main_async(args: argparse.Namespace) -> None:
    zone = ClusterZone(args.cluster_domain, args.ttl)
    client = Client(client_config(args, "cluster-dns"))
    factory = SharedInformerFactory(client)
    services = factory.informer_for(SERVICES)
    slices = factory.informer_for(ENDPOINT_SLICES)
    regs = [
        services.add_event_handler(
            zone.set_service, lambda _o, n: zone.set_service(n), lambda o: zone.set_service(o, True)
        ),
        slices.add_event_handler(
            zone.set_slice, lambda _o, n: zone.set_slice(n), lambda o: zone.set_slice(o, True)
        ),
    ]
    upstreams = [
        u for u in read_resolv_conf(args.resolv_conf) if not (u[0] == args.bind_address and u[1] == args.port)
    ]
    server = DNSServer(zone, upstreams)
    health: HealthServer | None = None
    if args.health_port:
        health = HealthServer(args.health_bind_address, args.health_port)
        health.add_readyz_check("informers", lambda: all(r.has_synced() for r in regs))
        await health.start()
    factory.start()
    try:
        for reg in regs:
            await reg.wait_for_sync()
        await server.start(args.bind_address, args.port)
        await asyncio.Event().wait()
    finally:
        await server.stop()
        await factory.shutdown()
        await client.close()
        if health is not None:
            await health.stop()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging(args)
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    return run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
