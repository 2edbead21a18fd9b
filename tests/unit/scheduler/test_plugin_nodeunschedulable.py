from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import QueueingHint
from scheduler.framework.interface import Code
from scheduler.framework.types import NodeInfo
from scheduler.plugins.nodeunschedulable import NodeUnschedulable
from tests.unit.scheduler.util import make_node, make_pod


def test_cordoned_node_rejects_unless_tolerated() -> None:
    pl = NodeUnschedulable({}, None)  # type: ignore[arg-type]
    node = make_node("n")
    node["spec"]["unschedulable"] = True
    st = pl.filter(CycleState(), make_pod("p"), NodeInfo(node))
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == "node(s) were unschedulable"
    tolerant = make_pod("t", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                           "effect": "NoSchedule"}])
    assert pl.filter(CycleState(), tolerant, NodeInfo(node)) is None
    assert pl.filter(CycleState(), make_pod("p"), NodeInfo(make_node("ok"))) is None


def test_uncordon_event_requeues() -> None:
    pl = NodeUnschedulable({}, None)  # type: ignore[arg-type]
    hint = pl.events_to_register()[0].hint
    assert hint is not None
    cordoned = make_node("n")
    cordoned["spec"]["unschedulable"] = True
    assert hint(make_pod("p"), cordoned, make_node("n")) == QueueingHint.QUEUE
    assert hint(make_pod("p"), make_node("n"), cordoned) == QueueingHint.QUEUE_SKIP
