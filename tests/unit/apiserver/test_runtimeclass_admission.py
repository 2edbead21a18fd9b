"""The RuntimeClass admission plugin's pure parts: toleration merging and overhead comparison."""

from __future__ import annotations

import pytest

from apiserver.admission.runtimeclass import admit, merge_tolerations, validate
from services.api import errors

EXISTS_ALL = {"operator": "Exists"}
NO_SCHEDULE = {"key": "k", "operator": "Exists", "effect": "NoSchedule"}
EQUAL = {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}


def test_a_toleration_covered_by_another_is_dropped() -> None:
    assert merge_tolerations([EQUAL], [NO_SCHEDULE]) == [NO_SCHEDULE]
    assert merge_tolerations([NO_SCHEDULE], [EQUAL]) == [NO_SCHEDULE]
    assert merge_tolerations([EQUAL, NO_SCHEDULE], [EXISTS_ALL]) == [EXISTS_ALL]
    assert merge_tolerations([EQUAL], [EQUAL]) == [EQUAL]


def test_no_execute_seconds_decide_coverage() -> None:
    short = {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}
    long = {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 100}
    assert merge_tolerations([short], [long]) == [long]
    forever = {"key": "k", "operator": "Exists", "effect": "NoExecute"}
    assert merge_tolerations([long], [forever]) == [forever]


def test_different_keys_are_both_kept() -> None:
    other = {"key": "other", "operator": "Exists"}
    assert merge_tolerations([NO_SCHEDULE], [other]) == [NO_SCHEDULE, other]


def test_overhead_is_compared_by_value() -> None:
    classes = {"rc": {"metadata": {"name": "rc"}, "handler": "runc", "overhead": {"podFixed": {"cpu": "1"}}}}
    pod = {"metadata": {"name": "p"}, "spec": {"runtimeClassName": "rc", "overhead": {"cpu": "1000m"}}}
    admit(pod, classes)
    validate(pod, classes)
    assert pod["spec"]["overhead"] == {"cpu": "1"}
    pod = {"metadata": {"name": "p"}, "spec": {"runtimeClassName": "rc", "overhead": {"cpu": "2"}}}
    with pytest.raises(errors.StatusError) as err:
        validate(pod, classes)
    assert err.value.code == 403


def test_a_class_without_scheduling_leaves_the_pod_alone() -> None:
    classes = {"rc": {"metadata": {"name": "rc"}, "handler": "runc"}}
    pod = {"metadata": {"name": "p"}, "spec": {"runtimeClassName": "rc", "nodeSelector": {"a": "b"}}}
    admit(pod, classes)
    assert pod["spec"] == {"runtimeClassName": "rc", "nodeSelector": {"a": "b"}}
