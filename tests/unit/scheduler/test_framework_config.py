"""KubeSchedulerConfiguration: upstream defaults, enable/disable, multiPoint expansion, weights, args."""

from __future__ import annotations

import pytest

from scheduler.config import ConfigError, parse_config

API = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}


def names(entries: list[tuple[str, int]]) -> list[str]:
    return [n for n, _ in entries]


def test_defaults_follow_upstream() -> None:
    cfg = parse_config(None)
    prof = cfg.profiles[0]
    assert prof.scheduler_name == "default-scheduler"
    p = prof.plugins
    assert names(p["queueSort"]) == ["PrioritySort"]
    assert names(p["preEnqueue"]) == ["SchedulingGates"]
    assert names(p["filter"])[:6] == ["NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity",
                                      "NodePorts", "NodeResourcesFit"]
    weights = dict(p["score"])
    assert weights["TaintToleration"] == 3 and weights["NodeAffinity"] == 2
    assert weights["NodeResourcesFit"] == 1 and weights["ImageLocality"] == 1
    assert weights["NodeResourcesBalancedAllocation"] == 1
    assert names(p["bind"]) == ["DefaultBinder"]
    assert prof.plugin_args["NodeResourcesFit"]["scoringStrategy"]["type"] == "LeastAllocated"
    assert cfg.percentage_of_nodes_to_score == 0


def test_disable_at_one_point_and_reweight() -> None:
    cfg = parse_config({**API, "profiles": [{"schedulerName": "s", "plugins": {
        "score": {"disabled": [{"name": "ImageLocality"}], "enabled": [{"name": "NodeResourcesFit", "weight": 5}]},
        "filter": {"disabled": [{"name": "TaintToleration"}]},
    }}]})
    p = cfg.profiles[0].plugins
    assert "ImageLocality" not in names(p["score"])
    assert dict(p["score"])["NodeResourcesFit"] == 5
    # explicitly enabled plugins at a point come first (override), then multiPoint ones
    assert names(p["score"])[0] == "NodeResourcesFit"
    assert "TaintToleration" not in names(p["filter"])
    assert "TaintToleration" in names(p["score"])


def test_multipoint_disable_all_and_enable_some() -> None:
    cfg = parse_config({**API, "profiles": [{"plugins": {"multiPoint": {
        "disabled": [{"name": "*"}],
        "enabled": [{"name": "PrioritySort"}, {"name": "NodeName"}, {"name": "DefaultBinder"},
                    {"name": "NodeResourcesFit", "weight": 7}]}}}]})
    p = cfg.profiles[0].plugins
    assert names(p["filter"]) == ["NodeName", "NodeResourcesFit"]
    assert p["score"] == [("NodeResourcesFit", 7)]
    assert names(p["preFilter"]) == ["NodeResourcesFit"]


def test_plugin_args_and_profile_percentage() -> None:
    cfg = parse_config({**API, "percentageOfNodesToScore": 30, "profiles": [{
        "schedulerName": "a", "percentageOfNodesToScore": 70,
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "NodeResourcesFitArgs",
            "scoringStrategy": {"type": "MostAllocated"}}}]}, {"schedulerName": "b"}]})
    assert cfg.percentage_of_nodes_to_score == 30
    a, b = cfg.profiles
    assert a.percentage_of_nodes_to_score == 70 and b.percentage_of_nodes_to_score is None
    assert a.plugin_args["NodeResourcesFit"] == {"scoringStrategy": {"type": "MostAllocated"}}
    assert b.plugin_args["NodeResourcesFit"]["scoringStrategy"]["type"] == "LeastAllocated"


@pytest.mark.parametrize("doc", [
    {"apiVersion": "kubescheduler.config.k8s.io/v1beta3", "kind": "KubeSchedulerConfiguration"},
    {**API, "profiles": [{"schedulerName": "x"}, {"schedulerName": "x"}]},
    {**API, "profiles": [{"plugins": {"filter": {"enabled": [{"name": "NoSuchPlugin"}]}}}]},
    {**API, "profiles": [{"plugins": {"filter": {"enabled": [{"name": "PrioritySort"}]}}}]},
    {**API, "profiles": [{"plugins": {"multiPoint": {"disabled": [{"name": "*"}]}}}]},
    {**API, "percentageOfNodesToScore": 101},
])
def test_invalid_configs(doc: dict) -> None:
    with pytest.raises(ConfigError):
        parse_config(doc)
