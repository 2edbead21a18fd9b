from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import Code
from scheduler.framework.types import NodeInfo
from scheduler.plugins.nodename import NodeName
from tests.unit.scheduler.util import make_node, make_pod


def test_node_name() -> None:
    pl = NodeName({}, None)  # type: ignore[arg-type]
    pod = make_pod("p")
    assert pl.filter(CycleState(), pod, NodeInfo(make_node("a"))) is None
    pod["spec"]["nodeName"] = "b"
    assert pl.filter(CycleState(), pod, NodeInfo(make_node("b"))) is None
    st = pl.filter(CycleState(), pod, NodeInfo(make_node("a")))
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == "node(s) didn't match the requested node name"
