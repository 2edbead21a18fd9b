"""Which pod a hard threshold evicts first, the message it carries, and admission under node pressure."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

from kubelet_agent.eviction import (
    EvictionManager,
    admit_under_pressure,
    eviction_message,
    parse_thresholds,
    rank_for_eviction,
)
from kubelet_agent.pods.util import qos_class

GUARANTEED = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
BURSTABLE = {"requests": {"memory": "1Gi"}}


def pod(name: str, resources: dict[str, Any] | None = None, priority: int | None = None,
        annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": name, "uid": name, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": resources or {}}], **spec}}


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_unknown_usage_ranks_by_qos_then_priority() -> None:
    pods = [pod("g", GUARANTEED), pod("b-high", BURSTABLE, priority=100), pod("b-low", BURSTABLE, priority=-5),
            pod("be-high", priority=1000), pod("be", None)]
    assert names(rank_for_eviction(pods, qos_class)) == ["be", "be-high", "b-low", "b-high", "g"]


def test_known_usage_ranks_by_exceeding_requests_priority_then_excess() -> None:
    gib = Decimal(2**30)
    pods = [pod("under", BURSTABLE), pod("over-small", BURSTABLE), pod("over-big", BURSTABLE),
            pod("over-high", BURSTABLE, priority=10)]
    usage = {"under": (gib / 2, gib), "over-small": (gib + 1, gib), "over-big": (3 * gib, gib),
             "over-high": (9 * gib, gib)}
    assert names(rank_for_eviction(pods, qos_class, usage)) == ["over-big", "over-small", "over-high", "under"]


def test_critical_pods_are_never_ranked() -> None:
    pods = [pod("critical", priority=2_000_000_000), pod("mirror", annotations={"kubernetes.io/config.mirror": "x"}),
            pod("static", annotations={"kubernetes.io/config.source": "file"}), pod("plain", GUARANTEED)]
    assert names(rank_for_eviction(pods, qos_class)) == ["plain"]


def test_eviction_message_as_upstream() -> None:
    memory, nodefs, pids = parse_thresholds({"memory.available": "100Mi", "nodefs.available": "10%",
                                             "pid.available": "1000"})
    assert eviction_message(memory, Decimal(50 * 2**20), Decimal(2**34)) == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ")
    assert eviction_message(nodefs, Decimal(3 * 2**20 + 1024), Decimal(2**30 * 10)) == (
        "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 3073Ki. ")
    assert eviction_message(pids, Decimal(999), Decimal(4_000_000)) == (
        "The node was low on resource: pids. Threshold quantity: 1k, available: 999. ")


async def test_one_victim_per_pass(tmp_path: Path) -> None:
    manager = EvictionManager(parse_thresholds({"memory.available": "1000Ti", "nodefs.available": "100Ki"}),
                              str(tmp_path))
    met = await manager.synchronize()
    assert [t.signal for t in met] == ["memory.available"] and manager.pressure["memory"]
    assert await manager.victim([], [pod("be")], qos_class) is None
    chosen = await manager.victim(met, [pod("g", GUARANTEED), pod("be")], qos_class)
    assert chosen is not None and chosen.pod["metadata"]["name"] == "be" and chosen.grace == 0
    assert chosen.message.startswith("The node was low on resource: memory. Threshold quantity: 1000Ti, available: ")
    assert await manager.victim(met, [pod("critical", priority=2_000_000_000)], qos_class) is None


def test_admission_under_pressure() -> None:
    memory = {"memory": True, "disk": False, "pid": False}
    disk = {"memory": False, "disk": True, "pid": False}
    calm = {"memory": False, "disk": False, "pid": False}
    be, burstable = pod("be"), pod("b", BURSTABLE)
    tolerant = pod("t", tolerations=[{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists",
                                      "effect": "NoSchedule"}])
    critical = pod("c", priority=2_000_000_000)
    assert admit_under_pressure(be, calm, "BestEffort") is None
    assert admit_under_pressure(be, memory, "BestEffort") == (
        "Evicted", "The node had condition: [MemoryPressure]. ")
    assert admit_under_pressure(burstable, memory, "Burstable") is None
    assert admit_under_pressure(tolerant, memory, "BestEffort") is None
    assert admit_under_pressure(critical, memory, "BestEffort") is None
    assert admit_under_pressure(burstable, disk, "Burstable") == ("Evicted", "The node had condition: [DiskPressure]. ")
    assert admit_under_pressure(critical, disk, "BestEffort") is None
    assert admit_under_pressure(tolerant, {**memory, "pid": True}, "BestEffort") == (
        "Evicted", "The node had condition: [MemoryPressure PIDPressure]. ")
