from __future__ import annotations

from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import QueueingHint
from scheduler.framework.interface import Code, NodeScore
from scheduler.framework.types import NodeInfo
from scheduler.plugins.nodeaffinity import NodeAffinity
from tests.unit.scheduler.util import make_node, make_pod


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def run_filter(pl: NodeAffinity, pod: dict, node: dict) -> Any:
    state = CycleState()
    _, st = pl.pre_filter(state, pod, [])
    if st is not None and st.code == Code.SKIP:
        return None
    if st is not None:
        return st
    return pl.filter(state, pod, NodeInfo(node))


def test_skip_without_selector_or_affinity() -> None:
    _, st = NodeAffinity({}, None).pre_filter(CycleState(), make_pod("p"), [])  # type: ignore[arg-type]
    assert st is not None and st.code == Code.SKIP


def test_node_selector() -> None:
    pl = NodeAffinity({}, None)  # type: ignore[arg-type]
    pod = make_pod("p", nodeSelector={"disk": "ssd"})
    assert run_filter(pl, pod, make_node("a", labels={"disk": "ssd"})) is None
    st = run_filter(pl, pod, make_node("b", labels={"disk": "hdd"}))
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == "node(s) didn't match Pod's node affinity/selector"


def test_match_expression_operators() -> None:
    pl = NodeAffinity({}, None)  # type: ignore[arg-type]
    node = make_node("n", labels={"zone": "a", "cores": "8"})
    cases = [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "missing", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, False),
        ({"key": "cores", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "cores", "operator": "Lt", "values": ["4"]}, False),
        ({"key": "zone", "operator": "Gt", "values": ["4"]}, False),
    ]
    for expr, fits in cases:
        pod = make_pod("p", affinity=required({"matchExpressions": [expr]}))
        assert (run_filter(pl, pod, node) is None) == fits, expr


def test_terms_are_ored_and_expressions_anded() -> None:
    pl = NodeAffinity({}, None)  # type: ignore[arg-type]
    pod = make_pod("p", affinity=required(
        {"matchExpressions": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]},
        {"matchExpressions": [{"key": "c", "operator": "Exists"}]}))
    assert run_filter(pl, pod, make_node("n", labels={"a": "", "b": ""})) is None
    assert run_filter(pl, pod, make_node("n", labels={"c": ""})) is None
    assert run_filter(pl, pod, make_node("n", labels={"a": ""})) is not None
    # an empty term matches nothing
    assert run_filter(pl, make_pod("q", affinity=required({})), make_node("n")) is not None


def test_match_fields_narrow_prefilter_result() -> None:
    pl = NodeAffinity({}, None)  # type: ignore[arg-type]
    pod = make_pod("p", affinity=required(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}))
    res, st = pl.pre_filter(CycleState(), pod, [])
    assert st is None and res is not None and res.node_names == {"n1", "n2"}
    assert run_filter(pl, pod, make_node("n1")) is None
    assert run_filter(pl, pod, make_node("n3")) is not None


def test_added_affinity_is_enforced_with_its_own_message() -> None:
    args = {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}]}}}
    pl = NodeAffinity(args, None)  # type: ignore[arg-type]
    st = run_filter(pl, make_pod("p"), make_node("n"))
    assert st.message() == "node(s) didn't match scheduler-enforced node affinity"
    assert run_filter(pl, make_pod("p"), make_node("n", labels={"pool": "batch"})) is None


def test_preferred_terms_score_and_normalize() -> None:
    pl = NodeAffinity({}, None)  # type: ignore[arg-type]
    pod = make_pod("p", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 2, "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}},
        {"weight": 6, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
    ]}})
    nodes = [NodeInfo(make_node("both", labels={"ssd": "", "zone": "a"})),
             NodeInfo(make_node("ssd", labels={"ssd": ""})), NodeInfo(make_node("none"))]
    state = CycleState()
    assert pl.pre_score(state, pod, nodes) is None
    scores = [NodeScore(n.name, pl.score(state, pod, n)[0]) for n in nodes]
    assert [s.score for s in scores] == [8, 2, 0]
    pl.normalize_score(state, pod, scores)
    assert [s.score for s in scores] == [100, 25, 0]
    st = pl.pre_score(CycleState(), make_pod("q"), nodes)
    assert st is not None and st.code == Code.SKIP


def test_node_label_hint() -> None:
    pl = NodeAffinity({}, None)  # type: ignore[arg-type]
    hint = pl.events_to_register()[0].hint
    assert hint is not None
    pod = make_pod("p", nodeSelector={"disk": "ssd"})
    assert hint(pod, make_node("n"), make_node("n", labels={"disk": "ssd"})) == QueueingHint.QUEUE
    assert hint(pod, make_node("n"), make_node("n", labels={"disk": "hdd"})) == QueueingHint.QUEUE_SKIP
