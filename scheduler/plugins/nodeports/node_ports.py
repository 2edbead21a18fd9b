"""NodePorts: a pod's host ports must be free on the node (0.0.0.0 conflicts with every address)."""

from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from scheduler.framework.interface import Code, Plugin, PreFilterResult, Status
from scheduler.framework.types import NodeInfo, Obj, pod_host_ports

ERR_REASON = "node(s) didn't have free ports for the requested pod ports"
_PRE_FILTER_KEY = "PreFilterNodePorts"


def fits_ports(wanted: list[tuple[str, str, int]], node_info: NodeInfo) -> bool:
    return not any(node_info.used_ports.check_conflict(ip, proto, port) for ip, proto, port in wanted)


class NodePorts(Plugin):
    name = "NodePorts"

    def pre_filter(self, state: CycleState, pod: Obj,
                   nodes: list[NodeInfo]) -> tuple[PreFilterResult | None, Status | None]:
        wanted = pod_host_ports(pod)
        if not wanted:
            return None, Status(Code.SKIP)
        state.write(_PRE_FILTER_KEY, wanted)
        return None, None

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        wanted = state.get(_PRE_FILTER_KEY)
        if wanted is None:
            wanted = pod_host_ports(pod)
        if fits_ports(wanted, node_info):
            return None
        return Status.unschedulable(ERR_REASON)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), self._pod_hint),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
        ]

    @staticmethod
    def _pod_hint(pod: Obj, old: Obj | None, new: Obj | None) -> QueueingHint:
        """A deleted pod helps only if it held a host port this pod wants."""
        if old is None:
            return QueueingHint.QUEUE_SKIP
        freed = {(proto, port) for _, proto, port in pod_host_ports(old)}
        wanted = {(proto, port) for _, proto, port in pod_host_ports(pod)}
        return QueueingHint.QUEUE if freed & wanted else QueueingHint.QUEUE_SKIP
