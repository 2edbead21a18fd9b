"""InterPodAffinity with upstream's semantics.

Filtering counts, per topology pair (key, value), the existing pods that match the incoming pod's
required terms and the existing pods whose required anti-affinity terms match the incoming pod; a
node then passes or fails by looking up its own label values. Scoring sums term weights per
topology pair the same way and normalizes the per-node sums to 0..100.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scheduler.framework.interface import (
    MAX_NODE_SCORE,
    ActionType,
    AffinityTerm,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Handle,
    NodeInfo,
    NodeScore,
    Obj,
    Plugin,
    PodInfo,
    PreFilterResult,
    Status,
    WeightedAffinityTerm,
)

NAME = "InterPodAffinity"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME

ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_REASON_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"

DEFAULT_HARD_POD_AFFINITY_WEIGHT = 1

TopologyPair = tuple[str, str]
NsLabels = Callable[[str], Mapping[str, str] | None]


def _namespace(pod: Obj) -> str:
    return (pod.get("metadata") or {}).get("namespace", "")


class _NsLabelCache:
    """Namespace labels looked up once per cycle (terms with a namespaceSelector need them per pod)."""

    __slots__ = ("_lookup", "_seen")

    def __init__(self, lookup: NsLabels) -> None:
        self._lookup = lookup
        self._seen: dict[str, Mapping[str, str] | None] = {}

    def __call__(self, ns: str) -> Mapping[str, str] | None:
        if ns not in self._seen:
            self._seen[ns] = self._lookup(ns)
        return self._seen[ns]


def _term_matches(term: AffinityTerm, pod: Obj, ns_labels: _NsLabelCache) -> bool:
    return term.matches(pod, ns_labels(_namespace(pod)))


def _add(counts: dict[TopologyPair, int], pair: TopologyPair, delta: int) -> None:
    n = counts.get(pair, 0) + delta
    if n == 0:
        counts.pop(pair, None)
    else:
        counts[pair] = n


def _update_with_affinity_terms(counts: dict[TopologyPair, int], target: Obj, node_labels: Mapping[str, str],
                                terms: list[AffinityTerm], ns_labels: _NsLabelCache, delta: int) -> None:
    """Count `target` once per term's domain, but only when it matches every term (upstream's rule)."""
    if not terms or not all(_term_matches(t, target, ns_labels) for t in terms):
        return
    for t in terms:
        value = node_labels.get(t.topology_key)
        if value is not None:
            _add(counts, (t.topology_key, value), delta)


def _update_with_anti_affinity_terms(counts: dict[TopologyPair, int], target: Obj,
                                     target_ns_labels: Mapping[str, str] | None,
                                     node_labels: Mapping[str, str], terms: list[AffinityTerm], delta: int) -> None:
    """Count `target` in the domain of every term it matches."""
    for t in terms:
        if t.matches(target, target_ns_labels):
            value = node_labels.get(t.topology_key)
            if value is not None:
                _add(counts, (t.topology_key, value), delta)


class PreFilterState:
    """What Filter needs: three topology-pair counters and the incoming pod's parsed terms."""

    __slots__ = ("existing_anti_affinity_counts", "affinity_counts", "anti_affinity_counts", "pod_info",
                 "ns_labels", "pod_ns_labels")

    def __init__(self, pod_info: PodInfo, ns_labels: _NsLabelCache) -> None:
        self.pod_info = pod_info
        self.ns_labels = ns_labels
        self.pod_ns_labels = ns_labels(_namespace(pod_info.pod))
        self.existing_anti_affinity_counts: dict[TopologyPair, int] = {}
        self.affinity_counts: dict[TopologyPair, int] = {}
        self.anti_affinity_counts: dict[TopologyPair, int] = {}

    def clone(self) -> PreFilterState:
        other = PreFilterState.__new__(PreFilterState)
        other.pod_info = self.pod_info
        other.ns_labels = self.ns_labels
        other.pod_ns_labels = self.pod_ns_labels
        other.existing_anti_affinity_counts = dict(self.existing_anti_affinity_counts)
        other.affinity_counts = dict(self.affinity_counts)
        other.anti_affinity_counts = dict(self.anti_affinity_counts)
        return other

    def update_with_pod(self, updated: PodInfo, node_labels: Mapping[str, str], delta: int) -> None:
        """Account for a pod added to (delta 1) or removed from (delta -1) a node in a what-if run."""
        _update_with_anti_affinity_terms(self.existing_anti_affinity_counts, self.pod_info.pod, self.pod_ns_labels,
                                         node_labels, updated.required_anti_affinity_terms, delta)
        _update_with_affinity_terms(self.affinity_counts, updated.pod, node_labels,
                                    self.pod_info.required_affinity_terms, self.ns_labels, delta)
        target_ns = self.ns_labels(_namespace(updated.pod))
        _update_with_anti_affinity_terms(self.anti_affinity_counts, updated.pod, target_ns, node_labels,
                                         self.pod_info.required_anti_affinity_terms, delta)


class PreScoreState:
    __slots__ = ("topology_score",)

    def __init__(self) -> None:
        self.topology_score: dict[str, dict[str, int]] = {}

    def clone(self) -> PreScoreState:
        return self

    def process_term(self, term: AffinityTerm, weight: int, target: Obj, target_ns_labels: Mapping[str, str] | None,
                     node_labels: Mapping[str, str], multiplier: int) -> None:
        if not term.matches(target, target_ns_labels):
            return
        value = node_labels.get(term.topology_key)
        if value is None:
            return
        scores = self.topology_score.setdefault(term.topology_key, {})
        scores[value] = scores.get(value, 0) + weight * multiplier

    def process_terms(self, terms: Iterable[WeightedAffinityTerm], target: Obj,
                      target_ns_labels: Mapping[str, str] | None, node_labels: Mapping[str, str],
                      multiplier: int) -> None:
        for wt in terms:
            self.process_term(wt.term, wt.weight, target, target_ns_labels, node_labels, multiplier)


class InterPodAffinity(Plugin):
    """Pods attracted to, or kept apart from, other pods within a topology domain."""

    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        weight = args.get("hardPodAffinityWeight")
        self.hard_pod_affinity_weight = DEFAULT_HARD_POD_AFFINITY_WEIGHT if weight is None else int(weight)
        if not 0 <= self.hard_pod_affinity_weight <= 100:
            raise ValueError(f"hardPodAffinityWeight: Invalid value: {self.hard_pod_affinity_weight}: "
                             "not in valid range [0-100]")
        self.ignore_preferred_terms_of_existing_pods = bool(args.get("ignorePreferredTermsOfExistingPods", False))

    def _ns_labels(self) -> _NsLabelCache:
        return _NsLabelCache(self.handle.namespace_labels)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(
                EventResource.POD, ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE)),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
        ]

    # -- filtering -------------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Obj,
                   nodes: list[NodeInfo]) -> tuple[PreFilterResult | None, Status | None]:
        lister = self.handle.snapshot_shared_lister()
        with_anti = lister.have_pods_with_required_anti_affinity_list()
        pod_info = PodInfo(pod)
        if not pod_info.required_affinity_terms and not pod_info.required_anti_affinity_terms and not with_anti:
            return None, Status(Code.SKIP)
        s = PreFilterState(pod_info, self._ns_labels())
        for ni in with_anti:
            labels = ni.labels
            for existing in ni.pods_with_required_anti_affinity:
                _update_with_anti_affinity_terms(s.existing_anti_affinity_counts, pod, s.pod_ns_labels, labels,
                                                 existing.required_anti_affinity_terms, 1)
        affinity_terms = pod_info.required_affinity_terms
        anti_terms = pod_info.required_anti_affinity_terms
        if affinity_terms or anti_terms:
            for ni in lister.list():
                labels = ni.labels
                for existing in ni.pods:
                    target = existing.pod
                    if affinity_terms:
                        _update_with_affinity_terms(s.affinity_counts, target, labels, affinity_terms,
                                                    s.ns_labels, 1)
                    if anti_terms:
                        _update_with_anti_affinity_terms(s.anti_affinity_counts, target,
                                                         s.ns_labels(_namespace(target)), labels, anti_terms, 1)
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, None

    def pre_filter_extensions(self) -> Plugin | None:
        return self

    def add_pod(self, state: CycleState, pod_to_schedule: Obj, pod_info_to_add: PodInfo,
                node_info: NodeInfo) -> Status | None:
        s = state.get(PRE_FILTER_STATE_KEY)
        if s is not None:
            s.update_with_pod(pod_info_to_add, node_info.labels, 1)
        return None

    def remove_pod(self, state: CycleState, pod_to_schedule: Obj, pod_info_to_remove: PodInfo,
                   node_info: NodeInfo) -> Status | None:
        s = state.get(PRE_FILTER_STATE_KEY)
        if s is not None:
            s.update_with_pod(pod_info_to_remove, node_info.labels, -1)
        return None

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        if node_info.node is None:
            return Status.error("node not found")
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return Status.error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        labels = node_info.labels
        if not _satisfy_pod_affinity(s, labels):
            return Status.unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH)
        if not _satisfy_pod_anti_affinity(s, labels):
            return Status.unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
        if not _satisfy_existing_pods_anti_affinity(s, labels):
            return Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)
        return None

    # -- scoring ---------------------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> Status | None:
        if not nodes:
            return Status(Code.SKIP)
        pod_info = PodInfo(pod)
        has_constraints = bool(pod_info.preferred_affinity_terms or pod_info.preferred_anti_affinity_terms)
        if self.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return Status(Code.SKIP)
        lister = self.handle.snapshot_shared_lister()
        all_nodes = lister.list() if has_constraints else lister.have_pods_with_affinity_list()
        ns_labels = self._ns_labels()
        pod_ns_labels = ns_labels(_namespace(pod))
        s = PreScoreState()
        hard_weight = self.hard_pod_affinity_weight
        use_existing_preferred = not self.ignore_preferred_terms_of_existing_pods
        for ni in all_nodes:
            labels = ni.labels
            if not labels:
                continue
            for existing in (ni.pods if has_constraints else ni.pods_with_affinity):
                target = existing.pod
                if has_constraints:
                    target_ns = ns_labels(_namespace(target))
                    s.process_terms(pod_info.preferred_affinity_terms, target, target_ns, labels, 1)
                    s.process_terms(pod_info.preferred_anti_affinity_terms, target, target_ns, labels, -1)
                if hard_weight > 0:
                    for term in existing.required_affinity_terms:
                        s.process_term(term, hard_weight, pod, pod_ns_labels, labels, 1)
                if use_existing_preferred:
                    s.process_terms(existing.preferred_affinity_terms, pod, pod_ns_labels, labels, 1)
                    s.process_terms(existing.preferred_anti_affinity_terms, pod, pod_ns_labels, labels, -1)
        if not s.topology_score:
            return Status(Code.SKIP)
        state.write(PRE_SCORE_STATE_KEY, s)
        return None

    def score(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> tuple[int, Status | None]:
        s: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if s is None:
            return 0, None
        labels = node_info.labels
        total = 0
        for key, values in s.topology_score.items():
            value = labels.get(key)
            if value is not None:
                total += values.get(value, 0)
        return total, None

    def normalize_score(self, state: CycleState, pod: Obj, scores: list[NodeScore]) -> Status | None:
        s: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if s is None or not s.topology_score or not scores:
            return None
        lo = min(ns.score for ns in scores)
        hi = max(ns.score for ns in scores)
        diff = hi - lo
        for ns in scores:
            ns.score = int(MAX_NODE_SCORE * (ns.score - lo) / diff) if diff > 0 else 0
        return None


def _satisfy_pod_affinity(s: PreFilterState, labels: Mapping[str, str]) -> bool:
    pods_exist = True
    terms = s.pod_info.required_affinity_terms
    for term in terms:
        value = labels.get(term.topology_key)
        if value is None:
            # Every topology key must be present on the node.
            return False
        if s.affinity_counts.get((term.topology_key, value), 0) <= 0:
            pods_exist = False
    if pods_exist:
        return True
    # The first pod of a group with affinity to itself: allowed when no pod matches yet and it
    # matches its own terms, so such a group is not left pending forever.
    return not s.affinity_counts and all(_term_matches(t, s.pod_info.pod, s.ns_labels) for t in terms)


def _satisfy_pod_anti_affinity(s: PreFilterState, labels: Mapping[str, str]) -> bool:
    if not s.anti_affinity_counts:
        return True
    for term in s.pod_info.required_anti_affinity_terms:
        value = labels.get(term.topology_key)
        if value is not None and s.anti_affinity_counts.get((term.topology_key, value), 0) > 0:
            return False
    return True


def _satisfy_existing_pods_anti_affinity(s: PreFilterState, labels: Mapping[str, str]) -> bool:
    counts = s.existing_anti_affinity_counts
    if not counts:
        return True
    return not any(counts.get((k, v), 0) > 0 for k, v in labels.items())
