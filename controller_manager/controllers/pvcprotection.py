"""PVC protection controller (upstream `pvc-protection`): a claim being deleted keeps its
`kubernetes.io/pvc-protection` finalizer while a pod still uses it, so the volume under a running
pod is never released. The apiserver's admission adds the finalizer on create; this controller
adds it to older claims and removes it once no scheduled pod that is still running uses the claim.
"""

from __future__ import annotations

from typing import Any

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from controller_manager.podutil import is_terminal
from controller_manager.protectionutil import is_deletion_candidate, needs_finalizer
from controller_manager.resources import PODS, PVCS

NAME = "pvc-protection"
FINALIZER = "kubernetes.io/pvc-protection"

Obj = dict[str, Any]


def new(ctx: ControllerContext) -> PVCProtectionController:
    return PVCProtectionController(ctx)


def pod_is_shut_down(pod: Obj) -> bool:
    """The kubelet is done with the pod (it asked for deletion with grace 0) or it was
    force-deleted: it only waits for garbage collection, which must not wait for the claim."""
    meta = pod["metadata"]
    return bool(meta.get("deletionTimestamp")) and meta.get("deletionGracePeriodSeconds") == 0


def claim_names(pod: Obj) -> list[str]:
    """The claims a pod's volumes name, directly or as generic ephemeral volumes (`<pod>-<volume>`)."""
    out = []
    pod_name = pod["metadata"].get("name", "")
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        if volume.get("persistentVolumeClaim") is not None:
            out.append(volume["persistentVolumeClaim"].get("claimName") or "")
        elif volume.get("ephemeral") is not None:
            out.append(f"{pod_name}-{volume.get('name', '')}")
    return out


def pod_uses_claim(pod: Obj, claim: Obj) -> bool:
    """Only scheduled pods count: the kubelet refuses to start a pod whose claim is being deleted.
    A pod that has terminated (Succeeded/Failed) or is shut down holds the volume no more."""
    if not (pod.get("spec") or {}).get("nodeName") or is_terminal(pod) or pod_is_shut_down(pod):
        return False
    name = claim["metadata"]["name"]
    pod_meta = pod["metadata"]
    owned = any(ref.get("controller") and ref.get("uid") == pod_meta.get("uid")
                for ref in claim["metadata"].get("ownerReferences") or ())
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        direct = volume.get("persistentVolumeClaim")
        if direct is not None and direct.get("claimName") == name:
            return True
        # An ephemeral volume's claim counts only if it was made for this pod.
        ephemeral_name = f"{pod_meta.get('name', '')}-{volume.get('name', '')}"
        if volume.get("ephemeral") is not None and owned and ephemeral_name == name:
            return True
    return False


class PVCProtectionController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.claims = ctx.informer(PVCS)
        self.pods = ctx.informer(PODS)
        super().__init__(NAME, [self.claims, self.pods], 1)
        self.claims.add_event_handler(self._claim_changed, lambda old, new: self._claim_changed(new), None)
        self.pods.add_event_handler(
            lambda pod: self._pod_changed(pod, False), self._pod_updated, lambda pod: self._pod_changed(pod, True)
        )

    def _claim_changed(self, claim: Obj) -> None:
        if needs_finalizer(claim, FINALIZER) or is_deletion_candidate(claim, FINALIZER):
            self.enqueue(claim)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self._pod_changed(new, False)
        # An update may hide the deletion of one pod and the creation of another under its name.
        if old["metadata"].get("uid") != new["metadata"].get("uid"):
            self._pod_changed(old, True)

    def _pod_changed(self, pod: Obj, deleted: bool) -> None:
        """Only a pod that went away, finished or was never scheduled can free a claim."""
        scheduled = bool((pod.get("spec") or {}).get("nodeName"))
        if not deleted and scheduled and not is_terminal(pod) and not pod_is_shut_down(pod):
            return
        namespace = pod["metadata"].get("namespace", "")
        for name in claim_names(pod):
            self.queue.add(f"{namespace}/{name}")

    async def sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        claim = self.claims.get(name, namespace)
        if claim is None:
            return
        if is_deletion_candidate(claim, FINALIZER):
            if await self._in_use(claim):
                self.log.info("keeping claim because it is being used", claim=key)
                return
            await self._set_finalizer(claim, present=False)
        elif needs_finalizer(claim, FINALIZER):
            await self._set_finalizer(claim, present=True)

    async def _in_use(self, claim: Obj) -> bool:
        """Ask the cache first; when it knows no user, make sure with a live list, since a pod that
        was just created may not be in the cache yet."""
        namespace = claim["metadata"].get("namespace", "")
        if any(pod_uses_claim(p, claim) for p in self.pods.list(namespace)):
            return True
        live = await self.client.list(PODS, namespace)
        return any(pod_uses_claim(p, claim) for p in live.get("items") or ())

    async def _set_finalizer(self, claim: Obj, *, present: bool) -> None:
        meta = claim["metadata"]
        finalizers = [f for f in meta.get("finalizers") or () if f != FINALIZER]
        if present:
            finalizers.append(FINALIZER)
        body = {**claim, "metadata": {**meta, "finalizers": finalizers}}
        await self.client.replace(PVCS, body)
        self.log.info("added protection finalizer" if present else "removed protection finalizer",
                      claim=f"{meta.get('namespace', '')}/{meta['name']}")
