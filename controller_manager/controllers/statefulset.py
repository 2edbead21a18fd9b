"""StatefulSet controller: pods with stable identities `<set>-<ordinal>` (from
spec.ordinals.start), created 0..N-1 and removed N-1..0 one at a time with OrderedReady or all
at once with Parallel; a PVC `<claim>-<set>-<ordinal>` per volumeClaimTemplate that outlives
its pod (persistentVolumeClaimRetentionPolicy decides who owns it); RollingUpdate from the
highest ordinal down to the partition (maxUnavailable at a time) or OnDelete; and
ControllerRevisions behind currentRevision/updateRevision.
"""

from __future__ import annotations

import asyncio
import copy
import re
from typing import Any

from controller_manager import refmanager
from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.history import (
    REVISION_HASH,
    ensure_revision,
    owned_revisions,
    template_of,
    truncate_history,
)
from controller_manager.podutil import (
    controller_ref,
    is_available,
    is_ready,
    new_controller_ref,
    selector_of,
)
from controller_manager.resources import CONTROLLER_REVISIONS, PODS, PVCS, STATEFUL_SETS
from services.api.intstr import scaled_value
from services.client import AlreadyExists, NotFound

NAME = "statefulset"

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
_ORDINAL = re.compile(r"^(.*)-([0-9]+)$")

Obj = dict[str, Any]


def new(ctx: ControllerContext) -> StatefulSetController:
    return StatefulSetController(ctx)


# -- identities and ordering (pure) ------------------------------------------------------------------


def parse_ordinal(pod_name: str) -> tuple[str, int] | None:
    """("web", 3) for "web-3"; None when the name has no ordinal."""
    match = _ORDINAL.match(pod_name)
    return (match.group(1), int(match.group(2))) if match else None


def start_ordinal(sts: Obj) -> int:
    return int(((sts.get("spec") or {}).get("ordinals") or {}).get("start") or 0)


def replicas_of(sts: Obj) -> int:
    value = (sts.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def ordinal_range(sts: Obj) -> range:
    start = start_ordinal(sts)
    return range(start, start + replicas_of(sts))


def claim_name(claim: str, set_name: str, ordinal: int) -> str:
    return f"{claim}-{set_name}-{ordinal}"


def is_running_and_ready(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and is_ready(pod)


def is_healthy(pod: Obj, min_ready: int = 0) -> bool:
    return (
        is_running_and_ready(pod)
        and not pod["metadata"].get("deletionTimestamp")
        and (min_ready <= 0 or is_available(pod, min_ready))
    )


def pod_revision(pod: Obj) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_HASH, "")


def _or_one(value: int | str | None) -> int | str:
    """maxUnavailable unset means one pod at a time (upstream's ValueOrDefault(..., 1))."""
    return 1 if value is None else value


def rolling_update_targets(
    pods: dict[int, Obj],
    ordinals: range,
    partition: int,
    max_unavailable: int,
    update_revision: str,
    min_ready: int = 0,
) -> list[int]:
    """Ordinals to delete now for a RollingUpdate, highest first: pods at or above the partition
    with an old revision, no more than maxUnavailable pods down at a time (deleted ones included).
    """
    start = max(partition, ordinals.start)
    unavailable = sum(
        1 for o in ordinals if o >= start and (o not in pods or not is_healthy(pods[o], min_ready))
    )
    targets: list[int] = []
    for ordinal in reversed(ordinals):
        if ordinal < start:
            break
        pod = pods.get(ordinal)
        if pod is None or pod["metadata"].get("deletionTimestamp") or pod_revision(pod) == update_revision:
            continue
        healthy = is_healthy(pod, min_ready)
        if healthy and unavailable >= max_unavailable:
            break
        targets.append(ordinal)
        if healthy:
            unavailable += 1
    return targets


def new_pod(sts: Obj, template: Obj, ordinal: int, revision: str) -> Obj:
    """The pod for one ordinal: identity labels, hostname/subdomain, and its claims mounted."""
    meta = sts["metadata"]
    spec = sts.get("spec") or {}
    name = f"{meta['name']}-{ordinal}"
    tmeta = template.get("metadata") or {}
    labels = {
        **(tmeta.get("labels") or {}),
        POD_NAME_LABEL: name,
        POD_INDEX_LABEL: str(ordinal),
        REVISION_HASH: revision,
    }
    pod_meta: Obj = {
        "name": name,
        "namespace": meta["namespace"],
        "labels": labels,
        "ownerReferences": [new_controller_ref(sts)],
    }
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        pod_meta["finalizers"] = list(tmeta["finalizers"])
    pod_spec = copy.deepcopy(template.get("spec") or {})
    pod_spec["hostname"] = name
    if spec.get("serviceName"):
        pod_spec["subdomain"] = spec["serviceName"]
    claims = spec.get("volumeClaimTemplates") or []
    if claims:
        names = {c["metadata"]["name"] for c in claims}
        volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") not in names]
        for claim in claims:
            volumes.append(
                {
                    "name": claim["metadata"]["name"],
                    "persistentVolumeClaim": {
                        "claimName": claim_name(claim["metadata"]["name"], meta["name"], ordinal)
                    },
                }
            )
        pod_spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


def new_claims(sts: Obj, ordinal: int) -> list[Obj]:
    meta = sts["metadata"]
    spec = sts.get("spec") or {}
    match_labels = (spec.get("selector") or {}).get("matchLabels") or {}
    out = []
    for claim in spec.get("volumeClaimTemplates") or []:
        cmeta = claim.get("metadata") or {}
        body: Obj = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": claim_name(cmeta["name"], meta["name"], ordinal),
                "namespace": meta["namespace"],
                "labels": {**(cmeta.get("labels") or {}), **match_labels},
            },
            "spec": copy.deepcopy(claim.get("spec") or {}),
        }
        if cmeta.get("annotations"):
            body["metadata"]["annotations"] = dict(cmeta["annotations"])
        out.append(body)
    return out


def claim_owner_refs(sts: Obj, claim: Obj, pod: Obj | None, condemned: bool) -> list[Obj]:
    """The ownerReferences a claim should have under the retention policy (upstream's
    updateClaimOwnerRefForSetAndPod): the set when whenDeleted=Delete, the pod of a condemned
    ordinal when whenScaled=Delete; other owners are kept.
    """
    policy = (sts.get("spec") or {}).get("persistentVolumeClaimRetentionPolicy") or {}
    set_uid = sts["metadata"]["uid"]
    pod_uid = pod["metadata"]["uid"] if pod is not None else None
    refs = [
        r
        for r in (claim.get("metadata") or {}).get("ownerReferences") or []
        if r.get("uid") != set_uid and not (r.get("kind") == "Pod" and r.get("uid") == pod_uid)
    ]
    if policy.get("whenDeleted") == "Delete":
        refs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": sts["metadata"]["name"],
                "uid": set_uid,
                "blockOwnerDeletion": True,
            }
        )
    if policy.get("whenScaled") == "Delete" and condemned and pod is not None:
        refs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod["metadata"]["name"],
                "uid": pod_uid,
                "blockOwnerDeletion": True,
            }
        )
    return refs


def compute_status(sts: Obj, pods: list[Obj], current: str, update: str, collision: int) -> Obj:
    min_ready = int((sts.get("spec") or {}).get("minReadySeconds") or 0)
    status: Obj = {
        "observedGeneration": sts["metadata"].get("generation", 0),
        "replicas": 0,
        "readyReplicas": 0,
        "availableReplicas": 0,
        "currentReplicas": 0,
        "updatedReplicas": 0,
        "currentRevision": current,
        "updateRevision": update,
        "collisionCount": collision,
    }
    for pod in pods:
        status["replicas"] += 1
        if is_running_and_ready(pod):
            status["readyReplicas"] += 1
            if is_available(pod, min_ready):
                status["availableReplicas"] += 1
        if not pod["metadata"].get("deletionTimestamp"):
            if pod_revision(pod) == current:
                status["currentReplicas"] += 1
            if pod_revision(pod) == update:
                status["updatedReplicas"] += 1
    strategy = ((sts.get("spec") or {}).get("updateStrategy") or {}).get("type", "RollingUpdate")
    if strategy == "RollingUpdate" and status["updatedReplicas"] == status["replicas"] == status[
        "readyReplicas"
    ] == replicas_of(sts):
        status["currentRevision"] = update
        status["currentReplicas"] = status["updatedReplicas"]
    return status


# -- controller ----------------------------------------------------------------------------------------


class StatefulSetController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.sets = ctx.informer(STATEFUL_SETS)
        self.pods = ctx.informer(PODS)
        self.revisions = ctx.informer(CONTROLLER_REVISIONS)
        self.claims = ctx.informer(PVCS)
        self.recorder = ctx.recorder("statefulset-controller")
        super().__init__(
            "statefulset",
            [self.sets, self.pods, self.revisions, self.claims],
            int(ctx.options.concurrent_statefulset_syncs),
        )
        self.sets.add_event_handler(self.enqueue, lambda old, new: self.enqueue(new), self.enqueue)
        self.pods.add_event_handler(self._pod_event, lambda old, new: self._pod_event(new), self._pod_event)

    def _pod_event(self, pod: Obj) -> None:
        ref = controller_ref(pod)
        namespace = pod["metadata"].get("namespace")
        if ref is not None:
            if ref.get("kind") != "StatefulSet":
                return
            owner = self.sets.get(ref.get("name", ""), namespace)
            if owner is not None and owner["metadata"].get("uid") == ref.get("uid"):
                self.enqueue(owner)
            return
        labels = pod["metadata"].get("labels") or {}
        for sts in self.sets.list(namespace):
            if selector_of(sts).matches(labels):
                self.enqueue(sts)

    async def sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        sts = self.sets.get(name, namespace)
        if sts is None:
            return
        pods = await self._claim_pods(sts)
        revisions = owned_revisions(sts, self.revisions.list(namespace))
        template = (sts.get("spec") or {}).get("template") or {}
        labels = dict(((template.get("metadata") or {}).get("labels")) or {})
        update_rev, collision = await ensure_revision(self.client, sts, revisions, template, labels)
        update = update_rev["metadata"]["name"]
        current_name = (sts.get("status") or {}).get("currentRevision") or update
        by_name = {r["metadata"]["name"]: r for r in revisions}
        current_rev = by_name.get(current_name, update_rev)
        current = current_rev["metadata"]["name"]
        wait: float | None = None
        if not sts["metadata"].get("deletionTimestamp"):
            wait = await self._update(sts, pods, template_of(current_rev), current, template, update)
        uid = sts["metadata"]["uid"]
        live_pods = [p for p in self.pods.list(namespace) if (controller_ref(p) or {}).get("uid") == uid]
        status = compute_status(sts, live_pods, current, update, collision)
        old = sts.get("status") or {}
        if any(old.get(k) != status[k] for k in status):
            try:
                await self.client.patch_status(STATEFUL_SETS, name, {"status": status}, namespace)
            except NotFound:
                return
        live = {status["currentRevision"], status["updateRevision"], *(pod_revision(p) for p in live_pods)}
        await truncate_history(self.client, sts, owned_revisions(sts, self.revisions.list(namespace)), live)
        if wait is not None:
            raise RequeueAfter(wait)

    async def _claim_pods(self, sts: Obj) -> list[Obj]:
        """The set's pods: those it controls and the orphans it adopts, by selector and ordinal name."""
        selector = selector_of(sts)
        name = sts["metadata"]["name"]
        uid = sts["metadata"]["uid"]

        def matches(pod: Obj) -> bool:
            parsed = parse_ordinal(pod["metadata"]["name"])
            return selector.matches(pod["metadata"].get("labels")) and parsed is not None and parsed[0] == name

        pods = self.pods.list(sts["metadata"]["namespace"])
        owned = [p for p in pods if (controller_ref(p) or {}).get("uid") == uid]
        orphans = [p for p in pods if controller_ref(p) is None]
        return await refmanager.claim(self.client, STATEFUL_SETS, sts, matches, owned, orphans)

    async def _update(
        self,
        sts: Obj,
        pods: list[Obj],
        current_template: Obj,
        current: str,
        update_template: Obj,
        update: str,
    ) -> float | None:
        """One step toward the spec; returns seconds to look again (minReadySeconds), else None."""
        spec = sts.get("spec") or {}
        ordered = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
        min_ready = int(spec.get("minReadySeconds") or 0)
        ordinals = ordinal_range(sts)
        by_ordinal: dict[int, Obj] = {}
        condemned: list[Obj] = []
        for pod in pods:
            ordinal = parse_ordinal(pod["metadata"]["name"])[1]  # type: ignore[index]
            if ordinal in ordinals:
                by_ordinal[ordinal] = pod
            else:
                condemned.append(pod)
        condemned.sort(key=lambda p: -parse_ordinal(p["metadata"]["name"])[1])  # type: ignore[index]
        strategy = spec.get("updateStrategy") or {}
        partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
        for ordinal in ordinals:
            pod = by_ordinal.get(ordinal)
            if (
                pod is not None
                and (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")
                and not pod["metadata"].get("deletionTimestamp")
            ):
                await self._delete_pod(sts, pod)
                by_ordinal.pop(ordinal)
                if ordered:
                    return None
                continue
            if pod is None:
                use_current = (
                    strategy.get("type", "RollingUpdate") == "RollingUpdate"
                    and ordinal < start_ordinal(sts) + partition
                )
                template, revision = (current_template, current) if use_current else (update_template, update)
                await self._create_pod(sts, new_pod(sts, template, ordinal, revision), ordinal)
                if ordered:
                    return None
                continue
            await self._ensure_claims(sts, pod, ordinal, condemned=False)
            if pod["metadata"].get("deletionTimestamp") and ordered:
                return None
            if ordered and not is_healthy(pod, min_ready):
                return float(min_ready) if is_running_and_ready(pod) and min_ready > 0 else None
        for pod in condemned:
            ordinal = parse_ordinal(pod["metadata"]["name"])[1]  # type: ignore[index]
            if pod["metadata"].get("deletionTimestamp"):
                if ordered:
                    return None
                continue
            others = [p for p in [*by_ordinal.values(), *condemned] if p is not pod]
            if ordered and any(not is_healthy(p, min_ready) for p in others):
                return None
            await self._ensure_claims(sts, pod, ordinal, condemned=True)
            await self._delete_pod(sts, pod)
            if ordered:
                return None
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return None
        max_unavailable = max(
            scaled_value(_or_one((strategy.get("rollingUpdate") or {}).get("maxUnavailable")), replicas_of(sts),
                         round_up=False),
            1,
        )
        if ordered and any(
            not is_healthy(p, min_ready)
            for o, p in by_ordinal.items()
            if o < max(partition + ordinals.start, ordinals.start)
        ):
            return None
        targets = rolling_update_targets(
            by_ordinal, ordinals, partition + ordinals.start, max_unavailable, update, min_ready
        )
        for ordinal in targets:
            await self._delete_pod(sts, by_ordinal[ordinal])
        return None

    async def _create_pod(self, sts: Obj, pod: Obj, ordinal: int) -> None:
        await self._ensure_claims(sts, None, ordinal, condemned=False)
        set_name = sts["metadata"]["name"]
        try:
            await self.client.create(PODS, pod, sts["metadata"]["namespace"])
        except AlreadyExists:
            return
        except Exception as exc:
            self.recorder.warning(
                sts,
                "FailedCreate",
                f"create Pod {pod['metadata']['name']} in StatefulSet {set_name} failed error: {exc}",
            )
            raise
        self.recorder.normal(
            sts,
            "SuccessfulCreate",
            f"create Pod {pod['metadata']['name']} in StatefulSet {set_name} successful",
        )

    async def _delete_pod(self, sts: Obj, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            await self.client.delete(
                PODS, meta["name"], meta["namespace"], preconditions={"uid": meta["uid"]}
            )
        except NotFound:
            return
        self.recorder.normal(
            sts,
            "SuccessfulDelete",
            f"delete Pod {meta['name']} in StatefulSet {sts['metadata']['name']} successful",
        )

    async def _ensure_claims(self, sts: Obj, pod: Obj | None, ordinal: int, condemned: bool) -> None:
        """Create missing claims for an ordinal and keep their owner references in line with the policy."""
        namespace = sts["metadata"]["namespace"]

        async def one(body: Obj) -> None:
            name = body["metadata"]["name"]
            existing = self.claims.get(name, namespace)
            if existing is None:
                body["metadata"]["ownerReferences"] = claim_owner_refs(sts, body, pod, condemned) or None
                if body["metadata"]["ownerReferences"] is None:
                    del body["metadata"]["ownerReferences"]
                try:
                    await self.client.create(PVCS, body, namespace)
                except AlreadyExists:
                    return
                self.recorder.normal(
                    sts,
                    "SuccessfulCreate",
                    f"create Claim {name} Pod {sts['metadata']['name']}-{ordinal} in StatefulSet "
                    f"{sts['metadata']['name']} success",
                )
                return
            if existing["metadata"].get("deletionTimestamp"):
                return
            refs = claim_owner_refs(sts, existing, pod, condemned)
            if refs != (existing["metadata"].get("ownerReferences") or []):
                patch = {
                    "metadata": {
                        "ownerReferences": refs or None,
                        "resourceVersion": existing["metadata"]["resourceVersion"],
                    }
                }
                try:
                    await self.client.patch(PVCS, name, patch, namespace)
                except NotFound:
                    return

        await asyncio.gather(*(one(c) for c in new_claims(sts, ordinal)))

