"""`python -m proxy_agent.networkpolicy`: the network-policy agent of one node."""

from __future__ import annotations

import argparse
import shutil
import socket
import sys

import structlog

from proxy_agent.backends import run_tool
from proxy_agent.networkpolicy.agent import PolicyAgent, Rules
from proxy_agent.networkpolicy.rules import IptablesRules, NftablesRules
from services.client import Client
from services.runtime import base_parser, client_config, run, setup_logging, start_health
from services.runtime.durations import duration_flag

log = structlog.get_logger("proxy_agent.networkpolicy")


def parser() -> argparse.ArgumentParser:
    p = base_parser("pyk8s-network-policy", "Enforces NetworkPolicies for the pods of one node.")
    p.add_argument("--hostname-override", default=None, help="this node's name (default: the hostname)")
    p.add_argument("--backend", choices=("auto", "nftables", "iptables"), default="auto",
                   help="auto: nftables when nft works here, else iptables")
    p.add_argument("--nft-binary", default="nft")
    p.add_argument("--iptables-binary", default="iptables",
                   help="iptables command; <binary>-restore and <binary>-save are used alongside")
    p.add_argument("--min-sync-period", type=duration_flag, default=0.1)
    p.add_argument("--sync-period", type=duration_flag, default=60.0)
    p.add_argument("--cleanup", action="store_true", help="remove the rules of both backends, then exit")
    return p


async def choose_rules(args: argparse.Namespace) -> Rules:
    if args.backend == "nftables":
        return NftablesRules(args.nft_binary)
    if args.backend == "iptables":
        return IptablesRules(args.iptables_binary)
    if shutil.which(args.nft_binary) and (await run_tool([args.nft_binary, "list", "tables"], check=False))[0] == 0:
        return NftablesRules(args.nft_binary)
    return IptablesRules(args.iptables_binary)


async def main_async(args: argparse.Namespace) -> None:
    if args.cleanup:
        for rules in (NftablesRules(args.nft_binary), IptablesRules(args.iptables_binary)):
            try:
                await rules.cleanup()
            except Exception as exc:
                log.warning("cleanup step failed", mode=rules.mode, error=str(exc))
        return
    node = (args.hostname_override or socket.gethostname()).strip().lower()
    rules = await choose_rules(args)
    # what the other backend wrote before a switch would otherwise keep dropping traffic
    other = IptablesRules(args.iptables_binary) if rules.mode == "nftables" else NftablesRules(args.nft_binary)
    try:
        await other.cleanup()
    except Exception as exc:
        log.debug("nothing of the other backend to clean up", mode=other.mode, error=str(exc))
    agent = PolicyAgent(rules, node, min_sync_period=args.min_sync_period, sync_period=args.sync_period)
    health = await start_health(args)
    if health is not None:
        health.add_readyz_check("rules", lambda: agent.synced)
    client = Client(client_config(args, "pyk8s-network-policy"))
    log.info("starting network-policy agent", node=node, mode=rules.mode)
    try:
        await agent.run(client)
    finally:
        await client.close()
        if health is not None:
            await health.stop()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging(args)
    return run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
