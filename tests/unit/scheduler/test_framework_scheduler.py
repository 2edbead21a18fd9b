"""The scheduling algorithm over a snapshot: feasible-node budget, round-robin start, messages, ties."""

from __future__ import annotations

import pytest

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import NominatingInfo
from scheduler.framework.types import NodeInfo, PodInfo
from scheduler.scheduler import FitError, Scheduler, num_feasible_nodes_to_find
from tests.unit.scheduler.util import make_node, make_pod

CP_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


@pytest.mark.parametrize(("pct", "nodes", "expected"), [
    (0, 10, 10), (0, 99, 99), (0, 100, 100), (0, 200, 100), (0, 1000, 420), (0, 5000, 500),
    (0, 6000, 300), (0, 100000, 5000), (30, 1000, 300), (1, 1000, 100), (100, 5000, 5000),
])
def test_num_feasible_nodes_to_find(pct: int, nodes: int, expected: int) -> None:
    assert num_feasible_nodes_to_find(pct, nodes) == expected


def load(s: Scheduler, *nodes: dict, pods: tuple = ()) -> None:
    for n in nodes:
        s.cache.add_node(n)
    for p in pods:
        s.cache.add_pod(p)
    s.cache.update_snapshot(s.snapshot)


def run(s: Scheduler, pod: dict):  # noqa: ANN201
    fwk = s.profiles["default-scheduler"]
    return s.schedule_pod(fwk, CycleState(), pod)


async def test_aggregated_message_like_upstream(sched: Scheduler) -> None:
    load(sched, make_node("cp", cpu="8", taints=[CP_TAINT]), make_node("w1", cpu="1"), make_node("w2", cpu="1"))
    result, status, diagnosis = run(sched, make_pod("p", cpu="2"))
    assert result is None and status is not None and status.is_rejected()
    assert str(FitError({}, 3, diagnosis)) == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
        "2 Insufficient cpu.")
    assert diagnosis.unschedulable_plugins == {"TaintToleration", "NodeResourcesFit"}


async def test_prefilter_narrowing_message(sched: Scheduler) -> None:
    load(sched, make_node("a"), make_node("b"))
    pod = make_pod("p", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}],
                               "matchExpressions": [{"key": "nope", "operator": "Exists"}]}]}}})
    result, _, diagnosis = run(sched, pod)
    assert result is None
    assert str(FitError({}, 2, diagnosis)) == (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) didn't satisfy plugin(s) [NodeAffinity].")


async def test_no_nodes(sched: Scheduler) -> None:
    result, status, _ = run(sched, make_pod("p"))
    assert result is None and status is not None and status.message() == "no nodes available to schedule pods"


async def test_picks_least_allocated_node(sched: Scheduler) -> None:
    load(sched, make_node("busy", cpu="4"), make_node("idle", cpu="4"),
         pods=(make_pod("x", cpu="3", memory="1Gi", node="busy"),))
    result, status, _ = run(sched, make_pod("p", cpu="500m", memory="100Mi"))
    assert status is None and result is not None and result.suggested_host == "idle"


async def test_preferred_affinity_beats_resources(sched: Scheduler) -> None:
    load(sched, make_node("plain"), make_node("fast", labels={"disk": "ssd"}))
    pod = make_pod("p", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}})
    for _ in range(5):
        result, _, _ = run(sched, pod)
        assert result is not None and result.suggested_host == "fast"


async def test_round_robin_start_and_budget(sched: Scheduler) -> None:
    load(sched, *[make_node(f"n{i:03d}") for i in range(300)])
    # 300 nodes: 50 - 300/125 = 48% -> 144 nodes to find per cycle
    result, _, _ = run(sched, make_pod("p"))
    assert result is not None and result.feasible_nodes == 144
    assert sched.next_start_node_index == 144
    run(sched, make_pod("q"))
    assert sched.next_start_node_index == 288
    run(sched, make_pod("r"))
    assert sched.next_start_node_index == (288 + 144) % 300


async def test_round_robin_search_wraps_around_with_rejections(sched: Scheduler) -> None:
    # Every odd node is too small: the search from index 250 wraps past the end of the node list and
    # stops at the node where a node-by-node search would have found its 144th fit.
    load(sched, *[make_node(f"n{i:03d}", cpu="4" if i % 2 == 0 else "100m") for i in range(300)])
    order = [ni.name for ni in sched.snapshot.list()]
    sched.next_start_node_index = 250
    result, _, _ = run(sched, make_pod("p", cpu="1"))
    rotated = order[250:] + order[:250]
    fits = [i for i, name in enumerate(rotated) if int(name[1:]) % 2 == 0]
    assert result is not None and result.feasible_nodes == 144
    assert result.evaluated_nodes == fits[143] + 1
    assert sched.next_start_node_index == (250 + fits[143] + 1) % 300


async def test_ties_broken_at_random() -> None:
    nodes = [NodeInfo(make_node(n)) for n in ("a", "b", "c")]
    seen = {Scheduler.select_host(nodes, [5, 7, 7]) for _ in range(200)}
    assert seen == {"b", "c"}


async def test_nominated_pods_hold_room(sched: Scheduler) -> None:
    load(sched, make_node("only", cpu="2"))
    big = make_pod("big", cpu="2", priority=100)
    sched.queue.nominator.add_nominated_pod(PodInfo(big), NominatingInfo("only", "override"))
    result, _, diagnosis = run(sched, make_pod("small", cpu="1", priority=1))
    assert result is None
    assert str(FitError({}, 1, diagnosis)) == "0/1 nodes are available: 1 Insufficient cpu."
    result, _, _ = run(sched, make_pod("higher", cpu="1", priority=1000))
    assert result is not None
