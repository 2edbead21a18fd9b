"""Reading CRI container log files the way `kubectl logs` expects them.

containerd writes one record per line: `<RFC3339Nano> <stdout|stderr> <F|P> <content>`; `P` marks a
partial line whose rest follows in the next record. The kubelet strips the prefix, restores the
newline after full records and applies the request's tail, since, timestamps and byte limit.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from kubelet_agent.cri.logfile import LogRecord, format_timestamp, parse_record

CHUNK = 64 * 1024


@dataclass
class LogOptions:
    follow: bool = False
    tail_lines: int | None = None
    since_ns: int | None = None
    timestamps: bool = False
    limit_bytes: int | None = None


def render(record: LogRecord, options: LogOptions) -> bytes:
    out = record.content + (b"\n" if record.full else b"")
    if options.timestamps:
        out = format_timestamp(record.timestamp_ns).encode() + b" " + out
    return out


def tail_offset(path: str, lines: int) -> int:
    """The byte offset where the last `lines` records of the file begin (read backwards in chunks)."""
    with open(path, "rb") as f:
        pos = f.seek(0, os.SEEK_END)
        if lines <= 0:
            return pos
        buf = b""
        while pos > 0:
            step = min(CHUNK, pos)
            pos -= step
            f.seek(pos)
            buf = f.read(step) + buf
            if buf.rstrip(b"\n").count(b"\n") >= lines:
                break
    body = buf[:-1] if buf.endswith(b"\n") else buf
    idx = len(body)
    for _ in range(lines):
        idx = body.rfind(b"\n", 0, idx)
        if idx < 0:
            return pos
    return pos + idx + 1


def _read_from(path: str, offset: int, size: int = CHUNK) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


async def read_logs(path: str, options: LogOptions,
                    running: Callable[[], Awaitable[bool]] | None = None,
                    poll: float = 0.2) -> AsyncIterator[bytes]:
    """Yield rendered log bytes; with `follow`, keep waiting for new records until `running()` is False."""
    if not await asyncio.to_thread(os.path.exists, path):
        return
    offset = 0 if options.tail_lines is None else await asyncio.to_thread(tail_offset, path, options.tail_lines)
    remaining = options.limit_bytes
    pending = b""
    idle = 0.0
    while True:
        try:
            data = await asyncio.to_thread(_read_from, path, offset)
        except FileNotFoundError:
            data = b""
        if data:
            idle = 0.0
            offset += len(data)
            pending += data
            *lines, pending = pending.split(b"\n")
            out = []
            for line in lines:
                record = parse_record(line)
                if record is None or (options.since_ns is not None and record.timestamp_ns < options.since_ns):
                    continue
                out.append(render(record, options))
            chunk = b"".join(out)
            if remaining is not None:
                chunk = chunk[:remaining]
                remaining -= len(chunk)
            if chunk:
                yield chunk
            if remaining is not None and remaining <= 0:
                return
            continue
        if not options.follow:
            return
        if running is not None and idle >= 1.0:
            if not await running():
                # The container may have written its last lines between the read and the check.
                if (await asyncio.to_thread(_read_from, path, offset, 1)) == b"":
                    return
                idle = 0.0
                continue
            idle = 0.0
        await asyncio.sleep(poll)
        idle += poll
