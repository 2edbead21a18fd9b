"""Node-pressure signals against the hard eviction thresholds (upstream's eviction manager, the part that
sets MemoryPressure, DiskPressure and PIDPressure), and emptyDir sizeLimit enforcement, which evicts a pod
whose emptyDir holds more than its limit.

Signals are computed from the host the way upstream documents them: memory.available is capacity minus
the working set (MemFree + Inactive(file) of /proc/meminfo), nodefs is the filesystem of the kubelet's
root directory, imagefs the one the runtime keeps images on, pid.available is pid_max minus the tasks
that exist. A condition that was met stays True for the pressure transition period after it clears.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import structlog

from services.api.quantity import canonicalize_quantity, parse_quantity

log = structlog.get_logger(__name__)

#: upstream's Linux defaults, used only when no threshold is configured at all
DEFAULT_EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
                         "imagefs.available": "15%", "imagefs.inodesFree": "5%"}
PRESSURE_OF = {"memory.available": "memory", "nodefs.available": "disk", "nodefs.inodesFree": "disk",
               "imagefs.available": "disk", "imagefs.inodesFree": "disk", "pid.available": "pid"}
EMPTY_DIR_MESSAGE = 'Usage of EmptyDir volume "{}" exceeds the limit "{}". '


@dataclass(frozen=True)
class Threshold:
    signal: str
    quantity: Decimal | None = None
    percentage: float | None = None
    original: str = ""

    def limit(self, capacity: Decimal) -> Decimal:
        if self.percentage is not None:
            return capacity * Decimal(str(self.percentage))
        return self.quantity or Decimal(0)


def parse_thresholds(values: dict[str, str]) -> list[Threshold]:
    """evictionHard as KubeletConfiguration writes it: signal -> quantity or percentage; "0%"/"100%" disable."""
    out = []
    for signal, value in values.items():
        if signal not in PRESSURE_OF:
            raise ValueError(f"unsupported eviction signal {signal!r}")
        text = str(value).strip()
        try:
            out.extend(_threshold(signal, text))
        except ValueError as exc:
            raise ValueError(f"invalid eviction threshold {signal}<{text}: {exc}") from exc
    return out


def _threshold(signal: str, text: str) -> list[Threshold]:
    """The threshold for one signal; none when a percentage of 0% or 100% disables it."""
    if text.endswith("%"):
        pct = float(text[:-1])
        if not 0 <= pct <= 100:
            raise ValueError("a percentage must be within 0%..100%")
        return [Threshold(signal, percentage=pct / 100)] if 0 < pct < 100 else []
    q = parse_quantity(text)
    if q < 0:
        raise ValueError("the quantity must not be negative")
    return [Threshold(signal, quantity=q, original=canonicalize_quantity(text))]


def parse_eviction_flag(text: str) -> dict[str, str]:
    """--eviction-hard: `memory.available<100Mi,nodefs.available<10%`."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"([a-zA-Z.]+)\s*<\s*(\S+)", part)
        if m is None:
            raise ValueError(f"invalid eviction threshold {part!r}: want <signal><<value>")
        out[m.group(1)] = m.group(2)
    return out


def _meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            with contextlib.suppress(ValueError, IndexError):
                out[key] = int(rest.split()[0]) * 1024
    return out


def _fs(path: str) -> tuple[int, int, int, int]:
    """(bytes available, bytes capacity, inodes free, inodes capacity) of the filesystem holding path."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize, st.f_favail, st.f_files


def _pids() -> tuple[int, int]:
    """(pids in use, pid limit): tasks that exist, from /proc/loadavg, and pid_max capped by threads-max."""
    limit = int(Path("/proc/sys/kernel/pid_max").read_text())
    with contextlib.suppress(OSError, ValueError):
        limit = min(limit, int(Path("/proc/sys/kernel/threads-max").read_text()))
    used = int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])
    return used, limit


def observe(root_dir: str, image_fs: str | None) -> dict[str, tuple[Decimal, Decimal]]:
    """signal -> (available, capacity), for every signal this host can report."""
    out: dict[str, tuple[Decimal, Decimal]] = {}
    with contextlib.suppress(OSError):
        mem = _meminfo()
        total = mem["MemTotal"]
        working_set = max(0, total - mem.get("MemFree", 0) - mem.get("Inactive(file)", 0))
        out["memory.available"] = (Decimal(total - working_set), Decimal(total))
    for prefix, path in (("nodefs", root_dir), ("imagefs", image_fs)):
        if not path:
            continue
        with contextlib.suppress(OSError):
            avail, cap, ifree, icap = _fs(path)
            out[f"{prefix}.available"] = (Decimal(avail), Decimal(cap))
            if icap:
                out[f"{prefix}.inodesFree"] = (Decimal(ifree), Decimal(icap))
    with contextlib.suppress(OSError, ValueError, IndexError):
        used, limit = _pids()
        out["pid.available"] = (Decimal(limit - used), Decimal(limit))
    return out


def disk_usage(path: str) -> int:
    """Bytes a directory tree occupies on disk (allocated blocks, as du counts them), each inode once."""
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [path]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as it:
            for entry in it:
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return total


class EvictionManager:
    """Evaluates thresholds every interval; calls `on_change` when a pressure condition flips."""

    def __init__(self, thresholds: list[Threshold], root_dir: str, *, transition: float = 300.0,
                 image_fs: Callable[[], Awaitable[str | None]] | None = None,
                 on_change: Callable[[], Awaitable[None]] | None = None) -> None:
        self.thresholds = thresholds
        self.root_dir = root_dir
        self.transition = transition
        self.image_fs = image_fs
        self.on_change = on_change
        self.pressure: dict[str, bool] = {"memory": False, "disk": False, "pid": False}
        self.observations: dict[str, tuple[Decimal, Decimal]] = {}
        self._last_met: dict[str, float] = {}

    async def synchronize(self) -> list[Threshold]:
        """One pass: observe, compare, update the pressure flags; returns the thresholds met now."""
        image_fs = None
        if self.image_fs is not None:
            with contextlib.suppress(Exception):
                image_fs = await self.image_fs()
        self.observations = await asyncio.to_thread(observe, self.root_dir, image_fs)
        met = [t for t in self.thresholds if t.signal in self.observations
               and self.observations[t.signal][0] < t.limit(self.observations[t.signal][1])]
        now = time.monotonic()
        for t in met:
            self._last_met[PRESSURE_OF[t.signal]] = now
        met_kinds = {PRESSURE_OF[t.signal] for t in met}
        pressure = {kind: kind in met_kinds or now - self._last_met.get(kind, -1e18) < self.transition
                    for kind in self.pressure}
        if pressure != self.pressure:
            log.info("node pressure changed", pressure=pressure,
                     met=[f"{t.signal}<{t.limit(self.observations[t.signal][1])}" for t in met])
            self.pressure.update(pressure)
            if self.on_change is not None:
                await self.on_change()
        return met

    def victim(self, met: list[Threshold], pods: list[dict[str, Any]],
               qos: Callable[[dict[str, Any]], str]) -> tuple[dict[str, Any], str] | None:
        """The one pod a pass evicts for the met thresholds (memory first, as upstream), with its message."""
        if not met:
            return None
        ranked = rank_for_eviction(pods, qos)
        if not ranked:
            log.warning("node under pressure but no pod can be evicted")
            return None
        order = list(PRESSURE_OF)
        threshold = min(met, key=lambda t: order.index(t.signal))
        available, capacity = self.observations[threshold.signal]
        return ranked[0], eviction_message(threshold, available, capacity)


def empty_dir_violations(pod: dict[str, Any], volume_dir: Path) -> str | None:
    """The eviction message for the first emptyDir of `pod` over its sizeLimit, or None."""
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        source = vol.get("emptyDir")
        if source is None or not source.get("sizeLimit"):
            continue
        limit = parse_quantity(source["sizeLimit"])
        if limit <= 0:
            continue
        if disk_usage(str(volume_dir / vol["name"])) > limit:
            return EMPTY_DIR_MESSAGE.format(vol["name"], canonicalize_quantity(source["sizeLimit"]))
    return None


#: upstream's SystemCriticalPriority: pods at or above it are never evicted nor refused for pressure
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
RESOURCE_OF = {"memory.available": "memory", "nodefs.available": "ephemeral-storage", "nodefs.inodesFree": "inodes",
               "imagefs.available": "ephemeral-storage", "imagefs.inodesFree": "inodes", "pid.available": "pids"}
QOS_ORDER = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}
CONDITION_OF = {"memory": "MemoryPressure", "disk": "DiskPressure", "pid": "PIDPressure"}
MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"


def is_critical(pod: dict[str, Any]) -> bool:
    """Static, mirror and system-critical pods, which upstream's kubelet neither evicts nor refuses."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if "kubernetes.io/config.mirror" in annotations or annotations.get("kubernetes.io/config.source", "api") != "api":
        return True
    return _priority(pod) >= SYSTEM_CRITICAL_PRIORITY


def _priority(pod: dict[str, Any]) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


def rank_for_eviction(pods: list[dict[str, Any]], qos: Callable[[dict[str, Any]], str],
                      usage: dict[str, tuple[Decimal, Decimal]] | None = None) -> list[dict[str, Any]]:
    """Eviction candidates, first victim first, as upstream ranks them under pressure.

    `usage` maps a pod uid to (usage, request) of the starved resource. Pods without usage come first (as
    upstream's stats comparison puts them), ordered by QoS class then priority; the others by whether usage
    exceeds the request, then priority (lower first), then usage above the request (more first).
    """
    usage = usage or {}

    def key(pod: dict[str, Any]) -> tuple[Any, ...]:
        seen = usage.get((pod.get("metadata") or {}).get("uid", ""))
        if seen is None:
            return (0, QOS_ORDER.get(qos(pod.get("spec") or {}), 0), _priority(pod))
        used, requested = seen
        return (1, used <= requested, _priority(pod), -(used - requested))

    return sorted((p for p in pods if not is_critical(p)), key=key)


def eviction_message(threshold: Threshold, available: Decimal, capacity: Decimal) -> str:
    """The status message upstream writes on a pod evicted for `threshold` (no per-container usage known)."""
    resource = RESOURCE_OF[threshold.signal]
    shown = threshold.original or _quantity(threshold.limit(capacity), resource)
    return (f"The node was low on resource: {resource}. "
            f"Threshold quantity: {shown}, available: {_quantity(available, resource)}. ")


def _quantity(value: Decimal, resource: str) -> str:
    """An observed amount as upstream prints it: bytes in the largest exact binary suffix, counts in decimal."""
    n = int(value)
    base, suffixes = (1024, ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")) if resource in ("memory", "ephemeral-storage") \
        else (1000, ("k", "M", "G", "T", "P", "E"))
    suffix = ""
    for candidate in suffixes:
        if n == 0 or n % base:
            break
        n, suffix = n // base, candidate
    return f"{n}{suffix}"


def admit_under_pressure(pod: dict[str, Any], pressure: dict[str, bool], qos: str) -> tuple[str, str] | None:
    """Upstream's eviction admit handler: None to admit, else ("Evicted", message) while the node is starved.

    Under memory pressure alone only BestEffort pods are refused (unless they tolerate the memory-pressure
    taint); under disk or PID pressure everything but critical pods is.
    """
    conditions = [CONDITION_OF[kind] for kind in ("memory", "disk", "pid") if pressure.get(kind)]
    if not conditions or is_critical(pod):
        return None
    if conditions == ["MemoryPressure"]:
        if qos != "BestEffort" or _tolerates_memory_pressure(pod):
            return None
    return "Evicted", f"The node had condition: [{' '.join(conditions)}]. "


def _tolerates_memory_pressure(pod: dict[str, Any]) -> bool:
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("effect") not in (None, "", "NoSchedule"):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, "", MEMORY_PRESSURE_TAINT):
            return True
        if t.get("key") == MEMORY_PRESSURE_TAINT and not t.get("value"):
            return True
    return False
