"""The pure parts of the controller-manager: deletion ranking, rolling-update arithmetic,
expectations, ownership and cascade decisions, flags and the controller registry."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from controller_manager import rollout as ro
from controller_manager.app import build_parser
from controller_manager.controllers.garbagecollector import classify_owners, delete_policy
from controller_manager.controllers.namespace import build_conditions
from controller_manager.controllers.podgc import terminated_to_delete
from controller_manager.expectations import Expectations
from controller_manager.podutil import (
    MAX_IN_FLIGHT,
    BatchError,
    claim_decision,
    index_orphans,
    is_available,
    pod_from_template,
    pods_to_delete,
    slow_start_batch,
)
from controller_manager.registry import KNOWN_UNIMPLEMENTED, Descriptor, discover, enabled
from controller_manager.replica_manager import calculate_status
from services.runtime.durations import duration

T0 = "2024-01-01T00:00:00Z"


def pod(name: str, *, node: str = "", phase: str = "Running", ready: bool = True, ready_at: str = T0,
        created: str = T0, restarts: int = 0, cost: int | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": name, "namespace": "ns", "creationTimestamp": created}
    if cost is not None:
        meta["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": str(cost)}
    return {
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase,
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                   "lastTransitionTime": ready_at}],
                   "containerStatuses": [{"restartCount": restarts}]},
    }


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


# -- deletion ranking ------------------------------------------------------------------------------


def test_unscheduled_before_scheduled() -> None:
    assert names(pods_to_delete([pod("a", node="n"), pod("b")], 1)) == ["b"]


def test_pending_before_unknown_before_running() -> None:
    pods = [pod("run", node="n"), pod("unknown", node="n", phase="Unknown"), pod("pend", node="n", phase="Pending")]
    assert names(pods_to_delete(pods, 3)) == ["pend", "unknown", "run"]


def test_not_ready_before_ready() -> None:
    assert names(pods_to_delete([pod("r", node="n"), pod("nr", node="n", ready=False)], 1)) == ["nr"]


def test_deletion_cost_and_doubled_up_nodes() -> None:
    assert names(pods_to_delete([pod("cheap", node="a", cost=-5), pod("dear", node="b", cost=5)], 1)) == ["cheap"]
    pods = [pod("alone", node="a"), pod("pair1", node="b"), pod("pair2", node="b", created="2023-01-01T00:00:00Z")]
    assert names(pods_to_delete(pods, 1)) == ["pair1"]


def test_recently_ready_then_restarts_then_newer() -> None:
    old_ready = pod("old", node="a", ready_at="2024-01-01T00:00:00Z")
    new_ready = pod("new", node="b", ready_at="2024-01-02T00:00:00Z")
    assert names(pods_to_delete([old_ready, new_ready], 1)) == ["new"]
    assert names(pods_to_delete([pod("calm", node="a"), pod("crashy", node="b", restarts=4)], 1)) == ["crashy"]
    older = pod("older", node="a", created="2023-01-01T00:00:00Z")
    newer = pod("newer", node="b", created="2024-06-01T00:00:00Z")
    assert names(pods_to_delete([older, newer], 1)) == ["newer"]


def test_availability_honours_min_ready_seconds() -> None:
    from datetime import UTC, datetime

    p = pod("p", ready_at="2024-01-01T00:00:00Z")
    assert is_available(p, 10, datetime(2024, 1, 1, 0, 0, 11, tzinfo=UTC))
    assert not is_available(p, 10, datetime(2024, 1, 1, 0, 0, 5, tzinfo=UTC))
    assert not is_available(pod("q", ready=False), 0)


# -- slow start, expectations, ownership -----------------------------------------------------------


async def test_slow_start_doubles_and_stops_at_first_failing_batch() -> None:
    calls = 0

    async def ok() -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)

    assert await slow_start_batch(10, 1, ok) == 10 and calls == 10
    calls = 0

    async def fail_after_three() -> None:
        nonlocal calls
        calls += 1
        if calls > 3:
            raise RuntimeError("quota")

    with pytest.raises(BatchError) as err:
        await slow_start_batch(100, 1, fail_after_three)
    # batches 1, 2, 4: the third batch has 3 failures; nothing more is attempted.
    assert calls == 7 and err.value.successes == 3 and len(err.value.errors) == 4


async def test_slow_start_keeps_at_most_max_in_flight_calls_running() -> None:
    running = peak = calls = 0

    async def call() -> None:
        nonlocal running, peak, calls
        running += 1
        calls += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001)
        running -= 1

    # batches 1, 2, ..., 128, then the remaining 245: the last ones are wider than the cap
    assert await slow_start_batch(500, 1, call) == 500
    assert calls == 500 and peak == MAX_IN_FLIGHT


def test_expectations() -> None:
    exp = Expectations()
    assert exp.satisfied("k")
    exp.expect_creations("k", 2)
    assert not exp.satisfied("k")
    exp.creation_observed("k")
    assert not exp.satisfied("k")
    exp.creation_observed("k")
    assert exp.satisfied("k")
    exp.expect_deletions("k", {"u1", "u2"})
    exp.deletion_observed("k", "u1")
    exp.deletion_observed("k", "u1")
    exp.deletion_observed("k", "other")
    assert not exp.satisfied("k")
    exp.deletion_observed("k", "u2")
    assert exp.satisfied("k")
    exp.expect_creations("k", 5)
    exp.lower("k", adds=5)
    assert exp.satisfied("k")


def test_claim_decisions() -> None:
    owner = {"metadata": {"name": "rs", "namespace": "ns", "uid": "o1"}}
    orphan = {"metadata": {"name": "p", "namespace": "ns", "uid": "p1"}}
    ours = {"metadata": {"name": "p", "namespace": "ns", "uid": "p1",
                         "ownerReferences": [{"uid": "o1", "controller": True}]}}
    theirs = {"metadata": {"name": "p", "namespace": "ns", "uid": "p1",
                           "ownerReferences": [{"uid": "x", "controller": True}]}}
    assert claim_decision(orphan, owner, True) == "adopt"
    assert claim_decision(orphan, owner, False) == "ignore"
    assert claim_decision(ours, owner, True) == "claim"
    assert claim_decision(ours, owner, False) == "release"
    assert claim_decision(theirs, owner, True) == "ignore"
    deleting = {"metadata": {**owner["metadata"], "deletionTimestamp": "2024-01-01T00:00:00Z"}}
    assert claim_decision(orphan, deleting, True) == "ignore"
    assert claim_decision(ours, deleting, False) == "ignore"


def test_orphans_are_indexed_by_namespace() -> None:
    orphan = {"metadata": {"name": "a", "namespace": "ns", "ownerReferences": [{"uid": "o", "kind": "X"}]}}
    owned = {"metadata": {"name": "b", "namespace": "ns", "ownerReferences": [{"uid": "o", "controller": True}]}}
    assert index_orphans(orphan) == ["ns"]
    assert index_orphans(owned) == []


def test_pod_from_template_and_status() -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
             "metadata": {"name": "web", "namespace": "ns", "uid": "u", "generation": 3},
             "spec": {"replicas": 2, "minReadySeconds": 0,
                      "template": {"metadata": {"labels": {"app": "web", "tier": "f"}}, "spec": {"containers": []}}}}
    new_pod = pod_from_template(owner["spec"]["template"], owner)
    assert new_pod["metadata"]["generateName"] == "web-"
    assert new_pod["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is True
    partial = pod("x")
    partial["metadata"]["labels"] = {"app": "web"}
    full = pod("y", ready=False)
    full["metadata"]["labels"] = {"app": "web", "tier": "f"}
    status = calculate_status(owner, [partial, full], ("FailedCreate", "quota"))
    assert (status["replicas"], status["fullyLabeledReplicas"], status["readyReplicas"],
            status["availableReplicas"], status["observedGeneration"]) == (2, 1, 1, 1, 3)
    (cond,) = status["conditions"]
    assert (cond["type"], cond["reason"], cond["message"]) == ("ReplicaFailure", "FailedCreate", "quota")
    assert "conditions" not in calculate_status({**owner, "status": status}, [], None)


# -- rolling-update arithmetic ---------------------------------------------------------------------


def dep(replicas: int, surge: Any = "25%", unavailable: Any = "25%", status_replicas: int = 0) -> dict[str, Any]:
    return {"metadata": {"generation": 1},
            "spec": {"replicas": replicas,
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}},
            "status": {"replicas": status_replicas}}


def rs(name: str, replicas: int, available: int = 0, max_replicas: int | None = None,
       created: str = "2024-01-01T00:00:00Z") -> dict[str, Any]:
    annotations = {ro.MAX_REPLICAS: str(max_replicas)} if max_replicas is not None else {}
    return {"metadata": {"name": name, "creationTimestamp": created, "annotations": annotations},
            "spec": {"replicas": replicas}, "status": {"availableReplicas": available, "replicas": replicas}}


def test_surge_rounds_up_and_unavailable_down() -> None:
    assert ro.rolling_params(dep(10)) == (3, 2)
    assert ro.rolling_params(dep(10, "20%", 1)) == (2, 1)
    assert ro.rolling_params(dep(1, "1%", "1%")) == (1, 0)
    assert ro.rolling_params(dep(10, 0, 0)) == (0, 1)
    assert ro.max_unavailable(dep(2, 0, 5)) == 2
    recreate = {"spec": {"replicas": 3, "strategy": {"type": "Recreate"}}}
    assert ro.max_surge(recreate) == 0 and ro.max_unavailable(recreate) == 0


def test_new_rs_size_during_rolling_update() -> None:
    d = dep(10, 3, 2)
    old, new = rs("old", 10, 10), rs("new", 0)
    assert ro.new_rs_new_replicas(d, [old, new], new) == 3
    assert ro.new_rs_new_replicas(d, [rs("old", 10), rs("new", 3)], rs("new", 3)) == 3
    assert ro.new_rs_new_replicas(d, [rs("old", 5), rs("new", 3)], rs("new", 3)) == 8


def test_how_many_old_pods_may_go() -> None:
    d = dep(10, 3, 2)
    assert ro.max_scaled_down(d, [rs("old", 10, 10), rs("new", 3, 0)], rs("new", 3, 0)) == 2
    assert ro.max_scaled_down(d, [rs("old", 8, 8), rs("new", 5, 5)], rs("new", 5, 5)) == 5


def test_proportional_scaling() -> None:
    d = dep(20, 3, 2, status_replicas=13)
    sizes = ro.proportional_sizes(d, [rs("old", 8, 8, 13, "2024-01-01T00:00:00Z"),
                                      rs("new", 5, 0, 13, "2024-01-02T00:00:00Z")])
    assert sizes == {"old": 14, "new": 9}
    down = ro.proportional_sizes(dep(5, 3, 2, status_replicas=13),
                                 [rs("old", 8, 8, 13), rs("new", 5, 0, 13, "2024-01-02T00:00:00Z")])
    assert sum(down.values()) == 8 and down == {"old": 5, "new": 3}


def test_go_round_and_percent_values() -> None:
    assert [ro.go_round(v) for v in (0.5, 1.5, -0.5, 2.4)] == [1, 2, -1, 2]
    assert ro.rolling_params({"spec": {"replicas": 10, "strategy": {"rollingUpdate": {"maxSurge": None}}}}) == (3, 2)


def test_progress_checks() -> None:
    from datetime import UTC, datetime

    d = dep(3)
    d["spec"]["progressDeadlineSeconds"] = 10
    done = {"updatedReplicas": 3, "replicas": 3, "availableReplicas": 3, "observedGeneration": 1}
    assert ro.complete(d, done)
    assert not ro.complete(d, {**done, "availableReplicas": 2})
    d["status"] = {"updatedReplicas": 1, "replicas": 3, "readyReplicas": 1, "availableReplicas": 1}
    assert ro.progressing(d, {"updatedReplicas": 2, "replicas": 3})
    assert not ro.progressing(d, {"updatedReplicas": 1, "replicas": 3, "readyReplicas": 1, "availableReplicas": 1})
    status = {"conditions": [{"type": "Progressing", "reason": "ReplicaSetUpdated",
                              "lastUpdateTime": "2024-01-01T00:00:00Z"}]}
    assert ro.timed_out(d, status, datetime(2024, 1, 1, 0, 0, 11, tzinfo=UTC))
    assert not ro.timed_out(d, status, datetime(2024, 1, 1, 0, 0, 9, tzinfo=UTC))
    d["spec"]["progressDeadlineSeconds"] = ro.MAX_INT32
    assert not ro.timed_out(d, status, datetime(2030, 1, 1, tzinfo=UTC))


def test_set_condition_keeps_transition_time() -> None:
    status: dict[str, Any] = {}
    first = {"type": "Available", "status": "True", "reason": "A", "lastTransitionTime": "t1", "lastUpdateTime": "t1"}
    ro.set_condition(status, dict(first))
    ro.set_condition(status, {**first, "reason": "B", "lastTransitionTime": "t2", "lastUpdateTime": "t2"})
    (cond,) = status["conditions"]
    assert cond["reason"] == "B" and cond["lastTransitionTime"] == "t1" and cond["lastUpdateTime"] == "t2"


# -- garbage collection, namespaces, pod GC --------------------------------------------------------


def test_cascade_decisions() -> None:
    owners = [{"uid": "a"}, {"uid": "b"}, {"uid": "c"}]
    solid, dangling, waiting = classify_owners(owners, {"a": "present", "b": "absent", "c": "foreground"})
    assert (solid, dangling, waiting) == ([{"uid": "a"}], [{"uid": "b"}], [{"uid": "c"}])
    assert delete_policy([], False) == "Background"
    assert delete_policy(["orphan"], False) == "Orphan"
    assert delete_policy(["foregroundDeletion"], False) == "Foreground"
    assert delete_policy(["orphan"], True) == "Foreground"


def test_namespace_conditions() -> None:
    conds = build_conditions([], {"NamespaceContentRemaining": "Some resources are remaining: pods. has 1"})
    by_type = {c["type"]: c for c in conds}
    assert by_type["NamespaceContentRemaining"]["status"] == "True"
    assert by_type["NamespaceContentRemaining"]["reason"] == "SomeResourcesRemain"
    assert by_type["NamespaceDeletionDiscoveryFailure"] == {
        **by_type["NamespaceDeletionDiscoveryFailure"], "status": "False", "reason": "ResourcesDiscovered",
        "message": "All resources successfully discovered"}
    again = build_conditions(conds, {})
    assert {c["type"]: c["status"] for c in again}["NamespaceContentRemaining"] == "False"


def test_terminated_pod_gc_picks_oldest_beyond_threshold() -> None:
    pods = [pod(f"p{i}", phase="Succeeded", created=f"2024-01-0{i + 1}T00:00:00Z") for i in range(5)]
    pods.append(pod("live"))
    assert names(terminated_to_delete(pods, 3)) == ["p0", "p1"]
    assert terminated_to_delete(pods, 0) == []
    assert terminated_to_delete(pods, 10) == []


# -- flags and registry ----------------------------------------------------------------------------


def test_flags() -> None:
    args = build_parser().parse_args(["--leader-elect=false", "--concurrent-replicaset-syncs=9",
                                      "--leader-elect-lease-duration=1m30s"])
    assert args.leader_elect is False and args.concurrent_replicaset_syncs == 9
    assert args.leader_elect_lease_duration == 90.0 and args.secure_port == 10257
    assert args.terminated_pod_gc_threshold == 12500 and args.kube_api_qps >= 500
    assert duration("500ms") == 0.5
    defaults = build_parser().parse_args([])
    assert defaults.leader_elect is True


def test_controller_selection() -> None:
    available = discover()
    assert {"replicaset", "replicationcontroller", "deployment", "garbagecollector", "namespace",
            "serviceaccount", "podgc"} <= set(available)
    assert "deployment" in enabled(["*"], available)
    assert "deployment" not in enabled(["*", "-deployment"], available)
    assert enabled(["replicaset"], available) == ["replicaset"]
    unimplemented = next(n for n in KNOWN_UNIMPLEMENTED if n not in available)
    assert enabled([unimplemented], available) == []
    off: dict[str, Descriptor] = {"x": Descriptor("x", available["podgc"].module, True)}
    assert enabled(["*"], off) == [] and enabled(["x"], off) == ["x"]
    with pytest.raises(ValueError, match="not in the list of known controllers"):
        enabled(["bogus"], available)


def test_event_spam_filter() -> None:
    from controller_manager.events import SpamFilter

    spam = SpamFilter(burst=3, refill_seconds=10)
    assert [spam.allow(("a",), 0.0) for _ in range(4)] == [True, True, True, False]
    assert spam.allow(("b",), 0.0)
    assert not spam.allow(("a",), 5.0)
    assert spam.allow(("a",), 10.1)
