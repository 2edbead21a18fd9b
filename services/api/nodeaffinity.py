"""Whether a pod may sit on a node by its labels and taints: node selectors, required node affinity and
tolerations, with upstream's semantics.

The scheduler filters with them, the DaemonSet controller decides eligibility with them and the kubelet
admits pods with them; all three must agree on what matches, so the rules live here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """Whether one toleration matches a taint (upstream's Toleration.ToleratesTaint)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def tolerations_tolerate(tolerations: Sequence[Obj], taint: Obj) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def find_untolerated_taint(taints: Sequence[Obj], tolerations: Sequence[Obj], effects: tuple[str, ...]) -> Obj | None:
    """The first taint with one of `effects` that no toleration matches."""
    for taint in taints:
        if taint.get("effect") in effects and not tolerations_tolerate(tolerations, taint):
            return taint
    return None


def _requirement_matches(req: Obj, values: Mapping[str, str]) -> bool:
    key = req.get("key", "")
    op = req.get("operator", "")
    vals = req.get("values") or []
    present = key in values
    if op == "In":
        return present and values[key] in vals
    if op == "NotIn":
        return not present or values[key] not in vals
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(vals) != 1:
            return False
        try:
            have, want = int(values[key]), int(vals[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selector_term_matches(term: Obj, node: Obj) -> bool:
    """A term is the AND of its expressions and fields; a term with neither matches nothing."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not all(_requirement_matches(r, labels) for r in exprs):
        return False
    if fields:
        node_fields = {"metadata.name": meta.get("name", "")}
        for r in fields:
            if r.get("key") != "metadata.name" or not _requirement_matches(r, node_fields):
                return False
    return True


def node_selector_matches(selector: Obj | None, node: Obj) -> bool:
    """A NodeSelector: the OR of its terms; no selector matches every node."""
    if selector is None:
        return True
    return any(node_selector_term_matches(t, node) for t in selector.get("nodeSelectorTerms") or ())


def required_node_affinity_matches(pod_spec: Obj, node: Obj) -> bool:
    """`nodeSelector` and required node affinity together (upstream's RequiredNodeAffinity.Match)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    return node_selector_matches(required, node)
