"""Job controller: runs pods until `completions` succeed (NonIndexed or Indexed), at most
`parallelism` at a time, with exponential backoff after pod failures, backoffLimit and
backoffLimitPerIndex, activeDeadlineSeconds, suspend/resume, podFailurePolicy and successPolicy.

Every pod carries the `batch.kubernetes.io/job-tracking` finalizer. A finished pod is first
recorded in status.uncountedTerminatedPods, then its finalizer is removed, then it moves into
the succeeded/failed counters, so no finished pod is lost or counted twice across restarts.
A job ends in two steps as upstream: FailureTarget/SuccessCriteriaMet while its remaining pods
terminate, then Failed/Complete.

A job claims its pods like the ReplicaSet (adopting matching orphans with the tracking finalizer,
releasing pods that stopped matching). A pod that still carries the finalizer but whose job is gone,
finished or no longer its controller is queued as an orphan and loses the finalizer, so the pods of
a deleted job do not hang in Terminating.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.controllers.job.policy import (
    backoff_exceeded,
    format_indexes,
    is_finished,
    match_pod_failure_policy,
    parse_indexes,
    pod_failure_backoff,
    success_policy_rule,
    wanted_active,
)
from controller_manager.expectations import Expectations
from controller_manager.podutil import (
    ORPHANS_INDEX,
    SLOW_START_INITIAL_BATCH,
    BatchError,
    controller_ref,
    index_orphans,
    is_ready,
    pod_from_template,
    pods_to_delete,
    selector_of,
    slow_start_batch,
)
from controller_manager.refmanager import claim_pods
from controller_manager.resources import JOBS, PODS
from services.api.conditions import true_condition
from services.api.meta import parse_time
from services.client import NotFound
from services.informers import OWNER_UID_INDEX, meta_namespace_key

NAME = "job"

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
#: upstream's MaxUncountedPods / MaxPodCreateDeletePerSync
MAX_UNCOUNTED = 500
MAX_PER_SYNC = 500
#: queue keys of pods whose tracking finalizer may have to go (upstream's orphanQueue)
ORPHAN_KEY = "orphan-pod:"

Obj = dict[str, Any]


def new(ctx: ControllerContext) -> JobController:
    return JobController(ctx)


def _fmt(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def has_finalizer(pod: Obj) -> bool:
    return TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])


def pod_index(pod: Obj) -> int | None:
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(COMPLETION_INDEX) or (meta.get("labels") or {}).get(
        COMPLETION_INDEX
    )
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def only_replace_failed(job: Obj) -> bool:
    return (job.get("spec") or {}).get("podReplacementPolicy") == "Failed"


def pod_failed(pod: Obj, job: Obj) -> bool:
    """Failed, or (unless podReplacementPolicy is Failed) deleted before it succeeded."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return bool(pod["metadata"].get("deletionTimestamp")) and phase != "Succeeded"


def pod_finished(pod: Obj, job: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Succeeded" or pod_failed(pod, job)


def finish_time(pod: Obj) -> float:
    latest = 0.0
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        done = parse_time(((status.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if done:
            latest = max(latest, done.timestamp())
    if not latest:
        stamp = parse_time(
            pod["metadata"].get("deletionTimestamp") or pod["metadata"].get("creationTimestamp")
        )
        latest = stamp.timestamp() if stamp else 0.0
    return latest


def job_pod(job: Obj, index: int | None, failure_count: int = 0) -> Obj:
    """A pod for the job (and completion index), carrying the tracking finalizer."""
    name = job["metadata"]["name"]
    template = (job.get("spec") or {}).get("template") or {}
    prefix = f"{name}-" if index is None else f"{name}-{index}-"
    pod = pod_from_template(template, job, prefix)
    meta = pod["metadata"]
    meta["finalizers"] = [*(meta.get("finalizers") or []), TRACKING_FINALIZER]
    if index is None:
        return pod
    meta.setdefault("annotations", {})[COMPLETION_INDEX] = str(index)
    meta.setdefault("labels", {})[COMPLETION_INDEX] = str(index)
    if (job.get("spec") or {}).get("backoffLimitPerIndex") is not None:
        meta["annotations"][INDEX_FAILURE_COUNT] = str(failure_count)
    spec = pod["spec"]
    if not spec.get("hostname"):
        spec["hostname"] = f"{name}-{index}"
    env_var = {
        "name": COMPLETION_INDEX_ENV,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
    }
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            env = container.setdefault("env", [])
            if all(e.get("name") != COMPLETION_INDEX_ENV for e in env):
                env.append(dict(env_var))
    return pod


def _condition(kind: str, reason: str, message: str, now: datetime, status: str = "True") -> Obj:
    stamp = _fmt(now)
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }


def set_condition(conditions: list[Obj], new: Obj) -> list[Obj]:
    """Replace the condition of that type, keeping lastTransitionTime if the status did not change."""
    out = []
    for cond in conditions:
        if cond.get("type") == new["type"]:
            if cond.get("status") == new["status"]:
                new = {**new, "lastTransitionTime": cond.get("lastTransitionTime", new["lastTransitionTime"])}
            continue
        out.append(cond)
    out.append(new)
    return out


@dataclass
class BackoffRecord:
    """Consecutive failures since the last success and when the last one happened (in memory, as upstream)."""

    failures: int = 0
    last_failure: float = 0.0
    seen: set[str] = field(default_factory=set)

    def observe(self, pods: list[tuple[Obj, bool]]) -> None:
        """Fold in newly finished (pod, failed) pairs in the order they finished."""
        for pod, failed in sorted(pods, key=lambda pf: finish_time(pf[0])):
            uid = pod["metadata"]["uid"]
            if uid in self.seen:
                continue
            self.seen.add(uid)
            if failed:
                self.failures += 1
                self.last_failure = max(self.last_failure, finish_time(pod))
            else:
                self.failures = 0

    def remaining(self, now: float) -> float:
        if self.failures <= 0:
            return 0.0
        return self.last_failure + pod_failure_backoff(self.failures) - now


class JobController(QueueController):
    def __init__(self, ctx: ControllerContext, clock: Callable[[], datetime] | None = None) -> None:
        self.client = ctx.client
        self.clock = clock or (lambda: datetime.now(UTC))
        self.jobs = ctx.informer(JOBS)
        self.pods = ctx.informer(PODS)
        self.recorder = ctx.recorder("job-controller")
        self.expectations = Expectations()
        self.backoff: dict[str, BackoffRecord] = {}
        #: pods whose tracking finalizer we removed and whose update the pod cache has not shown yet
        self.finalizer_removed: set[str] = set()
        self.pods.store.add_indexers({ORPHANS_INDEX: index_orphans})
        super().__init__("job", [self.jobs, self.pods], int(ctx.options.concurrent_job_syncs))
        self.jobs.add_event_handler(self.enqueue, lambda old, new: self.enqueue(new), self._job_deleted)
        self.pods.add_event_handler(self._pod_added, self._pod_changed, self._pod_deleted)

    # -- handlers ----------------------------------------------------------------------------------

    def _job_deleted(self, job: Obj) -> None:
        key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        self.expectations.delete(key)
        self.backoff.pop(key, None)
        self.enqueue(job)
        for pod in self.pods.store.by_index(OWNER_UID_INDEX, job["metadata"].get("uid", ""), ordered=False):
            if has_finalizer(pod):
                self._enqueue_orphan(pod)

    def _enqueue_orphan(self, pod: Obj) -> None:
        self.queue.add(ORPHAN_KEY + meta_namespace_key(pod))

    def _matching_jobs(self, pod: Obj) -> list[Obj]:
        """Jobs whose selector takes an orphan in: they may adopt it."""
        labels = (pod.get("metadata") or {}).get("labels")
        if not labels:
            return []
        return [j for j in self.jobs.list(pod["metadata"].get("namespace")) if selector_of(j).matches(labels)]

    def _owner(self, pod: Obj) -> Obj | None:
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "Job":
            return None
        job = self.jobs.get(ref.get("name", ""), pod["metadata"].get("namespace"))
        if job is None or job["metadata"].get("uid") != ref.get("uid"):
            return None
        return job

    def _pod_added(self, pod: Obj) -> None:
        job = self._owner(pod)
        if job is not None:
            self.expectations.creation_observed(self._key(job))
            self.enqueue(job)
        self._route_unowned(pod, job)

    def _pod_changed(self, old: Obj, pod: Obj) -> None:
        if not has_finalizer(pod):
            self.finalizer_removed.discard(pod["metadata"].get("uid"))
        old_ref, new_ref = controller_ref(old), controller_ref(pod)
        if old_ref is not None and (new_ref is None or old_ref.get("uid") != new_ref.get("uid")):
            previous = self._owner(old)
            if previous is not None:
                self.enqueue(previous)
        job = self._owner(pod)
        if job is not None:
            self.enqueue(job)
        self._route_unowned(pod, job)

    def _route_unowned(self, pod: Obj, job: Obj | None) -> None:
        """A pod no live job controls: jobs that select it may adopt it; its finalizer may have to go."""
        if job is not None and not is_finished(job):
            return
        if has_finalizer(pod):
            self._enqueue_orphan(pod)
        if controller_ref(pod) is None:
            for candidate in self._matching_jobs(pod):
                self.enqueue(candidate)

    def _pod_deleted(self, pod: Obj) -> None:
        self.finalizer_removed.discard(pod["metadata"].get("uid"))
        job = self._owner(pod)
        if job is not None:
            self.expectations.deletion_observed(self._key(job), pod["metadata"].get("uid"))
            self.enqueue(job)

    @staticmethod
    def _key(job: Obj) -> str:
        return f"{job['metadata']['namespace']}/{job['metadata']['name']}"

    # -- sync --------------------------------------------------------------------------------------

    def _owned_pods(self, job: Obj) -> list[Obj]:
        """Pods whose controller reference is this job, whatever their labels."""
        uid = job["metadata"]["uid"]
        return [
            p
            for p in self.pods.store.by_index(OWNER_UID_INDEX, uid)
            if (controller_ref(p) or {}).get("uid") == uid
        ]

    def _job_pods(self, job: Obj) -> list[Obj]:
        """The job's pods as the cache has them: owned and selected."""
        selector = selector_of(job)
        return [p for p in self._owned_pods(job) if selector.matches(p["metadata"].get("labels"))]

    async def _claim(self, job: Obj) -> list[Obj]:
        """The job's pods after adopting matching orphans and releasing pods that stopped matching."""
        orphans = self.pods.store.by_index(ORPHANS_INDEX, job["metadata"]["namespace"])
        return await claim_pods(
            self.client, JOBS, job, selector_of(job), self._owned_pods(job), orphans,
            finalizers=(TRACKING_FINALIZER,), keep_inactive=True,
        )

    async def sync(self, key: str) -> None:
        if key.startswith(ORPHAN_KEY):
            await self._sync_orphan(key.removeprefix(ORPHAN_KEY))
            return
        namespace, _, name = key.partition("/")
        job = self.jobs.get(name, namespace)
        if job is None:
            return
        if is_finished(job) or job["metadata"].get("deletionTimestamp"):
            await self._remove_finalizers([p for p in self._job_pods(job) if has_finalizer(p)])
            return
        await JobSync(self, key, job, await self._claim(job)).run()

    async def _sync_orphan(self, key: str) -> None:
        """Drop the tracking finalizer of a pod no running job controls (upstream's syncOrphanPod)."""
        namespace, _, name = key.partition("/")
        pod = self.pods.get(name, namespace)
        if pod is None or not has_finalizer(pod):
            return
        job = self._owner(pod)
        if job is not None and not is_finished(job):
            return
        await self._remove_finalizers([pod], unchanged=True)

    async def _remove_finalizers(self, pods: list[Obj], unchanged: bool = False) -> set[str]:
        """Drop the tracking finalizer; returns the uids whose finalizer is gone (or whose pod is gone).

        `unchanged` makes each removal apply only to the version of the pod the cache holds: an orphan
        a job adopted meanwhile (the adoption adds the finalizer back) keeps it, and its update event
        brings the pod back here if it is still an orphan.
        """

        async def one(pod: Obj) -> str | None:
            meta = pod["metadata"]
            finalizers = [f for f in meta.get("finalizers") or [] if f != TRACKING_FINALIZER]
            patch = [
                {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
                {"op": "replace", "path": "/metadata/finalizers", "value": finalizers},
            ]
            if unchanged:
                patch.insert(1, {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]})
            self.finalizer_removed.add(str(meta["uid"]))
            try:
                await self.client.patch(PODS, meta["name"], patch, meta["namespace"], patch_type="json")
            except NotFound:
                return str(meta["uid"])
            except Exception as exc:
                self.finalizer_removed.discard(str(meta["uid"]))
                self.log.info("could not remove job tracking finalizer", pod=meta["name"], error=str(exc))
                return None
            return str(meta["uid"])

        results = await asyncio.gather(*(one(p) for p in pods))
        return {uid for uid in results if uid}


class JobSync:
    """One pass over one job: count finished pods, decide whether it ends, then manage its pods."""

    def __init__(self, ctl: JobController, key: str, job: Obj, pods: list[Obj]) -> None:
        self.ctl = ctl
        self.key = key
        self.job = job
        self.spec: Obj = job.get("spec") or {}
        self.pods = pods
        self.now = ctl.clock()
        old = job.get("status") or {}
        self.status: Obj = {
            "active": old.get("active") or 0,
            "succeeded": old.get("succeeded") or 0,
            "failed": old.get("failed") or 0,
            "startTime": old.get("startTime"),
            "conditions": list(old.get("conditions") or []),
            "uncountedTerminatedPods": {
                "succeeded": list((old.get("uncountedTerminatedPods") or {}).get("succeeded") or []),
                "failed": list((old.get("uncountedTerminatedPods") or {}).get("failed") or []),
            },
        }
        self.indexed = self.spec.get("completionMode") == "Indexed"
        completions = self.spec.get("completions")
        self.completions = int(completions) if completions is not None else None
        if self.indexed:
            self.status["completedIndexes"] = old.get("completedIndexes") or ""
            if self.spec.get("backoffLimitPerIndex") is not None:
                self.status["failedIndexes"] = old.get("failedIndexes") or ""
        for k in ("ready", "terminating", "completionTime"):
            if old.get(k) is not None:
                self.status[k] = old[k]
        self.old = old
        self.resource_version = job["metadata"]["resourceVersion"]
        self.requeue: float | None = None

    # -- helpers -----------------------------------------------------------------------------------

    @property
    def completed(self) -> set[int]:
        return parse_indexes(self.status.get("completedIndexes"), self.completions)

    @property
    def failed_indexes(self) -> set[int]:
        return parse_indexes(self.status.get("failedIndexes"), self.completions)

    def _requeue(self, delay: float) -> None:
        self.requeue = delay if self.requeue is None else min(self.requeue, delay)

    def _set(self, cond: Obj) -> None:
        self.status["conditions"] = set_condition(self.status["conditions"], cond)

    async def _write_status(self) -> None:
        status = dict(self.status)
        uncounted = status["uncountedTerminatedPods"]
        status["uncountedTerminatedPods"] = {k: v or None for k, v in uncounted.items()}
        if not status["conditions"]:
            status["conditions"] = None
        compare = {k: self.old.get(k) for k in status}
        old_uncounted = self.old.get("uncountedTerminatedPods") or {}
        compare["uncountedTerminatedPods"] = {k: old_uncounted.get(k) or None for k in uncounted}
        compare["conditions"] = self.old.get("conditions") or None
        for k in ("active", "succeeded", "failed"):
            compare[k] = self.old.get(k) or 0
        if compare == status:
            return
        try:
            # The resourceVersion makes a write from a stale cache conflict instead of rewinding counters.
            updated = await self.ctl.client.patch_status(
                JOBS,
                self.job["metadata"]["name"],
                {"metadata": {"resourceVersion": self.resource_version}, "status": status},
                self.job["metadata"]["namespace"],
            )
        except NotFound:
            return
        self.old = updated.get("status") or {}
        self.resource_version = updated["metadata"]["resourceVersion"]

    # -- the pass ----------------------------------------------------------------------------------

    async def run(self) -> None:
        job = self.job
        if self.status["startTime"] is None and not self.spec.get("suspend"):
            self.status["startTime"] = _fmt(self.now)
        fail_job_message = await self._track_finished()
        active = [
            p for p in self.pods if not pod_finished(p, job) and not p["metadata"].get("deletionTimestamp")
        ]
        terminating = [
            p
            for p in self.pods
            if p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        target = true_condition(job, "FailureTarget") or true_condition(job, "SuccessCriteriaMet")
        if target is None:
            target = self._decide_end(active, fail_job_message)
        if target is not None:
            await self._finish(target, active, terminating)
        elif self.spec.get("suspend"):
            await self._suspend(active)
        else:
            if true_condition(job, "Suspended"):
                self._set(_condition("Suspended", "JobResumed", "Job resumed", self.now, status="False"))
                self.status["startTime"] = _fmt(self.now)
                self.ctl.recorder.normal(job, "Resumed", "Job resumed")
            if self.ctl.expectations.satisfied(self.key):
                active = await self._manage(active, terminating)
            self._deadline_requeue()
        self.status["active"] = len(active)
        self.status["ready"] = sum(1 for p in active if is_ready(p))
        self.status["terminating"] = len(terminating)
        await self._write_status()
        if self.requeue is not None:
            raise RequeueAfter(max(self.requeue, 0.05))

    async def _track_finished(self) -> str:
        """Record newly finished pods, remove their finalizers, move them into the counters.

        Returns the message of a FailJob podFailurePolicy match, "" if none.
        """
        job = self.job
        uncounted = self.status["uncountedTerminatedPods"]
        known = set(uncounted["succeeded"]) | set(uncounted["failed"])
        newly: list[Obj] = []
        fail_job = ""
        completed, failed_idx = self.completed, self.failed_indexes
        per_index = self.spec.get("backoffLimitPerIndex") is not None
        succeeding = true_condition(job, "SuccessCriteriaMet") is not None
        observed: list[tuple[Obj, bool]] = []
        for pod in self.pods:
            if not has_finalizer(pod) or not pod_finished(pod, job):
                continue
            uid = pod["metadata"]["uid"]
            if uid in known:
                newly.append(pod)
                continue
            if uid in self.ctl.finalizer_removed:
                continue  # counted already; the pod cache has not caught up with the removal yet
            if len(newly) >= MAX_UNCOUNTED:
                break
            index = pod_index(pod)
            if (pod.get("status") or {}).get("phase") == "Succeeded":
                if self.indexed:
                    if (
                        index is None
                        or (self.completions is not None and index >= self.completions)
                        or index in completed
                    ):
                        newly.append(pod)
                        continue
                    completed.add(index)
                uncounted["succeeded"].append(uid)
                observed.append((pod, False))
            elif (pod.get("status") or {}).get("phase") != "Failed" and succeeding:
                newly.append(pod)  # removed because the job already succeeded: not a failure
                continue
            else:
                action, message = match_pod_failure_policy(self.spec.get("podFailurePolicy"), pod)
                if action == "Ignore":
                    newly.append(pod)
                    continue
                if action == "FailJob" and not fail_job:
                    fail_job = message
                if per_index and index is not None:
                    tries = _failure_count(pod) + 1
                    if action == "FailIndex" or tries > int(self.spec["backoffLimitPerIndex"]):
                        failed_idx.add(index)
                uncounted["failed"].append(uid)
                observed.append((pod, True))
            newly.append(pod)
        if observed:
            self.ctl.backoff.setdefault(self.key, BackoffRecord()).observe(observed)
        if self.indexed:
            self.status["completedIndexes"] = format_indexes(completed)
            if per_index:
                self.status["failedIndexes"] = format_indexes(failed_idx)
        if not newly and not known:
            return fail_job
        await self._write_status()
        done = await self.ctl._remove_finalizers(newly)
        tracked = {p["metadata"]["uid"] for p in self.pods if has_finalizer(p)}
        done |= {uid for uid in known if uid not in tracked}
        for kind in ("succeeded", "failed"):
            moved = [u for u in uncounted[kind] if u in done]
            self.status[kind] += len(moved)
            uncounted[kind] = [u for u in uncounted[kind] if u not in done]
        self.pods = [p for p in self.pods if p["metadata"]["uid"] not in done or not pod_finished(p, job)]
        return fail_job

    def _decide_end(self, active: list[Obj], fail_job_message: str) -> Obj | None:
        """The FailureTarget or SuccessCriteriaMet condition the job reaches now, if any."""
        spec = self.spec
        uncounted = self.status["uncountedTerminatedPods"]
        succeeded = self.status["succeeded"] + len(uncounted["succeeded"])
        failed = self.status["failed"] + len(uncounted["failed"])
        if fail_job_message:
            return _condition("FailureTarget", "PodFailurePolicy", fail_job_message, self.now)
        restarts = 0
        if ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") == "OnFailure":
            restarts = sum(
                s.get("restartCount") or 0
                for p in active
                for s in (p.get("status") or {}).get("containerStatuses") or []
            )
        if backoff_exceeded(spec, failed, restarts):
            return _condition(
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                self.now,
            )
        deadline = spec.get("activeDeadlineSeconds")
        started = parse_time(self.status.get("startTime"))
        if deadline is not None and started is not None and not spec.get("suspend"):
            if started + timedelta(seconds=int(deadline)) <= self.now:
                return _condition(
                    "FailureTarget",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                    self.now,
                )
        if self.indexed and spec.get("backoffLimitPerIndex") is not None:
            failed_idx = self.failed_indexes
            max_failed = spec.get("maxFailedIndexes")
            if max_failed is not None and len(failed_idx) > int(max_failed):
                return _condition(
                    "FailureTarget",
                    "MaxFailedIndexesExceeded",
                    "Job has exceeded the specified maximal number of failed indexes",
                    self.now,
                )
            if (
                failed_idx
                and self.completions is not None
                and len(failed_idx | self.completed) >= self.completions
            ):
                return _condition("FailureTarget", "FailedIndexes", "Job has failed indexes", self.now)
        if self.indexed:
            rule = success_policy_rule(spec.get("successPolicy"), self.completed)
            if rule is not None:
                return _condition(
                    "SuccessCriteriaMet", "SuccessPolicy", f"Matched rules at index {rule}", self.now
                )
            if self.completions is not None and len(self.completed) >= self.completions:
                return _condition(
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    self.now,
                )
            return None
        if self.completions is not None and succeeded >= self.completions:
            return _condition(
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                self.now,
            )
        if self.completions is None and succeeded > 0 and not active:
            return _condition(
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                self.now,
            )
        return None

    async def _finish(self, target: Obj, active: list[Obj], terminating: list[Obj]) -> None:
        """Hold the interim condition while pods terminate, then the final one."""
        job = self.job
        success = target["type"] == "SuccessCriteriaMet"
        if not true_condition(job, target["type"]):
            self._set(target)
            if not success:
                self.ctl.recorder.warning(job, target["reason"], target["message"])
        if active:
            await self._delete_pods(active)
            active.clear()
            return
        uncounted = self.status["uncountedTerminatedPods"]
        if (
            terminating
            or uncounted["succeeded"]
            or uncounted["failed"]
            or any(has_finalizer(p) for p in self.pods)
        ):
            return
        final = _condition("Complete" if success else "Failed", target["reason"], target["message"], self.now)
        self._set(final)
        if success:
            self.status["completionTime"] = _fmt(self.now)
            self.ctl.recorder.normal(job, "Completed", "Job completed")

    async def _suspend(self, active: list[Obj]) -> None:
        if active:
            await self._delete_pods(active)
            active.clear()
        if not true_condition(self.job, "Suspended"):
            self._set(_condition("Suspended", "JobSuspended", "Job suspended", self.now))
            self.ctl.recorder.normal(self.job, "Suspended", "Job suspended")

    def _deadline_requeue(self) -> None:
        deadline = self.spec.get("activeDeadlineSeconds")
        started = parse_time(self.status.get("startTime"))
        if deadline is not None and started is not None:
            self._requeue((started + timedelta(seconds=int(deadline)) - self.now).total_seconds())

    async def _manage(self, active: list[Obj], terminating: list[Obj]) -> list[Obj]:
        """Create or delete pods toward the wanted active count; returns the pods left active."""
        blocking = len(terminating) if only_replace_failed(self.job) else 0
        if self.indexed:
            extra, missing = self._index_plan(active)
        else:
            succeeded = self.status["succeeded"] + len(self.status["uncountedTerminatedPods"]["succeeded"])
            want = wanted_active(self.spec, succeeded)
            diff = len(active) + blocking - want
            extra = pods_to_delete(active, diff) if diff > 0 else []
            missing = [None] * max(-diff, 0)
        if extra:
            await self._delete_pods(extra[:MAX_PER_SYNC])
            gone = {p["metadata"]["uid"] for p in extra}
            active = [p for p in active if p["metadata"]["uid"] not in gone]
        if missing:
            record = self.ctl.backoff.get(self.key)
            wait = record.remaining(self.now.timestamp()) if record else 0.0
            if wait > 0:
                self._requeue(wait)
            else:
                await self._create_pods(missing[:MAX_PER_SYNC])
        return active

    def _index_plan(self, active: list[Obj]) -> tuple[list[Obj], list[int | None]]:
        """Indexed mode: pods to delete (duplicates, out of range, done) and indexes to start."""
        done = self.completed | self.failed_indexes
        extra: list[Obj] = []
        running: dict[int, Obj] = {}
        for pod in sorted(active, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
            index = pod_index(pod)
            if (
                index is None
                or self.completions is None
                or index >= self.completions
                or index in done
                or index in running
            ):
                extra.append(pod)
            else:
                running[index] = pod
        parallelism = int(self.spec.get("parallelism") if self.spec.get("parallelism") is not None else 1)
        room = parallelism - len(running)
        if room < 0:
            victims = sorted(running.items(), key=lambda kv: -kv[0])[:-room]
            extra.extend(p for _, p in victims)
            return extra, []
        todo: list[int | None] = [
            i for i in range(self.completions or 0) if i not in done and i not in running
        ]
        return extra, todo[:room]

    def _index_failures(self, index: int) -> int:
        counts = [
            _failure_count(p) + 1
            for p in self.ctl._job_pods(self.job)
            if pod_index(p) == index and pod_failed(p, self.job)
        ]
        return max(counts, default=0)

    async def _create_pods(self, indexes: list[int | None]) -> None:
        job = self.job
        namespace = job["metadata"]["namespace"]
        self.ctl.expectations.expect_creations(self.key, len(indexes))
        queue = list(indexes)

        async def create_one() -> None:
            index = queue.pop(0)
            body = job_pod(job, index, self._index_failures(index) if index is not None else 0)
            try:
                created = await self.ctl.client.create(PODS, body, namespace)
            except Exception as exc:
                self.ctl.expectations.creation_observed(self.key)
                self.ctl.recorder.warning(job, "FailedCreate", f"Error creating: {exc}")
                raise
            self.ctl.recorder.normal(job, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")

        try:
            await slow_start_batch(len(indexes), SLOW_START_INITIAL_BATCH, create_one)
        except BatchError as err:
            skipped = len(indexes) - err.successes - len(err.errors)
            if skipped > 0:
                self.ctl.expectations.lower(self.key, adds=skipped)
            raise err.errors[0] from None

    async def _delete_pods(self, pods: list[Obj]) -> None:
        """Delete pods; their tracking finalizers are removed (and they are counted) by a later pass."""
        job = self.job

        async def one(pod: Obj) -> None:
            meta = pod["metadata"]
            try:
                await self.ctl.client.delete(
                    PODS, meta["name"], meta["namespace"], preconditions={"uid": meta["uid"]}
                )
            except NotFound:
                return
            self.ctl.recorder.normal(job, "SuccessfulDelete", f"Deleted pod: {meta['name']}")

        await asyncio.gather(*(one(p) for p in pods))


def _failure_count(pod: Obj) -> int:
    try:
        return int(((pod.get("metadata") or {}).get("annotations") or {}).get(INDEX_FAILURE_COUNT) or 0)
    except ValueError:
        return 0
