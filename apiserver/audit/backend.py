"""The audit log backend: Events buffered and written by a thread of their own, so a slow disk never
stalls the event loop (upstream's batch backend in front of its log backend), with lumberjack's
rotation: `--audit-log-maxsize` megabytes per file (0: 100), `--audit-log-maxbackup` old files kept
(0: all), `--audit-log-maxage` days (0: forever)."""

from __future__ import annotations

import os
import queue
import re
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import structlog

log = structlog.get_logger("apiserver.audit")

#: upstream's default batch buffer: events past it are dropped (and logged), never waited for.
BUFFER_SIZE = 10_000
_BATCH = 400
_DEFAULT_MAX_MB = 100
_BACKUP_TIME = "%Y-%m-%dT%H-%M-%S"


@dataclass(frozen=True)
class LogOptions:
    path: str
    max_age_days: int = 0
    max_backups: int = 0
    max_size_mb: int = 0
    format: str = "json"


def legacy_line(event: dict[str, Any]) -> bytes:
    """One event in upstream's `legacy` format: the receive time and key="value" pairs."""
    user = event.get("user") or {}
    name = user.get("username") or "<none>"
    groups = ",".join(f'"{g}"' for g in user.get("groups") or []) if user.get("username") else ""
    imp = event.get("impersonatedUser")
    as_user, as_groups = ("<self>", "<lookup>") if imp is None else (
        imp.get("username", ""), ",".join(f'"{g}"' for g in imp.get("groups") or []) or "<lookup>")
    ref = event.get("objectRef") or {}
    status = event.get("responseStatus")
    ips = event.get("sourceIPs") or ["<unknown>"]
    pairs = [("id", event["auditID"]), ("stage", event["stage"]), ("ip", ips[0]), ("method", event["verb"]),
             ("user", name), ("groups", groups or "<none>"), ("as", as_user), ("asgroups", as_groups),
             ("user-agent", event.get("userAgent", "")), ("namespace", ref.get("namespace") or "<none>"),
             ("uri", event["requestURI"])]
    text = " ".join(f"{k}={orjson.dumps(v).decode()}" for k, v in pairs)
    response = str(status["code"]) if status else "<deferred>"
    return f'{event["requestReceivedTimestamp"]} AUDIT: {text} response="{response}"\n'.encode()


class _RotatingFile:
    """A file that moves itself aside as `<name>-<UTC time>.<ext>` when the next line would pass the size."""

    def __init__(self, options: LogOptions) -> None:
        self.path = Path(options.path)
        self.options = options
        self.max_bytes = (options.max_size_mb or _DEFAULT_MAX_MB) * 1024 * 1024
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file: BinaryIO = open(self.path, "ab")  # noqa: SIM115 - kept open for the process's life
        self.size = self.file.tell()

    def write(self, data: bytes) -> None:
        if self.size and self.size + len(data) > self.max_bytes:
            self._rotate()
        self.file.write(data)
        self.size += len(data)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def _backup_name(self) -> Path:
        now = datetime.now(UTC)
        stamp = now.strftime(_BACKUP_TIME) + f".{now.microsecond // 1000:03d}"
        return self.path.with_name(f"{self.path.stem}-{stamp}{self.path.suffix}")

    def _rotate(self) -> None:
        self.file.close()
        os.replace(self.path, self._backup_name())
        self.file = open(self.path, "ab")  # noqa: SIM115 - kept open for the process's life
        self.size = 0
        self._prune()

    def _prune(self) -> None:
        pattern = re.compile(re.escape(self.path.stem) + r"-(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d)\.\d{3}"
                             + re.escape(self.path.suffix) + "$")
        backups = []
        for entry in self.path.parent.iterdir():
            m = pattern.match(entry.name)
            if m:
                backups.append((datetime.strptime(m.group(1), _BACKUP_TIME).replace(tzinfo=UTC), entry))
        backups.sort(reverse=True)
        doomed = backups[self.options.max_backups:] if self.options.max_backups else []
        if self.options.max_age_days:
            cutoff = datetime.now(UTC) - timedelta(days=self.options.max_age_days)
            doomed += [b for b in backups if b[0] < cutoff and b not in doomed]
        for _, entry in doomed:
            entry.unlink(missing_ok=True)


class LogBackend:
    """Takes events from the event loop without waiting; a thread serializes and writes them in batches."""

    def __init__(self, options: LogOptions) -> None:
        self.options = options
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(BUFFER_SIZE)
        self._out: _RotatingFile | None = None if options.path == "-" else _RotatingFile(options)
        self._encode = legacy_line if options.format == "legacy" else (
            lambda event: orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE))
        self._dropped = 0
        self._thread = threading.Thread(target=self._run, name="audit-log", daemon=True)
        self._thread.start()

    def process(self, event: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 1000 == 0:
                log.error("audit buffer full, events dropped", dropped=self._dropped)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is buffered, then stop the thread (blocking: call it off the event loop)."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _write(self, data: bytes) -> None:
        if self._out is None:
            sys.stdout.buffer.write(data)
        else:
            self._out.write(data)

    def _flush(self) -> None:
        if self._out is None:
            sys.stdout.buffer.flush()
        else:
            self._out.flush()

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            batch = [event]
            while event is not None and len(batch) < _BATCH:
                try:
                    event = self._queue.get_nowait()
                except queue.Empty:
                    break
                batch.append(event)
            try:
                for item in batch:
                    if item is not None:
                        self._write(self._encode(item))
                self._flush()
            except (OSError, TypeError, ValueError):
                log.exception("writing the audit log failed")
                time.sleep(0.1)
            if batch[-1] is None:
                if self._out is not None:
                    self._out.close()
                return
