"""DefaultBinder: bind through the pods/binding subresource (409 if someone bound the pod first)."""

from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import Plugin, Status
from scheduler.framework.types import Obj
from services.client import ApiError, gvr

PODS = gvr("v1", "pods")


class DefaultBinder(Plugin):
    name = "DefaultBinder"

    async def bind(self, state: CycleState, pod: Obj, node_name: str) -> Status | None:
        meta = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace"), "uid": meta.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        try:
            await self.handle.client.create(PODS, binding, meta.get("namespace"), name=meta["name"],
                                            subresource="binding")
        except ApiError as e:
            return Status.error(e)
        return None
