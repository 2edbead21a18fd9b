"""ReplicaSet controller: keeps `spec.replicas` active pods matching the selector, creating in
slow-start batches behind expectations, adopting orphans and releasing pods that stop matching,
deleting the pods upstream ranks first, and reporting status.

ReplicationControllers use the same code with a set-based selector (see replicationcontroller.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.events import EventRecorder
from controller_manager.expectations import Expectations
from controller_manager.podutil import (
    ORPHANS_INDEX,
    SLOW_START_INITIAL_BATCH,
    BatchError,
    adopt_patch,
    claim_decision,
    condition,
    controller_ref,
    index_orphans,
    is_active,
    is_available,
    is_ready,
    pod_from_template,
    pods_to_delete,
    release_patch,
    slow_start_batch,
)
from controller_manager.resources import PODS, REPLICA_SETS
from services.api.meta import now_rfc3339
from services.api.selectors import LabelSelector
from services.client import Forbidden, NotFound
from services.client.rest import GVR, resource_path
from services.informers import OWNER_UID_INDEX, meta_namespace_key

NAME = "replicaset"

#: upstream's BurstReplicas: at most this many creates or deletes per sync
BURST_REPLICAS = 500
TERMINAL = ("Succeeded", "Failed")

Obj = dict[str, Any]


def new(ctx: ControllerContext) -> ReplicaSetController:
    return ReplicaSetController(
        ctx, REPLICA_SETS, "ReplicaSet", "replicaset-controller", int(ctx.options.concurrent_replicaset_syncs)
    )


def selector_of(owner: Obj) -> LabelSelector:
    """A ReplicaSet's metav1.LabelSelector, or a ReplicationController's plain map."""
    sel = (owner.get("spec") or {}).get("selector")
    if owner.get("kind") == "ReplicationController":
        return LabelSelector.from_set(sel or {}) if sel else LabelSelector.nothing()
    try:
        return LabelSelector.from_dict(sel)
    except ValueError:
        return LabelSelector.nothing()


def calculate_status(owner: Obj, pods: list[Obj], error: tuple[str, str] | None) -> Obj:
    """The status a sync reports: counts over the active owned pods, plus ReplicaFailure.

    Every sync walks all the pods, so the loop avoids helper calls (a sync of 10,000 pods runs often
    while they start).
    """
    spec = owner.get("spec") or {}
    template_labels = (((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}).items()
    min_ready = int(spec.get("minReadySeconds") or 0)
    fully = ready = available = 0
    for pod in pods:
        if template_labels <= ((pod.get("metadata") or {}).get("labels") or {}).items():
            fully += 1
        for cond in (pod.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "Ready":
                if cond.get("status") == "True":
                    ready += 1
                    if min_ready <= 0 or is_available(pod, min_ready):
                        available += 1
                break
    old = owner.get("status") or {}
    conditions = [c for c in old.get("conditions") or [] if c.get("type") != "ReplicaFailure"]
    failure = condition(owner, "ReplicaFailure")
    if error is not None:
        reason, message = error
        if failure is None or failure.get("reason") != reason or failure.get("message") != message:
            failure = {"type": "ReplicaFailure", "status": "True", "lastTransitionTime": now_rfc3339(),
                       "reason": reason, "message": message}
        conditions.append(failure)
    status: Obj = {
        "replicas": len(pods),
        "fullyLabeledReplicas": fully,
        "readyReplicas": ready,
        "availableReplicas": available,
        "observedGeneration": (owner.get("metadata") or {}).get("generation", 0),
    }
    if conditions:
        status["conditions"] = conditions
    return status


def status_changed(owner: Obj, status: Obj) -> bool:
    old = owner.get("status") or {}
    keys = ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas", "observedGeneration")
    return any((old.get(k) or 0) != (status.get(k) or 0) for k in keys) or (
        (old.get("conditions") or []) != (status.get("conditions") or [])
    )


class ReplicaSetController(QueueController):
    """Shared by ReplicaSets and ReplicationControllers."""

    def __init__(self, ctx: ControllerContext, resource: GVR, kind: str, component: str, workers: int) -> None:
        self.client = ctx.client
        self.resource = resource
        self.kind = kind
        self.owners = ctx.informer(resource)
        self.pods = ctx.informer(PODS)
        self.recorder: EventRecorder = ctx.recorder(component)
        self.expectations = Expectations()
        self.pods.store.add_indexers({ORPHANS_INDEX: index_orphans})
        super().__init__(component.removesuffix("-controller"), [self.owners, self.pods], workers)
        self.owners.add_event_handler(self.enqueue, self._update_owner, self._delete_owner)
        self.pods.add_event_handler(self._add_pod, self._update_pod, self._delete_pod)

    # -- event handlers ----------------------------------------------------------------------------

    def _update_owner(self, old: Obj, new: Obj) -> None:
        self.enqueue(new)

    def _delete_owner(self, obj: Obj) -> None:
        self.expectations.delete(meta_namespace_key(obj))
        self.enqueue(obj)

    def _resolve(self, namespace: str, ref: Obj | None) -> Obj | None:
        if ref is None or ref.get("kind") != self.kind:
            return None
        owner = self.owners.get(ref.get("name", ""), namespace)
        if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
            return None
        return owner

    def _matching_owners(self, pod: Obj) -> list[Obj]:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if not labels:
            return []
        return [o for o in self.owners.list(meta.get("namespace")) if selector_of(o).matches(labels)]

    def _add_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            self._delete_pod(pod)
            return
        owner = self._resolve(meta.get("namespace", ""), controller_ref(pod))
        if owner is not None:
            self.expectations.creation_observed(meta_namespace_key(owner))
            self.enqueue(owner)
            return
        if controller_ref(pod) is None:
            for candidate in self._matching_owners(pod):
                self.enqueue(candidate)

    def _update_pod(self, old: Obj, new: Obj) -> None:
        if old["metadata"].get("resourceVersion") == new["metadata"].get("resourceVersion"):
            return
        ns = new["metadata"].get("namespace", "")
        if new["metadata"].get("deletionTimestamp"):
            self._delete_pod(new)
            if old["metadata"].get("labels") != new["metadata"].get("labels"):
                self._delete_pod(old)
            return
        old_ref, new_ref = controller_ref(old), controller_ref(new)
        if old_ref is not None and (new_ref is None or old_ref.get("uid") != new_ref.get("uid")):
            previous = self._resolve(ns, old_ref)
            if previous is not None:
                self.enqueue(previous)
        owner = self._resolve(ns, new_ref)
        if owner is not None:
            self.enqueue(owner)
            min_ready = int((owner.get("spec") or {}).get("minReadySeconds") or 0)
            if min_ready > 0 and not is_ready(old) and is_ready(new):
                self.enqueue_after(owner, min_ready + 1)
            return
        if new_ref is None and (
            old["metadata"].get("labels") != new["metadata"].get("labels") or old_ref is not None
        ):
            for candidate in self._matching_owners(new):
                self.enqueue(candidate)

    def _delete_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        owner = self._resolve(meta.get("namespace", ""), controller_ref(pod))
        if owner is None:
            return
        self.expectations.deletion_observed(meta_namespace_key(owner), meta.get("uid"))
        self.enqueue(owner)

    # -- sync --------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        owner = self.owners.get(name, namespace)
        if owner is None:
            self.expectations.delete(key)
            return
        needs_sync = self.expectations.satisfied(key)
        selector = selector_of(owner)
        pods = await self.claim_pods(owner, selector, *self._candidates(owner))
        error: tuple[str, str] | None = None
        if needs_sync and not owner["metadata"].get("deletionTimestamp"):
            error = await self.manage_replicas(key, owner, pods)
        status = calculate_status(owner, pods, error)
        if status_changed(owner, status):
            patch = {"status": {**status, "conditions": status.get("conditions")}}
            try:
                await self.client.patch_status(self.resource, name, patch, namespace)
            except NotFound:
                return
        if error is not None:
            raise RuntimeError(error[1])
        min_ready = int((owner.get("spec") or {}).get("minReadySeconds") or 0)
        if min_ready > 0 and status["readyReplicas"] == status["replicas"] != status["availableReplicas"]:
            raise RequeueAfter(float(min_ready))

    def _candidates(self, owner: Obj) -> tuple[list[Obj], list[Obj]]:
        """The active pods a claim looks at: those the owner controls, and the orphans of its namespace.

        Upstream lists the whole namespace, but the claim ignores pods another controller owns, so the
        owner and orphan indexes give the same answer without walking those.
        """
        meta = owner["metadata"]
        uid = meta.get("uid")
        store = self.pods.store
        owned: list[Obj] = []
        for pod in store.by_index(OWNER_UID_INDEX, uid, ordered=False) if uid else ():
            pod_meta = pod["metadata"]
            status = pod.get("status")
            if pod_meta.get("deletionTimestamp") or status and status.get("phase") in TERMINAL:
                continue
            for ref in pod_meta.get("ownerReferences") or ():
                if ref.get("controller"):
                    if ref.get("uid") == uid:
                        owned.append(pod)
                    break
        orphans = [p for p in store.by_index(ORPHANS_INDEX, meta.get("namespace") or "", ordered=False)
                   if is_active(p)]
        return owned, orphans

    async def claim_pods(self, owner: Obj, selector: LabelSelector, owned: list[Obj], orphans: list[Obj]) -> list[Obj]:
        """Our pods after adopting matching orphans and releasing owned pods that stopped matching
        (upstream's ClaimPods, given the candidates `_candidates` found)."""
        matches = selector.matches
        claimed = [p for p in owned if matches(p["metadata"].get("labels"))]
        release = [p for p in owned if not matches(p["metadata"].get("labels"))] \
            if len(claimed) < len(owned) and not owner["metadata"].get("deletionTimestamp") else []
        adopt = [p for p in orphans if claim_decision(p, owner, matches(p["metadata"].get("labels"))) == "adopt"]
        if adopt and await self._can_adopt(owner):
            results = await asyncio.gather(
                *(self.client.patch(PODS, p["metadata"]["name"], adopt_patch(p, owner), p["metadata"]["namespace"],
                                    patch_type="strategic") for p in adopt),
                return_exceptions=True,
            )
            claimed.extend(r for r in results if isinstance(r, dict) and is_active(r))
        if release:
            await asyncio.gather(
                *(self.client.patch(PODS, p["metadata"]["name"], release_patch(p, owner), p["metadata"]["namespace"],
                                    patch_type="strategic") for p in release),
                return_exceptions=True,
            )
        return claimed

    async def _can_adopt(self, owner: Obj) -> bool:
        """Re-read the owner past the cache: never adopt for an owner that is going away."""
        meta = owner["metadata"]
        try:
            fresh = await self.client.get(self.resource, meta["name"], meta["namespace"])
        except NotFound:
            return False
        fresh_meta = fresh.get("metadata") or {}
        return fresh_meta.get("uid") == meta.get("uid") and not fresh_meta.get("deletionTimestamp")

    async def manage_replicas(self, key: str, owner: Obj, pods: list[Obj]) -> tuple[str, str] | None:
        """Create or delete pods toward spec.replicas; returns (reason, message) of a failure."""
        spec = owner.get("spec") or {}
        replicas = spec.get("replicas")
        diff = len(pods) - (1 if replicas is None else int(replicas))
        if diff < 0:
            return await self._create(key, owner, min(-diff, BURST_REPLICAS))
        if diff > 0:
            return await self._delete(key, owner, pods, min(diff, BURST_REPLICAS))
        return None

    async def _create(self, key: str, owner: Obj, count: int) -> tuple[str, str] | None:
        self.expectations.expect_creations(key, count)
        template = (owner.get("spec") or {}).get("template") or {}
        namespace = owner["metadata"]["namespace"]
        # Every pod of the burst has the same body (the apiserver picks the names), so encode it once.
        body = orjson.dumps(pod_from_template(template, owner))
        path = resource_path(PODS, namespace)

        async def create_one() -> None:
            try:
                created = await self.client.request("POST", path, body=body)
            except Exception as exc:
                self.expectations.creation_observed(key)
                if not _namespace_terminating(exc):
                    self.recorder.warning(owner, "FailedCreate", f"Error creating: {exc}")
                raise
            self.recorder.normal(owner, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")

        try:
            await slow_start_batch(count, SLOW_START_INITIAL_BATCH, create_one)
        except BatchError as err:
            skipped = count - err.successes - len(err.errors)
            if skipped > 0:
                self.expectations.lower(key, adds=skipped)
            if all(_namespace_terminating(e) for e in err.errors):
                return None
            return "FailedCreate", str(err.errors[0])
        return None

    async def _delete(self, key: str, owner: Obj, pods: list[Obj], count: int) -> tuple[str, str] | None:
        # by name first, so pods that rank the same go in the same order every time
        victims = pods_to_delete(sorted(pods, key=lambda p: p["metadata"]["name"]), count)
        self.expectations.expect_deletions(key, {p["metadata"]["uid"] for p in victims})

        async def delete_one(pod: Obj) -> None:
            meta = pod["metadata"]
            try:
                await self.client.delete(PODS, meta["name"], meta["namespace"],
                                         preconditions={"uid": meta["uid"]})
            except NotFound:
                self.expectations.deletion_observed(key, meta["uid"])
                return
            except Exception as exc:
                self.expectations.deletion_observed(key, meta["uid"])
                self.recorder.warning(owner, "FailedDelete", f"Error deleting: {exc}")
                raise
            self.recorder.normal(owner, "SuccessfulDelete", f"Deleted pod: {meta['name']}")

        results = await asyncio.gather(*(delete_one(p) for p in victims), return_exceptions=True)
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            return "FailedDelete", str(errors[0])
        return None


def _namespace_terminating(exc: BaseException) -> bool:
    """Creates into a Terminating namespace fail with a Forbidden naming NamespaceTerminating."""
    if not isinstance(exc, Forbidden):
        return False
    causes = (exc.details or {}).get("causes") or []
    return any(c.get("reason") == "NamespaceTerminating" for c in causes) or "being terminated" in str(exc)
