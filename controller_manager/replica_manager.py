"""The replica manager behind the ReplicaSet and ReplicationController controllers (upstream's
replicaset.NewBaseController, which both run): keeps `spec.replicas` active pods matching the
selector, creating in slow-start batches behind expectations, adopting orphans and releasing pods
that stop matching, deleting the pods upstream ranks first, and reporting status. The two
controllers in controllers/ differ only in the resource they manage and its selector's shape.
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
    controller_ref,
    index_orphans,
    is_active,
    is_available,
    is_ready,
    pod_from_template,
    pods_to_delete,
    selector_of,
    slow_start_batch,
)
from controller_manager.refmanager import claim_pods
from controller_manager.resources import PODS
from services.api.conditions import get_condition
from services.api.meta import now_rfc3339
from services.client import NotFound, namespace_terminating
from services.client.rest import GVR, resource_path
from services.informers import OWNER_UID_INDEX, meta_namespace_key

#: upstream's BurstReplicas: at most this many creates or deletes per sync
BURST_REPLICAS = 500
TERMINAL = ("Succeeded", "Failed")
#: How long a change that can only move status counts waits before its sync. Every pod's binding and
#: kubelet status updates would otherwise each start a sync walking all the owner's pods; waiting lets
#: one sync take in all the changes that arrive meanwhile (a key waiting for a deadline keeps the first).
STATUS_SYNC_DELAY = 0.25

Obj = dict[str, Any]


def calculate_status(owner: Obj, pods: list[Obj], error: tuple[str, str] | None) -> Obj:
    """The status a sync reports: counts over the active owned pods, plus ReplicaFailure.

    Every full sync walks all the pods, so the loop avoids helper calls (a sync of 10,000 pods runs
    often while they start).
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
    return status_from_counts(owner, len(pods), fully, ready, available, error)


def status_from_counts(owner: Obj, replicas: int, fully: int, ready: int, available: int,
                       error: tuple[str, str] | None) -> Obj:
    """The status for these pod counts, carrying the owner's other conditions and setting ReplicaFailure."""
    old = owner.get("status") or {}
    conditions = [c for c in old.get("conditions") or [] if c.get("type") != "ReplicaFailure"]
    failure = get_condition(owner, "ReplicaFailure")
    if error is not None:
        reason, message = error
        if failure is None or failure.get("reason") != reason or failure.get("message") != message:
            failure = {"type": "ReplicaFailure", "status": "True", "lastTransitionTime": now_rfc3339(),
                       "reason": reason, "message": message}
        conditions.append(failure)
    status: Obj = {
        "replicas": replicas,
        "fullyLabeledReplicas": fully,
        "readyReplicas": ready,
        "availableReplicas": available,
        "observedGeneration": (owner.get("metadata") or {}).get("generation", 0),
    }
    if conditions:
        status["conditions"] = conditions
    return status


class Tally:
    """Counts over the pods one owner holds, which the pod handlers keep current between full syncs,
    so that a sync with nothing to claim or release reports status without walking thousands of pods.

    A full sync builds it from the cache for the owner's selector and template as they are then; it is
    of no use once either changes, nor while an owned pod no longer matches (it must be released).
    Only owners without minReadySeconds have one: their available pods are their ready pods.
    """

    __slots__ = ("selector", "template_labels", "matches", "_labels", "members", "fully", "ready", "trusted")

    def __init__(self, owner: Obj) -> None:
        spec = owner.get("spec") or {}
        self.selector = spec.get("selector")
        self.template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        self.matches = selector_of(owner).matches
        self._labels = self.template_labels.items()
        #: pod key -> 1 if fully labeled, + 2 if ready
        self.members: dict[str, int] = {}
        self.fully = self.ready = 0
        self.trusted = True

    def fits(self, owner: Obj) -> bool:
        """Whether the counts answer for the owner as it is now."""
        spec = owner.get("spec") or {}
        return self.trusted and spec.get("selector") == self.selector and (
            ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}) == self.template_labels

    def put(self, key: str, pod: Obj) -> None:
        """Count a pod the owner controls as it is now (or stop counting it)."""
        meta = pod["metadata"]
        status = pod.get("status")
        if meta.get("deletionTimestamp") or status and status.get("phase") in TERMINAL:
            self.discard(key)
            return
        labels = meta.get("labels") or {}
        if not self.matches(labels):
            self.discard(key)
            self.trusted = False
            return
        weight = 1 if self._labels <= labels.items() else 0
        for cond in (status or {}).get("conditions") or ():
            if cond.get("type") == "Ready":
                if cond.get("status") == "True":
                    weight += 2
                break
        self.discard(key)
        self.members[key] = weight
        self.fully += weight & 1
        self.ready += weight >> 1

    def discard(self, key: str) -> None:
        weight = self.members.pop(key, None)
        if weight is not None:
            self.fully -= weight & 1
            self.ready -= weight >> 1


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
        #: owner uid -> its pod counts, for owners whose last full sync could build them
        self.tallies: dict[str, Tally] = {}
        self.pods.store.add_indexers({ORPHANS_INDEX: index_orphans})
        super().__init__(component.removesuffix("-controller"), [self.owners, self.pods], workers)
        self.owners.add_event_handler(self.enqueue, self._update_owner, self._delete_owner)
        self.pods.add_event_handler(self._add_pod, self._update_pod, self._on_delete_pod)

    # -- event handlers ----------------------------------------------------------------------------

    def _update_owner(self, old: Obj, new: Obj) -> None:
        if old is not new and _only_status_changed(old, new):
            self.enqueue_after(new, STATUS_SYNC_DELAY)
        else:
            self.enqueue(new)

    def _delete_owner(self, obj: Obj) -> None:
        self.expectations.delete(meta_namespace_key(obj))
        self.tallies.pop(obj["metadata"].get("uid", ""), None)
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

    def _track(self, old: Obj | None, new: Obj | None) -> None:
        """Keep the tallies of the owners controlling a pod before and after one event in step."""
        old_ref = controller_ref(old) if old is not None else None
        new_ref = controller_ref(new) if new is not None else None
        old_uid = old_ref.get("uid") if old_ref is not None else None
        new_uid = new_ref.get("uid") if new_ref is not None else None
        key = meta_namespace_key(new if new is not None else old)  # type: ignore[arg-type]
        if old_uid is not None and old_uid != new_uid and (tally := self.tallies.get(old_uid)) is not None:
            tally.discard(key)
        if new_uid is not None and (tally := self.tallies.get(new_uid)) is not None:
            tally.put(key, new)  # type: ignore[arg-type]

    def _add_pod(self, pod: Obj) -> None:
        if self.tallies:
            self._track(None, pod)
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            self._delete_pod(pod)
            return
        owner = self._resolve(meta.get("namespace", ""), controller_ref(pod))
        if owner is not None:
            key = meta_namespace_key(owner)
            self.expectations.creation_observed(key)
            # Until the last create of a burst is seen, a sync could only update status.replicas.
            if self.expectations.satisfied(key):
                self.enqueue(owner)
            else:
                self.enqueue_after(owner, STATUS_SYNC_DELAY)
            return
        if controller_ref(pod) is None:
            for candidate in self._matching_owners(pod):
                self.enqueue(candidate)

    def _update_pod(self, old: Obj, new: Obj) -> None:
        if old["metadata"].get("resourceVersion") == new["metadata"].get("resourceVersion"):
            return
        if self.tallies:
            self._track(old, new)
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
            if old_ref is not None and old_ref.get("uid") == new_ref.get("uid") and _same_claim(old, new):
                self.enqueue_after(owner, STATUS_SYNC_DELAY)
            else:
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

    def _on_delete_pod(self, pod: Obj) -> None:
        if self.tallies:
            self._track(pod, None)
        self._delete_pod(pod)

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
        error: tuple[str, str] | None = None
        counts = self._counts(owner, needs_sync)
        if counts is not None:
            replicas, fully, ready = counts
            want = (owner.get("spec") or {}).get("replicas")
            missing = (1 if want is None else int(want)) - replicas
            if needs_sync and missing > 0:
                error = await self._create(key, owner, min(missing, BURST_REPLICAS))
            status = status_from_counts(owner, replicas, fully, ready, ready, error)
        else:
            owned, orphans = self._candidates(owner)
            self._build_tally(owner, owned)
            pods = await claim_pods(self.client, self.resource, owner, selector_of(owner), owned, orphans)
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

    def _counts(self, owner: Obj, needs_sync: bool) -> tuple[int, int, int] | None:
        """(replicas, fully labeled, ready) from the owner's tally, or None when a sync must walk its
        pods: no fitting tally, an orphan to adopt, pods to delete, or the owner going away."""
        meta = owner["metadata"]
        tally = self.tallies.get(meta.get("uid", ""))
        if tally is None or meta.get("deletionTimestamp") or not tally.fits(owner):
            return None
        want = (owner.get("spec") or {}).get("replicas")
        if needs_sync and len(tally.members) > (1 if want is None else int(want)):
            return None
        matches = tally.matches
        for pod in self.pods.store.by_index(ORPHANS_INDEX, meta.get("namespace") or "", ordered=False):
            if is_active(pod) and matches(pod["metadata"].get("labels")):
                return None
        return len(tally.members), tally.fully, tally.ready

    def _build_tally(self, owner: Obj, owned: list[Obj]) -> None:
        """Count the pods a full sync found, for the syncs after it (owners without minReadySeconds)."""
        meta = owner["metadata"]
        uid = meta.get("uid", "")
        if meta.get("deletionTimestamp") or int((owner.get("spec") or {}).get("minReadySeconds") or 0) > 0:
            self.tallies.pop(uid, None)
            return
        tally = Tally(owner)
        for pod in owned:
            tally.put(meta_namespace_key(pod), pod)
        self.tallies[uid] = tally

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
                if not namespace_terminating(exc):
                    self.recorder.warning(owner, "FailedCreate", f"Error creating: {exc}")
                raise
            self.recorder.normal(owner, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")

        try:
            await slow_start_batch(count, SLOW_START_INITIAL_BATCH, create_one)
        except BatchError as err:
            skipped = count - err.successes - len(err.errors)
            if skipped > 0:
                self.expectations.lower(key, adds=skipped)
            if all(namespace_terminating(e) for e in err.errors):
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


def _only_status_changed(old: Obj, new: Obj) -> bool:
    """Whether an owner update (often our own status write) leaves everything but status as it was."""
    if old.get("spec") != new.get("spec"):
        return False
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    return len(old_meta) == len(new_meta) and all(
        k == "resourceVersion" or new_meta.get(k) == v for k, v in old_meta.items()
    )


def _same_claim(old: Obj, new: Obj) -> bool:
    """Whether a pod update leaves what a sync acts on (labels, being active) as it was, so that it can
    only change status counts."""
    return old["metadata"].get("labels") == new["metadata"].get("labels") and is_active(old) == is_active(new)

