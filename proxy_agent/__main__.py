"""`python -m proxy_agent`: kube-proxy for one node, with upstream's flags."""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import sys

import structlog

from proxy_agent.backends import Backend, run_tool
from proxy_agent.backends.iptables import IptablesBackend
from proxy_agent.backends.ipvs import IpvsBackend
from proxy_agent.backends.nftables import NftablesBackend
from proxy_agent.healthcheck import JSONServer, ProxyHealth, ServiceHealthServers
from proxy_agent.proxier import Proxier
from proxy_agent.tracker import ProxyState
from services.client import Client
from services.runtime import HealthServer, base_parser, client_config, run, setup_logging
from services.runtime.durations import duration_flag
from services.runtime.netns import Dialer

log = structlog.get_logger("proxy_agent")



def host_port(default_port: int) -> type:
    def parse(text: str) -> tuple[str, int]:
        host, sep, port = text.rpartition(":")
        if not sep:
            return text, default_port
        return host.strip("[]") or "0.0.0.0", int(port)

    return parse  # type: ignore[return-value]


def parser() -> argparse.ArgumentParser:
    p = base_parser("kube-proxy", "Programs Service virtual IPs into the node's packet filter.")
    p.add_argument("--hostname-override", default=None, help="this node's name (default: the hostname)")
    p.add_argument("--proxy-mode", choices=("iptables", "nftables", "ipvs"), default="iptables")
    p.add_argument("--cluster-cidr", default="", help="pod CIDR; traffic from outside it is masqueraded")
    p.add_argument("--masquerade-all", action="store_true", help="masquerade all traffic to Service IPs")
    p.add_argument("--nodeport-addresses", default="", help="comma-separated CIDRs NodePorts listen on")
    p.add_argument("--sync-period", type=duration_flag, default=30.0)
    p.add_argument(
        "--min-sync-period",
        type=duration_flag,
        default=1.0,
        help="least time between syncs (upstream's 1s); a change after a quiet spell is applied at once",
    )
    p.add_argument("--cleanup", action="store_true", help="remove every rule kube-proxy wrote, then exit")
    p.add_argument(
        "--healthz-bind-address",
        type=host_port(10256),
        default=("0.0.0.0", 10256),
        help="host:port for /healthz; port 0 picks one, empty host means all",
    )
    p.add_argument(
        "--metrics-bind-address",
        type=host_port(10249),
        default=("127.0.0.1", 10249),
        help="host:port for /metrics",
    )
    p.add_argument(
        "--iptables-binary",
        default="auto",
        help="iptables command; <binary>-restore and <binary>-save are used alongside. 'auto' picks "
        "iptables-legacy or iptables-nft as described in detect_iptables",
    )
    p.add_argument("--nft-binary", default="nft", help="nft command")
    p.add_argument(
        "--node-netns",
        default=None,
        help="network namespace (a path) of the node whose rules the binaries write; healthCheckNodePorts "
        "are served there, on every address",
    )
    p.add_argument("--ipvs-scheduler", default="rr")
    p.add_argument(
        "--dry-run-output", default=None, help="write the ruleset to this file instead of applying it"
    )
    return p


def choose_iptables(saves: dict[str, str]) -> str:
    """Pick a flavour from each one's `iptables-save` output, like upstream's iptables-wrapper: the
    one holding kube-proxy's chains, else the one holding kubelet's hint chains; with no such rules,
    legacy, whose restore takes a 10,000-Service ruleset in seconds where the nft-backed restore
    takes minutes on this kernel (bench/proxy.py)."""
    for pattern in (r"^:KUBE-(SERVICES|SVC-|SEP-|PROXY-CANARY)", r"^:KUBE-(IPTABLES-HINT|KUBELET-CANARY)"):
        having = [flavour for flavour, out in saves.items() if re.search(pattern, out, re.M)]
        if len(having) == 1:
            return having[0]
    return "iptables-legacy" if "iptables-legacy" in saves else next(iter(saves), "iptables")


async def detect_iptables() -> str:
    """choose_iptables over the flavours installed here."""
    flavours = [f for f in ("iptables-legacy", "iptables-nft") if shutil.which(f + "-restore")]
    if len(flavours) < 2:
        return flavours[0] if flavours else "iptables"
    return choose_iptables({f: (await run_tool([f + "-save"], check=False))[1] for f in flavours})


def make_backend(args: argparse.Namespace) -> Backend:
    if args.proxy_mode == "nftables":
        return NftablesBackend(args.nft_binary)
    if args.proxy_mode == "ipvs":
        return IpvsBackend(args.iptables_binary, args.ipvs_scheduler)
    return IptablesBackend(args.iptables_binary)


async def cleanup(args: argparse.Namespace) -> None:
    """Remove everything any mode wrote, as upstream's --cleanup does (both iptables flavours on 'auto')."""
    binaries = [args.iptables_binary]
    if args.iptables_binary == "auto":
        binaries = [f for f in ("iptables-legacy", "iptables-nft") if shutil.which(f + "-restore")] or ["iptables"]
    backends: list[Backend] = [IptablesBackend(b) for b in binaries]
    for backend in [*backends, NftablesBackend(args.nft_binary)]:
        try:
            await backend.cleanup()
        except Exception as exc:
            log.warning("cleanup step failed", mode=backend.mode, error=str(exc))


async def main_async(args: argparse.Namespace) -> None:
    if args.cleanup:
        await cleanup(args)
        return
    if args.iptables_binary == "auto":
        args.iptables_binary = await detect_iptables()
        log.info("iptables flavour detected", binary=args.iptables_binary)
    hostname = (args.hostname_override or socket.gethostname()).strip().lower()
    state = ProxyState(
        node_name=hostname,
        cluster_cidr=args.cluster_cidr,
        masquerade_all=args.masquerade_all,
        nodeport_addresses=tuple(c.strip() for c in args.nodeport_addresses.split(",") if c.strip()),
    )
    health = ProxyHealth(args.sync_period)
    hz_host, hz_port = args.healthz_bind_address
    proxier = Proxier(
        make_backend(args),
        state,
        sync_period=args.sync_period,
        min_sync_period=args.min_sync_period,
        dry_run_output=args.dry_run_output,
        health=health,
        service_health=(
            ServiceHealthServers("0.0.0.0", Dialer(args.node_netns))
            if args.node_netns
            else ServiceHealthServers(hz_host)
        ),
    )
    servers: list[JSONServer | HealthServer] = []
    if hz_port >= 0:
        healthz = JSONServer(hz_host, hz_port, health.handle)
        await healthz.start()
        servers.append(healthz)
        log.info("serving healthz", address=f"{hz_host}:{healthz.port}")
    m_host, m_port = args.metrics_bind_address
    if m_port >= 0:
        metrics = HealthServer(m_host, m_port)
        await metrics.start()
        servers.append(metrics)
    client = Client(client_config(args, "kube-proxy"))
    log.info("starting kube-proxy", node=hostname, mode=args.proxy_mode)
    try:
        await proxier.run(client, hostname)
    finally:
        await client.close()
        for server in servers:
            await server.stop()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging(args)
    return run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
