"""PV protection controller (upstream `pv-protection`): a volume being deleted keeps its
`kubernetes.io/pv-protection` finalizer while it is Bound to a claim. The apiserver's admission adds
the finalizer on create; this controller adds it to older volumes and removes it once the volume is
no longer Bound.
"""

from __future__ import annotations

from typing import Any

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from controller_manager.protectionutil import is_deletion_candidate, needs_finalizer
from controller_manager.resources import PVS

NAME = "pv-protection"
FINALIZER = "kubernetes.io/pv-protection"


Obj = dict[str, Any]


def new(ctx: ControllerContext) -> PVProtectionController:
    return PVProtectionController(ctx)


def is_in_use(volume: Obj) -> bool:
    return (volume.get("status") or {}).get("phase") == "Bound"


class PVProtectionController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.volumes = ctx.informer(PVS)
        super().__init__(NAME, [self.volumes], 1)
        self.volumes.add_event_handler(self._changed, lambda old, new: self._changed(new), None)

    def _changed(self, volume: Obj) -> None:
        if needs_finalizer(volume, FINALIZER) or is_deletion_candidate(volume, FINALIZER):
            self.enqueue(volume)

    async def sync(self, key: str) -> None:
        volume = self.volumes.get(key)
        if volume is None:
            return
        meta = volume["metadata"]
        finalizers = [f for f in meta.get("finalizers") or () if f != FINALIZER]
        if is_deletion_candidate(volume, FINALIZER):
            if is_in_use(volume):
                self.log.info("keeping volume because it is bound", volume=key)
                return
        elif needs_finalizer(volume, FINALIZER):
            finalizers.append(FINALIZER)
        else:
            return
        await self.client.replace(PVS, {**volume, "metadata": {**meta, "finalizers": finalizers}})
        self.log.info("updated protection finalizer", volume=key, present=FINALIZER in finalizers)
