"""TTL-after-finished controller: deletes a finished Job (with background propagation, so its
pods go through the garbage collector) once ttlSecondsAfterFinished has passed since it finished.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.resources import JOBS
from services.api.meta import parse_time
from services.client import Conflict, NotFound

NAME = "ttl-after-finished"

Obj = dict[str, Any]


def new(ctx: ControllerContext) -> TTLAfterFinishedController:
    return TTLAfterFinishedController(ctx)


def finish_time(job: Obj) -> datetime | None:
    """When the Complete or Failed condition turned True; None while the job runs."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return parse_time(cond.get("lastTransitionTime")) or parse_time(
                (job.get("status") or {}).get("completionTime")
            )
    return None


def needs_cleanup(job: Obj) -> bool:
    return (job.get("spec") or {}).get("ttlSecondsAfterFinished") is not None and finish_time(job) is not None


def time_left(job: Obj, now: datetime) -> float | None:
    """Seconds until the job expires (<= 0: expired); None if it has no TTL or has not finished."""
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    finished = finish_time(job)
    if ttl is None or finished is None:
        return None
    return (finished + timedelta(seconds=int(ttl)) - now).total_seconds()


class TTLAfterFinishedController(QueueController):
    def __init__(self, ctx: ControllerContext, clock: Callable[[], datetime] | None = None) -> None:
        self.client = ctx.client
        self.clock = clock or (lambda: datetime.now(UTC))
        self.jobs = ctx.informer(JOBS)
        super().__init__(
            "ttl-after-finished", [self.jobs], int(ctx.options.concurrent_ttl_after_finished_syncs)
        )
        self.jobs.add_event_handler(self._changed, lambda old, new: self._changed(new), None)

    def _changed(self, job: Obj) -> None:
        if not job["metadata"].get("deletionTimestamp") and needs_cleanup(job):
            self.enqueue(job)

    async def sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        job = self.jobs.get(name, namespace)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        left = time_left(job, self.clock())
        if left is None:
            return
        if left > 0:
            raise RequeueAfter(left)
        # The cache may be stale (TTL changed, job restarted): decide again on a fresh read.
        try:
            fresh = await self.client.get(JOBS, name, namespace)
        except NotFound:
            return
        left = time_left(fresh, self.clock())
        if left is None or fresh["metadata"].get("deletionTimestamp"):
            return
        if left > 0:
            raise RequeueAfter(left)
        meta = fresh["metadata"]
        try:
            await self.client.delete(
                JOBS,
                name,
                namespace,
                propagation_policy="Background",
                preconditions={"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
            )
        except (NotFound, Conflict):
            return
        self.log.info("deleted finished job after its TTL", job=key)
