"""PodTopologySpread with upstream's semantics.

Filter (DoNotSchedule constraints): placing the pod on a node must keep
`matching pods in the node's domain + self-match - global minimum <= maxSkew`, where the global
minimum counts only eligible domains and is 0 while fewer than `minDomains` domains exist.
Score (ScheduleAnyway constraints): fewer matching pods in a node's domains scores higher, each
constraint weighted by log(number of domains + 2).

Matching pods per node come from the snapshot's PodIndex and the eligible domains from its
per-label-key node sets, so a cycle costs O(nodes holding matching pods), not O(all pods).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from scheduler.framework.interface import MAX_NODE_SCORE, Code, Handle, NodeScore, Plugin, PreFilterResult, Status
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import NodeInfo, Obj, PodInfo
from scheduler.plugins.helper import find_untolerated_taint, node_selector_matches
from services.api.selectors import LabelSelector, Requirement
from services.client import GVR
from services.informers import Informer

NAME = "PodTopologySpread"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME

ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"

# Applied when a pod has no constraints of its own and the plugin's defaultingType is System.
SYSTEM_DEFAULT_CONSTRAINTS: tuple[dict[str, Any], ...] = (
    {"topologyKey": LABEL_HOSTNAME, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 3},
    {"topologyKey": LABEL_ZONE, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 5},
)

SERVICES = GVR("", "v1", "services")
REPLICATION_CONTROLLERS = GVR("", "v1", "replicationcontrollers")
REPLICA_SETS = GVR("apps", "v1", "replicasets")
STATEFUL_SETS = GVR("apps", "v1", "statefulsets")

_INFINITY = 2**31 - 1


@dataclass(slots=True)
class Constraint:
    """A topology spread constraint with its selector parsed (matchLabelKeys folded in)."""

    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE

    def includes_every_node(self, pod: Obj) -> bool:
        """True when no inclusion policy can exclude a node for this pod (the common case)."""
        if self.node_taints_policy == HONOR:
            return False
        if self.node_affinity_policy != HONOR:
            return True
        spec = pod.get("spec") or {}
        node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        return not spec.get("nodeSelector") and not node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")

    def includes_node(self, pod: Obj, node: Obj) -> bool:
        """Whether the node's domain counts for this pod under nodeAffinityPolicy/nodeTaintsPolicy."""
        if self.node_affinity_policy == HONOR and not required_node_affinity_matches(pod, node):
            return False
        if self.node_taints_policy == HONOR:
            taints = (node.get("spec") or {}).get("taints") or ()
            tolerations = (pod.get("spec") or {}).get("tolerations") or ()
            if find_untolerated_taint(taints, tolerations, ("NoSchedule", "NoExecute")) is not None:
                return False
        return True


def required_node_affinity_matches(pod: Obj, node: Obj) -> bool:
    """The pod's nodeSelector and required node affinity (what NodeAffinity filters on)."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    return required is None or node_selector_matches(required, node)


def parse_constraints(specs: Any, pod_labels: Mapping[str, str], action: str) -> list[Constraint]:
    """The constraints with `whenUnsatisfiable == action`, defaults applied as upstream does."""
    out = []
    for c in specs or ():
        if c.get("whenUnsatisfiable") != action:
            continue
        selector = LabelSelector.from_dict(c.get("labelSelector"))
        keys = [k for k in c.get("matchLabelKeys") or () if k in pod_labels]
        if keys and not selector.matches_nothing:
            selector = LabelSelector([*(Requirement(k, "=", (pod_labels[k],)) for k in keys),
                                      *selector.requirements])
        min_domains = c.get("minDomains")
        out.append(Constraint(
            max_skew=int(c.get("maxSkew", 1)),
            topology_key=c.get("topologyKey", ""),
            selector=selector,
            min_domains=1 if min_domains is None else int(min_domains),
            node_affinity_policy=c.get("nodeAffinityPolicy") or HONOR,
            node_taints_policy=c.get("nodeTaintsPolicy") or IGNORE,
        ))
    return out


def node_has_all_keys(labels: Mapping[str, str], constraints: list[Constraint]) -> bool:
    return all(c.topology_key in labels for c in constraints)


def matching_pods_by_node(lister: Snapshot, selector: LabelSelector, namespace: str) -> dict[str, int] | None:
    """Matching (non-terminating) pods of the namespace per node name, from the snapshot's pod index;
    None when the index cannot narrow the selector and the caller must count node by node."""
    if selector.empty or selector.matches_nothing:
        return {}
    index = lister.pod_index
    found, exact = index.candidates(namespace, selector)
    if found is None:
        return None
    if exact and not index.terminating:
        return {node: len(pods) for node, pods in found.items()}
    out = {}
    for node, pods in found.items():
        n = count_pods_match_selector(pods, selector, namespace)
        if n:
            out[node] = n
    return out


def count_pods_match_selector(pods: list[PodInfo], selector: LabelSelector, namespace: str) -> int:
    """Matching pods of the namespace on a node; terminating pods do not count (upstream #87621)."""
    if selector.empty or selector.matches_nothing:
        return 0
    n = 0
    for pi in pods:
        meta = pi.pod["metadata"]
        if meta.get("deletionTimestamp") or meta.get("namespace", "") != namespace:
            continue
        if selector.matches(meta.get("labels")):
            n += 1
    return n


class CriticalPaths:
    """The two domains with the fewest matching pods; [0] always holds the global minimum."""

    __slots__ = ("paths",)

    def __init__(self) -> None:
        self.paths: list[list[Any]] = [["", _INFINITY], ["", _INFINITY]]

    def clone(self) -> CriticalPaths:
        other = CriticalPaths.__new__(CriticalPaths)
        other.paths = [list(self.paths[0]), list(self.paths[1])]
        return other

    def update(self, value: str, num: int) -> None:
        p = self.paths
        i = 0 if value == p[0][0] else 1 if value == p[1][0] else -1
        if i >= 0:
            p[i][1] = num
            if p[0][1] > p[1][1]:
                p[0], p[1] = p[1], p[0]
        elif num < p[0][1]:
            p[1] = p[0]
            p[0] = [value, num]
        elif num < p[1][1]:
            p[1] = [value, num]

    @property
    def min_match_num(self) -> int:
        return self.paths[0][1]


class PreFilterState:
    __slots__ = ("constraints", "tp_key_to_critical_paths", "tp_key_to_domains_num", "tp_pair_to_match_num",
                 "checks")

    def __init__(self, constraints: list[Constraint]) -> None:
        self.constraints = constraints
        self.checks: list[tuple[str, set[str]]] | None = None
        self.tp_key_to_critical_paths: dict[str, CriticalPaths] = {}
        self.tp_key_to_domains_num: dict[str, int] = {}
        self.tp_pair_to_match_num: dict[tuple[str, str], int] = {}

    def clone(self) -> PreFilterState:
        other = PreFilterState(self.constraints)
        other.tp_key_to_critical_paths = {k: v.clone() for k, v in self.tp_key_to_critical_paths.items()}
        # The number of domains does not change through add_pod/remove_pod.
        other.tp_key_to_domains_num = self.tp_key_to_domains_num
        other.tp_pair_to_match_num = dict(self.tp_pair_to_match_num)
        return other

    def full_domains(self, pod: Obj) -> list[tuple[str, set[str]]] | None:
        """Per constraint, its key and the domains with no room for one more matching pod (computed once
        per state; add_pod/remove_pod reset it). None when a constraint's limit is negative."""
        if self.checks is not None:
            return self.checks
        pod_labels = (pod.get("metadata") or {}).get("labels") or {}
        checks: list[tuple[str, set[str]]] = []
        for c in self.constraints:
            limit = c.max_skew - (1 if c.selector.matches(pod_labels) else 0) + self.min_match_num(c)
            if limit < 0:
                return None
            key = c.topology_key
            checks.append((key, {v for (k, v), n in self.tp_pair_to_match_num.items() if k == key and n > limit}))
        self.checks = checks
        return checks

    def min_match_num(self, c: Constraint) -> int:
        if self.tp_key_to_domains_num.get(c.topology_key, 0) < c.min_domains:
            return 0
        return self.tp_key_to_critical_paths[c.topology_key].min_match_num


class PreScoreState:
    __slots__ = ("constraints", "ignored_nodes", "topology_value_to_pod_counts", "topology_normalizing_weight",
                 "host_counts")

    def __init__(self) -> None:
        self.constraints: list[Constraint] = []
        self.ignored_nodes: set[str] = set()
        # Per constraint on the hostname key, matching pods per node (None: count on the node itself).
        self.host_counts: list[dict[str, int] | None] = []
        self.topology_value_to_pod_counts: list[dict[str, int]] = []
        self.topology_normalizing_weight: list[float] = []

    def clone(self) -> PreScoreState:
        return self


class PodTopologySpread(Plugin):
    """Spreads matching pods evenly over topology domains (zones, nodes, ...)."""

    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        defaulting = args.get("defaultingType") or "System"
        if defaulting not in ("System", "List"):
            raise ValueError(f'defaultingType: Unsupported value: "{defaulting}": supported values: "List", "System"')
        configured = list(args.get("defaultConstraints") or ())
        if defaulting == "System" and configured:
            raise ValueError("defaultConstraints: Invalid value: when .defaultingType is \"System\", "
                             "defaultConstraints must be empty")
        for c in configured:
            if c.get("labelSelector") is not None:
                raise ValueError("defaultConstraints[].labelSelector: Forbidden: constraint must not define a "
                                 "selector, as they deduced for each pod")
        self.system_defaulted = defaulting == "System"
        self.default_constraints: list[dict[str, Any]] = (
            list(SYSTEM_DEFAULT_CONSTRAINTS) if self.system_defaulted else configured)
        self._parsed_defaults: dict[str, list[Constraint]] = {}
        self._services: Informer | None = None
        self._rcs: Informer | None = None
        self._rss: Informer | None = None
        self._sss: Informer | None = None
        if self.default_constraints:
            factory = handle.informer_factory
            self._services = factory.informer_for(SERVICES)
            self._rcs = factory.informer_for(REPLICATION_CONTROLLERS)
            self._rss = factory.informer_for(REPLICA_SETS)
            self._sss = factory.informer_for(STATEFUL_SETS)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(
                EventResource.POD, ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE)),
            ClusterEventWithHint(ClusterEvent(
                EventResource.NODE,
                ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT)),
        ]

    # -- constraints -----------------------------------------------------------------------------------

    def _constraints(self, pod: Obj, action: str) -> list[Constraint]:
        spec = pod.get("spec") or {}
        labels = (pod.get("metadata") or {}).get("labels") or {}
        own = spec.get("topologySpreadConstraints")
        if own:
            return parse_constraints(own, labels, action)
        return self._default_constraints(pod, action)

    def _default_constraints(self, pod: Obj, action: str) -> list[Constraint]:
        # The defaults are parsed once per action; each pod gets copies carrying its own selector.
        parsed = self._parsed_defaults.get(action)
        if parsed is None:
            parsed = self._parsed_defaults[action] = parse_constraints(
                [{**c, "labelSelector": {}} for c in self.default_constraints], {}, action)
        if not parsed:
            return []
        selector = self.default_selector(pod)
        if selector.empty:
            return []
        return [dataclasses.replace(c, selector=selector) for c in parsed]

    def default_selector(self, pod: Obj) -> LabelSelector:
        """The union of the selectors of the Services, RC, ReplicaSet or StatefulSet that own the pod."""
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace", "")
        labels = meta.get("labels") or {}
        label_set: dict[str, str] = {}
        if self._services is not None:
            for svc in self._services.list(ns):
                sel = (svc.get("spec") or {}).get("selector")
                if sel is None or not LabelSelector.from_set(sel).matches(labels):
                    continue
                label_set.update(sel)
        requirements = [Requirement(k, "=", (v,)) for k, v in label_set.items()]
        owner = next((r for r in meta.get("ownerReferences") or () if r.get("controller")), None)
        if owner is not None:
            api_version, kind, name = owner.get("apiVersion", ""), owner.get("kind", ""), owner.get("name", "")
            if (api_version, kind) == ("v1", "ReplicationController") and self._rcs is not None:
                rc = self._rcs.get(name, ns)
                if rc is not None:
                    label_set.update((rc.get("spec") or {}).get("selector") or {})
                    requirements = [Requirement(k, "=", (v,)) for k, v in label_set.items()]
            elif (api_version, kind) in (("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet")):
                informer = self._rss if kind == "ReplicaSet" else self._sss
                owner_obj = informer.get(name, ns) if informer is not None else None
                if owner_obj is not None:
                    try:
                        other = LabelSelector.from_dict((owner_obj.get("spec") or {}).get("selector"))
                    except ValueError:
                        other = LabelSelector()
                    if not other.matches_nothing:
                        requirements += list(other.requirements)
        return LabelSelector(requirements)

    # -- filtering -------------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Obj,
                   nodes: list[NodeInfo]) -> tuple[PreFilterResult | None, Status | None]:
        try:
            constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        except ValueError as e:
            return None, Status.error(f"obtaining pod's hard topology spread constraints: {e}")
        if not constraints:
            return None, Status(Code.SKIP)
        s = PreFilterState(constraints)
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        lister = self.handle.snapshot_shared_lister()
        eligible = lister.nodes_with_keys(tuple(sorted({c.topology_key for c in constraints})))
        pairs = s.tp_pair_to_match_num
        for c in constraints:
            key = c.topology_key
            if c.includes_every_node(pod):
                included: dict[str, NodeInfo] = eligible
                for value in lister.domains(eligible, key):
                    pairs.setdefault((key, value), 0)
            else:
                included = {name: ni for name, ni in eligible.items() if c.includes_node(pod, ni.node or {})}
                for ni in included.values():
                    pairs.setdefault((key, ni.labels[key]), 0)
            by_node = matching_pods_by_node(lister, c.selector, namespace)
            if by_node is None:
                for ni in included.values():
                    pairs[(key, ni.labels[key])] += count_pods_match_selector(ni.pods, c.selector, namespace)
                continue
            for name, n in by_node.items():
                ni = included.get(name)
                if ni is not None:
                    pairs[(key, ni.labels[key])] += n
        for key, _ in pairs:
            s.tp_key_to_domains_num[key] = s.tp_key_to_domains_num.get(key, 0) + 1
        for c in constraints:
            s.tp_key_to_critical_paths[c.topology_key] = CriticalPaths()
        for (key, value), num in pairs.items():
            s.tp_key_to_critical_paths[key].update(value, num)
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, None

    def pre_filter_extensions(self) -> Plugin | None:
        return self

    def _update_with_pod(self, state: CycleState, updated: Obj, preemptor: Obj, node_info: NodeInfo,
                         delta: int) -> None:
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        node = node_info.node
        if s is None or node is None:
            return
        if updated["metadata"].get("namespace", "") != preemptor["metadata"].get("namespace", ""):
            return
        labels = node_info.labels
        if not node_has_all_keys(labels, s.constraints):
            return
        pod_labels = updated["metadata"].get("labels") or {}
        for c in s.constraints:
            if not c.selector.matches(pod_labels) or not c.includes_node(preemptor, node):
                continue
            pair = (c.topology_key, labels[c.topology_key])
            s.tp_pair_to_match_num[pair] = s.tp_pair_to_match_num.get(pair, 0) + delta
            s.tp_key_to_critical_paths[c.topology_key].update(pair[1], s.tp_pair_to_match_num[pair])
            s.checks = None

    def add_pod(self, state: CycleState, pod_to_schedule: Obj, pod_info_to_add: PodInfo,
                node_info: NodeInfo) -> Status | None:
        self._update_with_pod(state, pod_info_to_add.pod, pod_to_schedule, node_info, 1)
        return None

    def remove_pod(self, state: CycleState, pod_to_schedule: Obj, pod_info_to_remove: PodInfo,
                   node_info: NodeInfo) -> Status | None:
        self._update_with_pod(state, pod_info_to_remove.pod, pod_to_schedule, node_info, -1)
        return None

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        if node_info.node is None:
            return Status.error("node not found")
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        labels = node_info.labels
        pod_labels = (pod.get("metadata") or {}).get("labels") or {}
        for c in s.constraints:
            value = labels.get(c.topology_key)
            if value is None:
                return Status.unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)
            self_match = 1 if c.selector.matches(pod_labels) else 0
            match_num = s.tp_pair_to_match_num.get((c.topology_key, value), 0)
            if match_num + self_match - s.min_match_num(c) > c.max_skew:
                return Status.unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
        return None

    def filter_nodes(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> list[Status | None] | None:
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None or any(ni.node is None for ni in nodes):
            return super().filter_nodes(state, pod, nodes)
        checks = s.full_domains(pod)
        if checks is None:
            return super().filter_nodes(state, pod, nodes)
        out: list[Status | None] | None = None
        missing = Status.unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)
        skewed = Status.unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
        for key, full in checks:
            # Nodes without the key, or in a domain already too full for one more matching pod.
            bad = [i for i, ni in enumerate(nodes) if (v := ni.labels.get(key)) is None or v in full]
            if not bad:
                continue
            if out is None:
                out = [None] * len(nodes)
            for i in bad:
                if out[i] is None:
                    out[i] = missing if key not in nodes[i].labels else skewed
        return out

    # -- scoring ---------------------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> Status | None:
        all_nodes = self.handle.snapshot_shared_lister().list()
        if not all_nodes:
            return Status(Code.SKIP)
        try:
            constraints = self._constraints(pod, SCHEDULE_ANYWAY)
        except ValueError as e:
            return Status.error(f"obtaining pod's soft topology spread constraints: {e}")
        if not constraints:
            return Status(Code.SKIP)
        # Only pods' own constraints demand every topology label: with system defaults, nodes
        # without a zone label still get hostname spreading.
        require_all = bool((pod.get("spec") or {}).get("topologySpreadConstraints")) or not self.system_defaulted
        s = PreScoreState()
        s.constraints = constraints
        s.topology_value_to_pod_counts = [{} for _ in constraints]
        for ni in nodes:
            labels = ni.labels
            if require_all and not node_has_all_keys(labels, constraints):
                s.ignored_nodes.add(ni.name)
                continue
            for i, c in enumerate(constraints):
                if c.topology_key == LABEL_HOSTNAME:
                    continue
                value = labels.get(c.topology_key, "")
                s.topology_value_to_pod_counts[i].setdefault(value, 0)
        for i, c in enumerate(constraints):
            size = len(s.topology_value_to_pod_counts[i])
            if c.topology_key == LABEL_HOSTNAME:
                size = len(nodes) - len(s.ignored_nodes)
            s.topology_normalizing_weight.append(math.log(size + 2))
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        lister = self.handle.snapshot_shared_lister()
        for i, c in enumerate(constraints):
            by_node = matching_pods_by_node(lister, c.selector, namespace)
            if c.topology_key == LABEL_HOSTNAME:
                s.host_counts.append(by_node)
                continue
            s.host_counts.append(None)
            counts = s.topology_value_to_pod_counts[i]
            if by_node is None:
                candidates = [(ni, count_pods_match_selector(ni.pods, c.selector, namespace)) for ni in all_nodes]
            else:
                infos = lister.node_info_map
                candidates = [(infos[name], n) for name, n in by_node.items() if name in infos]
            every = c.includes_every_node(pod)
            for ni, n in candidates:
                node = ni.node
                if node is None or not n:
                    continue
                labels = ni.labels
                if require_all and not node_has_all_keys(labels, constraints):
                    continue
                value = labels.get(c.topology_key, "")
                if value in counts and (every or c.includes_node(pod, node)):
                    counts[value] += n
        state.write(PRE_SCORE_STATE_KEY, s)
        return None

    def score(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> tuple[int, Status | None]:
        s: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if s is None:
            return 0, Status.error(f'error reading "{PRE_SCORE_STATE_KEY}" from cycleState: not found')
        return _score(s, pod, node_info), None

    def score_nodes(self, state: CycleState, pod: Obj,
                    nodes: list[NodeInfo]) -> tuple[list[int], Status | None]:
        s: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if s is None:
            return [], Status.error(f'error reading "{PRE_SCORE_STATE_KEY}" from cycleState: not found')
        return [_score(s, pod, ni) for ni in nodes], None

    def normalize_score(self, state: CycleState, pod: Obj, scores: list[NodeScore]) -> Status | None:
        s: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if s is None:
            return None
        valid = [ns for ns in scores if ns.name not in s.ignored_nodes]
        lo = min((ns.score for ns in valid), default=0)
        hi = max((ns.score for ns in valid), default=0)
        hi = max(hi, 0)
        for ns in scores:
            if ns.name in s.ignored_nodes:
                ns.score = 0
            elif hi == 0:
                ns.score = MAX_NODE_SCORE
            else:
                ns.score = MAX_NODE_SCORE * (hi + lo - ns.score) // hi
        return None

    def normalize_values(self, state: CycleState, pod: Obj, nodes: list[NodeInfo],
                         values: list[int]) -> tuple[list[int], Status | None]:
        s: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if s is None:
            return values, None
        ignored = s.ignored_nodes
        valid = [v for ni, v in zip(nodes, values, strict=True) if ni.name not in ignored] if ignored else values
        lo = min(valid, default=0)
        hi = max(max(valid, default=0), 0)
        if hi == 0:
            return [0 if ignored and ni.name in ignored else MAX_NODE_SCORE for ni in nodes], None
        return [0 if ignored and ni.name in ignored else MAX_NODE_SCORE * (hi + lo - v) // hi
                for ni, v in zip(nodes, values, strict=True)], None


def _score(s: PreScoreState, pod: Obj, node_info: NodeInfo) -> int:
    if node_info.name in s.ignored_nodes:
        return 0
    labels = node_info.labels
    total = 0.0
    for i, c in enumerate(s.constraints):
        value = labels.get(c.topology_key)
        if value is None:
            continue
        if c.topology_key == LABEL_HOSTNAME:
            by_node = s.host_counts[i]
            if by_node is None:
                namespace = (pod.get("metadata") or {}).get("namespace", "")
                cnt = count_pods_match_selector(node_info.pods, c.selector, namespace)
            else:
                cnt = by_node.get(node_info.name, 0)
        else:
            cnt = s.topology_value_to_pod_counts[i].get(value, 0)
        total += cnt * s.topology_normalizing_weight[i] + (c.max_skew - 1)
    return _round_half_up(total)


def _round_half_up(x: float) -> int:
    """Go's math.Round for the non-negative scores here (Python's round() would go to even)."""
    return int(math.floor(x + 0.5))
