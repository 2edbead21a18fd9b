"""The node-matching rules the scheduler, the DaemonSet controller and the kubelet share."""

from __future__ import annotations

from services.api.nodeaffinity import (
    find_untolerated_taint,
    node_selector_term_matches,
    required_node_affinity_matches,
    tolerates,
)

NODE = {"metadata": {"name": "n1", "labels": {"zone": "a", "cores": "8"}}}


def term(*exprs: dict, fields: tuple[dict, ...] = ()) -> dict:
    return {"matchExpressions": list(exprs), "matchFields": list(fields)}


def test_terms() -> None:
    assert node_selector_term_matches(term({"key": "zone", "operator": "In", "values": ["a", "b"]}), NODE)
    assert not node_selector_term_matches(term({"key": "zone", "operator": "NotIn", "values": ["a"]}), NODE)
    assert node_selector_term_matches(term({"key": "gpu", "operator": "DoesNotExist"}), NODE)
    assert node_selector_term_matches(term({"key": "cores", "operator": "Gt", "values": ["4"]}), NODE)
    assert not node_selector_term_matches(term({"key": "cores", "operator": "Lt", "values": ["4"]}), NODE)
    assert not node_selector_term_matches(term({"key": "zone", "operator": "Gt", "values": ["4"]}), NODE)
    assert node_selector_term_matches(term(fields=({"key": "metadata.name", "operator": "In", "values": ["n1"]},)),
                                      NODE)
    assert not node_selector_term_matches(term(), NODE), "an empty term matches nothing"


def test_node_selector_and_required_affinity_both_apply() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        term({"key": "zone", "operator": "In", "values": ["b"]}),
        term({"key": "cores", "operator": "Exists"})]}}}
    assert required_node_affinity_matches({"affinity": affinity}, NODE), "terms are ORed"
    assert not required_node_affinity_matches({"affinity": affinity, "nodeSelector": {"zone": "b"}}, NODE)
    assert required_node_affinity_matches({}, NODE)


def test_tolerations() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoExecute"}
    assert tolerates({"key": "k", "operator": "Equal", "value": "v"}, taint)
    assert not tolerates({"key": "k", "value": "w"}, taint)
    assert tolerates({"operator": "Exists"}, taint), "an empty key with Exists tolerates every taint"
    assert not tolerates({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, taint)
    taints = [{"key": "a", "effect": "NoSchedule"}, taint]
    assert find_untolerated_taint(taints, [], ("NoExecute",)) == taint
    assert find_untolerated_taint(taints, [{"key": "k", "operator": "Exists"}], ("NoExecute",)) is None
