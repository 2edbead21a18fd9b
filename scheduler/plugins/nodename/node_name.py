"""NodeName: a pod that names its node (`spec.nodeName`) fits only that node."""

from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from scheduler.framework.interface import Plugin, Status
from scheduler.framework.types import NodeInfo, Obj

ERR_REASON = "node(s) didn't match the requested node name"


def fits(pod: Obj, node_info: NodeInfo) -> bool:
    wanted = (pod.get("spec") or {}).get("nodeName")
    return not wanted or wanted == node_info.name


class NodeName(Plugin):
    name = "NodeName"

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        if fits(pod, node_info):
            return None
        return Status.unresolvable(ERR_REASON)

    def filter_nodes(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> list[Status | None]:
        if not (pod.get("spec") or {}).get("nodeName"):
            return [None] * len(nodes)
        return super().filter_nodes(state, pod, nodes)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD))]
