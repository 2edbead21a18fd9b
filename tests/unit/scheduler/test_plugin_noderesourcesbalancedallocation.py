from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import Code
from scheduler.framework.types import NodeInfo
from scheduler.plugins.noderesources import BalancedAllocation
from tests.unit.scheduler.util import make_node, make_pod


def test_balanced_prefers_even_usage() -> None:
    pl = BalancedAllocation({}, None)  # type: ignore[arg-type]
    pod = make_pod("p", cpu="1", memory="1Gi")
    even = NodeInfo(make_node("even", cpu="4", memory="4Gi"))
    skewed = NodeInfo(make_node("skewed", cpu="2", memory="8Gi"))
    state = CycleState()
    assert pl.pre_score(state, pod, [even, skewed]) is None
    assert pl.score(state, pod, even)[0] == 100
    # cpu 0.5, memory 0.125 -> std 0.1875 -> 81
    assert pl.score(state, pod, skewed)[0] == 81


def test_best_effort_pod_skips() -> None:
    st = BalancedAllocation({}, None).pre_score(CycleState(), make_pod("b"), [])  # type: ignore[arg-type]
    assert st is not None and st.code == Code.SKIP
