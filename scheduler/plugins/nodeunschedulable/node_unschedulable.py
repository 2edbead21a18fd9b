"""NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take only pods tolerating the cordon taint."""

from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from scheduler.framework.interface import Plugin, Status
from scheduler.framework.types import NodeInfo, Obj
from scheduler.plugins.helper import tolerations_tolerate

ERR_REASON_UNKNOWN_CONDITION = "node(s) had unknown conditions"
ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
_CORDON_TAINT = {"key": TAINT_NODE_UNSCHEDULABLE, "effect": "NoSchedule"}


class NodeUnschedulable(Plugin):
    name = "NodeUnschedulable"

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        node = node_info.node
        if node is None:
            return Status.unresolvable(ERR_REASON_UNKNOWN_CONDITION)
        if not (node.get("spec") or {}).get("unschedulable"):
            return None
        if tolerations_tolerate((pod.get("spec") or {}).get("tolerations") or [], _CORDON_TAINT):
            return None
        return Status.unresolvable(ERR_REASON_UNSCHEDULABLE)

    def filter_nodes(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> list[Status | None] | None:
        # The snapshot lists only nodes with a Node object, so none is rejected when none is unschedulable.
        if not self.handle.snapshot_shared_lister().traits().unschedulable:
            return None
        if not [1 for ni in nodes if ni.unschedulable or ni.node is None]:
            return None
        f = self.filter
        return [f(state, pod, ni) if ni.unschedulable or ni.node is None else None for ni in nodes]

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                                 self._node_hint),
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATIONS), self._pod_hint),
        ]

    @staticmethod
    def _node_hint(pod: Obj, old: Obj | None, new: Obj | None) -> QueueingHint:
        if new is None or (new.get("spec") or {}).get("unschedulable"):
            return QueueingHint.QUEUE_SKIP
        if old is not None and not (old.get("spec") or {}).get("unschedulable"):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    @staticmethod
    def _pod_hint(pod: Obj, old: Obj | None, new: Obj | None) -> QueueingHint:
        if new is None or new["metadata"].get("uid") != pod["metadata"].get("uid"):
            return QueueingHint.QUEUE_SKIP
        tols = (new.get("spec") or {}).get("tolerations") or []
        return QueueingHint.QUEUE if tolerations_tolerate(tols, _CORDON_TAINT) else QueueingHint.QUEUE_SKIP
