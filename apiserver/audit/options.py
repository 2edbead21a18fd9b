"""The audit flags, upstream's names and defaults: `--audit-policy-file`, `--audit-log-path` (`-` is stdout),
`--audit-log-maxage`, `--audit-log-maxbackup`, `--audit-log-maxsize`, `--audit-log-format`."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from apiserver.audit.backend import LogBackend, LogOptions
from apiserver.audit.policy import Policy, PolicyError, load_policy
from apiserver.audit.recorder import Auditor
from services.runtime import int_flag


def policy_file(path: str) -> Policy | None:
    """Read and check the policy at start-up, so a bad one is a usage error naming the flag."""
    if not path:
        return None
    try:
        return load_policy(path)
    except PolicyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _not_negative(flag: str) -> Callable[[str], int]:
    return int_flag(0, flag + " {value} can't be a negative number")


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("audit")
    group.add_argument("--audit-policy-file", type=policy_file, default=None, metavar="PATH",
                       help="an audit.k8s.io/v1 Policy (YAML or JSON): which requests are audited, at what level")
    group.add_argument("--audit-log-path", default="",
                       help="where audit events go, one per line; '-' is standard output; empty disables")
    group.add_argument("--audit-log-maxage", type=_not_negative("--audit-log-maxage"), default=0, metavar="DAYS",
                       help="days to keep rotated audit logs (0: no limit)")
    group.add_argument("--audit-log-maxbackup", type=_not_negative("--audit-log-maxbackup"), default=0,
                       metavar="N", help="rotated audit logs to keep (0: all)")
    group.add_argument("--audit-log-maxsize", type=_not_negative("--audit-log-maxsize"), default=0, metavar="MB",
                       help="megabytes an audit log grows to before it is rotated (0: 100)")
    group.add_argument("--audit-log-format", choices=("legacy", "json"), default="json",
                       help="json: one audit.k8s.io/v1 Event per line (default); legacy: one text line per event")


def auditor(args: argparse.Namespace) -> Auditor | None:
    """The request auditor the flags ask for; None when nothing is audited (no policy or no log path)."""
    if args.audit_policy_file is None or not args.audit_log_path:
        return None
    backend = LogBackend(LogOptions(args.audit_log_path, args.audit_log_maxage, args.audit_log_maxbackup,
                                    args.audit_log_maxsize, args.audit_log_format))
    return Auditor(args.audit_policy_file, backend)
