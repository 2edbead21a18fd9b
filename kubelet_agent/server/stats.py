"""/stats/summary in the shape of upstream's stats/v1alpha1 Summary (what metrics-server reads).

Node figures come from /proc and statvfs; pod and container figures from CRI ListContainerStats
and, where the runtime has it, ListPodSandboxStats (network). CPU rates are computed from the
previous sample, as cAdvisor does.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time
from typing import Any

from kubelet_agent.server.cri_streaming import LABEL_POD_UID, CRIError, CRIStreaming


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
