"""/stats/summary in the shape of upstream's stats/v1alpha1 Summary, and /metrics/resource (what
metrics-server reads) from it.

Node figures come from /proc and statvfs; pod and container figures from CRI ListContainerStats
and, where the runtime has it, ListPodSandboxStats (network). CPU rates are computed from the
previous sample, as cAdvisor does.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import time
from typing import Any

from kubelet_agent.server.cri_streaming import LABEL_POD_UID, CRIError, CRIStreaming
from services.api.quantity import parse_quantity


def _rfc3339(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _host_cpu_ns() -> int:
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    ticks = sum(int(x) for x in fields[:3]) + sum(int(x) for x in fields[5:8])
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _host_memory() -> dict[str, int]:
    info: dict[str, int] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            info[key] = int(value.split()[0]) * 1024
    total, available = info.get("MemTotal", 0), info.get("MemAvailable", 0)
    return {"availableBytes": available, "usageBytes": total - info.get("MemFree", 0),
            "workingSetBytes": total - available, "rssBytes": info.get("AnonPages", 0),
            "pageFaults": 0, "majorPageFaults": 0}


def _fs(path: str) -> dict[str, int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return {}
    return {"availableBytes": st.f_bavail * st.f_frsize, "capacityBytes": st.f_blocks * st.f_frsize,
            "usedBytes": (st.f_blocks - st.f_bfree) * st.f_frsize, "inodesFree": st.f_ffree,
            "inodes": st.f_files, "inodesUsed": st.f_files - st.f_ffree}


class StatsCollector:
    def __init__(self) -> None:
        self._last: dict[str, tuple[int, int]] = {}

    def _rate(self, key: str, now_ns: int, usage_ns: int) -> int:
        prev = self._last.get(key)
        self._last[key] = (now_ns, usage_ns)
        if prev is None or now_ns <= prev[0] or usage_ns < prev[1]:
            return 0
        return (usage_ns - prev[1]) * 1_000_000_000 // (now_ns - prev[0])

    def _cpu(self, key: str, now_ns: int, usage_ns: int, ts: str) -> dict[str, Any]:
        return {"time": ts, "usageCoreNanoSeconds": usage_ns, "usageNanoCores": self._rate(key, now_ns, usage_ns)}

    async def summary(self, kubelet: Any, cri: CRIStreaming | None) -> dict[str, Any]:
        now = time.time()
        now_ns = time.time_ns()
        ts = _rfc3339(now)
        root_dir = getattr(getattr(kubelet, "options", None), "root_dir", "/")
        cpu_ns = await asyncio.to_thread(_host_cpu_ns)
        node = {"nodeName": kubelet.name, "startTime": _rfc3339(now - time.monotonic()),
                "cpu": self._cpu("node", now_ns, cpu_ns, ts),
                "memory": {"time": ts, **await asyncio.to_thread(_host_memory)},
                "fs": {"time": ts, **await asyncio.to_thread(_fs, root_dir)},
                "systemContainers": []}
        pods = {}
        for worker in list(kubelet.workers.values()):
            meta = worker.pod.get("metadata") or {}
            start = (worker.pod.get("status") or {}).get("startTime") or meta.get("creationTimestamp")
            pods[meta.get("uid", "")] = {
                "podRef": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")},
                "startTime": start, "containers": [], "volume": []}
        if cri is not None:
            await self._runtime_stats(cri, pods, now_ns, ts)
        return {"node": node, "pods": list(pods.values())}

    async def _runtime_stats(self, cri: CRIStreaming, pods: dict[str, dict[str, Any]], now_ns: int,
                             ts: str) -> None:
        try:
            containers = await cri.container_stats()
            sandboxes = await cri.sandbox_stats()
        except CRIError:
            return
        totals: dict[str, list[int]] = {}
        for c in containers:
            uid = c.attributes.labels.get(LABEL_POD_UID, "")
            pod = pods.get(uid)
            if pod is None:
                continue
            usage = c.cpu.usage_core_nano_seconds.value
            working = c.memory.working_set_bytes.value
            pod["containers"].append({
                "name": c.attributes.metadata.name, "startTime": pod["startTime"],
                "cpu": self._cpu(c.attributes.id, now_ns, usage, ts),
                "memory": {"time": ts, "workingSetBytes": working, "usageBytes": c.memory.usage_bytes.value,
                           "rssBytes": c.memory.rss_bytes.value},
                "rootfs": {"time": ts, "usedBytes": c.writable_layer.used_bytes.value}})
            total = totals.setdefault(uid, [0, 0])
            total[0] += usage
            total[1] += working
        for uid, (usage, working) in totals.items():
            pods[uid]["cpu"] = self._cpu(f"pod/{uid}", now_ns, usage, ts)
            pods[uid]["memory"] = {"time": ts, "workingSetBytes": working}
        for s in sandboxes:
            pod = pods.get(s.attributes.metadata.uid)
            if pod is None or not s.HasField("linux") or not s.linux.HasField("network"):
                continue
            net = s.linux.network
            iface = net.default_interface
            pod["network"] = {"time": ts, "name": iface.name, "rxBytes": iface.rx_bytes.value,
                              "txBytes": iface.tx_bytes.value,
                              "interfaces": [{"name": i.name, "rxBytes": i.rx_bytes.value,
                                              "txBytes": i.tx_bytes.value} for i in net.interfaces]}


#: A hollow pod's simulated usage per container: `{"<container>": {"cpu": "250m", "memory": "64Mi"}}`;
#: containers it does not name use their requests.
ANNOTATION_USAGE = "hollow.pyk8s.io/usage"


def _configured(pod: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(nanocores, working-set bytes) per container of a hollow pod: the annotation, else its requests."""
    try:
        declared = json.loads(((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_USAGE) or "{}")
    except ValueError:
        declared = {}
    out = {}
    for c in (pod.get("spec") or {}).get("containers") or ():
        requests = (c.get("resources") or {}).get("requests") or {}
        usage = declared.get(c.get("name")) if isinstance(declared, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        try:
            nanocores = int(parse_quantity(str(usage.get("cpu") or requests.get("cpu") or "0")) * 10**9)
            memory = int(parse_quantity(str(usage.get("memory") or requests.get("memory") or "0")))
        except ValueError:
            nanocores, memory = 0, 0
        out[c["name"]] = (nanocores, memory)
    return out


def configured_summary(kubelet: Any, now: float) -> dict[str, Any]:
    """The Summary of a hollow node: each running container burns what its pod declares, so its cumulative
    CPU grows at exactly that rate from its start (whole milliseconds, so rates come out exact); the
    node's usage is the sum of its pods'."""
    now_ms = int(now * 1000)
    pods, node_cpu, node_memory = [], 0, 0
    for worker in list(kubelet.workers.values()):
        pod = worker.pod
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        running = {s.get("name"): (s.get("state") or {}).get("running") for s in status.get("containerStatuses") or ()}
        containers = []
        for name, (nanocores, memory) in _configured(pod).items():
            started = (running.get(name) or {}).get("startedAt")
            start = _epoch(started) if started else None
            if start is None:
                continue
            used_ns = nanocores * max(now_ms - int(start * 1000), 0) // 1000
            containers.append({"name": name, "startTime": started, "cpu": {"usageCoreNanoSeconds": used_ns},
                               "memory": {"workingSetBytes": memory}})
            node_cpu += used_ns
            node_memory += memory
        pods.append({"podRef": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")},
                     "containers": containers,
                     "cpu": {"usageCoreNanoSeconds": sum(c["cpu"]["usageCoreNanoSeconds"] for c in containers)},
                     "memory": {"workingSetBytes": sum(c["memory"]["workingSetBytes"] for c in containers)}})
    return {"node": {"nodeName": kubelet.name, "cpu": {"usageCoreNanoSeconds": node_cpu},
                     "memory": {"workingSetBytes": node_memory}}, "pods": pods}


def _epoch(ts: str) -> float | None:
    try:
        return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None


def _labels(**values: str) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in values.items() if v is not None)
    return "{" + inner + "}" if inner else ""


_HELP = (
    ("container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the container in core-seconds"),
    ("container_memory_working_set_bytes", "gauge", "Current working set of the container in bytes"),
    ("container_start_time_seconds", "gauge", "Start time of the container since unix epoch in seconds"),
    ("node_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the node in core-seconds"),
    ("node_memory_working_set_bytes", "gauge", "Current working set of the node in bytes"),
    ("pod_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the pod in core-seconds"),
    ("pod_memory_working_set_bytes", "gauge", "Current working set of the pod in bytes"),
    ("resource_scrape_error", "gauge", "1 if there was an error while getting container metrics, 0 otherwise"),
)


def resource_metrics(summary: dict[str, Any], now: float) -> bytes:
    """The kubelet's /metrics/resource (Prometheus text format, the [STABLE] series metrics-server reads)
    from a Summary: cumulative CPU in core-seconds and working sets, each sample stamped in milliseconds."""
    ms = int(now * 1000)
    samples: dict[str, list[str]] = {name: [] for name, _, _ in _HELP}
    node = summary.get("node") or {}
    samples["node_cpu_usage_seconds_total"].append(
        f" {(node.get('cpu') or {}).get('usageCoreNanoSeconds', 0) / 1e9} {ms}")
    samples["node_memory_working_set_bytes"].append(f" {(node.get('memory') or {}).get('workingSetBytes', 0)} {ms}")
    for pod in summary.get("pods") or ():
        ref = pod.get("podRef") or {}
        pod_labels = _labels(namespace=ref.get("namespace"), pod=ref.get("name"))
        if pod.get("cpu"):
            samples["pod_cpu_usage_seconds_total"].append(
                f"{pod_labels} {pod['cpu'].get('usageCoreNanoSeconds', 0) / 1e9} {ms}")
        if pod.get("memory"):
            samples["pod_memory_working_set_bytes"].append(
                f"{pod_labels} {pod['memory'].get('workingSetBytes', 0)} {ms}")
        for c in pod.get("containers") or ():
            labels = _labels(container=c.get("name"), namespace=ref.get("namespace"), pod=ref.get("name"))
            samples["container_cpu_usage_seconds_total"].append(
                f"{labels} {(c.get('cpu') or {}).get('usageCoreNanoSeconds', 0) / 1e9} {ms}")
            samples["container_memory_working_set_bytes"].append(
                f"{labels} {(c.get('memory') or {}).get('workingSetBytes', 0)} {ms}")
            start = _epoch(c.get("startTime") or "")
            if start is not None:
                samples["container_start_time_seconds"].append(f"{labels} {start} {ms}")
    samples["resource_scrape_error"].append(" 0")
    lines = []
    for name, kind, text in _HELP:
        lines += [f"# HELP {name} [STABLE] {text}", f"# TYPE {name} {kind}", *(name + s for s in samples[name])]
    return ("\n".join(lines) + "\n").encode()
