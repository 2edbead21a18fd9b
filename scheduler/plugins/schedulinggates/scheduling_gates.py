"""SchedulingGates: a pod with `spec.schedulingGates` waits outside activeQ until they are all removed."""

from __future__ import annotations

from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from scheduler.framework.interface import Plugin, Status
from scheduler.framework.types import Obj


class SchedulingGates(Plugin):
    name = "SchedulingGates"

    def pre_enqueue(self, pod: Obj) -> Status | None:
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        if not gates:
            return None
        names = " ".join(g.get("name", "") for g in gates)
        return Status.unresolvable(f"waiting for scheduling gates: [{names}]")

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(
            ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED), self._hint)]

    @staticmethod
    def _hint(pod: Obj, old: Obj | None, new: Obj | None) -> QueueingHint:
        """Only the gated pod itself losing its gates can help it."""
        if new is None or new["metadata"].get("uid") != pod["metadata"].get("uid"):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE_SKIP if (new.get("spec") or {}).get("schedulingGates") else QueueingHint.QUEUE
