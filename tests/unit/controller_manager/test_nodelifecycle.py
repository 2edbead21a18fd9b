"""The node lifecycle and taint eviction controllers' decisions: conditions of a silent node, the
taints that follow conditions, zone states and rates, and when a tolerating pod is deleted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from controller_manager.controllers import nodelifecycle as nl
from controller_manager.controllers import tainteviction as te

NOW = "2026-11-30T12:00:00Z"


def node(conditions: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
         labels: dict[str, str] | None = None, unschedulable: bool = False) -> dict[str, Any]:
    conds = [{"type": t, "status": s, "reason": "KubeletReady", "message": "kubelet is posting ready status",
              "lastHeartbeatTime": "2026-11-30T11:00:00Z", "lastTransitionTime": "2026-11-30T10:00:00Z"}
             for t, s in (conditions or {}).items()]
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": "n1", "labels": labels or {}, "creationTimestamp": "2026-11-30T09:00:00Z"},
            "spec": spec, "status": {"conditions": conds}}


def test_silent_node_conditions_go_unknown_keeping_heartbeat() -> None:
    n = node({"Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False",
              "NetworkUnavailable": "False"})
    out = {c["type"]: c for c in nl.unknown_conditions(n, NOW)}
    for ctype in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
        c = out[ctype]
        assert (c["status"], c["reason"], c["message"]) == (
            "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
        assert c["lastTransitionTime"] == NOW and c["lastHeartbeatTime"] == "2026-11-30T11:00:00Z"
    assert out["NetworkUnavailable"]["status"] == "False"
    assert n["status"]["conditions"][0]["status"] == "True", "the cached node must not be modified"


def test_already_unknown_condition_keeps_transition_time_and_missing_ones_are_added() -> None:
    n = node({"Ready": "Unknown"})
    out = {c["type"]: c for c in nl.unknown_conditions(n, NOW)}
    assert out["Ready"]["lastTransitionTime"] == "2026-11-30T10:00:00Z"
    assert out["Ready"]["reason"] == "KubeletReady"
    mem = out["MemoryPressure"]
    assert (mem["status"], mem["reason"], mem["message"]) == (
        "Unknown", "NodeStatusNeverUpdated", "Kubelet never posted node status.")
    assert mem["lastHeartbeatTime"] == "2026-11-30T09:00:00Z"


@pytest.mark.parametrize(("status", "key"), [
    ("True", None), ("False", nl.TAINT_NOT_READY), ("Unknown", nl.TAINT_UNREACHABLE), (None, None)])
def test_no_execute_taint_follows_ready(status: str | None, key: str | None) -> None:
    assert nl.no_execute_key(status) == key


def test_no_schedule_taints_follow_conditions_and_cordon() -> None:
    n = node({"Ready": "Unknown", "MemoryPressure": "True", "DiskPressure": "False", "PIDPressure": "True",
              "NetworkUnavailable": "True"}, unschedulable=True,
             taints=[{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"},
                     {"key": "custom", "effect": "NoSchedule"},
                     {"key": nl.TAINT_UNREACHABLE, "effect": "NoExecute"}])
    add, remove = nl.no_schedule_changes(n)
    assert sorted(add) == sorted([nl.TAINT_UNREACHABLE, "node.kubernetes.io/memory-pressure",
                                  "node.kubernetes.io/pid-pressure", "node.kubernetes.io/network-unavailable",
                                  nl.TAINT_UNSCHEDULABLE])
    assert remove == ["node.kubernetes.io/disk-pressure"]
    assert nl.no_schedule_changes(node({"Ready": "True"})) == ([], [])
    assert nl.no_schedule_changes(node({"Ready": "False"})) == ([nl.TAINT_NOT_READY], [])


def test_swap_taints_matches_by_key_and_effect_and_stamps_time_added() -> None:
    old = [{"key": nl.TAINT_NOT_READY, "effect": "NoExecute", "timeAdded": "x"},
           {"key": nl.TAINT_NOT_READY, "effect": "NoSchedule"}, {"key": "other", "effect": "NoExecute"}]
    out = nl.swap_taints(old, [{"key": nl.TAINT_UNREACHABLE, "effect": "NoExecute"}],
                         [{"key": nl.TAINT_NOT_READY, "effect": "NoExecute"}], NOW)
    assert out == [{"key": nl.TAINT_NOT_READY, "effect": "NoSchedule"}, {"key": "other", "effect": "NoExecute"},
                   {"key": nl.TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": NOW}]
    assert nl.swap_taints(old, [{"key": "other", "effect": "NoExecute"}], [], NOW) is None
    assert nl.swap_taints([], [], [{"key": "gone", "effect": "NoExecute"}], NOW) is None


def test_zone_key_from_region_and_zone() -> None:
    assert nl.zone_key(node()) == ""
    assert nl.zone_key(node(labels={"topology.kubernetes.io/zone": "a"})) == ":\x00:a"
    assert nl.zone_key(node(labels={"topology.kubernetes.io/region": "r",
                                    "failure-domain.beta.kubernetes.io/zone": "b"})) == "r:\x00:b"


@pytest.mark.parametrize(("ready", "expected"), [
    ([], (0, nl.STATE_NORMAL)),
    (["True", "True"], (0, nl.STATE_NORMAL)),
    (["Unknown"], (1, nl.STATE_FULL_DISRUPTION)),
    (["False", None], (2, nl.STATE_FULL_DISRUPTION)),
    (["True", "Unknown", "Unknown"], (2, nl.STATE_NORMAL)),  # more than two must be down
    (["True", "Unknown", "Unknown", "False"], (3, nl.STATE_PARTIAL_DISRUPTION)),
    (["True", "True", "True", "Unknown", "Unknown", "Unknown"], (3, nl.STATE_NORMAL)),  # 0.5 < 0.55
])
def test_zone_state(ready: list[str | None], expected: tuple[int, str]) -> None:
    assert nl.zone_state(ready, 0.55) == expected


def test_zone_rates() -> None:
    assert nl.zone_qps(nl.STATE_NORMAL, 10, 0.1, 0.01, 50) == 0.1
    assert nl.zone_qps(nl.STATE_FULL_DISRUPTION, 10, 0.1, 0.01, 50) == 0.1
    assert nl.zone_qps(nl.STATE_PARTIAL_DISRUPTION, 10, 0.1, 0.01, 50) == 0.0
    assert nl.zone_qps(nl.STATE_PARTIAL_DISRUPTION, 51, 0.1, 0.01, 50) == 0.01


def test_token_bucket_burst_one() -> None:
    bucket = nl.TokenBucket(0.5)
    assert bucket.try_accept(bucket.last) is True
    assert bucket.try_accept(bucket.last + 1.0) is False
    assert bucket.try_accept(bucket.last + 1.0) is True
    stopped = nl.TokenBucket(0.0)
    assert stopped.try_accept() is False


UNREACHABLE = {"key": nl.TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": "2026-11-30T12:00:00Z"}
ADDED = datetime(2026, 11, 30, 12, tzinfo=UTC).timestamp()


def tol(key: str | None = nl.TAINT_UNREACHABLE, seconds: int | None = None, effect: str = "NoExecute") -> dict:
    t: dict[str, Any] = {"operator": "Exists", "effect": effect}
    if key is not None:
        t["key"] = key
    if seconds is not None:
        t["tolerationSeconds"] = seconds
    return t


def test_untolerated_taint_evicts_at_once() -> None:
    assert te.eviction_deadline([UNREACHABLE], [], ADDED + 5) == 0.0
    assert te.eviction_deadline([UNREACHABLE], [tol(effect="NoSchedule")], ADDED + 5) == 0.0


def test_toleration_seconds_count_from_time_added() -> None:
    assert te.eviction_deadline([UNREACHABLE], [tol(seconds=300)], ADDED + 5) == ADDED + 300
    two = [UNREACHABLE, {"key": "x", "effect": "NoExecute", "timeAdded": "2026-11-30T12:00:10Z"}]
    assert te.eviction_deadline(two, [tol(seconds=300), tol("x", seconds=20)], ADDED + 30) == ADDED + 20
    assert te.eviction_deadline([UNREACHABLE], [tol(seconds=-5)], ADDED + 5) == ADDED


def test_taint_without_time_added_counts_from_observation() -> None:
    taint = {"key": nl.TAINT_UNREACHABLE, "effect": "NoExecute"}
    assert te.eviction_deadline([taint], [tol(seconds=2)], 1000.0) == 1002.0


def test_tolerating_forever_or_no_taint_means_no_eviction() -> None:
    assert te.eviction_deadline([UNREACHABLE], [tol()], ADDED) is None
    assert te.eviction_deadline([UNREACHABLE], [tol(key=None)], ADDED) is None
    assert te.eviction_deadline([], [], ADDED) is None


def test_only_no_execute_taints_count() -> None:
    n = node(taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}])
    assert te.no_execute_taints(n) == [{"key": "b", "effect": "NoExecute"}]
    assert te.no_execute_taints(None) == []
