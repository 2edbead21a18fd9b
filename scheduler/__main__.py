"""`python -m scheduler`: kube-scheduler with upstream's flags (the ones that still mean something here)."""

from __future__ import annotations

import argparse
import gc
import socket
import sys
import uuid
from dataclasses import dataclass

import structlog

from scheduler.config import ConfigError, SchedulerConfig, load_config
from scheduler.scheduler import Scheduler
from services.client import Client
from services.informers import LeaderElector
from services.runtime import base_parser, client_config, run, setup_logging, start_health
from services.runtime.durations import duration, duration_flag

log = structlog.get_logger("scheduler")

DEFAULT_SECURE_PORT = 10259



def boolean(text: str) -> bool:
    if text.lower() in ("1", "t", "true", "yes"):
        return True
    if text.lower() in ("0", "f", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


def parser() -> argparse.ArgumentParser:
    p = base_parser("kube-scheduler", "Schedules pods onto nodes.", default_secure_port=DEFAULT_SECURE_PORT)
    p.add_argument("--config", default=None, help="path to a KubeSchedulerConfiguration file")
    p.add_argument("--leader-elect", type=boolean, nargs="?", const=True, default=None,
                   help="elect a leader through a Lease before scheduling (default true)")
    p.add_argument("--leader-elect-lease-duration", type=duration_flag, default=None)
    p.add_argument("--leader-elect-renew-deadline", type=duration_flag, default=None)
    p.add_argument("--leader-elect-retry-period", type=duration_flag, default=None)
    p.add_argument("--leader-elect-resource-namespace", default=None)
    p.add_argument("--leader-elect-resource-name", default=None)
    p.add_argument("--identity", default=None, help="leader election identity (default hostname_uuid)")
    return p


@dataclass
class LeaderSettings:
    enabled: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    namespace: str = "kube-system"
    name: str = "kube-scheduler"


def leader_settings(args: argparse.Namespace, config: SchedulerConfig) -> LeaderSettings:
    """Flags override the config file's leaderElection, which overrides upstream's defaults."""
    le = config.leader_election
    out = LeaderSettings()
    if "leaderElect" in le:
        out.enabled = bool(le["leaderElect"])
    for key, attr in (("leaseDuration", "lease_duration"), ("renewDeadline", "renew_deadline"),
                      ("retryPeriod", "retry_period")):
        if key in le:
            setattr(out, attr, duration(le[key]))
    out.namespace = le.get("resourceNamespace") or out.namespace
    out.name = le.get("resourceName") or out.name
    for flag, attr in ((args.leader_elect, "enabled"), (args.leader_elect_lease_duration, "lease_duration"),
                       (args.leader_elect_renew_deadline, "renew_deadline"),
                       (args.leader_elect_retry_period, "retry_period"),
                       (args.leader_elect_resource_namespace, "namespace"),
                       (args.leader_elect_resource_name, "name")):
        if flag is not None:
            setattr(out, attr, flag)
    return out


async def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    setup_logging(args)
    try:
        config = load_config(args.config)
    except (ConfigError, OSError) as e:
        raise SystemExit(f"invalid configuration: {e}") from e
    if args.kubeconfig is None and args.master is None and config.client_connection.get("kubeconfig"):
        args.kubeconfig = config.client_connection["kubeconfig"]
    cfg = client_config(args, user_agent="kube-scheduler")
    cfg.qps = cfg.qps or float(config.client_connection.get("qps") or 0)
    cfg.burst = cfg.burst or int(config.client_connection.get("burst") or 0)
    identity = args.identity or f"{socket.gethostname()}_{uuid.uuid4()}"
    le = leader_settings(args, config)
    health = await start_health(args)
    client = Client(cfg)
    current: list[Scheduler] = []

    if health is not None:
        # A standby candidate is ready; a leader is ready once its informers synced.
        health.add_readyz_check("sched-handler-sync", lambda: not current or current[0].has_synced())

    async def lead() -> None:
        sched = Scheduler(client, config, instance=identity)
        current[:] = [sched]
        await sched.run()

    try:
        if le.enabled:
            elector = LeaderElector(
                client, namespace=le.namespace, name=le.name, identity=identity, on_started_leading=lead,
                lease_duration=le.lease_duration, renew_deadline=le.renew_deadline, retry_period=le.retry_period,
                on_new_leader=lambda who: log.info("new leader elected", leader=who),
            )
            await elector.run()
            # Like upstream: losing the lease ends the process; a supervisor restarts it as a candidate.
            log.error("leader election lost")
            raise SystemExit(1)
        await lead()
    finally:
        await client.close()
        if health is not None:
            await health.stop()


def tune_runtime() -> None:
    """uvloop's C event loop (cheaper wake-ups and socket I/O per request and watch event), and
    young-generation collections less often, as the apiserver does: the caches hold dicts for every
    node and pod, which the default thresholds make the collector walk over and over."""
    gc.set_threshold(50_000, 50, 100)
    try:
        import uvloop
    except ImportError:
        return
    uvloop.install()


if __name__ == "__main__":
    tune_runtime()
    sys.exit(run(main()))
