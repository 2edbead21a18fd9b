from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import QueueingHint
from scheduler.framework.interface import Code, NodeScore
from scheduler.framework.types import NodeInfo
from scheduler.plugins.tainttoleration import TaintToleration
from tests.unit.scheduler.util import make_node, make_pod

CP = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


def pl() -> TaintToleration:
    return TaintToleration({}, None)  # type: ignore[arg-type]


def test_untolerated_taint_message_matches_upstream() -> None:
    st = pl().filter(CycleState(), make_pod("p"), NodeInfo(make_node("n", taints=[CP])))
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }"
    st = pl().filter(CycleState(), make_pod("p"), NodeInfo(make_node("n", taints=[
        {"key": "dedicated", "value": "gpu", "effect": "NoExecute"}])))
    assert st is not None and st.message() == "node(s) had untolerated taint {dedicated: gpu}"


def test_tolerations_equal_exists_and_effects() -> None:
    node = NodeInfo(make_node("n", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]))
    ok = [
        [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
        [{"key": "k", "operator": "Exists"}],
        [{"operator": "Exists"}],
        [{"key": "k", "value": "v"}],
    ]
    for tols in ok:
        assert pl().filter(CycleState(), make_pod("p", tolerations=tols), node) is None, tols
    bad = [
        [{"key": "k", "operator": "Equal", "value": "w"}],
        [{"key": "k", "operator": "Exists", "effect": "NoExecute"}],
        [{"key": "other", "operator": "Exists"}],
    ]
    for tols in bad:
        assert pl().filter(CycleState(), make_pod("p", tolerations=tols), node) is not None, tols
    # PreferNoSchedule never filters
    soft = NodeInfo(make_node("s", taints=[{"key": "k", "effect": "PreferNoSchedule"}]))
    assert pl().filter(CycleState(), make_pod("p"), soft) is None


def test_score_prefers_fewer_intolerable_prefer_no_schedule_taints() -> None:
    p = pl()
    pod = make_pod("p", tolerations=[{"key": "tolerated", "operator": "Exists", "effect": "PreferNoSchedule"}])
    nodes = [
        NodeInfo(make_node("clean")),
        NodeInfo(make_node("one", taints=[{"key": "a", "effect": "PreferNoSchedule"}])),
        NodeInfo(make_node("two", taints=[{"key": "a", "effect": "PreferNoSchedule"},
                                          {"key": "b", "effect": "PreferNoSchedule"},
                                          {"key": "tolerated", "effect": "PreferNoSchedule"}])),
    ]
    state = CycleState()
    assert p.pre_score(state, pod, nodes) is None
    scores = [NodeScore(n.name, p.score(state, pod, n)[0]) for n in nodes]
    assert [s.score for s in scores] == [0, 1, 2]
    p.normalize_score(state, pod, scores)
    assert [s.score for s in scores] == [100, 50, 0]


def test_node_hint_queues_only_when_taint_removed() -> None:
    hint = pl().events_to_register()[0].hint
    assert hint is not None
    tainted, clean = make_node("n", taints=[CP]), make_node("n")
    assert hint(make_pod("p"), tainted, clean) == QueueingHint.QUEUE
    assert hint(make_pod("p"), clean, tainted) == QueueingHint.QUEUE_SKIP
    assert hint(make_pod("p"), None, tainted) == QueueingHint.QUEUE_SKIP
    assert hint(make_pod("p"), None, clean) == QueueingHint.QUEUE
