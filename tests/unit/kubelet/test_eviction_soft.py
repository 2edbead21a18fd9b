"""Soft thresholds and their grace periods, minimum reclaim, victims ranked by usage, and the eviction
message naming the containers over their requests."""

from __future__ import annotations

import asyncio
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from kubelet_agent.config import parser, settings
from kubelet_agent.eviction import (
    EvictionManager,
    PodStats,
    RuntimeStats,
    eviction_message,
    hollow_observations,
    hollow_stats,
    parse_thresholds,
    rank_for_eviction,
    usage_against_requests,
)
from kubelet_agent.pods.util import qos_class

GI = Decimal(2**30)
MI = Decimal(2**20)
CAPACITY = {"memory": "16Gi", "ephemeral-storage": "100Gi"}


def pod(name: str, usage: str | None = None, requests: dict[str, str] | None = None, priority: int = 0,
        grace: int | None = None) -> dict[str, Any]:
    annotations = {"hollow.pyk8s.io/usage.app": usage} if usage is not None else {}
    spec: dict[str, Any] = {"priority": priority,
                            "containers": [{"name": "app", "resources": {"requests": requests or {}}}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, "uid": name, "annotations": annotations}, "spec": spec}


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def hollow_manager(thresholds: Any, pods: list[dict[str, Any]], **kw: Any) -> EvictionManager:
    """A manager on a hollow node's signals: 16Gi of memory less what `pods` (as they are now) use."""
    async def observer() -> Any:
        return hollow_observations(CAPACITY, pods)

    async def stats(candidates: list[dict[str, Any]], _resource: str) -> dict[str, PodStats]:
        return {p["metadata"]["uid"]: s for p in candidates if (s := hollow_stats(p)) is not None}

    return EvictionManager(thresholds, "/", observer=observer, stats=stats, **kw)


def test_soft_threshold_needs_a_grace_period() -> None:
    with pytest.raises(ValueError, match="grace period must be specified for the soft eviction threshold "
                                         "memory.available"):
        parse_thresholds({}, soft={"memory.available": "1Gi"}, grace_periods={"nodefs.available": 60})
    with pytest.raises(ValueError, match="unsupported eviction signal 'cpu'"):
        parse_thresholds({}, min_reclaim={"cpu": "1"})
    with pytest.raises(ValueError, match="negative eviction minimum reclaim specified for memory.available"):
        parse_thresholds({}, min_reclaim={"memory.available": "-1Mi"})
    hard, soft = parse_thresholds({"memory.available": "100Mi"}, soft={"memory.available": "1Gi"},
                                  grace_periods={"memory.available": 90}, min_reclaim={"memory.available": "5%"})
    assert (hard.hard, hard.grace_period, soft.hard, soft.grace_period) == (True, 0, False, 90)
    assert soft.limit(Decimal(100)) == GI and soft.limit(Decimal(100), reclaim=True) == GI + 5
    assert hard.limit(16 * GI, reclaim=True) == 100 * MI + 16 * GI * Decimal("0.05")


def test_flags_and_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "kubelet.yaml"
    cfg.write_text("kind: KubeletConfiguration\nevictionSoft:\n  memory.available: 1.5Gi\n"
                   "evictionSoftGracePeriod:\n  memory.available: 1m30s\nevictionMinimumReclaim:\n"
                   "  memory.available: 500Mi\nevictionMaxPodGracePeriod: 20\n")
    s = settings(parser().parse_args(["--hollow", "--config", str(cfg)]))
    assert (s.eviction_soft, s.eviction_soft_grace_period) == ({"memory.available": "1.5Gi"}, {"memory.available": 90})
    assert (s.eviction_minimum_reclaim, s.eviction_max_pod_grace_period) == ({"memory.available": "500Mi"}, 20)
    s = settings(parser().parse_args([
        "--hollow", "--config", str(cfg), "--eviction-soft", "nodefs.available<15%,pid.available<100",
        "--eviction-soft-grace-period", "nodefs.available=2m,pid.available=10s",
        "--eviction-minimum-reclaim", "nodefs.available=1Gi", "--eviction-max-pod-grace-period", "5"]))
    assert s.eviction_soft == {"nodefs.available": "15%", "pid.available": "100"}
    assert s.eviction_soft_grace_period == {"nodefs.available": 120, "pid.available": 10}
    assert (s.eviction_minimum_reclaim, s.eviction_max_pod_grace_period) == ({"nodefs.available": "1Gi"}, 5)


@pytest.mark.parametrize("flags, message", [
    (["--eviction-soft=memory.available<1Gi"],
     "grace period must be specified for the soft eviction threshold memory.available"),
    (["--eviction-soft=memory.available<1Gi", "--eviction-soft-grace-period=memory.available=soon"],
     'time: invalid duration "soon"'),
    (["--eviction-minimum-reclaim=memory.available=lots"], "invalid eviction minimum reclaim memory.available=lots"),
    (["--eviction-soft=memory.available<1Gi", "--eviction-soft-grace-period=foo.available=1m"],
     "unsupported eviction signal 'foo.available'"),
])
def test_bad_soft_flags_are_refused(flags: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        settings(parser().parse_args(["--hollow", *flags]))


async def test_soft_threshold_raises_pressure_at_once_and_evicts_after_its_grace_period() -> None:
    pods = [pod("hog", "memory=14Gi", priority=1, grace=60), pod("idle", "memory=0")]
    manager = hollow_manager(parse_thresholds({}, soft={"memory.available": "4Gi"},
                                              grace_periods={"memory.available": 0.4}), pods, max_pod_grace=20)
    assert await manager.synchronize() == []
    assert manager.pressure["memory"], "the condition does not wait for the grace period"
    await asyncio.sleep(0.2)
    assert await manager.synchronize() == []
    await asyncio.sleep(0.3)
    met = await manager.synchronize()
    assert [t.signal for t in met] == ["memory.available"]
    chosen = await manager.victim(met, pods, qos_class)
    assert chosen is not None and chosen.pod["metadata"]["name"] == "hog"
    assert chosen.grace == 20, "the pod's 60s grace period, capped by evictionMaxPodGracePeriod"
    assert chosen.message == ("The node was low on resource: memory. Threshold quantity: 4Gi, available: 2Gi. "
                              "Container app was using 14Gi, request is 0, has larger consumption of memory. ")
    pods.pop(0)
    assert await manager.synchronize() == []
    pods.append(pod("again", "memory=13Gi"))
    assert await manager.synchronize() == [], "the grace period starts over once the signal cleared"


async def test_minimum_reclaim_keeps_evicting_until_cleared_by_it() -> None:
    pods = [pod(f"p{i}", "memory=4Gi") for i in range(3)]
    hard = parse_thresholds({"memory.available": "5Gi"}, min_reclaim={"memory.available": "6Gi"})
    manager = hollow_manager(hard, pods)
    met = await manager.synchronize()
    assert [t.signal for t in met] == ["memory.available"], "4Gi available is below 5Gi"
    pods.pop(0)
    assert await manager.synchronize() == met, "8Gi available is above 5Gi but not above 5Gi + 6Gi"
    assert manager.pressure["memory"]
    pods.pop(0)
    assert await manager.synchronize() == [], "12Gi available clears it"
    fresh = hollow_manager(hard, [pod("p", "memory=8Gi")])
    assert await fresh.synchronize() == [], "without an eviction under way only the threshold itself counts"
    assert not fresh.pressure["memory"]


async def test_hard_threshold_evicts_without_grace() -> None:
    pods = [pod("a", "memory=16Gi", grace=30)]
    manager = hollow_manager(parse_thresholds({"memory.available": "1Gi"}), pods, max_pod_grace=10)
    chosen = await manager.victim(await manager.synchronize(), pods, qos_class)
    assert chosen is not None and chosen.grace == 0


def test_memory_ranking_by_usage_over_requests_then_priority() -> None:
    pods = [pod("under-low", "memory=50Mi", {"memory": "100Mi"}, priority=-10),
            pod("over-high", "memory=300Mi", {"memory": "100Mi"}, priority=100),
            pod("over-small", "memory=110Mi", {"memory": "100Mi"}),
            pod("over-big", "memory=900Mi", {"memory": "100Mi"}),
            pod("unknown", None, {"memory": "1Gi"}, priority=1000)]
    stats = {p["metadata"]["uid"]: s for p in pods if (s := hollow_stats(p)) is not None}
    usage = usage_against_requests(pods, stats, "memory")
    assert usage["over-big"] == (900 * MI, 100 * MI) and "unknown" not in usage
    assert names(rank_for_eviction(pods, qos_class, usage)) == [
        "unknown", "over-big", "over-small", "over-high", "under-low"]
    assert names(rank_for_eviction(pods, qos_class)) == ["under-low", "over-small", "over-big", "over-high",
                                                         "unknown"], "without stats: QoS, then priority"


def test_disk_and_pid_ranking() -> None:
    pods = [pod("logs", "ephemeral-storage=2Gi", {"ephemeral-storage": "1Gi"}),
            pod("layer", "ephemeral-storage=5Gi", {"ephemeral-storage": "1Gi"}),
            pod("within", "ephemeral-storage=1Gi,pids=900", {"ephemeral-storage": "2Gi"}, priority=-1),
            pod("forks", "pids=50", priority=-1), pod("few", "pids=10")]
    stats = {p["metadata"]["uid"]: s for p in pods if (s := hollow_stats(p)) is not None}
    disk = usage_against_requests(pods, stats, "ephemeral-storage")
    assert names(rank_for_eviction(pods, qos_class, disk))[:2] == ["forks", "few"], "no disk stats come first"
    assert names(rank_for_eviction(pods, qos_class, disk))[2:] == ["layer", "logs", "within"]
    pids = usage_against_requests(pods, stats, "pids")
    assert names(rank_for_eviction(pods, qos_class, pids, priority_first=True)) == [
        "within", "forks", "logs", "layer", "few"]


def test_message_names_each_container_over_its_request() -> None:
    memory, nodefs, pid = parse_thresholds({"memory.available": "100Mi", "nodefs.available": "10%",
                                            "pid.available": "1k"})
    p = {"metadata": {"uid": "u"}, "spec": {
        "initContainers": [{"name": "init", "resources": {}}],
        "containers": [{"name": "app", "resources": {"requests": {"memory": "10Mi", "ephemeral-storage": "1Gi"}}},
                       {"name": "side", "resources": {"requests": {"memory": "0.5Gi"}}}]}}
    stats = PodStats(memory={"app": 80 * MI, "side": 100 * MI, "gone": GI},
                     disk={"app": 3 * GI, "side": Decimal(1000)}, volumes=50 * GI)
    assert eviction_message(memory, 50 * MI, 16 * GI, p, stats) == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        "Container app was using 80Mi, request is 10Mi, has larger consumption of memory. ")
    assert eviction_message(nodefs, GI, 100 * GI, p, stats) == (
        "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 1Gi. "
        "Container app was using 3Gi, request is 1Gi, has larger consumption of ephemeral-storage. "
        "Container side was using 1000, request is 0, has larger consumption of ephemeral-storage. ")
    assert eviction_message(pid, Decimal(10), Decimal(32768), p, PodStats(pids=Decimal(5))) == (
        "The node was low on resource: pids. Threshold quantity: 1k, available: 10. ")


def test_runtime_stats_measure_logs_and_disk_backed_empty_dirs(tmp_path: Path) -> None:
    uid = "0b6d"
    logs = tmp_path / "logs" / f"ns_web_{uid}" / "app"
    logs.mkdir(parents=True)
    (logs / "0.log").write_bytes(b"x" * (1 << 20))
    volumes = tmp_path / "root" / "pods" / uid / "volumes" / "kubernetes.io~empty-dir"
    for name in ("cache", "shm"):
        (volumes / name).mkdir(parents=True)
        (volumes / name / "f").write_bytes(b"x" * (2 << 20))
    p = {"metadata": {"uid": uid, "name": "web", "namespace": "ns"},
         "spec": {"volumes": [{"name": "cache", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}},
                              {"name": "cfg", "configMap": {"name": "x"}}]}}
    source = RuntimeStats("unix:///nonexistent.sock", str(tmp_path / "root"), log_dir=str(tmp_path / "logs"))
    seen = {uid: PodStats(memory={"app": MI}, disk={"app": Decimal(4096)})}
    source._disk(seen, {uid: p})
    assert seen[uid].disk["app"] >= 4096 + (1 << 20)
    assert 2 << 20 <= seen[uid].volumes < 3 << 20, "the memory-backed emptyDir is not disk"
    assert seen[uid].usage("ephemeral-storage") == seen[uid].disk["app"] + seen[uid].volumes


async def test_runtime_stats_without_a_runtime_rank_by_the_fallback() -> None:
    source = RuntimeStats("unix:///nonexistent/containerd.sock", "/")
    try:
        assert await source([pod("a")], "memory") == {}
    finally:
        await source.close()
