"""InterPodAffinity with upstream's semantics.

Filtering counts, per topology pair (key, value), the existing pods that match the incoming pod's
required terms and the existing pods whose required anti-affinity terms match the incoming pod; a
node then passes or fails by looking up its own label values. Scoring sums term weights per
topology pair the same way and normalizes the per-node sums to 0..100.

The counts come from the snapshot's PodIndex: existing pods' terms are grouped by signature with
their counts per topology pair (one match test per distinct term, not per pod), and the incoming
pod's terms find their pods through the label index; only selectors without a single-value
requirement fall back to scanning every pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from scheduler.framework.interface import MAX_NODE_SCORE, Code, Handle, NodeScore, Plugin, PreFilterResult, Status
from scheduler.framework.podindex import TermCounts, TermKey
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import AffinityTerm, NodeInfo, Obj, PodInfo, WeightedAffinityTerm

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
        index = lister.pod_index
        pod_info = PodInfo(pod)
        if not pod_info.required_affinity_terms and not pod_info.required_anti_affinity_terms \
                and not index.required_anti_affinity:
            return None, Status(Code.SKIP)
        s = PreFilterState(pod_info, self._ns_labels())
        # Existing pods' anti-affinity terms, grouped by signature: one match test per distinct term.
        counts = s.existing_anti_affinity_counts
        for tc in index.required_anti_affinity.values():
            if tc.term.matches(pod, s.pod_ns_labels):
                for pair, n in tc.pairs.items():
                    _add(counts, pair, n)
        affinity_terms = pod_info.required_affinity_terms
        anti_terms = pod_info.required_anti_affinity_terms
        if affinity_terms and not self._count_affinity(lister, s, affinity_terms):
            self._scan(lister, s, affinity_terms, [])
        for t in anti_terms:
            if not self._count_anti_affinity(lister, s, t):
                self._scan(lister, s, [], [t])
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, None

    @staticmethod
    def _count_affinity(lister: Snapshot, s: PreFilterState, terms: list[AffinityTerm]) -> bool:
        """Count pods matching every term from the index; False when the index cannot narrow."""
        found = _candidates_by_node(lister, terms[0], s.ns_labels)
        if found is None:
            return False
        counts = s.affinity_counts
        for ni, pods, exact in found:
            labels = ni.labels
            if exact and len(terms) == 1:
                value = labels.get(terms[0].topology_key)
                if value is not None:
                    _add(counts, (terms[0].topology_key, value), len(pods))
                continue
            for existing in pods:
                _update_with_affinity_terms(counts, existing.pod, labels, terms, s.ns_labels, 1)
        return True

    @staticmethod
    def _count_anti_affinity(lister: Snapshot, s: PreFilterState, term: AffinityTerm) -> bool:
        found = _candidates_by_node(lister, term, s.ns_labels)
        if found is None:
            return False
        counts = s.anti_affinity_counts
        key = term.topology_key
        for ni, pods, exact in found:
            value = ni.labels.get(key)
            if value is None:
                continue
            n = len(pods) if exact else sum(
                1 for p in pods if term.matches(p.pod, s.ns_labels(_namespace(p.pod))))
            if n:
                _add(counts, (key, value), n)
        return True

    @staticmethod
    def _scan(lister: Snapshot, s: PreFilterState, affinity_terms: list[AffinityTerm],
              anti_terms: list[AffinityTerm]) -> None:
        """Every pod on every node: for selectors the index cannot narrow (no single-value requirement)."""
        for ni in lister.list():
            labels = ni.labels
            for existing in ni.pods:
                target = existing.pod
                if affinity_terms:
                    _update_with_affinity_terms(s.affinity_counts, target, labels, affinity_terms, s.ns_labels, 1)
                if anti_terms:
                    _update_with_anti_affinity_terms(s.anti_affinity_counts, target,
                                                     s.ns_labels(_namespace(target)), labels, anti_terms, 1)

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

    def filter_nodes(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> list[Status | None] | None:
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None or [1 for ni in nodes if ni.node is None]:
            return super().filter_nodes(state, pod, nodes)
        out: list[Status | None] | None = None
        if s.pod_info.required_affinity_terms:
            failed = Status.unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH)
            bad = [i for i, ni in enumerate(nodes) if not _satisfy_pod_affinity(s, ni.labels)]
            if bad:
                out = [None] * len(nodes)
                for i in bad:
                    out[i] = failed
        # The anti-affinity rules reject nodes by their value of a topology key: list those values once.
        checks: list[tuple[dict[str, set[str]], Status]] = []
        if s.anti_affinity_counts:
            keys = {t.topology_key for t in s.pod_info.required_anti_affinity_terms}
            checks.append((_positive_values(s.anti_affinity_counts, keys),
                           Status.unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)))
        if s.existing_anti_affinity_counts:
            checks.append((_positive_values(s.existing_anti_affinity_counts, None),
                           Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)))
        for values_by_key, failed in checks:
            for key, values in values_by_key.items():
                bad = [i for i, ni in enumerate(nodes) if ni.labels.get(key) in values]
                if not bad:
                    continue
                if out is None:
                    out = [None] * len(nodes)
                for i in bad:
                    if out[i] is None:
                        out[i] = failed
        return out

    # -- scoring ---------------------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> Status | None:
        if not nodes:
            return Status(Code.SKIP)
        pod_info = PodInfo(pod)
        has_constraints = bool(pod_info.preferred_affinity_terms or pod_info.preferred_anti_affinity_terms)
        if self.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return Status(Code.SKIP)
        lister = self.handle.snapshot_shared_lister()
        index = lister.pod_index
        if not has_constraints and not (self.hard_pod_affinity_weight > 0 and index.required_affinity) and (
                self.ignore_preferred_terms_of_existing_pods
                or not (index.preferred_affinity or index.preferred_anti_affinity)):
            # No term on either side: nothing would be scored.
            return Status(Code.SKIP)
        ns_labels = self._ns_labels()
        pod_ns_labels = ns_labels(_namespace(pod))
        s = PreScoreState()
        for wt in pod_info.preferred_affinity_terms:
            _score_incoming_term(lister, s, wt, 1, ns_labels)
        for wt in pod_info.preferred_anti_affinity_terms:
            _score_incoming_term(lister, s, wt, -1, ns_labels)
        # Existing pods' terms, grouped by signature (and weight) with their counts per topology pair.
        tables: list[tuple[dict[TermKey, TermCounts], int, int]] = []
        if self.hard_pod_affinity_weight > 0:
            tables.append((index.required_affinity, self.hard_pod_affinity_weight, 1))
        if not self.ignore_preferred_terms_of_existing_pods:
            tables.append((index.preferred_affinity, 0, 1))
            tables.append((index.preferred_anti_affinity, 0, -1))
        for table, fixed_weight, multiplier in tables:
            for tc in table.values():
                if not tc.term.matches(pod, pod_ns_labels):
                    continue
                weight = (fixed_weight or tc.weight) * multiplier
                for (key, value), n in tc.pairs.items():
                    scores = s.topology_score.setdefault(key, {})
                    scores[value] = scores.get(value, 0) + weight * n
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

    def normalize_values(self, state: CycleState, pod: Obj, nodes: list[NodeInfo],
                         values: list[int]) -> tuple[list[int], Status | None]:
        s: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if s is None or not s.topology_score or not values:
            return values, None
        lo = min(values)
        diff = max(values) - lo
        if diff <= 0:
            return [0] * len(values), None
        return [int(MAX_NODE_SCORE * (v - lo) / diff) for v in values], None


def _term_namespaces(term: AffinityTerm, lister: Snapshot, ns_labels: _NsLabelCache) -> list[str]:
    """Namespaces holding pods that `term` covers (its list, or those its namespaceSelector picks)."""
    if term.namespace_selector.matches_nothing:
        return list(term.namespaces)
    return [ns for ns in lister.pod_index.namespace_names()
            if ns in term.namespaces or term.namespace_selector.matches(ns_labels(ns) or {})]


def _candidates_by_node(lister: Snapshot, term: AffinityTerm,
                        ns_labels: _NsLabelCache) -> list[tuple[NodeInfo, list[PodInfo], bool]] | None:
    """Per node, the pods that may match `term` and whether all of them surely do; None if the index
    cannot narrow the term's selector."""
    out = []
    infos = lister.node_info_map
    for ns in _term_namespaces(term, lister, ns_labels):
        found, exact = lister.pod_index.candidates(ns, term.selector)
        if found is None:
            return None
        for node, pods in found.items():
            ni = infos.get(node)
            if ni is not None and pods:
                out.append((ni, pods, exact))
    return out


def _score_incoming_term(lister: Snapshot, s: PreScoreState, wt: WeightedAffinityTerm, multiplier: int,
                         ns_labels: _NsLabelCache) -> None:
    """Add the incoming pod's preferred term's weight for every existing pod it matches."""
    term = wt.term
    found = _candidates_by_node(lister, term, ns_labels)
    if found is None:
        for ni in lister.list():
            labels = ni.labels
            if labels:
                for existing in ni.pods:
                    target = existing.pod
                    s.process_term(term, wt.weight, target, ns_labels(_namespace(target)), labels, multiplier)
        return
    key = term.topology_key
    for ni, pods, exact in found:
        value = ni.labels.get(key)
        if value is None:
            continue
        n = len(pods) if exact else sum(1 for p in pods if term.matches(p.pod, ns_labels(_namespace(p.pod))))
        if n:
            scores = s.topology_score.setdefault(key, {})
            scores[value] = scores.get(value, 0) + wt.weight * multiplier * n


def _positive_values(counts: dict[TopologyPair, int], keys: set[str] | None) -> dict[str, set[str]]:
    """The topology values with a positive count, by key (only `keys` unless None)."""
    out: dict[str, set[str]] = {}
    for (k, v), n in counts.items():
        if n > 0 and (keys is None or k in keys):
            out.setdefault(k, set()).add(v)
    return out


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
