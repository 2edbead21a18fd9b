"""CronJob controller (upstream's cronjob v2 controller): starts a Job at each scheduled time
in the CronJob's time zone, honours suspend, startingDeadlineSeconds and concurrencyPolicy,
keeps status.active/lastScheduleTime/lastSuccessfulTime, and prunes finished Jobs beyond the
history limits.

The clock is injectable: `CronJobController(ctx, clock=...)` in tests, or
`--cronjob-clock-speed N` to run the whole process's schedule clock N times faster than real time.
"""

from __future__ import annotations

import argparse
import time
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.controllers.cronjob.schedule import (
    MAX_MISSED,
    Schedule,
    ScheduleError,
    missed_schedules,
    parse,
)
from controller_manager.podutil import controller_ref, new_controller_ref
from controller_manager.resources import CRON_JOBS, JOBS
from services.api.meta import parse_time
from services.client import AlreadyExists, NotFound

NAME = "cronjob"

SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"
#: upstream requeues a little after the next schedule time so it is surely past
NEXT_SCHEDULE_DELTA = 0.1

Obj = dict[str, Any]


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cronjob-clock-speed",
        type=float,
        default=1.0,
        help="pyk8s test aid: how many times faster than real time the CronJob schedule clock runs",
    )


class ScaledClock:
    """Wall-clock time running `speed` times faster than real time from the moment it was made."""

    def __init__(self, speed: float = 1.0, real: Callable[[], float] = time.time) -> None:
        self.speed = speed
        self.real = real
        self.origin = real()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.origin + (self.real() - self.origin) * self.speed, UTC)

    def real_delay(self, seconds: float) -> float:
        return seconds / self.speed


def new(ctx: ControllerContext) -> CronJobController:
    return CronJobController(ctx, ScaledClock(float(ctx.option("cronjob_clock_speed", 1.0) or 1.0)))


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_name(cronjob_name: str, scheduled: datetime) -> str:
    """Upstream's getJobName: the scheduled time in minutes since the epoch, so one job per minute."""
    return f"{cronjob_name}-{int(scheduled.timestamp()) // 60}"


def is_finished(job: Obj) -> tuple[bool, str]:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return True, cond["type"]
    return False, ""


def zone_of(cronjob: Obj) -> zoneinfo.ZoneInfo | None:
    """The time zone the schedule is read in; raises for an unknown one."""
    tz = (cronjob.get("spec") or {}).get("timeZone")
    if tz is None:
        return None
    return zoneinfo.ZoneInfo(tz)


def next_schedule_time(
    cronjob: Obj, schedule: Schedule, now: datetime
) -> tuple[datetime | None, int, datetime | None]:
    """(most recent unmet start time or None, missed count, the start time after now).

    Missed times are counted from lastScheduleTime (or creation), but never before now minus
    startingDeadlineSeconds, like upstream's mostRecentScheduleTime.
    """
    meta = cronjob.get("metadata") or {}
    spec = cronjob.get("spec") or {}
    status = cronjob.get("status") or {}
    earliest = parse_time(status.get("lastScheduleTime")) or parse_time(meta.get("creationTimestamp")) or now
    deadline = spec.get("startingDeadlineSeconds")
    if deadline is not None:
        earliest = max(earliest, now - timedelta(seconds=int(deadline)))
    recent, count = missed_schedules(schedule, earliest, now)
    return recent, count, schedule.next(now)


def too_late(cronjob: Obj, scheduled: datetime, now: datetime) -> bool:
    deadline = (cronjob.get("spec") or {}).get("startingDeadlineSeconds")
    return deadline is not None and scheduled + timedelta(seconds=int(deadline)) < now


def job_from_template(cronjob: Obj, scheduled: datetime, zone: zoneinfo.ZoneInfo | None) -> Obj:
    template = (cronjob.get("spec") or {}).get("jobTemplate") or {}
    tmeta = template.get("metadata") or {}
    annotations = dict(tmeta.get("annotations") or {})
    local = scheduled.astimezone(zone) if zone is not None else scheduled.astimezone(UTC)
    annotations[SCHEDULED_TIMESTAMP] = local.isoformat().replace("+00:00", "Z")
    meta: Obj = {
        "name": job_name(cronjob["metadata"]["name"], scheduled),
        "namespace": cronjob["metadata"]["namespace"],
        "ownerReferences": [new_controller_ref(cronjob)],
        "annotations": annotations,
    }
    if tmeta.get("labels"):
        meta["labels"] = dict(tmeta["labels"])
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": template.get("spec") or {}}


def job_ref(job: Obj) -> Obj:
    meta = job["metadata"]
    return {
        "kind": "Job",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "apiVersion": "batch/v1",
        "resourceVersion": meta.get("resourceVersion", ""),
    }


def history_to_delete(jobs: list[Obj], successful_limit: int | None, failed_limit: int | None) -> list[Obj]:
    """The oldest finished jobs beyond each history limit (by start time, then creation)."""

    def started(job: Obj) -> tuple[str, str]:
        return (
            (job.get("status") or {}).get("startTime") or "",
            job["metadata"].get("creationTimestamp") or "",
        )

    out: list[Obj] = []
    for kind, limit in (("Complete", successful_limit), ("Failed", failed_limit)):
        if limit is None:
            continue
        done = sorted((j for j in jobs if is_finished(j) == (True, kind)), key=started)
        out.extend(done[: max(len(done) - int(limit), 0)])
    return out


class CronJobController(QueueController):
    def __init__(self, ctx: ControllerContext, clock: ScaledClock | None = None) -> None:
        self.client = ctx.client
        self.clock = clock or ScaledClock()
        self.cronjobs = ctx.informer(CRON_JOBS)
        self.jobs = ctx.informer(JOBS)
        self.recorder = ctx.recorder("cronjob-controller")
        super().__init__("cronjob", [self.cronjobs, self.jobs], int(ctx.options.concurrent_cron_job_syncs))
        self.cronjobs.add_event_handler(self.enqueue, self._update_cronjob, None)
        self.jobs.add_event_handler(
            self._job_changed, lambda old, new: self._job_changed(new), self._job_changed
        )

    def _update_cronjob(self, old: Obj, new: Obj) -> None:
        self.enqueue(new)

    def _job_changed(self, job: Obj) -> None:
        ref = controller_ref(job)
        if ref is None or ref.get("kind") != "CronJob":
            return
        cronjob = self.cronjobs.get(ref.get("name", ""), job["metadata"].get("namespace"))
        if cronjob is not None and cronjob["metadata"].get("uid") == ref.get("uid"):
            self.enqueue(cronjob)

    def _owned_jobs(self, cronjob: Obj) -> list[Obj]:
        uid = cronjob["metadata"]["uid"]
        return [
            j
            for j in self.jobs.list(cronjob["metadata"]["namespace"])
            if (controller_ref(j) or {}).get("uid") == uid
        ]

    async def sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        cached = self.cronjobs.get(name, namespace)
        if cached is None:
            return
        cronjob = {**cached, "status": dict(cached.get("status") or {})}
        jobs = self._owned_jobs(cronjob)
        before = dict(cronjob["status"])
        await self._reconcile_active(cronjob, jobs)
        delay = None
        if not cronjob["metadata"].get("deletionTimestamp"):
            delay = await self._maybe_start(cronjob)
        if cronjob["status"] != before:
            status = cronjob["status"]
            patch = {
                "status": {
                    "active": status.get("active") or None,
                    "lastScheduleTime": status.get("lastScheduleTime"),
                    "lastSuccessfulTime": status.get("lastSuccessfulTime"),
                }
            }
            try:
                await self.client.patch_status(CRON_JOBS, name, patch, namespace)
            except NotFound:
                return
        if not cronjob["metadata"].get("deletionTimestamp"):
            await self._cleanup(cronjob, jobs)
        if delay is not None:
            raise RequeueAfter(self.clock.real_delay(delay))

    async def _reconcile_active(self, cronjob: Obj, jobs: list[Obj]) -> None:
        status = cronjob["status"]
        active = list(status.get("active") or [])
        active_uids = {a.get("uid") for a in active}
        children = set()
        for job in jobs:
            uid = job["metadata"]["uid"]
            children.add(uid)
            finished, kind = is_finished(job)
            if uid not in active_uids and not finished:
                known = await self._fresh_active_ref(cronjob, uid)
                if known is not None:  # our own creation, seen before the status update reached the cache
                    active.append(known)
                    continue
                self.recorder.warning(
                    cronjob,
                    "UnexpectedJob",
                    f"Saw a job that the controller did not create or forgot: {job['metadata']['name']}",
                )
                active.append(job_ref(job))
            elif uid in active_uids and finished:
                active = [a for a in active if a.get("uid") != uid]
                self.recorder.normal(
                    cronjob,
                    "SawCompletedJob",
                    f"Saw completed job: {job['metadata']['name']}, condition: {kind}",
                )
            if kind == "Complete":
                done = (job.get("status") or {}).get("completionTime")
                last = status.get("lastSuccessfulTime")
                if done and (not last or parse_time(done) > parse_time(last)):  # type: ignore[operator]
                    status["lastSuccessfulTime"] = done
        for ref in list(active):
            if ref.get("uid") in children:
                continue
            try:
                await self.client.get(
                    JOBS, ref["name"], ref.get("namespace") or cronjob["metadata"]["namespace"]
                )
            except NotFound:
                self.recorder.normal(cronjob, "MissingJob", f"Active job went missing: {ref['name']}")
                active = [a for a in active if a.get("uid") != ref.get("uid")]
        status["active"] = active

    async def _fresh_active_ref(self, cronjob: Obj, uid: str) -> Obj | None:
        """Re-read the CronJob past the cache: its active-list entry for this job, if it has one."""
        meta = cronjob["metadata"]
        try:
            fresh = await self.client.get(CRON_JOBS, meta["name"], meta["namespace"])
        except NotFound:
            return None
        return next((a for a in (fresh.get("status") or {}).get("active") or [] if a.get("uid") == uid), None)

    async def _maybe_start(self, cronjob: Obj) -> float | None:
        """Start the job of the most recent unmet schedule time; returns seconds until the next one."""
        spec = cronjob.get("spec") or {}
        try:
            zone = zone_of(cronjob)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            self.recorder.warning(
                cronjob, "UnknownTimeZone", f"invalid timeZone: {spec.get('timeZone')!r}: {exc}"
            )
            return None
        try:
            schedule = parse(spec.get("schedule") or "", zone or UTC)
        except ScheduleError as exc:
            self.recorder.warning(
                cronjob, "UnparseableSchedule", f"unparseable schedule: {spec.get('schedule')!r} : {exc}"
            )
            return None
        if spec.get("suspend"):
            return None
        now = self.clock.now()
        scheduled, missed, upcoming = next_schedule_time(cronjob, schedule, now)
        delay = (upcoming - now).total_seconds() + NEXT_SCHEDULE_DELTA if upcoming is not None else None
        if scheduled is None:
            return delay
        if missed > MAX_MISSED:
            self.recorder.warning(
                cronjob,
                "TooManyMissedTimes",
                f"too many missed start times: {missed}. Set or decrease "
                ".spec.startingDeadlineSeconds or check clock skew",
            )
        if too_late(cronjob, scheduled, now):
            self.recorder.warning(
                cronjob,
                "MissSchedule",
                "Missed scheduled time to start a job: "
                f"{scheduled.astimezone(UTC).strftime('%a, %d %b %Y %H:%M:%S +0000')}",
            )
            return delay
        status = cronjob["status"]
        name = job_name(cronjob["metadata"]["name"], scheduled)
        last = parse_time(status.get("lastScheduleTime"))
        if any(a.get("name") == name for a in status.get("active") or []) or (last and last >= scheduled):
            return delay
        policy = spec.get("concurrencyPolicy") or "Allow"
        if policy == "Forbid" and status.get("active"):
            self.recorder.normal(
                cronjob,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            )
            return delay
        namespace = cronjob["metadata"]["namespace"]
        if policy == "Replace":
            for ref in list(status.get("active") or []):
                try:
                    await self.client.delete(JOBS, ref["name"], namespace, propagation_policy="Background")
                except NotFound:
                    pass
                self.recorder.normal(cronjob, "SuccessfulDelete", f"Deleted job {ref['name']}")
                status["active"] = [a for a in status["active"] if a.get("uid") != ref.get("uid")]
        body = job_from_template(cronjob, scheduled, zone)
        try:
            created = await self.client.create(JOBS, body, namespace)
            self.recorder.normal(cronjob, "SuccessfulCreate", f"Created job {name}")
        except AlreadyExists:
            created = await self.client.get(JOBS, name, namespace)
            if (controller_ref(created) or {}).get("uid") != cronjob["metadata"]["uid"]:
                self.recorder.warning(
                    cronjob, "FailedCreate", f"Error creating job: job {name} already exists"
                )
                return delay
        except Exception as exc:
            self.recorder.warning(cronjob, "FailedCreate", f"Error creating job: {exc}")
            raise
        if not is_finished(created)[0] and all(
            a.get("uid") != created["metadata"]["uid"] for a in status.get("active") or []
        ):
            status["active"] = [*(status.get("active") or []), job_ref(created)]
        status["lastScheduleTime"] = format_time(scheduled)
        return delay

    async def _cleanup(self, cronjob: Obj, jobs: list[Obj]) -> None:
        spec = cronjob.get("spec") or {}
        active = {a.get("uid") for a in (cronjob.get("status") or {}).get("active") or []}
        finished = [
            j
            for j in jobs
            if j["metadata"]["uid"] not in active and not j["metadata"].get("deletionTimestamp")
        ]
        for job in history_to_delete(
            finished, spec.get("successfulJobsHistoryLimit"), spec.get("failedJobsHistoryLimit")
        ):
            meta = job["metadata"]
            try:
                await self.client.delete(
                    JOBS, meta["name"], meta["namespace"], propagation_policy="Background"
                )
            except NotFound:
                continue
            self.recorder.normal(cronjob, "SuccessfulDelete", f"Deleted job {meta['name']}")
