"""Scores remembered across cycles: per snapshot position (PositionalMemo) and per pod shape (pod_requests).

The remembered path must agree with scoring every node afresh, whatever changed in between.
"""

from __future__ import annotations

import random
from array import array

from scheduler.events import _micro_time
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.runtime import PositionalMemo
from scheduler.framework.types import NodeInfo, pod_requests
from scheduler.scheduler import Scheduler
from services.informers import micro_time
from tests.unit.scheduler.util import make_node, make_pod


def _nodes(n: int) -> list[NodeInfo]:
    return [NodeInfo(make_node(f"n{i}")) for i in range(n)]


def test_positional_memo_computes_only_changed_slots_and_wraps() -> None:
    nodes = _nodes(10)
    calls: list[str] = []

    def compute(ni: NodeInfo) -> int:
        calls.append(ni.name)
        return len(ni.pods) * 10 + int(ni.name[1:])

    memo = PositionalMemo()
    gens = array("q", [ni.generation for ni in nodes])
    window = nodes[7:] + nodes[:3]
    assert memo.values("k", window, 7, gens, compute) == [7, 8, 9, 0, 1, 2]
    assert calls == ["n7", "n8", "n9", "n0", "n1", "n2"]
    calls.clear()
    assert memo.values("k", window, 7, gens, compute) == [7, 8, 9, 0, 1, 2]
    assert calls == []
    nodes[9].add_pod(make_pod("p", node="n9"))
    gens[9] = nodes[9].generation
    assert memo.values("k", window, 7, gens, compute) == [7, 8, 19, 0, 1, 2]
    assert calls == ["n9"]
    # Another key has its own table; positions that cannot hold the run are refused.
    assert memo.values("other", nodes[:2], 0, gens, compute) == [0, 1]
    assert memo.values("k", nodes, 10, gens, compute) is None
    assert memo.values("k", nodes + nodes[:1], 0, gens, compute) is None


def test_positional_memo_starts_over_when_the_node_list_resizes() -> None:
    nodes = _nodes(4)
    memo = PositionalMemo()
    memo.values("k", nodes, 0, array("q", [ni.generation for ni in nodes]), lambda ni: 1)
    more = nodes + _nodes(1)
    out = memo.values("k", more, 0, array("q", [ni.generation for ni in more]), lambda ni: 2)
    assert out == [2, 2, 2, 2, 2]


def test_snapshot_generations_follow_the_cache(sched: Scheduler) -> None:
    cache, snap = sched.cache, sched.snapshot
    for i in range(6):
        cache.add_node(make_node(f"n{i}", labels={"topology.kubernetes.io/zone": f"z{i % 2}"}))
    cache.update_snapshot(snap)
    pods = [make_pod(f"p{i}", cpu="100m", node=f"n{i % 6}") for i in range(9)]
    for step, p in enumerate(pods):
        cache.add_pod(p)
        if step % 3 == 0:
            cache.remove_pod(pods[step // 2])
        if step == 4:
            cache.remove_node(make_node("n5"))
        cache.update_snapshot(snap)
        assert list(snap.generations) == [ni.generation for ni in snap.list()]


async def test_remembered_totals_match_fresh_scoring(sched: Scheduler) -> None:
    rng = random.Random(7)
    for i in range(40):
        sched.cache.add_node(make_node(f"n{i:02d}", cpu=str(rng.choice([2, 4, 8])), memory=f"{rng.choice([4, 8])}Gi"))
    fwk = sched.profiles["default-scheduler"]
    for step in range(30):
        sched.cache.update_snapshot(sched.snapshot)
        nodes = sched.snapshot.list()
        start = rng.randrange(len(nodes))
        window = (nodes[start:] + nodes[:start])[:25]
        pod = make_pod(f"p{step}", cpu=rng.choice(["100m", "250m"]), memory=rng.choice(["64Mi", "1Gi"]))
        fresh, remembered = CycleState(), CycleState()
        remembered.nodes_start = start
        assert fwk.run_pre_score_plugins(fresh, pod, window) is None
        assert fwk.run_pre_score_plugins(remembered, pod, window) is None
        expected, st = fwk.run_score_plugins(fresh, pod, window)
        assert st is None
        got, st = fwk.run_score_plugins(remembered, pod, window)
        assert st is None and got == expected
        node = rng.choice(window).name
        sched.cache.add_pod(make_pod(f"placed{step}", cpu="500m", memory="512Mi", node=node))


async def test_remembered_path_reports_invalid_scores_like_the_usual_one(sched: Scheduler) -> None:
    for i in range(3):
        sched.cache.add_node(make_node(f"n{i}"))
    sched.cache.update_snapshot(sched.snapshot)
    fwk = sched.profiles["default-scheduler"]
    fit = fwk.plugins["NodeResourcesFit"]
    fit.node_scorer = lambda state, pod: ("bad", lambda ni: 101)  # type: ignore[method-assign]
    state = CycleState()
    state.nodes_start = 0
    pod = make_pod("p", cpu="100m")
    nodes = sched.snapshot.list()
    assert fwk.run_pre_score_plugins(state, pod, nodes) is None
    _, st = fwk.run_score_plugins(state, pod, nodes)
    assert st is not None and st.plugin == "NodeResourcesFit" and "invalid score 101" in st.message()


async def test_scheduler_marks_unfiltered_runs_only(sched: Scheduler) -> None:
    for i in range(4):
        sched.cache.add_node(make_node(f"n{i}", cpu="4" if i != 2 else "100m"))
    sched.cache.update_snapshot(sched.snapshot)
    fwk = sched.profiles["default-scheduler"]
    state = CycleState()
    sched.next_start_node_index = 1
    feasible, _, _ = sched.find_nodes_that_fit(fwk, state, make_pod("small", cpu="50m"))
    assert state.nodes_start == 1 and len(feasible) == 4
    state = CycleState()
    feasible, _, _ = sched.find_nodes_that_fit(fwk, state, make_pod("big", cpu="1"))
    assert state.nodes_start == -1 and len(feasible) == 3


async def test_select_host_picks_the_unique_best_and_spreads_ties(sched: Scheduler) -> None:
    nodes = _nodes(5)
    assert sched.select_host(nodes, [1, 9, 3, 9, 9]) in {"n1", "n3", "n4"}
    assert sched.select_host(nodes, [1, 2, 30, 3, 4]) == "n2"
    seen = {sched.select_host(nodes, [9, 1, 9, 1, 9]) for _ in range(300)}
    assert seen == {"n0", "n2", "n4"}


def test_pod_requests_memo_hands_out_independent_copies() -> None:
    pod = make_pod("a", cpu="250m", memory="1Gi")
    first = pod_requests(pod)
    first.milli_cpu += 1000
    assert pod_requests(pod).milli_cpu == 250
    assert pod_requests(make_pod("b", cpu="250m", memory="1Gi")).memory == 1 << 30
    assert pod_requests(make_pod("c"), non_missing=True).milli_cpu == 100
    assert pod_requests(make_pod("c")).milli_cpu == 0
    with_init = make_pod("d", cpu="250m", initContainers=[
        {"name": "i", "image": "x", "resources": {"requests": {"cpu": "2"}}}])
    assert pod_requests(with_init).milli_cpu == 2000


def test_event_time_format_matches_micro_time() -> None:
    from datetime import UTC, datetime

    for t in (1764545604.0, 1764545604.999999, 1764545605.5):
        assert _micro_time(t) == micro_time(datetime.fromtimestamp(t, UTC))
