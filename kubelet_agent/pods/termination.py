"""Termination messages as upstream's kubelet reports them.

Each container instance gets a file of its own, bind-mounted at its terminationMessagePath and
writable by any user (the container may not run as root). Once the instance exits, the kubelet
reads at most the file's last 4 KiB; under `FallbackToLogsOnError`, a failed container that left
the file empty reports the last 80 lines of its log instead, at most 2 KiB. Across a pod the
messages share 12 KiB, split evenly over its containers and init containers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kubelet_agent.cri.logfile import parse_record

DEFAULT_PATH = "/dev/termination-log"
FALLBACK_TO_LOGS = "FallbackToLogsOnError"
#: upstream's MaxContainerTerminationMessageLength, MaxContainerTerminationMessageLogLength,
#: MaxContainerTerminationMessageLogLines and MaxPodTerminationMessageLogLength
MAX_FILE_BYTES = 4 * 1024
MAX_LOG_BYTES = 2 * 1024
MAX_LOG_LINES = 80
MAX_POD_BYTES = 12 * 1024
_LOG_READ = 64 * 1024


def message_file(pod_dir: Path, container: str, attempt: int) -> Path:
    return pod_dir / "containers" / container / f"termination-log.{attempt}"


def prepare(path: Path) -> None:
    """An empty message file any user in the container may write (blocking: run it in a thread)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    os.chmod(path, 0o666)


def read_message(path: Path, log_path: Path | None) -> str:
    """The instance's message: the file's tail, or with `log_path` (the fallback applies) the log's
    tail when the file is empty. Blocking: run it in a thread."""
    try:
        data = _tail_bytes(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        data = b""
    except OSError as exc:
        return f"Error on reading termination log {path}: {exc}"
    if not data and log_path is not None:
        data = _log_tail(log_path)
    return data.decode(errors="replace")


def cap_messages(spec: dict[str, Any], status: dict[str, Any]) -> None:
    """Cut every terminated message of the pod's status to its share of the pod's 12 KiB."""
    count = len(spec.get("containers") or []) + len(spec.get("initContainers") or [])
    share = MAX_POD_BYTES // count if count else MAX_POD_BYTES
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for entry in status.get(key) or []:
            for state_key in ("state", "lastState"):
                term = (entry.get(state_key) or {}).get("terminated")
                if term and term.get("message"):
                    raw = term["message"].encode()
                    if len(raw) > share:
                        term["message"] = raw[:share].decode(errors="ignore")


def _tail_bytes(path: Path, limit: int) -> bytes:
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - limit))
        return f.read(limit)


def _log_tail(log_path: Path) -> bytes:
    """The content of the log's last MAX_LOG_LINES lines, at most the last MAX_LOG_BYTES of it."""
    try:
        raw = _tail_bytes(log_path, _LOG_READ)
    except OSError:
        return b""
    lines: list[bytes] = []
    current = b""
    for line in raw.split(b"\n"):
        record = parse_record(line)
        if record is None:
            continue
        current += record.content
        if record.full:
            lines.append(current + b"\n")
            current = b""
    if current:
        lines.append(current)
    return b"".join(lines[-MAX_LOG_LINES:])[-MAX_LOG_BYTES:]
