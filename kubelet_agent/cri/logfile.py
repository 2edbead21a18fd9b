"""The CRI container log file format containerd writes: one record per line,
`<RFC3339Nano> <stdout|stderr> <F|P> <content>`, where `P` marks a partial line whose rest follows in
the next record. Read by the kubelet's log API and by termination messages that fall back to logs.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass


@dataclass
class LogRecord:
    timestamp_ns: int
    stream: str
    full: bool
    content: bytes


def parse_timestamp(text: str) -> int:
    """RFC3339 with up to nanoseconds to integer nanoseconds since the epoch (Python keeps only micros)."""
    text = text.strip()
    if text.endswith("Z"):
        main, offset = text[:-1], "+00:00"
    else:
        main, offset = text[:-6], text[-6:]
    frac_ns = 0
    if "." in main:
        main, frac = main.split(".", 1)
        frac_ns = int((frac + "000000000")[:9])
    dt = datetime.datetime.fromisoformat(main + offset)
    return int(dt.timestamp()) * 1_000_000_000 + frac_ns


def format_timestamp(ns: int) -> str:
    """Go's RFC3339Nano in UTC: trailing zeros of the fraction dropped, as upstream prints them."""
    seconds, frac = divmod(ns, 1_000_000_000)
    base = datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{frac:09d}".rstrip("0")
    return f"{base}.{digits}Z" if digits else f"{base}Z"


def parse_record(line: bytes) -> LogRecord | None:
    """One CRI log line (without its newline); None for a line that does not follow the format."""
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return None
    try:
        ts = parse_timestamp(parts[0].decode())
    except ValueError:
        return None
    stream = parts[1].decode(errors="replace")
    if stream not in ("stdout", "stderr"):
        return None
    if len(parts) == 3:
        return LogRecord(ts, stream, True, parts[2] if parts[2] not in (b"F", b"P") else b"")
    return LogRecord(ts, stream, not parts[2].startswith(b"P"), parts[3])
