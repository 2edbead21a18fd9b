"""Status conditions as apimachinery's meta helpers read and set them."""

from __future__ import annotations

from typing import Any

from services.api.conditions import find_condition, get_condition, set_status_condition, true_condition


def test_lookup_by_type_and_by_truth() -> None:
    obj: dict[str, Any] = {"status": {"conditions": [{"type": "Ready", "status": "False"},
                                                     {"type": "Complete", "status": "True"}]}}
    assert get_condition(obj, "Ready") == {"type": "Ready", "status": "False"}
    assert find_condition(obj["status"]["conditions"], "Complete") == {"type": "Complete", "status": "True"}
    assert get_condition(obj, "Failed") is None and get_condition({}, "Ready") is None
    assert true_condition(obj, "Ready") is None and true_condition(obj, "Complete") is not None


def test_the_transition_time_moves_only_with_the_status() -> None:
    status: dict[str, Any] = {}
    set_status_condition(status, {"type": "A", "status": "True", "reason": "R1", "message": "m"}, "t1")
    set_status_condition(status, {"type": "A", "status": "True", "reason": "R2", "message": "n"}, "t2")
    assert status["conditions"] == [{"type": "A", "status": "True", "reason": "R2", "message": "n",
                                     "lastTransitionTime": "t1"}]
    before = status["conditions"]
    set_status_condition(status, {"type": "A", "status": "False", "reason": "R3", "message": ""}, "t3")
    assert status["conditions"][0]["lastTransitionTime"] == "t3" and before[0]["status"] == "True"
