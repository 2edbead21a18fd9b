"""Deployment controller: owns ReplicaSets labelled by pod-template-hash, rolls them with the
RollingUpdate or Recreate strategy, scales proportionally mid-rollout, keeps revision
annotations and history, honours pause, and reports the status and Progressing/Available
conditions `kubectl rollout status` reads.
"""

from __future__ import annotations

import copy
import hashlib
from datetime import UTC, datetime
from typing import Any

import orjson

from controller_manager import refmanager
from controller_manager import rollout as ro
from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.podutil import (
    controller_ref,
    is_terminal,
    new_controller_ref,
    selector_of,
)
from controller_manager.resources import DEPLOYMENTS, PODS, REPLICA_SETS
from services.api.conditions import find_condition
from services.api.meta import now_rfc3339, parse_time
from services.client import AlreadyExists, NotFound
from services.informers import OWNER_UID_INDEX

NAME = "deployment"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"

Obj = dict[str, Any]


def new(ctx: ControllerContext) -> DeploymentController:
    return DeploymentController(ctx)


def template_hash(template: Obj, collision_count: int | None) -> str:
    """A stable short hash of the pod template (and collisionCount), in upstream's safe alphabet."""
    data = orjson.dumps(template, option=orjson.OPT_SORT_KEYS)
    if collision_count:
        data += str(collision_count).encode()
    value = int.from_bytes(hashlib.blake2b(data, digest_size=4).digest(), "big")
    return "".join(_SAFE[(value >> (5 * i)) % len(_SAFE)] for i in range(10)).rstrip(_SAFE[0]) or _SAFE[0]


def without_hash(template: Obj) -> Obj:
    out = copy.deepcopy(template or {})
    labels = (out.get("metadata") or {}).get("labels")
    if labels:
        labels.pop(ro.HASH_LABEL, None)
    return out


def equal_ignore_hash(a: Obj, b: Obj) -> bool:
    return without_hash(a) == without_hash(b)


def find_new_rs(deployment: Obj, rss: list[Obj]) -> Obj | None:
    """The oldest ReplicaSet whose template equals the deployment's, ignoring the hash label."""
    template = deployment["spec"].get("template") or {}
    for rs in sorted(rss, key=lambda r: (_created(r), r["metadata"]["name"])):
        if equal_ignore_hash((rs.get("spec") or {}).get("template") or {}, template):
            return rs
    return None


def _created(obj: Obj) -> float:
    parsed = parse_time(obj["metadata"].get("creationTimestamp"))
    return parsed.timestamp() if parsed else 0.0


def calculate_status(deployment: Obj, all_rss: list[Obj], new_rs: Obj | None) -> Obj:
    available = sum(ro.status_of(rs, "availableReplicas") for rs in all_rss)
    total = sum(ro.replicas_of(rs) for rs in all_rss)
    old = deployment.get("status") or {}
    status: Obj = {
        "observedGeneration": deployment["metadata"].get("generation", 0),
        "replicas": sum(ro.status_of(rs, "replicas") for rs in all_rss),
        "updatedReplicas": ro.status_of(new_rs, "replicas") if new_rs is not None else 0,
        "readyReplicas": sum(ro.status_of(rs, "readyReplicas") for rs in all_rss),
        "availableReplicas": available,
        "unavailableReplicas": max(total - available, 0),
        "conditions": copy.deepcopy(old.get("conditions") or []),
    }
    if old.get("collisionCount") is not None:
        status["collisionCount"] = old["collisionCount"]
    now = now_rfc3339()
    if available >= ro.replicas_of(deployment) - ro.max_unavailable(deployment):
        cond = _cond("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.", now)
    else:
        cond = _cond("Available", "False", "MinimumReplicasUnavailable",
                     "Deployment does not have minimum availability.", now)
    ro.set_condition(status, cond)
    return status


def _cond(kind: str, status: str, reason: str, message: str, now: str) -> Obj:
    return {"type": kind, "status": status, "lastUpdateTime": now, "lastTransitionTime": now,
            "reason": reason, "message": message}


class DeploymentController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.deployments = ctx.informer(DEPLOYMENTS)
        self.rss = ctx.informer(REPLICA_SETS)
        self.pods = ctx.informer(PODS)
        self.recorder = ctx.recorder("deployment-controller")
        super().__init__("deployment", [self.deployments, self.rss, self.pods],
                         int(ctx.options.concurrent_deployment_syncs))
        self.deployments.add_event_handler(self.enqueue, lambda old, new: self.enqueue(new), self.enqueue)
        self.rss.add_event_handler(self._rs_changed, self._rs_updated, self._rs_changed)
        self.pods.add_event_handler(on_delete=self._pod_deleted)

    # -- handlers ----------------------------------------------------------------------------------

    def _owner(self, obj: Obj, kind: str = "Deployment") -> Obj | None:
        ref = controller_ref(obj)
        if ref is None or ref.get("kind") != kind:
            return None
        informer = self.deployments if kind == "Deployment" else self.rss
        owner = informer.get(ref.get("name", ""), obj["metadata"].get("namespace"))
        return owner if owner is not None and owner["metadata"].get("uid") == ref.get("uid") else None

    def _rs_changed(self, rs: Obj) -> None:
        owner = self._owner(rs)
        if owner is not None:
            self.enqueue(owner)
        elif controller_ref(rs) is None:
            labels = rs["metadata"].get("labels") or {}
            for d in self.deployments.list(rs["metadata"].get("namespace")):
                if selector_of(d).matches(labels):
                    self.enqueue(d)

    def _rs_updated(self, old: Obj, new: Obj) -> None:
        if old["metadata"].get("resourceVersion") == new["metadata"].get("resourceVersion"):
            return
        if (controller_ref(old) or {}).get("uid") != (controller_ref(new) or {}).get("uid"):
            self._rs_changed(old)
        self._rs_changed(new)

    def _pod_deleted(self, pod: Obj) -> None:
        rs = self._owner(pod, "ReplicaSet")
        if rs is None:
            return
        d = self._owner(rs)
        if d is not None and not ro.is_rolling(d):
            self.enqueue(d)

    # -- sync --------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        cached = self.deployments.get(name, namespace)
        if cached is None:
            return
        d = copy.deepcopy(cached)
        rss = await self._claim(d)
        if d["metadata"].get("deletionTimestamp"):
            await self._sync_status_only(d, rss)
            return
        await self._check_paused(d)
        if (d.get("spec") or {}).get("paused"):
            await self._scale_sync(d, rss)
            return
        if self._is_scaling_event(d, rss):
            await self._scale_sync(d, rss)
            return
        if ro.is_rolling(d):
            await self._rollout_rolling(d, rss)
        else:
            await self._rollout_recreate(d, rss)

    async def _claim(self, d: Obj) -> list[Obj]:
        """The deployment's ReplicaSets (copies it may change): those it controls and the orphans it adopts."""
        selector = selector_of(d)
        uid = d["metadata"]["uid"]
        rss = self.rss.list(d["metadata"]["namespace"])
        owned = [rs for rs in rss if (controller_ref(rs) or {}).get("uid") == uid]
        orphans = [rs for rs in rss if controller_ref(rs) is None]
        claimed = await refmanager.claim(self.client, DEPLOYMENTS, d, lambda rs: selector.matches(
            rs["metadata"].get("labels")), owned, orphans, REPLICA_SETS)
        return [copy.deepcopy(rs) for rs in claimed]

    def _is_scaling_event(self, d: Obj, rss: list[Obj]) -> bool:
        desired = ro.replicas_of(d)
        for rs in rss:
            if ro.replicas_of(rs) <= 0:
                continue
            raw = (rs["metadata"].get("annotations") or {}).get(ro.DESIRED_REPLICAS)
            if raw is not None and raw.isdigit() and int(raw) != desired:
                return True
        return False

    async def _check_paused(self, d: Obj) -> None:
        if not ro.has_progress_deadline(d):
            return
        status = copy.deepcopy(d.get("status") or {})
        cond = find_condition(status.get("conditions"), "Progressing")
        paused = bool((d.get("spec") or {}).get("paused"))
        now = now_rfc3339()
        if paused and (cond is None or cond.get("reason") != "DeploymentPaused"):
            ro.set_condition(status, _cond("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused", now))
        elif not paused and cond is not None and cond.get("reason") == "DeploymentPaused":
            ro.set_condition(status, _cond("Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed", now))
        else:
            return
        await self._write_status(d, status)

    # -- replica sets ------------------------------------------------------------------------------

    async def _get_all(self, d: Obj, rss: list[Obj], create: bool) -> tuple[Obj | None, list[Obj]]:
        """(new ReplicaSet, old ones), syncing the new one's revision annotations; creates it if asked."""
        new_rs = find_new_rs(d, rss)
        old = [rs for rs in rss if rs is not new_rs]
        max_old = max((ro.revision(rs) for rs in old), default=0)
        new_revision = max_old + 1
        if new_rs is not None:
            new_rs = await self._sync_new_rs_annotations(d, new_rs, new_revision)
        elif create:
            new_rs = await self._create_new_rs(d, old, new_revision)
            if new_rs is None:
                return None, old
        if new_rs is not None:
            await self._sync_deployment_revision(d, str(ro.revision(new_rs)))
        return new_rs, old

    def _rs_annotations(self, d: Obj, rs: Obj, new_revision: int, creating: bool = False) -> dict[str, str]:
        current = dict(rs["metadata"].get("annotations") or {})
        out = dict(current)
        for k, v in (d["metadata"].get("annotations") or {}).items():
            if k not in ro.SKIP_ANNOTATIONS:
                out[k] = v
        old_revision = current.get(ro.REVISION)
        if ro.revision(rs) < new_revision:
            if old_revision:
                history = [h for h in (current.get(ro.REVISION_HISTORY) or "").split(",") if h]
                out[ro.REVISION_HISTORY] = ",".join([*history, old_revision])
            out[ro.REVISION] = str(new_revision)
        if creating:
            out[ro.DESIRED_REPLICAS] = str(ro.replicas_of(d))
            out[ro.MAX_REPLICAS] = str(ro.replicas_of(d) + ro.max_surge(d))
        return out

    async def _sync_new_rs_annotations(self, d: Obj, rs: Obj, new_revision: int) -> Obj:
        annotations = self._rs_annotations(d, rs, new_revision)
        min_ready = (d.get("spec") or {}).get("minReadySeconds") or 0
        if annotations == (rs["metadata"].get("annotations") or {}) and (
            ((rs.get("spec") or {}).get("minReadySeconds") or 0) == min_ready
        ):
            return rs
        patch = {"metadata": {"annotations": annotations, "resourceVersion": rs["metadata"]["resourceVersion"]},
                 "spec": {"minReadySeconds": min_ready}}
        return await self.client.patch(REPLICA_SETS, rs["metadata"]["name"], patch, rs["metadata"]["namespace"])

    async def _sync_deployment_revision(self, d: Obj, rev: str) -> None:
        if (d["metadata"].get("annotations") or {}).get(ro.REVISION) == rev:
            return
        updated = await self.client.patch(DEPLOYMENTS, d["metadata"]["name"],
                                          {"metadata": {"annotations": {ro.REVISION: rev}}},
                                          d["metadata"]["namespace"])
        d["metadata"] = updated["metadata"]

    async def _create_new_rs(self, d: Obj, all_rss: list[Obj], new_revision: int) -> Obj | None:
        status = d.setdefault("status", {})
        template = copy.deepcopy(d["spec"].get("template") or {})
        pod_hash = template_hash(template, status.get("collisionCount"))
        template.setdefault("metadata", {}).setdefault("labels", {})[ro.HASH_LABEL] = pod_hash
        selector = copy.deepcopy(d["spec"].get("selector") or {})
        selector.setdefault("matchLabels", {})[ro.HASH_LABEL] = pod_hash
        namespace = d["metadata"]["namespace"]
        rs: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{d['metadata']['name']}-{pod_hash}",
                "namespace": namespace,
                "labels": dict(template["metadata"]["labels"]),
                "ownerReferences": [new_controller_ref(d)],
                "annotations": {},
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": (d.get("spec") or {}).get("minReadySeconds") or 0,
                "selector": selector,
                "template": template,
            },
        }
        rs["metadata"]["annotations"] = self._rs_annotations(d, rs, new_revision, creating=True)
        rs["spec"]["replicas"] = ro.new_rs_new_replicas(d, all_rss, rs)
        try:
            created = await self.client.create(REPLICA_SETS, rs, namespace)
        except AlreadyExists:
            existing = await self.client.get(REPLICA_SETS, rs["metadata"]["name"], namespace)
            ref = controller_ref(existing)
            if ref is not None and ref.get("uid") == d["metadata"]["uid"] and equal_ignore_hash(
                (existing.get("spec") or {}).get("template") or {}, d["spec"].get("template") or {}
            ):
                return existing
            status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
            await self.client.patch_status(DEPLOYMENTS, d["metadata"]["name"],
                                           {"status": {"collisionCount": status["collisionCount"]}}, namespace)
            raise RuntimeError(f"hash collision for replica set {rs['metadata']['name']}") from None
        replicas = ro.replicas_of(created)
        if replicas > 0:
            self.recorder.normal(d, "ScalingReplicaSet",
                                 f"Scaled up replica set {created['metadata']['name']} from 0 to {replicas}")
        if ro.has_progress_deadline(d):
            ro.set_condition(status, _cond("Progressing", "True", "NewReplicaSetCreated",
                                           f'Created new replica set "{created["metadata"]["name"]}"', now_rfc3339()))
            await self._write_status(d, status)
        return created

    async def _scale_rs(self, d: Obj, rs: Obj, size: int, operation: str) -> Obj:
        """Set a ReplicaSet's replicas and desired/max annotations; records ScalingReplicaSet."""
        annotations = dict(rs["metadata"].get("annotations") or {})
        desired, max_r = str(ro.replicas_of(d)), str(ro.replicas_of(d) + ro.max_surge(d))
        old_size = ro.replicas_of(rs)
        if old_size == size and annotations.get(ro.DESIRED_REPLICAS) == desired and (
            annotations.get(ro.MAX_REPLICAS) == max_r
        ):
            return rs
        patch = {"metadata": {"annotations": {ro.DESIRED_REPLICAS: desired, ro.MAX_REPLICAS: max_r},
                              "resourceVersion": rs["metadata"]["resourceVersion"]},
                 "spec": {"replicas": size}}
        updated = await self.client.patch(REPLICA_SETS, rs["metadata"]["name"], patch, rs["metadata"]["namespace"])
        rs.clear()
        rs.update(updated)
        if old_size != size:
            self.recorder.normal(d, "ScalingReplicaSet",
                                 f"Scaled {operation} replica set {rs['metadata']['name']} from {old_size} to {size}")
        return rs

    # -- strategies --------------------------------------------------------------------------------

    async def _rollout_rolling(self, d: Obj, rss: list[Obj]) -> None:
        new_rs, old = await self._get_all(d, rss, create=True)
        all_rss = old + ([new_rs] if new_rs is not None else [])
        if new_rs is not None and await self._reconcile_new(d, all_rss, new_rs):
            await self._sync_rollout_status(d, all_rss, new_rs)
            return
        if await self._reconcile_old(d, all_rss, [rs for rs in old if ro.replicas_of(rs) > 0], new_rs):
            await self._sync_rollout_status(d, all_rss, new_rs)
            return
        if ro.complete(d, calculate_status(d, all_rss, new_rs)):
            await self._cleanup(d, old)
        await self._sync_rollout_status(d, all_rss, new_rs)

    async def _reconcile_new(self, d: Obj, all_rss: list[Obj], new_rs: Obj) -> bool:
        desired = ro.replicas_of(d)
        current = ro.replicas_of(new_rs)
        if current == desired:
            return False
        if current > desired:
            await self._scale_rs(d, new_rs, desired, "down")
            return True
        target = ro.new_rs_new_replicas(d, all_rss, new_rs)
        if target == current:
            return False
        await self._scale_rs(d, new_rs, target, "up")
        return True

    async def _reconcile_old(self, d: Obj, all_rss: list[Obj], old: list[Obj], new_rs: Obj | None) -> bool:
        if sum(ro.replicas_of(rs) for rs in old) == 0:
            return False
        budget = ro.max_scaled_down(d, all_rss, new_rs)
        if budget <= 0:
            return False
        cleaned = 0
        for rs in sorted(old, key=lambda r: (_created(r), r["metadata"]["name"])):
            if cleaned >= budget:
                break
            unhealthy = ro.replicas_of(rs) - ro.available_of(rs)
            if ro.replicas_of(rs) == 0 or unhealthy <= 0:
                continue
            count = min(budget - cleaned, unhealthy)
            await self._scale_rs(d, rs, ro.replicas_of(rs) - count, "down")
            cleaned += count
        min_available = ro.replicas_of(d) - ro.max_unavailable(d)
        available = sum(ro.available_of(rs) for rs in all_rss)
        scaled = 0
        if available > min_available:
            total = available - min_available
            for rs in sorted(old, key=lambda r: (_created(r), r["metadata"]["name"])):
                if scaled >= total:
                    break
                if ro.replicas_of(rs) == 0:
                    continue
                count = min(ro.replicas_of(rs), total - scaled)
                await self._scale_rs(d, rs, ro.replicas_of(rs) - count, "down")
                scaled += count
        return cleaned + scaled > 0

    async def _rollout_recreate(self, d: Obj, rss: list[Obj]) -> None:
        new_rs, old = await self._get_all(d, rss, create=False)
        all_rss = old + ([new_rs] if new_rs is not None else [])
        active_old = [rs for rs in old if ro.replicas_of(rs) > 0]
        if active_old:
            for rs in active_old:
                await self._scale_rs(d, rs, 0, "down")
            await self._sync_rollout_status(d, all_rss, new_rs)
            return
        if self._old_pods_running(old):
            await self._sync_rollout_status(d, all_rss, new_rs)
            return
        if new_rs is None:
            new_rs, old = await self._get_all(d, rss, create=True)
            all_rss = old + ([new_rs] if new_rs is not None else [])
        if new_rs is not None and ro.replicas_of(new_rs) != ro.replicas_of(d):
            await self._scale_rs(d, new_rs, ro.replicas_of(d), "up")
        if ro.complete(d, calculate_status(d, all_rss, new_rs)):
            await self._cleanup(d, old)
        await self._sync_rollout_status(d, all_rss, new_rs)

    def _old_pods_running(self, old: list[Obj]) -> bool:
        for rs in old:
            if ro.status_of(rs, "replicas") > 0:
                return True
            for pod in self.pods.store.by_index(OWNER_UID_INDEX, rs["metadata"]["uid"]):
                if not is_terminal(pod):
                    return True
        return False

    async def _scale_sync(self, d: Obj, rss: list[Obj]) -> None:
        """A scaling event or a paused deployment: resize without rolling, then report status."""
        new_rs, old = await self._get_all(d, rss, create=False)
        await self._scale(d, new_rs, old)
        if (d.get("spec") or {}).get("paused"):
            await self._cleanup(d, old)
        all_rss = old + ([new_rs] if new_rs is not None else [])
        status = calculate_status(d, all_rss, new_rs)
        await self._write_status(d, status)

    async def _scale(self, d: Obj, new_rs: Obj | None, old: list[Obj]) -> None:
        desired = ro.replicas_of(d)
        active = [rs for rs in ([new_rs] if new_rs is not None else []) + old if ro.replicas_of(rs) > 0]
        target: Obj | None = None
        if len(active) == 1:
            target = active[0]
        elif not active:
            target = new_rs or (max(old, key=_created) if old else None)
        if target is not None:
            if ro.replicas_of(target) != desired:
                await self._scale_rs(d, target, desired, "up" if ro.replicas_of(target) < desired else "down")
            return
        if new_rs is not None and ro.replicas_of(new_rs) == desired and ro.status_of(
            new_rs, "availableReplicas"
        ) == desired and (new_rs["metadata"].get("annotations") or {}).get(ro.DESIRED_REPLICAS) == str(desired):
            for rs in old:
                if ro.replicas_of(rs) > 0:
                    await self._scale_rs(d, rs, 0, "down")
            return
        if not ro.is_rolling(d):
            return
        sizes = ro.proportional_sizes(d, active)
        for rs in active:
            size = sizes[rs["metadata"]["name"]]
            await self._scale_rs(d, rs, size, "up" if size > ro.replicas_of(rs) else "down")

    async def _cleanup(self, d: Obj, old: list[Obj]) -> None:
        """Delete the oldest idle ReplicaSets beyond revisionHistoryLimit."""
        limit = (d.get("spec") or {}).get("revisionHistoryLimit")
        if limit is None:
            return
        idle = [rs for rs in old if ro.replicas_of(rs) == 0 and ro.status_of(rs, "replicas") == 0
                and not rs["metadata"].get("deletionTimestamp")
                and ro.status_of(rs, "observedGeneration") >= int(rs["metadata"].get("generation") or 0)]
        excess = len(idle) - int(limit)
        if excess <= 0:
            return
        for rs in sorted(idle, key=lambda r: (ro.revision(r), _created(r)))[:excess]:
            try:
                await self.client.delete(REPLICA_SETS, rs["metadata"]["name"], rs["metadata"]["namespace"],
                                         preconditions={"uid": rs["metadata"]["uid"]})
            except NotFound:
                pass

    # -- status ------------------------------------------------------------------------------------

    async def _sync_status_only(self, d: Obj, rss: list[Obj]) -> None:
        new_rs, old = await self._get_all(d, rss, create=False)
        all_rss = old + ([new_rs] if new_rs is not None else [])
        await self._write_status(d, calculate_status(d, all_rss, new_rs))

    async def _sync_rollout_status(self, d: Obj, all_rss: list[Obj], new_rs: Obj | None) -> None:
        status = calculate_status(d, all_rss, new_rs)
        now = datetime.now(UTC)
        stamp = now_rfc3339()
        if not ro.has_progress_deadline(d):
            ro.remove_condition(status, "Progressing")
        current = find_condition(status.get("conditions"), "Progressing")
        done = status["replicas"] == status["updatedReplicas"] and current is not None and (
            current.get("reason") == "NewReplicaSetAvailable")
        name = new_rs["metadata"]["name"] if new_rs is not None else ""
        if ro.has_progress_deadline(d) and not done:
            if ro.complete(d, status):
                msg = f'ReplicaSet "{name}" has successfully progressed.' if new_rs is not None else (
                    "Deployment has successfully progressed.")
                ro.set_condition(status, _cond("Progressing", "True", "NewReplicaSetAvailable", msg, stamp))
            elif ro.progressing(d, status):
                msg = f'ReplicaSet "{name}" is progressing.' if new_rs is not None else "Deployment is progressing."
                cond = _cond("Progressing", "True", "ReplicaSetUpdated", msg, stamp)
                if current is not None and current.get("status") == "True":
                    cond["lastTransitionTime"] = current.get("lastTransitionTime", stamp)
                ro.remove_condition(status, "Progressing")
                ro.set_condition(status, cond)
            elif ro.timed_out(d, status, now):
                msg = f'ReplicaSet "{name}" has timed out progressing.' if new_rs is not None else (
                    "Deployment has timed out progressing.")
                ro.set_condition(status, _cond("Progressing", "False", "ProgressDeadlineExceeded", msg, stamp))
        failure = next((c for rs in all_rss for c in (rs.get("status") or {}).get("conditions") or []
                        if c.get("type") == "ReplicaFailure" and c.get("status") == "True"), None)
        if failure is not None:
            ro.set_condition(status, _cond("ReplicaFailure", "True", failure.get("reason", ""),
                                           failure.get("message", ""), stamp))
        else:
            ro.remove_condition(status, "ReplicaFailure")
        await self._write_status(d, status)
        self._requeue_stuck(d, status, now)

    def _requeue_stuck(self, d: Obj, status: Obj, now: datetime) -> None:
        """Come back when the progress deadline would pass, since nothing else may wake us."""
        cond = find_condition(status.get("conditions"), "Progressing")
        if not ro.has_progress_deadline(d) or cond is None:
            return
        if cond.get("reason") in ("NewReplicaSetAvailable", "ProgressDeadlineExceeded"):
            return
        if ro.complete(d, status):
            return
        since = parse_time(cond.get("lastUpdateTime"))
        if since is None:
            return
        after = since.timestamp() + int(d["spec"]["progressDeadlineSeconds"]) - now.timestamp()
        raise RequeueAfter(max(after, 0.0) + 1.0)

    async def _write_status(self, d: Obj, status: Obj) -> None:
        if _same_status(d.get("status") or {}, status):
            return
        try:
            updated = await self.client.patch_status(DEPLOYMENTS, d["metadata"]["name"],
                                                     {"status": {**status, "conditions": status.get("conditions")}},
                                                     d["metadata"]["namespace"])
        except NotFound:
            return
        d["status"] = updated.get("status") or status


def _same_status(old: Obj, new: Obj) -> bool:
    keys = ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas", "availableReplicas",
            "unavailableReplicas", "collisionCount")
    return all((old.get(k) or 0) == (new.get(k) or 0) for k in keys) and (
        (old.get("conditions") or []) == (new.get("conditions") or []))
