"""TaintToleration: NoSchedule/NoExecute taints filter; PreferNoSchedule taints lower the score."""

from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from scheduler.framework.interface import MAX_NODE_SCORE, NodeScore, Plugin, Status
from scheduler.framework.types import NodeInfo, Obj
from scheduler.plugins.helper import (
    default_normalize_score,
    default_normalize_values,
    find_untolerated_taint,
    tolerations_tolerate,
)

_PRE_SCORE_KEY = "PreScoreTaintToleration"
_FILTER_EFFECTS = ("NoSchedule", "NoExecute")


def _taints(node: Obj | None) -> list[Obj]:
    return ((node or {}).get("spec") or {}).get("taints") or []


class TaintToleration(Plugin):
    name = "TaintToleration"

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        taints = node_info.taints
        if not taints:
            return None
        taint = find_untolerated_taint(taints, (pod.get("spec") or {}).get("tolerations") or [], _FILTER_EFFECTS)
        if taint is None:
            return None
        return Status.unresolvable(
            f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}")

    def filter_nodes(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> list[Status | None] | None:
        if not self.handle.snapshot_shared_lister().traits().taints or not [1 for ni in nodes if ni.taints]:
            return None
        f = self.filter
        return [f(state, pod, ni) if ni.taints else None for ni in nodes]

    def pre_score(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> Status | None:
        tolerations = [t for t in (pod.get("spec") or {}).get("tolerations") or ()
                       if not t.get("effect") or t.get("effect") == "PreferNoSchedule"]
        state.write(_PRE_SCORE_KEY, tolerations)
        return None

    def score(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> tuple[int, Status | None]:
        tolerations = state.read(_PRE_SCORE_KEY)
        count = sum(1 for t in node_info.taints
                    if t.get("effect") == "PreferNoSchedule" and not tolerations_tolerate(tolerations, t))
        return count, None

    def score_nodes(self, state: CycleState, pod: Obj,
                    nodes: list[NodeInfo]) -> tuple[list[int], Status | None]:
        if not self.handle.snapshot_shared_lister().traits().taints or not [1 for ni in nodes if ni.taints]:
            return [0] * len(nodes), None
        tolerations = state.read(_PRE_SCORE_KEY)
        return [sum(1 for t in ni.taints
                    if t.get("effect") == "PreferNoSchedule" and not tolerations_tolerate(tolerations, t))
                if ni.taints else 0 for ni in nodes], None

    def normalize_score(self, state: CycleState, pod: Obj, scores: list[NodeScore]) -> Status | None:
        default_normalize_score(MAX_NODE_SCORE, True, scores)
        return None

    def normalize_values(self, state: CycleState, pod: Obj, nodes: list[NodeInfo],
                         values: list[int]) -> tuple[list[int], Status | None]:
        return default_normalize_values(MAX_NODE_SCORE, True, values), None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                                 self._node_hint),
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATIONS), self._pod_hint),
        ]

    @staticmethod
    def _node_hint(pod: Obj, old: Obj | None, new: Obj | None) -> QueueingHint:
        """Queue when the node now admits the pod and did not before (or is new)."""
        if new is None:
            return QueueingHint.QUEUE_SKIP
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        if find_untolerated_taint(_taints(new), tolerations, _FILTER_EFFECTS) is not None:
            return QueueingHint.QUEUE_SKIP
        if old is not None and find_untolerated_taint(_taints(old), tolerations, _FILTER_EFFECTS) is None:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    @staticmethod
    def _pod_hint(pod: Obj, old: Obj | None, new: Obj | None) -> QueueingHint:
        if new is None or new["metadata"].get("uid") != pod["metadata"].get("uid"):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE
