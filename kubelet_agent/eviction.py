"""Node-pressure eviction as upstream's eviction manager does it: hard and soft thresholds, the
MemoryPressure, DiskPressure and PIDPressure conditions, minimum reclaim, victims ranked by what they use,
and emptyDir sizeLimit enforcement, which evicts a pod whose emptyDir holds more than its limit.

Signals are computed from the host the way upstream documents them: memory.available is capacity minus
the working set (MemFree + Inactive(file) of /proc/meminfo), nodefs is the filesystem of the kubelet's
root directory, imagefs the one the runtime keeps images on, pid.available is pid_max minus the tasks
that exist. A condition turns on as soon as a threshold is crossed and stays True for the pressure
transition period after it clears; a soft threshold evicts only once crossed for its whole grace period,
and a threshold that evicted stays met until the signal is above it by the minimum reclaim.

Per-pod usage comes from the runtime's CRI stats (what /stats/summary serves) plus logs and emptyDirs on
disk. Hollow pods report what `hollow.pyk8s.io/usage.<container>: "memory=80Mi,ephemeral-storage=1Gi,pids=5"`
says, and a hollow node's signals are its capacity minus what its running pods use.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import structlog

from kubelet_agent.server.cri_streaming import LABEL_POD_UID, CRIError, CRIStreaming
from services.api.quantity import canonicalize_quantity, parse_quantity

log = structlog.get_logger(__name__)

#: upstream's Linux defaults, used only when no threshold is configured at all
DEFAULT_EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
                         "imagefs.available": "15%", "imagefs.inodesFree": "5%"}
PRESSURE_OF = {"memory.available": "memory", "nodefs.available": "disk", "nodefs.inodesFree": "disk",
               "imagefs.available": "disk", "imagefs.inodesFree": "disk", "pid.available": "pid"}
EMPTY_DIR_MESSAGE = 'Usage of EmptyDir volume "{}" exceeds the limit "{}". '
CONTAINER_MESSAGE = "Container {} was using {}, request is {}, has larger consumption of {}. "
HOLLOW_USAGE = "hollow.pyk8s.io/usage."
#: what a hollow node can run before pid.available reaches zero (a common pid_max)
HOLLOW_PID_LIMIT = 32768
Observations = dict[str, tuple[Decimal, Decimal]]


@dataclass(frozen=True)
class Threshold:
    """One eviction threshold; a grace period makes it soft, a minimum reclaim raises the bar to clear it."""

    signal: str
    quantity: Decimal | None = None
    percentage: float | None = None
    original: str = ""
    grace_period: float = 0.0
    min_reclaim: Decimal | None = None
    min_reclaim_percentage: float | None = None

    @property
    def hard(self) -> bool:
        return self.grace_period == 0

    def limit(self, capacity: Decimal, *, reclaim: bool = False) -> Decimal:
        """The available amount below which the threshold is met (plus the minimum reclaim when `reclaim`)."""
        if self.percentage is not None:
            value = capacity * Decimal(str(self.percentage))
        else:
            value = self.quantity or Decimal(0)
        if reclaim:
            if self.min_reclaim_percentage is not None:
                value += capacity * Decimal(str(self.min_reclaim_percentage))
            elif self.min_reclaim is not None:
                value += self.min_reclaim
        return value


def parse_thresholds(values: dict[str, str], *, soft: dict[str, str] | None = None,
                     grace_periods: dict[str, float] | None = None,
                     min_reclaim: dict[str, str] | None = None) -> list[Threshold]:
    """evictionHard, evictionSoft (with evictionSoftGracePeriod) and evictionMinimumReclaim as
    KubeletConfiguration writes them: signal -> quantity or percentage; "0%"/"100%" disable a threshold.

    A soft threshold without a grace period is refused, as upstream refuses to start with one.
    """
    grace_periods = grace_periods or {}
    for signal, seconds in grace_periods.items():
        _check_signal(signal)
        if seconds < 0:
            raise ValueError(f"invalid eviction grace period specified for {signal}: must not be negative")
    reclaims = {signal: _min_reclaim(signal, str(value).strip()) for signal, value in (min_reclaim or {}).items()}
    out = _statements(values, "<")
    for t in _statements(soft or {}, "<"):
        if t.signal not in grace_periods:
            raise ValueError(f"grace period must be specified for the soft eviction threshold {t.signal}")
        out.append(replace(t, grace_period=grace_periods[t.signal]))
    return [replace(t, min_reclaim=reclaims[t.signal][0], min_reclaim_percentage=reclaims[t.signal][1])
            if t.signal in reclaims else t for t in out]


def _check_signal(signal: str) -> None:
    if signal not in PRESSURE_OF:
        raise ValueError(f"unsupported eviction signal {signal!r}")


def _statements(values: dict[str, str], op: str) -> list[Threshold]:
    out = []
    for signal, value in values.items():
        _check_signal(signal)
        text = str(value).strip()
        try:
            out.extend(_threshold(signal, text))
        except ValueError as exc:
            raise ValueError(f"invalid eviction threshold {signal}{op}{text}: {exc}") from exc
    return out


def _min_reclaim(signal: str, text: str) -> tuple[Decimal | None, float | None]:
    """(quantity, fraction) of one evictionMinimumReclaim entry."""
    _check_signal(signal)
    try:
        if text.endswith("%"):
            pct = float(text[:-1])
            if not 0 < pct <= 100:
                raise ValueError("a percentage must be within 0%..100% and positive")
            return None, pct / 100
        q = parse_quantity(text)
    except ValueError as exc:
        raise ValueError(f"invalid eviction minimum reclaim {signal}={text}: {exc}") from exc
    if q < 0:
        raise ValueError(f"negative eviction minimum reclaim specified for {signal}")
    return q, None


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
    """--eviction-hard and --eviction-soft: `memory.available<100Mi,nodefs.available<10%`."""
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


@dataclass
class PodStats:
    """What one pod uses, as the runtime reports it: per container (in the runtime's order) and per pod."""

    memory: dict[str, Decimal] = field(default_factory=dict)
    disk: dict[str, Decimal] = field(default_factory=dict)
    volumes: Decimal = Decimal(0)
    pids: Decimal | None = None

    def usage(self, resource: str) -> Decimal | None:
        """The pod's use of a starved resource (working set; writable layers, logs and emptyDirs; processes)."""
        if resource == "memory":
            return sum(self.memory.values(), Decimal(0)) if self.memory else None
        if resource == "ephemeral-storage":
            return sum(self.disk.values(), Decimal(0)) + self.volumes if self.disk or self.volumes else None
        if resource == "pids":
            return self.pids
        return None


StatsSource = Callable[[list[dict[str, Any]], str], Awaitable[dict[str, PodStats]]]


@dataclass
class Eviction:
    """One pod to evict: the status message upstream writes and the grace period to stop it with."""

    pod: dict[str, Any]
    message: str
    grace: int


class EvictionManager:
    """Evaluates thresholds every interval; calls `on_change` when a pressure condition flips.

    `observer` gives the node's signals (the host's by default); `stats` the running pods' usage, which
    ranks victims and names the containers over their requests in the message.
    """

    def __init__(self, thresholds: list[Threshold], root_dir: str, *, transition: float = 300.0,
                 image_fs: Callable[[], Awaitable[str | None]] | None = None,
                 on_change: Callable[[], Awaitable[None]] | None = None,
                 observer: Callable[[], Awaitable[Observations]] | None = None,
                 stats: StatsSource | None = None, max_pod_grace: int = 0) -> None:
        self.thresholds = thresholds
        self.root_dir = root_dir
        self.transition = transition
        self.image_fs = image_fs
        self.on_change = on_change
        self.observer = observer or self._observe_host
        self.stats = stats
        self.max_pod_grace = max_pod_grace
        self.pressure: dict[str, bool] = {"memory": False, "disk": False, "pid": False}
        self.observations: Observations = {}
        self._last_met: dict[str, float] = {}
        self._first_observed: dict[Threshold, float] = {}
        self._met: list[Threshold] = []

    async def _observe_host(self) -> Observations:
        image_fs = None
        if self.image_fs is not None:
            with contextlib.suppress(Exception):
                image_fs = await self.image_fs()
        return await asyncio.to_thread(observe, self.root_dir, image_fs)

    def _crossed(self, t: Threshold, *, reclaim: bool = False) -> bool:
        seen = self.observations.get(t.signal)
        return seen is not None and seen[0] < t.limit(seen[1], reclaim=reclaim)

    async def synchronize(self) -> list[Threshold]:
        """One pass: observe, compare, update the pressure flags; returns the thresholds that evict now.

        Crossed thresholds raise pressure at once; they evict once crossed for their grace period, and
        one that evicted keeps evicting until the signal clears it by its minimum reclaim.
        """
        self.observations = await self.observer()
        now = time.monotonic()
        active = [t for t in self.thresholds if self._crossed(t)]
        active += [t for t in self._met
                   if t in self.thresholds and t not in active and self._crossed(t, reclaim=True)]
        self._first_observed = {t: self._first_observed.get(t, now) for t in active}
        self._met = [t for t in active if now - self._first_observed[t] >= t.grace_period]
        for t in active:
            self._last_met[PRESSURE_OF[t.signal]] = now
        kinds = {PRESSURE_OF[t.signal] for t in active}
        pressure = {kind: kind in kinds or now - self._last_met.get(kind, -1e18) < self.transition
                    for kind in self.pressure}
        if pressure != self.pressure:
            log.info("node pressure changed", pressure=pressure,
                     crossed=[f"{t.signal}<{t.limit(self.observations[t.signal][1])}" for t in active])
            self.pressure.update(pressure)
            if self.on_change is not None:
                await self.on_change()
        return list(self._met)

    async def victim(self, met: list[Threshold], pods: list[dict[str, Any]],
                     qos: Callable[[dict[str, Any]], str]) -> Eviction | None:
        """The one pod a pass evicts for the met thresholds (memory first, as upstream)."""
        if not met:
            return None
        order = list(PRESSURE_OF)
        threshold = min(met, key=lambda t: order.index(t.signal))
        resource = RESOURCE_OF[threshold.signal]
        stats: dict[str, PodStats] = {}
        if self.stats is not None and pods:
            try:
                stats = await self.stats(pods, resource)
            except Exception as exc:  # noqa: BLE001 - ranking falls back to QoS and priority
                log.warning("pod usage unavailable for eviction ranking", error=repr(exc))
        ranked = rank_for_eviction(pods, qos, usage_against_requests(pods, stats, resource),
                                   priority_first=resource == "pids")
        if not ranked:
            log.warning("node under pressure but no pod can be evicted")
            return None
        pod = ranked[0]
        available, capacity = self.observations[threshold.signal]
        message = eviction_message(threshold, available, capacity, pod, stats.get(_uid(pod)))
        return Eviction(pod, message, 0 if threshold.hard else soft_grace(pod, self.max_pod_grace))


def soft_grace(pod: dict[str, Any], max_pod_grace: int) -> int:
    """The pod's own termination grace period, capped by evictionMaxPodGracePeriod when that is set."""
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    grace = 30 if value is None else int(value)
    return min(grace, max_pod_grace) if max_pod_grace > 0 else grace


def _uid(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def pod_request(pod: dict[str, Any], resource: str) -> Decimal:
    """What the pod requests of `resource`: its containers' sum or its largest init container, plus overhead."""
    spec = pod.get("spec") or {}

    def req(c: dict[str, Any]) -> Decimal:
        value = ((c.get("resources") or {}).get("requests") or {}).get(resource)
        return parse_quantity(value) if value else Decimal(0)

    total = sum((req(c) for c in spec.get("containers") or []), Decimal(0))
    total = max([total, *(req(c) for c in spec.get("initContainers") or [])])
    overhead = (spec.get("overhead") or {}).get(resource)
    return total + (parse_quantity(overhead) if overhead else Decimal(0))


def usage_against_requests(pods: list[dict[str, Any]], stats: dict[str, PodStats],
                           resource: str) -> dict[str, tuple[Decimal, Decimal]]:
    """uid -> (usage, request) for the pods whose usage of `resource` is known."""
    out = {}
    for pod in pods:
        seen = stats.get(_uid(pod))
        used = seen.usage(resource) if seen is not None else None
        if used is not None:
            out[_uid(pod)] = (used, pod_request(pod, resource))
    return out


def hollow_stats(pod: dict[str, Any]) -> PodStats | None:
    """A hollow pod's usage from its `hollow.pyk8s.io/usage.<container>` annotations; None without any."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    spec = pod.get("spec") or {}
    out, found = PodStats(), False
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        value = annotations.get(HOLLOW_USAGE + c["name"])
        if value is None:
            continue
        found = True
        for part in filter(None, (p.strip() for p in value.split(","))):
            key, _, amount = part.partition("=")
            with contextlib.suppress(ValueError):
                if key == "memory":
                    out.memory[c["name"]] = parse_quantity(amount)
                elif key == "ephemeral-storage":
                    out.disk[c["name"]] = parse_quantity(amount)
                elif key == "pids":
                    out.pids = (out.pids or Decimal(0)) + parse_quantity(amount)
    return out if found else None


def hollow_observations(capacity: dict[str, str], pods: list[dict[str, Any]]) -> Observations:
    """A hollow node's signals: its capacity less what its running pods' annotations say they use."""
    used = {"memory": Decimal(0), "ephemeral-storage": Decimal(0), "pids": Decimal(0)}
    for pod in pods:
        seen = hollow_stats(pod)
        for resource in used:
            amount = seen.usage(resource) if seen is not None else None
            used[resource] += amount or 0
    memory, disk = parse_quantity(capacity["memory"]), parse_quantity(capacity["ephemeral-storage"])
    pids = Decimal(HOLLOW_PID_LIMIT)
    return {"memory.available": (max(Decimal(0), memory - used["memory"]), memory),
            "nodefs.available": (max(Decimal(0), disk - used["ephemeral-storage"]), disk),
            "pid.available": (max(Decimal(0), pids - used["pids"]), pids)}


class RuntimeStats:
    """Running pods' usage from CRI ListContainerStats and ListPodSandboxStats (the source of
    /stats/summary), with container logs and disk-backed emptyDirs measured on disk."""

    def __init__(self, endpoint: str, root_dir: str, log_dir: str = "/var/log/pods") -> None:
        self.cri = CRIStreaming(endpoint)
        self.root_dir = Path(root_dir)
        self.log_dir = Path(log_dir)

    async def close(self) -> None:
        await self.cri.close()

    async def __call__(self, pods: list[dict[str, Any]], resource: str) -> dict[str, PodStats]:
        by_uid = {_uid(p): p for p in pods}
        out: dict[str, PodStats] = {}
        try:
            containers = await self.cri.container_stats()
            sandboxes = await self.cri.sandbox_stats() if resource == "pids" else []
        except CRIError as exc:
            log.warning("container stats unavailable", error=str(exc))
            return out
        for c in containers:
            uid = c.attributes.labels.get(LABEL_POD_UID, "")
            if uid not in by_uid:
                continue
            name = c.attributes.metadata.name
            seen = out.setdefault(uid, PodStats())
            seen.memory[name] = seen.memory.get(name, Decimal(0)) + c.memory.working_set_bytes.value
            seen.disk[name] = seen.disk.get(name, Decimal(0)) + c.writable_layer.used_bytes.value
        for s in sandboxes:
            seen = out.get(s.attributes.metadata.uid)
            if seen is not None and s.HasField("linux") and s.linux.HasField("process"):
                seen.pids = Decimal(s.linux.process.process_count.value)
        if resource == "ephemeral-storage":
            await asyncio.to_thread(self._disk, out, by_uid)
        return out

    def _disk(self, out: dict[str, PodStats], pods: dict[str, dict[str, Any]]) -> None:
        """Add each container's logs to its writable layer, and the pod's disk-backed emptyDirs."""
        for uid, seen in out.items():
            meta, spec = pods[uid].get("metadata") or {}, pods[uid].get("spec") or {}
            logs = self.log_dir / f"{meta.get('namespace')}_{meta.get('name')}_{uid}"
            for name in seen.disk:
                seen.disk[name] += disk_usage(str(logs / name))
            volumes = self.root_dir / "pods" / uid / "volumes" / "kubernetes.io~empty-dir"
            seen.volumes = Decimal(sum(disk_usage(str(volumes / v["name"])) for v in spec.get("volumes") or []
                                       if v.get("emptyDir") is not None and v["emptyDir"].get("medium") != "Memory"))


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
                      usage: dict[str, tuple[Decimal, Decimal]] | None = None, *,
                      priority_first: bool = False) -> list[dict[str, Any]]:
    """Eviction candidates, first victim first, as upstream ranks them under pressure.

    `usage` maps a pod uid to (usage, request) of the starved resource. Pods without usage come first (as
    upstream's stats comparison puts them), ordered by QoS class then priority; the others by whether usage
    exceeds the request, then priority (lower first), then usage above the request (more first). Under
    PID pressure (`priority_first`) priority decides first, then the pods without usage, then usage.
    """
    usage = usage or {}

    def key(pod: dict[str, Any]) -> tuple[Any, ...]:
        seen = usage.get(_uid(pod))
        if seen is None:
            fallback = (0, QOS_ORDER.get(qos(pod.get("spec") or {}), 0))
            return (_priority(pod), *fallback) if priority_first else (*fallback, _priority(pod))
        used, requested = seen
        if priority_first:
            return (_priority(pod), 1, -used)
        return (1, used <= requested, _priority(pod), -(used - requested))

    return sorted((p for p in pods if not is_critical(p)), key=key)


def eviction_message(threshold: Threshold, available: Decimal, capacity: Decimal,
                     pod: dict[str, Any] | None = None, stats: PodStats | None = None) -> str:
    """The status message upstream writes on a pod evicted for `threshold`, naming each container whose
    usage of the starved memory or ephemeral storage is above its request when that usage is known."""
    resource = RESOURCE_OF[threshold.signal]
    shown = threshold.original or _quantity(threshold.limit(capacity), resource)
    message = (f"The node was low on resource: {resource}. "
               f"Threshold quantity: {shown}, available: {_quantity(available, resource)}. ")
    if pod is None or stats is None or resource not in ("memory", "ephemeral-storage"):
        return message
    spec = pod.get("spec") or {}
    specs = {c["name"]: c for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])}
    for name, used in (stats.memory if resource == "memory" else stats.disk).items():
        if name not in specs:
            continue
        request = ((specs[name].get("resources") or {}).get("requests") or {}).get(resource)
        requested = parse_quantity(request) if request else Decimal(0)
        if used > requested:
            shown_request = canonicalize_quantity(request) if request else "0"
            message += CONTAINER_MESSAGE.format(name, _quantity(used, resource), shown_request, resource)
    return message


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
