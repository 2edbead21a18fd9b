"""Go duration strings ("1h0m0s", "30s", "500ms"), as every component's flags and config files write them.

One parser for all: Go's time.ParseDuration grammar (a sign, then number-unit pairs; "0" alone needs no
unit). Flags also take plain seconds, which pyk8s has always accepted.
"""

from __future__ import annotations

import argparse
import re

_PAIR = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text: str) -> float:
    """Seconds in `text`, accepting exactly what Go's time.ParseDuration accepts; ValueError with Go's message."""
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    pairs = _PAIR.findall(body)
    if not body or "".join(n + u for n, u in pairs) != body:
        raise ValueError(f'time: invalid duration "{text}"')
    seconds = sum(float(n) * _UNITS[u] for n, u in pairs)
    return -seconds if text.startswith("-") else seconds


def duration(text: str | int | float) -> float:
    """A duration from a flag or a config file: a Go duration, or plain seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    return go_duration(text)


def duration_flag(text: str) -> float:
    """argparse type for duration flags: a bad value is a usage error naming the value."""
    try:
        return duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def short_human_duration(seconds: float) -> str:
    """One unit only, as Go's ShortHumanDuration (a CSR's requested duration, a bootstrap token's TTL)."""
    secs = int(seconds)
    if secs < -1:
        return "<invalid>"
    if secs < 0:
        return "0s"
    if secs < 60:
        return f"{secs}s"
    if secs < 3600:
        return f"{secs // 60}m"
    if secs < 24 * 3600:
        return f"{secs // 3600}h"
    if secs < 365 * 24 * 3600:
        return f"{secs // (24 * 3600)}d"
    return f"{secs // (365 * 24 * 3600)}y"
