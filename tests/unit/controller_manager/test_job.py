"""The Job controller's pure decisions: backoff, podFailurePolicy, indexes, successPolicy,
how many pods to run, and the pods it creates."""

from __future__ import annotations

from typing import Any

import pytest

from controller_manager.controllers.job.controller import (
    COMPLETION_INDEX,
    TRACKING_FINALIZER,
    BackoffRecord,
    JobSync,
    job_pod,
    pod_failed,
    set_condition,
)
from controller_manager.controllers.job.policy import (
    backoff_exceeded,
    format_indexes,
    match_pod_failure_policy,
    parse_indexes,
    pod_failure_backoff,
    success_policy_rule,
    wanted_active,
)
from controller_manager.controllers.ttlafterfinished import time_left


def test_pod_failure_backoff_doubles_from_ten_seconds_to_six_minutes() -> None:
    assert [pod_failure_backoff(n) for n in range(0, 9)] == [0, 10, 20, 40, 80, 160, 320, 360, 360]


def test_index_sets_round_trip() -> None:
    assert parse_indexes("1,3-5,9") == {1, 3, 4, 5, 9}
    assert parse_indexes("0-9", limit=3) == {0, 1, 2}
    assert parse_indexes("") == set()
    assert format_indexes({5, 1, 3, 4, 9}) == "1,3-5,9"
    assert format_indexes(range(4)) == "0-3"
    assert format_indexes([]) == ""


def failed_pod(
    code: int, container: str = "main", conditions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "status": {
            "phase": "Failed",
            "conditions": conditions or [],
            "containerStatuses": [{"name": container, "state": {"terminated": {"exitCode": code}}}],
        },
    }


POLICY = {
    "rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [1]}},
        {"action": "FailIndex", "onExitCodes": {"operator": "NotIn", "values": [0, 1, 42]}},
    ]
}


def test_pod_failure_policy_first_matching_rule_wins() -> None:
    action, message = match_pod_failure_policy(POLICY, failed_pod(42))
    assert action == "FailJob"
    assert message == "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1"
    assert match_pod_failure_policy(POLICY, failed_pod(42, container="side")) == (None, "")
    assert match_pod_failure_policy(POLICY, failed_pod(1))[0] == "Count"
    assert match_pod_failure_policy(POLICY, failed_pod(7))[0] == "FailIndex"
    disrupted = failed_pod(42, conditions=[{"type": "DisruptionTarget", "status": "True"}])
    assert match_pod_failure_policy(POLICY, disrupted)[0] == "Ignore"
    assert match_pod_failure_policy(None, failed_pod(42)) == (None, "")
    assert match_pod_failure_policy({"rules": [POLICY["rules"][1]]}, failed_pod(3)) == (None, "")


def test_success_policy() -> None:
    policy = {"rules": [{"succeededIndexes": "0-2", "succeededCount": 2}, {"succeededIndexes": "5"}]}
    assert success_policy_rule(policy, {0}) is None
    assert success_policy_rule(policy, {0, 2}) == 0
    assert success_policy_rule(policy, {5}) == 1
    assert success_policy_rule({"rules": [{"succeededCount": 3}]}, {7, 8, 9}) == 0
    assert success_policy_rule(None, {1}) is None


def test_wanted_active_and_backoff_limit() -> None:
    assert wanted_active({"parallelism": 3, "completions": 10}, 0) == 3
    assert wanted_active({"parallelism": 3, "completions": 10}, 9) == 1
    assert wanted_active({"parallelism": 3, "completions": 10}, 10) == 0
    assert wanted_active({"parallelism": 3}, 0) == 3
    assert wanted_active({"parallelism": 3}, 1) == 0  # a work queue: once one succeeds no new pods
    assert not backoff_exceeded({"backoffLimit": 2}, 2, 0)
    assert backoff_exceeded({"backoffLimit": 2}, 2, 1)
    assert backoff_exceeded({"backoffLimit": 0}, 1, 0)
    assert not backoff_exceeded({"backoffLimit": 0, "backoffLimitPerIndex": 1}, 5, 0)


def test_backoff_record_resets_on_success() -> None:
    def pod(uid: str, at: str) -> dict[str, Any]:
        return {
            "metadata": {"uid": uid},
            "status": {"containerStatuses": [{"state": {"terminated": {"finishedAt": at}}}]},
        }

    record = BackoffRecord()
    record.observe([(pod("a", "2024-01-01T00:00:00Z"), True), (pod("b", "2024-01-01T00:00:05Z"), True)])
    assert record.failures == 2
    last = record.last_failure
    assert record.remaining(last) == 20
    record.observe([(pod("b", "2024-01-01T00:00:05Z"), True)])
    assert record.failures == 2  # seen pods are not counted again
    record.observe([(pod("c", "2024-01-01T00:00:09Z"), False)])
    assert record.failures == 0 and record.remaining(last) == 0


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "work", "namespace": "ns", "uid": "ju", "resourceVersion": "1"},
        "spec": {
            "template": {
                "metadata": {"labels": {"x": "y"}},
                "spec": {
                    "containers": [{"name": "c", "image": "busybox"}],
                    "initContainers": [{"name": "i", "image": "busybox"}],
                },
            },
            **spec,
        },
    }


def test_job_pod_indexed_identity() -> None:
    pod = job_pod(job(completionMode="Indexed", completions=3, backoffLimitPerIndex=1), 2, failure_count=1)
    meta = pod["metadata"]
    assert meta["generateName"] == "work-2-"
    assert TRACKING_FINALIZER in meta["finalizers"]
    assert meta["annotations"][COMPLETION_INDEX] == "2" and meta["labels"][COMPLETION_INDEX] == "2"
    assert meta["annotations"]["batch.kubernetes.io/job-index-failure-count"] == "1"
    assert pod["spec"]["hostname"] == "work-2"
    for key in ("containers", "initContainers"):
        env = pod["spec"][key][0]["env"]
        assert env == [
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
            }
        ]
    plain = job_pod(job(), None)
    assert plain["metadata"]["generateName"] == "work-"
    assert "hostname" not in plain["spec"] and "env" not in plain["spec"]["containers"][0]


def test_deleted_pods_count_as_failed_unless_replacement_waits_for_failure() -> None:
    deleting = {"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}, "status": {"phase": "Running"}}
    assert pod_failed(deleting, job())
    assert not pod_failed(deleting, job(podReplacementPolicy="Failed"))
    assert not pod_failed({"metadata": {}, "status": {"phase": "Succeeded"}}, job())


def test_set_condition_keeps_transition_time() -> None:
    old = [{"type": "Suspended", "status": "True", "lastTransitionTime": "t0"}]
    same = set_condition(old, {"type": "Suspended", "status": "True", "lastTransitionTime": "t1"})
    assert same[0]["lastTransitionTime"] == "t0"
    flipped = set_condition(old, {"type": "Suspended", "status": "False", "lastTransitionTime": "t1"})
    assert flipped[0]["lastTransitionTime"] == "t1"


class _Ctl:
    backoff: dict[str, BackoffRecord] = {}

    @staticmethod
    def clock() -> Any:
        from datetime import UTC, datetime

        return datetime(2024, 1, 1, 0, 10, tzinfo=UTC)


def running(index: int, name: str, created: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": name,
            "creationTimestamp": created,
            "annotations": {COMPLETION_INDEX: str(index)},
        },
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    ("parallelism", "expect_extra", "expect_todo"),
    [
        (3, ["dup"], [0, 4]),
        (1, ["dup", "r3"], []),
    ],
)
def test_indexed_plan(parallelism: int, expect_extra: list[str], expect_todo: list[int]) -> None:
    j = job(completionMode="Indexed", completions=5, parallelism=parallelism)
    j["status"] = {"completedIndexes": "1"}
    active = [
        running(2, "r2", "2024-01-01T00:00:01Z"),
        running(2, "dup", "2024-01-01T00:00:02Z"),
        running(3, "r3", "2024-01-01T00:00:01Z"),
    ]
    sync = JobSync(_Ctl(), "ns/work", j, active)  # type: ignore[arg-type]
    extra, todo = sync._index_plan(active)
    assert [p["metadata"]["name"] for p in extra] == expect_extra
    assert todo == expect_todo[: max(parallelism - 2, 0)]


def test_decide_end_reasons() -> None:
    def decide(j: dict[str, Any], active: list[dict[str, Any]] | None = None, msg: str = "") -> Any:
        sync = JobSync(_Ctl(), "ns/work", j, [])  # type: ignore[arg-type]
        cond = sync._decide_end(active or [], msg)
        return cond and (cond["type"], cond["reason"])

    j = job(completions=2, backoffLimit=1)
    j["status"] = {"succeeded": 2, "startTime": "2024-01-01T00:00:00Z"}
    assert decide(j) == ("SuccessCriteriaMet", "CompletionsReached")
    j["status"] = {"failed": 2, "startTime": "2024-01-01T00:00:00Z"}
    assert decide(j) == ("FailureTarget", "BackoffLimitExceeded")
    j = job(completions=2, activeDeadlineSeconds=60)
    j["status"] = {"startTime": "2024-01-01T00:00:00Z"}
    assert decide(j) == ("FailureTarget", "DeadlineExceeded")
    assert decide(job(completions=2), msg="boom") == ("FailureTarget", "PodFailurePolicy")
    j = job(completionMode="Indexed", completions=3, backoffLimitPerIndex=0, maxFailedIndexes=0)
    j["status"] = {"failedIndexes": "1", "completedIndexes": "0"}
    assert decide(j) == ("FailureTarget", "MaxFailedIndexesExceeded")
    j = job(completionMode="Indexed", completions=3, backoffLimitPerIndex=0)
    j["status"] = {"failedIndexes": "1", "completedIndexes": "0,2"}
    assert decide(j) == ("FailureTarget", "FailedIndexes")
    j = job(completionMode="Indexed", completions=3, successPolicy={"rules": [{"succeededIndexes": "0"}]})
    j["status"] = {"completedIndexes": "0"}
    assert decide(j) == ("SuccessCriteriaMet", "SuccessPolicy")
    j = job(completions=3)
    j["status"] = {"succeeded": 1, "startTime": "2024-01-01T00:00:00Z"}
    assert decide(j) is None


def test_ttl_after_finished_time_left() -> None:
    from datetime import UTC, datetime

    now = datetime(2024, 1, 1, 0, 1, tzinfo=UTC)
    done = {
        "spec": {"ttlSecondsAfterFinished": 100},
        "status": {
            "conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}
            ]
        },
    }
    assert time_left(done, now) == 40
    assert time_left({**done, "spec": {"ttlSecondsAfterFinished": 0}}, now) == -60
    assert time_left({**done, "spec": {}}, now) is None
    assert time_left({"spec": {"ttlSecondsAfterFinished": 5}, "status": {}}, now) is None
