from __future__ import annotations

import pytest

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import Code
from scheduler.framework.types import NodeInfo
from scheduler.plugins.noderesources import Fit
from scheduler.plugins.noderesources.balanced_allocation import BalancedAllocation
from scheduler.plugins.noderesources.scoring import broken_linear
from tests.unit.scheduler.util import make_node, make_pod, node_info


def check(pl: Fit, pod: dict, ni: NodeInfo) -> list[str]:
    state = CycleState()
    pl.pre_filter(state, pod, [ni])
    st = pl.filter(state, pod, ni)
    return [] if st is None else st.reasons


def test_insufficient_messages_in_upstream_order() -> None:
    pl = Fit({}, None)  # type: ignore[arg-type]
    ni = NodeInfo(make_node("n", cpu="2", memory="1Gi", pods="1", ephemeral_storage="1Gi"))
    ni.add_pod(make_pod("x", cpu="1", memory="512Mi", node="n"))
    pod = make_pod("p", cpu="1500m", memory="600Mi")
    assert check(pl, pod, ni) == ["Too many pods", "Insufficient cpu", "Insufficient memory"]
    st = pl.filter(CycleState(), pod, ni)
    assert st is not None and st.code == Code.UNSCHEDULABLE


def test_fits_exactly_and_zero_request_only_counts_pods() -> None:
    pl = Fit({}, None)  # type: ignore[arg-type]
    ni = NodeInfo(make_node("n", cpu="2", memory="1Gi"))
    assert check(pl, make_pod("p", cpu="2", memory="1Gi"), ni) == []
    full = NodeInfo(make_node("n", cpu="1", memory="1Gi"))
    full.add_pod(make_pod("x", cpu="1", node="n"))
    assert check(pl, make_pod("besteffort"), full) == []


def test_extended_resources_and_ignored() -> None:
    node = make_node("n", **{"example.com__gpu": "1"})
    ni = NodeInfo(node)
    pod = make_pod("p")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"example.com/gpu": "2"}}
    assert check(Fit({}, None), pod, ni) == ["Insufficient example.com/gpu"]  # type: ignore[arg-type]
    assert check(Fit({"ignoredResources": ["example.com/gpu"]}, None), pod, ni) == []  # type: ignore[arg-type]
    assert check(Fit({"ignoredResourceGroups": ["example.com"]}, None), pod, ni) == []  # type: ignore[arg-type]


def test_init_container_and_overhead_count() -> None:
    pl = Fit({}, None)  # type: ignore[arg-type]
    ni = NodeInfo(make_node("n", cpu="2"))
    pod = make_pod("p", cpu="1")
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "3"}}}]
    assert check(pl, pod, ni) == ["Insufficient cpu"]
    pod2 = make_pod("q", cpu="1900m", overhead={"cpu": "200m"})
    assert check(pl, pod2, ni) == ["Insufficient cpu"]


def score(pl: Fit, pod: dict, ni: NodeInfo) -> int:
    state = CycleState()
    pl.pre_filter(state, pod, [ni])
    return pl.score(state, pod, ni)[0]


def test_least_allocated() -> None:
    pl = Fit({}, None)  # type: ignore[arg-type]
    ni = NodeInfo(make_node("n", cpu="4", memory="4Gi"))
    ni.add_pod(make_pod("x", cpu="1", memory="1Gi", node="n"))
    # cpu (4-2)/4 = 50, memory (4-2)/4 = 50
    assert score(pl, make_pod("p", cpu="1", memory="1Gi"), ni) == 50
    # a best-effort pod counts as 100m / 200Mi
    empty = NodeInfo(make_node("e", cpu="1", memory="1Gi"))
    assert score(pl, make_pod("b"), empty) == (90 + 80) // 2


def test_most_allocated_with_weights() -> None:
    args = {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 3},
                                                                       {"name": "memory", "weight": 1}]}}
    pl = Fit(args, None)  # type: ignore[arg-type]
    ni = NodeInfo(make_node("n", cpu="4", memory="4Gi"))
    # cpu 2/4 = 50 (w3), memory 1/4 = 25 (w1) -> (150 + 25) / 4 = 43
    assert score(pl, make_pod("p", cpu="2", memory="1Gi"), ni) == 43


def test_requested_to_capacity_ratio() -> None:
    args = {"scoringStrategy": {"type": "RequestedToCapacityRatio", "resources": [{"name": "cpu", "weight": 1}],
                                "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0},
                                                                       {"utilization": 100, "score": 10}]}}}
    pl = Fit(args, None)  # type: ignore[arg-type]
    ni = NodeInfo(make_node("n", cpu="4"))
    assert score(pl, make_pod("p", cpu="1"), ni) == 25
    assert score(pl, make_pod("p", cpu="3"), ni) == 75


def test_broken_linear() -> None:
    f = broken_linear([(10, 0), (50, 100), (90, 20)])
    assert [f(0), f(10), f(30), f(50), f(70), f(100)] == [0, 0, 50, 100, 60, 20]


def test_unknown_strategy_rejected() -> None:
    with pytest.raises(ValueError):
        Fit({"scoringStrategy": {"type": "Bogus"}}, None)  # type: ignore[arg-type]


def test_batched_filter_and_score_see_node_changes() -> None:
    """Results are remembered per node generation: adding a pod to a node must be seen next time."""
    fit = Fit({}, None)  # type: ignore[arg-type]
    bal = BalancedAllocation({}, None)  # type: ignore[arg-type]
    nodes = [node_info(make_node("a", cpu="1", memory="1Gi")), node_info(make_node("b", cpu="1", memory="1Gi"))]
    pod = make_pod("p", cpu="600m", memory="100Mi")

    def run() -> tuple[list[bool], list[int], list[int]]:
        state = CycleState()
        fit.pre_filter(state, pod, nodes)
        statuses = fit.filter_nodes(state, pod, nodes) or [None] * len(nodes)
        fit.pre_score(state, pod, nodes)
        bal.pre_score(state, pod, nodes)
        return ([st is None for st in statuses], fit.score_nodes(state, pod, nodes)[0],
                bal.score_nodes(state, pod, nodes)[0])

    fits, fit_scores, bal_scores = run()
    assert fits == [True, True] and fit_scores[0] == fit_scores[1] and bal_scores[0] == bal_scores[1]
    nodes[0].add_pod(make_pod("x", cpu="500m", memory="100Mi", node="a"))
    fits2, fit_scores2, bal_scores2 = run()
    assert fits2 == [False, True]
    assert fit_scores2[0] < fit_scores2[1] == fit_scores[1]
    assert bal_scores2[0] != bal_scores2[1]
    assert [fit.score(CycleState(), pod, ni)[0] for ni in nodes] == fit_scores2
