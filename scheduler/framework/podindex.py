"""Indexes over the pods of a Snapshot, kept current as the cache copies changed nodes into it.

InterPodAffinity and PodTopologySpread ask, every cycle, "which pods match this selector, and in
which topology domain do they run?" and "which existing pods' (anti-)affinity terms match this
pod?". Scanning every pod on every node answers that in O(pods) per cycle. These indexes answer
it from labels and term signatures instead: pods by (namespace, label key, label value) and node,
and existing pods' terms grouped by signature with a count per topology pair, so a cycle costs
O(matching pods) or O(distinct terms), the way upstream's PreFilter state and NodeInfo's
pods-with-affinity lists narrow the work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from services.api.selectors import LabelSelector

if TYPE_CHECKING:
    from scheduler.framework.types import AffinityTerm, PodInfo

LabelKey = tuple[str, str, str]
TopologyPair = tuple[str, str]
TermKey = tuple[LabelSelector, frozenset[str], LabelSelector, str, int]

_EXACT_OPERATORS = frozenset({"=", "==", "in"})


def term_key(term: AffinityTerm, weight: int = 0) -> TermKey:
    return (term.selector, term.namespaces, term.namespace_selector, term.topology_key, weight)


class TermCounts:
    """Existing pods' terms sharing one signature: how many of them sit in each topology pair."""

    __slots__ = ("term", "weight", "pairs")

    def __init__(self, term: AffinityTerm, weight: int) -> None:
        self.term = term
        self.weight = weight
        self.pairs: dict[TopologyPair, int] = {}


def _bump(counts: dict, key: object, delta: int) -> None:
    n = counts.get(key, 0) + delta
    if n:
        counts[key] = n
    else:
        del counts[key]


class PodIndex:
    """Pods by label and node, and existing pods' affinity terms by signature and topology pair."""

    __slots__ = ("by_label", "label_sizes", "namespaces", "terminating", "required_anti_affinity",
                 "required_affinity", "preferred_affinity", "preferred_anti_affinity")

    def __init__(self) -> None:
        # (namespace, key, value) -> node name -> pods there carrying that label.
        self.by_label: dict[LabelKey, dict[str, list[PodInfo]]] = {}
        self.label_sizes: dict[LabelKey, int] = {}
        self.namespaces: dict[str, int] = {}
        self.terminating = 0
        self.required_anti_affinity: dict[TermKey, TermCounts] = {}
        self.required_affinity: dict[TermKey, TermCounts] = {}
        self.preferred_affinity: dict[TermKey, TermCounts] = {}
        self.preferred_anti_affinity: dict[TermKey, TermCounts] = {}

    def add(self, pi: PodInfo, node: str, node_labels: Mapping[str, str]) -> None:
        self._update(pi, node, node_labels, 1)

    def remove(self, pi: PodInfo, node: str, node_labels: Mapping[str, str]) -> None:
        self._update(pi, node, node_labels, -1)

    def _update(self, pi: PodInfo, node: str, node_labels: Mapping[str, str], delta: int) -> None:
        meta = pi.pod["metadata"]
        ns = meta.get("namespace", "")
        _bump(self.namespaces, ns, delta)
        if meta.get("deletionTimestamp"):
            self.terminating += delta
        for k, v in (meta.get("labels") or {}).items():
            key = (ns, k, v)
            by_node = self.by_label.get(key)
            if delta > 0:
                if by_node is None:
                    by_node = self.by_label[key] = {}
                by_node.setdefault(node, []).append(pi)
            else:
                pods = by_node.get(node) if by_node is not None else None
                if pods is None or not _remove_identity(pods, pi):
                    continue
                if not pods:
                    del by_node[node]
                    if not by_node:
                        del self.by_label[key]
            _bump(self.label_sizes, key, delta)
        if pi.required_anti_affinity_terms:
            _count_terms(self.required_anti_affinity, ((t, 0) for t in pi.required_anti_affinity_terms),
                         node_labels, delta)
        if pi.required_affinity_terms:
            _count_terms(self.required_affinity, ((t, 0) for t in pi.required_affinity_terms), node_labels, delta)
        if pi.preferred_affinity_terms:
            _count_terms(self.preferred_affinity, ((w.term, w.weight) for w in pi.preferred_affinity_terms),
                         node_labels, delta)
        if pi.preferred_anti_affinity_terms:
            _count_terms(self.preferred_anti_affinity,
                         ((w.term, w.weight) for w in pi.preferred_anti_affinity_terms), node_labels, delta)

    def candidates(self, namespace: str, selector: LabelSelector) -> tuple[dict[str, list[PodInfo]] | None, bool]:
        """Pods per node of `namespace` that may match `selector`, and whether all of them do.

        Narrows by the selector's most selective single-value requirement; (None, False) when it
        has none (an empty selector, or only NotIn/Exists/DoesNotExist), and the caller must scan.
        """
        if selector.matches_nothing:
            return {}, True
        best: dict[str, list[PodInfo]] | None = None
        best_size = -1
        for r in selector.requirements:
            if r.operator in _EXACT_OPERATORS and len(r.values) == 1:
                key = (namespace, r.key, r.values[0])
                size = self.label_sizes.get(key, 0)
                if best_size < 0 or size < best_size:
                    best_size = size
                    best = self.by_label.get(key) or {}
        if best is None:
            return None, False
        return best, len(selector.requirements) == 1

    def namespace_names(self) -> Iterable[str]:
        return self.namespaces.keys()


def _remove_identity(pods: list[PodInfo], pi: PodInfo) -> bool:
    for i, p in enumerate(pods):
        if p is pi:
            del pods[i]
            return True
    return False


def _count_terms(table: dict[TermKey, TermCounts], terms: Iterable[tuple[AffinityTerm, int]],
                 node_labels: Mapping[str, str], delta: int) -> None:
    for term, weight in terms:
        value = node_labels.get(term.topology_key)
        if value is None:
            continue
        key = term_key(term, weight)
        tc = table.get(key)
        if tc is None:
            if delta < 0:
                continue
            tc = table[key] = TermCounts(term, weight)
        _bump(tc.pairs, (term.topology_key, value), delta)
        if not tc.pairs:
            del table[key]
