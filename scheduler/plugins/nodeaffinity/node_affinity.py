"""NodeAffinity: `spec.nodeSelector`, required and preferred node affinity, and the profile's addedAffinity."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from scheduler.framework.interface import MAX_NODE_SCORE, Code, Handle, NodeScore, Plugin, PreFilterResult, Status
from scheduler.framework.types import NodeInfo, Obj
from scheduler.plugins.helper import (
    default_normalize_score,
    default_normalize_values,
    node_selector_matches,
    node_selector_term_matches,
)

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"

_PRE_FILTER_KEY = "PreFilterNodeAffinity"
_PRE_SCORE_KEY = "PreScoreNodeAffinity"


class _Required:
    """The pod's nodeSelector AND its required node affinity terms."""

    __slots__ = ("node_selector", "affinity")

    def __init__(self, pod: Obj) -> None:
        spec = pod.get("spec") or {}
        self.node_selector: Mapping[str, str] = spec.get("nodeSelector") or {}
        na = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        self.affinity: Mapping[str, Any] | None = na.get("requiredDuringSchedulingIgnoredDuringExecution")

    def matches(self, node: Obj) -> bool:
        if self.node_selector:
            labels = (node.get("metadata") or {}).get("labels") or {}
            for k, v in self.node_selector.items():
                if labels.get(k) != v:
                    return False
        return node_selector_matches(self.affinity, node)


def _preferred_score(terms: list[Mapping[str, Any]], node: Obj) -> int:
    total = 0
    for t in terms:
        weight = int(t.get("weight", 0))
        if weight and node_selector_term_matches(t.get("preference") or {}, node):
            total += weight
    return total


def _term_node_names(term: Mapping[str, Any]) -> set[str] | None:
    """Node names a term's matchFields pin (metadata.name In ...); None when it pins none."""
    names: set[str] | None = None
    for r in term.get("matchFields") or ():
        if r.get("key") == "metadata.name" and r.get("operator") == "In":
            vals = set(r.get("values") or ())
            names = vals if names is None else names & vals
    return names


class NodeAffinity(Plugin):
    name = "NodeAffinity"

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        added = args.get("addedAffinity") or {}
        self.added_required: Mapping[str, Any] | None = added.get("requiredDuringSchedulingIgnoredDuringExecution")
        self.added_preferred: list[Mapping[str, Any]] = list(
            added.get("preferredDuringSchedulingIgnoredDuringExecution") or ())

    def pre_filter(self, state: CycleState, pod: Obj,
                   nodes: list[NodeInfo]) -> tuple[PreFilterResult | None, Status | None]:
        required = _Required(pod)
        if required.affinity is None and self.added_required is None and not required.node_selector:
            return None, Status(Code.SKIP)
        state.write(_PRE_FILTER_KEY, required)
        terms = (required.affinity or {}).get("nodeSelectorTerms") or []
        if not terms:
            return None, None
        union: set[str] = set()
        for term in terms:
            names = _term_node_names(term)
            if names is None:
                return None, None
            union |= names
        if not union:
            return None, Status.unresolvable(ERR_REASON_CONFLICT)
        return PreFilterResult(union), None

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        node = node_info.node
        if node is None:
            return Status.error("node not found")
        if self.added_required is not None and not node_selector_matches(self.added_required, node):
            return Status.unresolvable(ERR_REASON_ENFORCED)
        required = state.get(_PRE_FILTER_KEY)
        if required is None:
            required = _Required(pod)
        if not required.matches(node):
            return Status.unresolvable(ERR_REASON_POD)
        return None

    def pre_score(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> Status | None:
        na = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
        terms = list(na.get("preferredDuringSchedulingIgnoredDuringExecution") or ())
        if not terms and not self.added_preferred:
            return Status(Code.SKIP)
        state.write(_PRE_SCORE_KEY, terms)
        return None

    def score(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> tuple[int, Status | None]:
        node = node_info.node
        if node is None:
            return 0, Status.error("node not found")
        terms = state.get(_PRE_SCORE_KEY)
        if terms is None:
            na = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
            terms = list(na.get("preferredDuringSchedulingIgnoredDuringExecution") or ())
        return _preferred_score(self.added_preferred, node) + _preferred_score(terms, node), None

    def normalize_score(self, state: CycleState, pod: Obj, scores: list[NodeScore]) -> Status | None:
        default_normalize_score(MAX_NODE_SCORE, False, scores)
        return None

    def normalize_values(self, state: CycleState, pod: Obj, nodes: list[NodeInfo],
                         values: list[int]) -> tuple[list[int], Status | None]:
        return default_normalize_values(MAX_NODE_SCORE, False, values), None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL), self._node_hint)]

    def _node_hint(self, pod: Obj, old: Obj | None, new: Obj | None) -> QueueingHint:
        """Queue when the node newly satisfies the pod's (and the profile's) required affinity."""
        if new is None:
            return QueueingHint.QUEUE_SKIP
        required = _Required(pod)

        def admits(node: Obj) -> bool:
            if self.added_required is not None and not node_selector_matches(self.added_required, node):
                return False
            return required.matches(node)

        if not admits(new):
            return QueueingHint.QUEUE_SKIP
        if old is not None and admits(old):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE
