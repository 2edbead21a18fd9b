"""`python -m controller_manager`: flags as upstream's kube-controller-manager, leader election
on the kube-system/kube-controller-manager Lease, and the enabled controllers run while leading.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import socket
import uuid
from collections.abc import Sequence

import structlog

from controller_manager.context import ControllerContext
from controller_manager.credentials import ServiceAccountCredentials
from controller_manager.events import EventBroadcaster
from controller_manager.registry import discover, enabled, service_account
from services.client import Client
from services.informers import LeaderElector, SharedInformerFactory, strip_managed_fields
from services.runtime import base_parser, boolean_flag, client_config, run, setup_logging, start_health
from services.runtime.durations import duration_flag

log = structlog.get_logger(__name__)

#: (flag, default) of upstream's worker-count flags; modules read them from ctx.options.
CONCURRENCY_FLAGS = (
    ("concurrent-replicaset-syncs", 5),
    ("concurrent-rc-syncs", 5),
    ("concurrent-deployment-syncs", 5),
    ("concurrent-gc-syncs", 20),
    ("concurrent-namespace-syncs", 10),
    ("concurrent-serviceaccount-syncs", 1),
    ("concurrent-statefulset-syncs", 5),
    ("concurrent-daemonset-syncs", 2),
    ("concurrent-job-syncs", 5),
    ("concurrent-cron-job-syncs", 5),
    ("concurrent-ttl-after-finished-syncs", 5),
    ("concurrent-endpoint-syncs", 5),
    ("concurrent-service-endpoint-syncs", 5),
)


def build_parser() -> argparse.ArgumentParser:
    parser = base_parser("kube-controller-manager", "pyk8s kube-controller-manager", default_secure_port=10257)
    # Upstream's 20 QPS would take minutes to create thousands of pods; this process is meant to be fast.
    parser.set_defaults(kube_api_qps=1000.0, kube_api_burst=2000)
    parser.add_argument(
        "--controllers", default="*",
        help="comma-separated controllers: '*' the defaults, 'foo' enables, '-foo' disables",
    )
    parser.add_argument("--use-service-account-credentials", type=boolean_flag, nargs="?", const=True,
                        default=False, help="each controller talks to the apiserver as its own kube-system "
                                            "service account")
    parser.add_argument("--leader-elect", type=boolean_flag, nargs="?", const=True, default=True)
    parser.add_argument("--leader-elect-lease-duration", type=duration_flag, default=15.0)
    parser.add_argument("--leader-elect-renew-deadline", type=duration_flag, default=10.0)
    parser.add_argument("--leader-elect-retry-period", type=duration_flag, default=2.0)
    parser.add_argument("--leader-elect-resource-namespace", default="kube-system")
    parser.add_argument("--leader-elect-resource-name", default="kube-controller-manager")
    for flag, default in CONCURRENCY_FLAGS:
        parser.add_argument(f"--{flag}", type=int, default=default)
    parser.add_argument("--terminated-pod-gc-threshold", type=int, default=12500)
    parser.add_argument("--enable-garbage-collector", type=boolean_flag, nargs="?", const=True, default=True)
    parser.add_argument("--namespace-sync-period", type=duration_flag, default=300.0)
    parser.add_argument("--min-resync-period", type=duration_flag, default=0.0,
                        help="informer resync period; 0 leaves resyncs off (pyk8s controllers are event driven)")
    # pyk8s additions for tests; upstream hard-codes these.
    parser.add_argument("--podgc-period", type=duration_flag, default=20.0, help="how often pod GC runs")
    parser.add_argument("--podgc-orphan-grace", type=duration_flag, default=40.0,
                        help="how long a pod's node must stay missing before its pods are deleted")
    parser.add_argument("--gc-discovery-period", type=duration_flag, default=30.0,
                        help="how often the garbage collector rereads discovery for new resources")
    for desc in discover().values():
        add_flags = getattr(desc.module, "add_flags", None)
        if add_flags is not None:
            add_flags(parser)
    return parser


async def run_controllers(client: Client, args: argparse.Namespace, names: list[str]) -> None:
    """Build the enabled controllers, start the informers they asked for, run them until cancelled.

    Watches get a client of their own: dozens of long-lived streams in the writers' connection pool
    would make every write pay for scanning them. The caches drop managedFields, as upstream's do:
    no controller reads them, and they are 40 % of a running pod. The shared informers and events use
    the manager's own identity, as upstream's; with --use-service-account-credentials each controller
    writes with its own service account's.
    """
    descriptors = discover()
    watch_client = Client(client.config)
    factory = SharedInformerFactory(watch_client, default_resync=args.min_resync_period,
                                    transform=strip_managed_fields)
    broadcaster = EventBroadcaster(client)
    ctx = ControllerContext(client=client, informers=factory, options=args, broadcaster=broadcaster)
    credentials = ServiceAccountCredentials(client) if args.use_service_account_credentials else None
    controllers = {}
    for name in names:
        if name == "garbagecollector" and not args.enable_garbage_collector:
            continue
        own = ctx if credentials is None else dataclasses.replace(
            ctx, client=await credentials.client_for(service_account(name)))
        controllers[name] = descriptors[name].new(own)
        log.info("started controller", controller=name)
    factory.start()
    broadcaster.start()
    tasks = [asyncio.create_task(_guard(name, c.run())) for name, c in controllers.items()]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await broadcaster.flush()
        await broadcaster.stop()
        await factory.shutdown()
        await watch_client.close()
        if credentials is not None:
            await credentials.close()


async def _guard(name: str, coro: object) -> None:
    """A crashed controller is logged and the others keep going, as upstream's goroutines do."""
    try:
        await coro  # type: ignore[misc]
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("controller crashed", controller=name)


async def amain(args: argparse.Namespace) -> None:
    names = enabled([c.strip() for c in args.controllers.split(",") if c.strip()], discover())
    client = Client(client_config(args, user_agent="kube-controller-manager"))
    health = await start_health(args)
    try:
        if not args.leader_elect:
            await run_controllers(client, args, names)
            return
        identity = f"{socket.gethostname()}_{uuid.uuid4()}"
        elector = LeaderElector(
            client,
            namespace=args.leader_elect_resource_namespace,
            name=args.leader_elect_resource_name,
            identity=identity,
            on_started_leading=lambda: run_controllers(client, args, names),
            on_new_leader=lambda leader: log.info("new leader elected", leader=leader),
            lease_duration=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
        )
        if health is not None:
            health.add_livez_check("leaderElection", lambda: True)
        log.info("attempting to acquire leader lease", identity=identity)
        await elector.run()
        raise RuntimeError("leaderelection lost")
    finally:
        if health is not None:
            await health.stop()
        await client.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args)
    return run(amain(args))
