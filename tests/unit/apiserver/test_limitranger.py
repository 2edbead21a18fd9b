"""LimitRanger's constraint arithmetic as upstream's: values compared in thousandths rounded up (whole
units once a value is too large for that), ratios printed with six decimals, duplicate errors once."""

from __future__ import annotations

from apiserver.admission import limitranger as lr


def test_comparison_rounds_thousandths_up() -> None:
    # 1.0001 cpu is 1001m once rounded up, so it exceeds a max of 1 ...
    assert lr.max_constraint("Container", "cpu", "1", {}, {"cpu": "1.0001"}) == (
        "maximum cpu usage per Container is 1, but limit is 1000100u")
    # ... and 999.9999 bytes rounds up to the 1 kB minimum.
    assert lr.min_constraint("Container", "memory", "1k", {"memory": "999.9999"}, {}) == ""


def test_huge_values_compare_in_whole_units() -> None:
    huge = "10E"
    assert lr.max_constraint("Pod", "ephemeral-storage", huge, {}, {"ephemeral-storage": "9E"}) == ""
    assert lr.max_constraint("Pod", "ephemeral-storage", "9E", {}, {"ephemeral-storage": huge}) == (
        "maximum ephemeral-storage usage per Pod is 9E, but limit is 10E")


def test_ratio() -> None:
    assert lr.ratio_constraint("Container", "cpu", "1500m", {"cpu": "300m"}, {"cpu": "500m"}) == (
        "cpu max limit to request ratio per Container is 1500m, but provided ratio is 1.666667")
    assert lr.ratio_constraint("Container", "cpu", "2", {"cpu": "300m"}, {"cpu": "600m"}) == ""
    assert lr.ratio_constraint("Container", "cpu", "2", {"cpu": "0"}, {"cpu": "1"}) == (
        "cpu max limit to request ratio per Container is 2, but no request is specified or request is 0")
    assert lr.ratio_constraint("Container", "cpu", "2", {"cpu": "1"}, {}) == (
        "cpu max limit to request ratio per Container is 2, but no limit is specified or limit is 0")


def test_aggregate_prints_each_error_once() -> None:
    assert lr.aggregate(["a", "a"]) == "a"
    assert lr.aggregate(["a", "b", "a"]) == "[a, b]"


def test_sidecars_add_up_and_init_containers_are_a_floor() -> None:
    pod = {"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "300m"}}}],
                    "initContainers": [{"name": "side", "restartPolicy": "Always",
                                        "resources": {"limits": {"cpu": "200m"}}},
                                       {"name": "init", "resources": {"limits": {"cpu": "900m"}}}]}}
    limit_range = {"spec": {"limits": [{"type": "Pod", "max": {"cpu": "1"}}]}}
    # init + sidecar = 1100m is above both 300m + 200m and the max
    assert lr.validate_pod(pod, limit_range) == ["maximum cpu usage per Pod is 1, but limit is 1100m"]
