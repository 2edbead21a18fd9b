"""The Job controller's sync alone, on the in-memory apiserver: parallelism and completions bound the
pods it starts, finished pods are counted through their tracking finalizer, and the job ends
Complete on enough successes or Failed past its backoffLimit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from controller_manager.controllers import job
from controller_manager.controllers.job.controller import TRACKING_FINALIZER, JobController
from controller_manager.resources import JOBS, PODS
from services.api.meta import now_rfc3339
from tests.unit.controller_manager.harness import harness

Obj = dict[str, Any]
UID = "job-uid"
LABELS = {"batch.kubernetes.io/controller-uid": UID, "batch.kubernetes.io/job-name": "work"}


def a_job(completions: int | None, parallelism: int, backoff_limit: int = 6) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "work", "namespace": "ns", "uid": UID, "generation": 1},
            "spec": {"completions": completions, "parallelism": parallelism, "backoffLimit": backoff_limit,
                     "completionMode": "NonIndexed", "selector": {"matchLabels": dict(LABELS)},
                     "template": {"metadata": {"labels": dict(LABELS)},
                                  "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}


def a_pod(name: str, phase: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": dict(LABELS), "finalizers": [TRACKING_FINALIZER],
                         "creationTimestamp": "2024-01-01T00:00:00Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "work", "uid": UID,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase}}


def conditions(env: Any) -> dict[str, tuple[str, str]]:
    stored = env.api.get(JOBS, "work", "ns")
    return {c["type"]: (c["status"], c["reason"]) for c in (stored["status"].get("conditions") or [])}


async def test_parallelism_bounds_the_pods_started() -> None:
    async with harness(job, [(JOBS, a_job(completions=5, parallelism=2))]) as env:
        await env.sync("ns/work")
        made = [a.result for a in env.api.writes("pods", "create")]
        assert len(made) == 2
        for pod in made:
            assert pod is not None and TRACKING_FINALIZER in pod["metadata"]["finalizers"]
            assert pod["metadata"]["ownerReferences"][0]["uid"] == UID
        stored = env.api.get(JOBS, "work", "ns")
        assert stored is not None and stored["status"]["startTime"]


async def test_remaining_completions_bound_the_pods_started() -> None:
    seed = [(JOBS, a_job(completions=3, parallelism=3)), (PODS, a_pod("done-1", "Succeeded")),
            (PODS, a_pod("done-2", "Succeeded")), (PODS, a_pod("running", "Running"))]
    async with harness(job, seed) as env:
        await env.sync("ns/work")
        assert env.api.writes("pods", "create") == []  # two succeeded, one running: three in all
        stored = env.api.get(JOBS, "work", "ns")
        assert stored is not None and stored["status"]["succeeded"] == 2 and stored["status"]["active"] == 1


async def test_enough_successes_complete_the_job_after_counting_each_pod_once() -> None:
    seed = [(JOBS, a_job(completions=2, parallelism=2)), (PODS, a_pod("a", "Succeeded")),
            (PODS, a_pod("b", "Succeeded"))]
    async with harness(job, seed) as env:
        await env.sync("ns/work")
        for name in ("a", "b"):
            pod = env.api.get(PODS, name, "ns")
            assert pod is not None and TRACKING_FINALIZER not in (pod["metadata"].get("finalizers") or [])
        stored = env.api.get(JOBS, "work", "ns")
        assert stored is not None
        assert stored["status"]["succeeded"] == 2 and not stored["status"].get("uncountedTerminatedPods")
        assert stored["status"]["completionTime"]
        assert conditions(env)["Complete"] == ("True", "CompletionsReached")
        assert conditions(env)["SuccessCriteriaMet"] == ("True", "CompletionsReached")
        assert env.api.writes("pods", "create") == []
        # the first status write recorded both pods as uncounted before their finalizers went
        first = env.api.writes("jobs", "patch")[0]
        assert sorted(first.body["status"]["uncountedTerminatedPods"]["succeeded"]) == sorted(
            env.api.get(PODS, n, "ns")["metadata"]["uid"] for n in ("a", "b"))


async def test_failures_beyond_the_backoff_limit_fail_the_job() -> None:
    seed = [(JOBS, a_job(completions=3, parallelism=1, backoff_limit=1)), (PODS, a_pod("x", "Failed")),
            (PODS, a_pod("y", "Failed"))]
    async with harness(job, seed) as env:
        await env.sync("ns/work")
        stored = env.api.get(JOBS, "work", "ns")
        assert stored is not None and stored["status"]["failed"] == 2
        assert conditions(env)["FailureTarget"] == ("True", "BackoffLimitExceeded")
        assert conditions(env)["Failed"] == ("True", "BackoffLimitExceeded")
        assert env.api.writes("pods", "create") == []


async def test_failures_within_the_backoff_limit_are_replaced_after_the_backoff() -> None:
    failed = a_pod("x", "Failed")
    failed["status"]["containerStatuses"] = [{"name": "c", "state": {"terminated": {"exitCode": 1,
                                                                                     "finishedAt": now_rfc3339()}}}]
    clock = [datetime.now(UTC)]
    seed = [(JOBS, a_job(completions=1, parallelism=1, backoff_limit=3)), (PODS, failed)]
    async with harness(job, seed, build=lambda ctx: JobController(ctx, clock=lambda: clock[0])) as env:
        delay = await env.sync("ns/work")
        assert delay is not None and 5 < delay <= 10  # upstream's 10 s backoff after the first failure
        assert env.api.writes("pods", "create") == []
        assert "Failed" not in conditions(env)
        stored = env.api.get(JOBS, "work", "ns")
        assert stored is not None and stored["status"]["failed"] == 1
        clock[0] += timedelta(seconds=11)
        env.api.clear_actions()
        await env.sync("ns/work")
        assert len(env.api.writes("pods", "create")) == 1


async def test_the_job_adopts_matching_orphans_and_releases_pods_that_stop_matching() -> None:
    orphan = a_pod("orphan", "Running")
    del orphan["metadata"]["ownerReferences"]
    orphan["metadata"]["finalizers"] = []
    stray = a_pod("stray", "Running")
    stray["metadata"]["labels"] = {"other": "x"}
    seed = [(JOBS, a_job(completions=None, parallelism=2)), (PODS, orphan), (PODS, stray)]
    async with harness(job, seed) as env:
        await env.sync("ns/work")
        adopted = env.api.get(PODS, "orphan", "ns")
        refs = adopted["metadata"]["ownerReferences"]
        assert [(r["uid"], r["controller"], r["blockOwnerDeletion"]) for r in refs] == [(UID, True, True)]
        assert TRACKING_FINALIZER in adopted["metadata"]["finalizers"]
        released = env.api.get(PODS, "stray", "ns")
        assert not released["metadata"].get("ownerReferences")
        assert TRACKING_FINALIZER not in (released["metadata"].get("finalizers") or [])
        # the adopted pod counts toward parallelism: one more pod, not two
        assert len(env.api.writes("pods", "create")) == 1
        stored = env.api.get(JOBS, "work", "ns")
        assert stored is not None and stored["status"]["active"] == 1  # the adopted pod; the new one next sync


async def test_a_deleting_job_adopts_nothing() -> None:
    orphan = a_pod("orphan", "Running")
    del orphan["metadata"]["ownerReferences"]
    deleting = a_job(completions=None, parallelism=2)
    deleting["metadata"].update({"deletionTimestamp": now_rfc3339(), "finalizers": ["orphan"]})
    async with harness(job, [(JOBS, deleting), (PODS, orphan)]) as env:
        await env.sync("ns/work")
        assert not env.api.get(PODS, "orphan", "ns")["metadata"].get("ownerReferences")


async def test_pods_of_a_deleted_job_lose_their_tracking_finalizer() -> None:
    """The GC deletes a background-deleted job's pods; without this they would stay Terminating."""
    gone = a_pod("left", "Running")
    gone["metadata"]["deletionTimestamp"] = now_rfc3339()
    async with harness(job, [(PODS, gone)]) as env:
        queued = set()
        while len(env.controller.queue):
            key = await env.controller.queue.get()
            queued.add(key)
            env.controller.queue.done(key)
        assert queued == {"orphan-pod:ns/left"}
        await env.sync("orphan-pod:ns/left")
        assert env.api.get(PODS, "left", "ns") is None  # its last finalizer gone, the deletion completed


async def test_pods_a_running_job_controls_keep_their_tracking_finalizer() -> None:
    async with harness(job, [(JOBS, a_job(completions=1, parallelism=1)), (PODS, a_pod("mine", "Running"))]) as env:
        await env.sync("orphan-pod:ns/mine")
        assert TRACKING_FINALIZER in env.api.get(PODS, "mine", "ns")["metadata"]["finalizers"]


async def test_an_orphan_adopted_since_the_cache_saw_it_keeps_its_tracking_finalizer() -> None:
    orphan = a_pod("orphan", "Running")
    del orphan["metadata"]["ownerReferences"]
    async with harness(job, [(JOBS, a_job(completions=1, parallelism=1)), (PODS, orphan)]) as env:
        await env.caught_up()
        adopted = env.api.get(PODS, "orphan", "ns")
        adopted["metadata"]["ownerReferences"] = a_pod("x", "Running")["metadata"]["ownerReferences"]
        env.update(PODS, adopted)  # the job's adoption, not yet in the controller's cache
        await env.controller.sync("orphan-pod:ns/orphan")
        assert TRACKING_FINALIZER in env.api.get(PODS, "orphan", "ns")["metadata"]["finalizers"]
