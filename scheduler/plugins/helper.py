"""Small pieces several plugins share: toleration and node-selector matching, score normalisation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.framework.interface import NodeScore, Obj


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration matches a taint (upstream's ToleratesTaint)."""
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


def tolerations_tolerate(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def find_untolerated_taint(taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]],
                           effects: tuple[str, ...]) -> Mapping[str, Any] | None:
    """The first taint with one of `effects` that no toleration matches."""
    for taint in taints:
        if taint.get("effect") in effects and not tolerations_tolerate(tolerations, taint):
            return taint
    return None


def default_normalize_score(max_priority: int, reverse: bool, scores: list[NodeScore]) -> None:
    """Scale scores so the highest becomes `max_priority` (and flip them when `reverse`)."""
    highest = max((s.score for s in scores), default=0)
    if highest == 0:
        if reverse:
            for s in scores:
                s.score = max_priority
        return
    for s in scores:
        score = max_priority * s.score // highest
        s.score = max_priority - score if reverse else score


def default_normalize_values(max_priority: int, reverse: bool, values: list[int]) -> list[int]:
    """`default_normalize_score` over plain scores (the framework's fast path)."""
    highest = max(values, default=0)
    if highest == 0:
        return [max_priority] * len(values) if reverse else list(values)
    if reverse:
        return [max_priority - max_priority * v // highest for v in values]
    return [max_priority * v // highest for v in values]


def _requirement_matches(req: Mapping[str, Any], values: Mapping[str, str]) -> bool:
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


def node_selector_term_matches(term: Mapping[str, Any], node: Obj) -> bool:
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


def node_selector_matches(selector: Mapping[str, Any] | None, node: Obj) -> bool:
    """A NodeSelector: the OR of its terms."""
    if selector is None:
        return True
    return any(node_selector_term_matches(t, node) for t in selector.get("nodeSelectorTerms") or ())
