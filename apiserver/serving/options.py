"""Flags of how the apiserver holds connections and requests: upstream's max-in-flight limits, and the
deadlines its secure server fixes in code (`--read-header-timeout`, `--idle-timeout` are pyk8s's, so
tests can shorten them)."""

from __future__ import annotations

import argparse
import resource
from collections.abc import Callable

from apiserver.serving.connections import ConnectionLimits
from apiserver.serving.inflight import MaxInFlight
from services.runtime import int_flag
from services.runtime.durations import duration_flag


def _inflight(flag: str) -> Callable[[str], int]:
    return int_flag(0, flag + " can not be negative value")


def _positive_duration(text: str) -> float:
    seconds = duration_flag(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f'must be greater than 0, "{text}" given')
    return seconds


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("serving limits")
    group.add_argument("--max-requests-inflight", type=_inflight("--max-requests-inflight"), default=400,
                       metavar="N", help="read-only requests served at once, long-running ones apart; "
                                         "more get 429 (default 400, 0: no limit)")
    group.add_argument("--max-mutating-requests-inflight", type=_inflight("--max-mutating-requests-inflight"),
                       default=200, metavar="N", help="mutating requests served at once; more get 429 "
                                                      "(default 200, 0: no limit)")
    group.add_argument("--read-header-timeout", type=_positive_duration, default=ConnectionLimits.read_header_timeout,
                       metavar="DURATION", help="a request's header must arrive within this, from when the "
                                                "connection waits for it (default 32s, as upstream's server)")
    group.add_argument("--idle-timeout", type=_positive_duration, default=ConnectionLimits.idle_timeout,
                       metavar="DURATION", help="a keep-alive connection with no request for this long is closed "
                                                "(default 1m30s, as upstream's server)")


def connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    return ConnectionLimits(read_header_timeout=args.read_header_timeout, idle_timeout=args.idle_timeout)


def max_in_flight(args: argparse.Namespace) -> MaxInFlight | None:
    if not args.max_requests_inflight and not args.max_mutating_requests_inflight:
        return None
    return MaxInFlight(args.max_requests_inflight, args.max_mutating_requests_inflight)


def raise_open_files_limit() -> None:
    """Every connection holds a descriptor: take the hard limit, as Go programs do at start-up (Go 1.19+),
    so thousands of clients do not run the apiserver out of them at the soft limit of 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
