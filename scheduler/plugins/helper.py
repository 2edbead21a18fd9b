"""Small pieces several plugins share: score normalisation, and the node-matching rules from
services.api.nodeaffinity under the names the plugins import."""

from __future__ import annotations

from scheduler.framework.interface import NodeScore
from services.api.nodeaffinity import (
    find_untolerated_taint,
    node_selector_matches,
    node_selector_term_matches,
    tolerates,
    tolerations_tolerate,
)

__all__ = [
    "default_normalize_score",
    "default_normalize_values",
    "find_untolerated_taint",
    "node_selector_matches",
    "node_selector_term_matches",
    "tolerates",
    "tolerations_tolerate",
]


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
