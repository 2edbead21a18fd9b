"""The disruption controller's arithmetic: expected and desired pods for each kind of budget, how
percentages round, which disruptedPods entries still hold, and the DisruptionAllowed condition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller_manager.controllers.disruption import (
    DELETION_TIMEOUT,
    SyncError,
    allowed_condition,
    conditions_up_to_date,
    count_healthy,
    disrupted_pod_map,
    disruptions_allowed,
    expected_and_desired,
    needs_scale,
    pdbs_for_pod,
    stale_disruption_wait,
)
from services.api.conditions import set_status_condition

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, ready: bool = True, deleting: bool = False, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels if labels is not None else {"a": "b"}}
    if deleting:
        meta["deletionTimestamp"] = stamp(NOW)
    return {"metadata": meta,
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.mark.parametrize("value", ["5", "x%", True])
def test_a_budget_neither_int_nor_percentage_fails_the_sync(value: Any) -> None:
    with pytest.raises(SyncError, match="invalid value for IntOrString"):
        expected_and_desired({"maxUnavailable": value}, 10, 10)


def test_needs_scale_only_for_percentages_and_max_unavailable() -> None:
    assert not needs_scale({"minAvailable": 2})
    assert needs_scale({"minAvailable": "50%"})
    assert needs_scale({"maxUnavailable": 1})
    assert needs_scale({"maxUnavailable": "25%"})
    assert not needs_scale({})


def test_int_min_available_counts_matched_pods_not_scale() -> None:
    assert expected_and_desired({"minAvailable": 2}, 5, 99) == (5, 2)
    assert expected_and_desired({"minAvailable": 0}, 0, 0) == (0, 0)


def test_percent_min_available_is_of_the_controllers_scale() -> None:
    assert expected_and_desired({"minAvailable": "50%"}, 2, 5) == (5, 3)
    assert expected_and_desired({"minAvailable": "28%"}, 7, 7) == (7, 2)


def test_max_unavailable_subtracts_from_scale_and_never_goes_negative() -> None:
    assert expected_and_desired({"maxUnavailable": 1}, 3, 3) == (3, 2)
    assert expected_and_desired({"maxUnavailable": "30%"}, 7, 7) == (7, 4)
    assert expected_and_desired({"maxUnavailable": "30%"}, 3, 3) == (3, 2)
    assert expected_and_desired({"maxUnavailable": 5}, 3, 3) == (3, 0)
    assert expected_and_desired({"maxUnavailable": "100%"}, 4, 4) == (4, 0)


def test_no_budget_fields_expects_nothing() -> None:
    assert expected_and_desired({}, 4, 4) == (0, 0)


def test_disruptions_allowed_needs_expected_pods_and_surplus() -> None:
    assert disruptions_allowed(3, 2, 3) == 1
    assert disruptions_allowed(2, 2, 3) == 0
    assert disruptions_allowed(1, 2, 3) == 0
    assert disruptions_allowed(3, 0, 0) == 0


def test_disrupted_pods_keep_until_deleted_or_timed_out() -> None:
    pods = [pod("fresh"), pod("old"), pod("going", deleting=True), pod("untouched")]
    reported = {
        "fresh": stamp(NOW - timedelta(seconds=30)),
        "old": stamp(NOW - DELETION_TIMEOUT - timedelta(seconds=1)),
        "going": stamp(NOW),
        "vanished": stamp(NOW),
    }
    kept, recheck, not_deleted = disrupted_pod_map(pods, reported, NOW)
    assert kept == {"fresh": reported["fresh"]}
    assert recheck == NOW - timedelta(seconds=30) + DELETION_TIMEOUT
    assert [p["metadata"]["name"] for p in not_deleted] == ["old"]


def test_the_earliest_expiry_is_the_recheck_time() -> None:
    pods = [pod("a"), pod("b")]
    reported = {"a": stamp(NOW - timedelta(seconds=10)), "b": stamp(NOW - timedelta(seconds=90))}
    kept, recheck, _ = disrupted_pod_map(pods, reported, NOW)
    assert set(kept) == {"a", "b"}
    assert recheck == NOW + timedelta(seconds=30)
    assert disrupted_pod_map(pods, None, NOW) == ({}, None, [])


def test_count_healthy_skips_unready_deleting_and_disrupted_pods() -> None:
    pods = [pod("ok"), pod("unready", ready=False), pod("deleting", deleting=True), pod("evicted"), pod("expired")]
    disrupted = {"evicted": stamp(NOW - timedelta(seconds=5)), "expired": stamp(NOW - timedelta(minutes=3))}
    assert count_healthy(pods, disrupted, NOW) == 2


def test_condition_follows_disruptions_allowed_and_keeps_transition_time() -> None:
    status: dict[str, Any] = {"disruptionsAllowed": 1, "observedGeneration": 2}
    set_status_condition(status, allowed_condition(status), "t1")
    assert status["conditions"] == [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
                                     "message": "", "observedGeneration": 2, "lastTransitionTime": "t1"}]
    set_status_condition(status, allowed_condition(status), "t2")
    assert status["conditions"][0]["lastTransitionTime"] == "t1"
    status["disruptionsAllowed"] = 0
    set_status_condition(status, allowed_condition(status), "t3")
    assert status["conditions"][0]["status"] == "False"
    assert status["conditions"][0]["reason"] == "InsufficientPods"
    assert status["conditions"][0]["lastTransitionTime"] == "t3"


def test_conditions_up_to_date_needs_the_current_generation_and_matching_reason() -> None:
    status: dict[str, Any] = {"disruptionsAllowed": 0, "observedGeneration": 1}
    set_status_condition(status, allowed_condition(status), "t")
    pdb = {"metadata": {"generation": 1}, "status": status}
    assert conditions_up_to_date(pdb)
    assert not conditions_up_to_date({"metadata": {"generation": 2}, "status": status})
    assert not conditions_up_to_date({"metadata": {"generation": 1}, "status": {**status, "disruptionsAllowed": 1}})
    failed = {**status, "conditions": [{**status["conditions"][0], "reason": "SyncFailed"}]}
    assert not conditions_up_to_date({"metadata": {"generation": 1}, "status": failed})


def test_pdbs_for_pod_empty_selector_matches_all_null_matches_none() -> None:
    pdbs = [
        {"metadata": {"name": "all"}, "spec": {"selector": {}}},
        {"metadata": {"name": "none"}, "spec": {}},
        {"metadata": {"name": "app"}, "spec": {"selector": {"matchLabels": {"a": "b"}}}},
        {"metadata": {"name": "other"}, "spec": {"selector": {"matchLabels": {"a": "c"}}}},
        {"metadata": {"name": "bad"}, "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Nope"}]}}},
    ]
    assert [p["metadata"]["name"] for p in pdbs_for_pod(pod("p"), pdbs)] == ["all", "app"]
    assert pdbs_for_pod(pod("bare", labels={}), pdbs) == []


def test_stale_disruption_target_waits_two_minutes_from_its_transition() -> None:
    target = pod("p")
    target["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": stamp(NOW - timedelta(seconds=20))})
    assert stale_disruption_wait(target, NOW) == 100.0
    assert stale_disruption_wait(target, NOW + timedelta(minutes=5)) == 0.0
    assert stale_disruption_wait(pod("plain"), NOW) is None
    target["metadata"]["deletionTimestamp"] = stamp(NOW)
    assert stale_disruption_wait(target, NOW) is None
