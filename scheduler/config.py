"""KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1): defaults, merging and multiPoint expansion."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scheduler.framework import registry
from scheduler.framework.interface import implements
from scheduler.framework.runtime import ProfileConfig

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
DEFAULT_SCHEDULER_NAME = "default-scheduler"

# (extension point field in the config, Plugin method that implements it)
EXTENSION_POINTS: list[tuple[str, str]] = [
    ("preEnqueue", "pre_enqueue"),
    ("queueSort", "less"),
    ("preFilter", "pre_filter"),
    ("filter", "filter"),
    ("postFilter", "post_filter"),
    ("preScore", "pre_score"),
    ("score", "score"),
    ("reserve", "reserve"),
    ("permit", "permit"),
    ("preBind", "pre_bind"),
    ("bind", "bind"),
    ("postBind", "post_bind"),
]

# Upstream's default multiPoint set for v1, in its order, with score weights.
DEFAULT_MULTI_POINT: list[dict[str, Any]] = [
    {"name": "SchedulingGates"},
    {"name": "PrioritySort"},
    {"name": "NodeUnschedulable"},
    {"name": "NodeName"},
    {"name": "TaintToleration", "weight": 3},
    {"name": "NodeAffinity", "weight": 2},
    {"name": "NodePorts"},
    {"name": "NodeResourcesFit", "weight": 1},
    {"name": "VolumeRestrictions"},
    {"name": "NodeVolumeLimits"},
    {"name": "VolumeBinding"},
    {"name": "VolumeZone"},
    {"name": "PodTopologySpread", "weight": 2},
    {"name": "InterPodAffinity", "weight": 2},
    {"name": "DefaultPreemption"},
    {"name": "NodeResourcesBalancedAllocation", "weight": 1},
    {"name": "ImageLocality", "weight": 1},
    {"name": "DefaultBinder"},
]

DEFAULT_PLUGIN_ARGS: dict[str, dict[str, Any]] = {
    "DefaultPreemption": {"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100},
    "InterPodAffinity": {"hardPodAffinityWeight": 1},
    "NodeAffinity": {},
    "NodeResourcesBalancedAllocation": {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]},
    "NodeResourcesFit": {"scoringStrategy": {"type": "LeastAllocated", "resources": [
        {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}},
    "PodTopologySpread": {"defaultingType": "System"},
    "VolumeBinding": {"bindTimeoutSeconds": 600},
}


class ConfigError(ValueError):
    pass


@dataclass
class SchedulerConfig:
    profiles: list[ProfileConfig]
    percentage_of_nodes_to_score: int = 0
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    leader_election: dict[str, Any] = field(default_factory=dict)
    client_connection: dict[str, Any] = field(default_factory=dict)


def _merge_set(default: dict[str, Any], custom: dict[str, Any]) -> dict[str, Any]:
    """Upstream's mergePluginSet: defaults minus disabled, custom entries replace or append."""
    disabled = {p["name"] for p in custom.get("disabled") or ()}
    custom_enabled = list(custom.get("enabled") or ())
    by_name = {p["name"]: i for i, p in enumerate(custom_enabled)}
    replaced: set[int] = set()
    enabled: list[dict[str, Any]] = []
    if "*" not in disabled:
        for p in default.get("enabled") or ():
            if p["name"] in disabled:
                continue
            if p["name"] in by_name:
                i = by_name[p["name"]]
                enabled.append(custom_enabled[i])
                replaced.add(i)
                continue
            enabled.append(p)
    for i, p in enumerate(custom_enabled):
        if i not in replaced:
            enabled.append(p)
    return {"enabled": enabled, "disabled": list(custom.get("disabled") or ())}


def expand_profile(profile: dict[str, Any]) -> ProfileConfig:
    custom = profile.get("plugins") or {}
    explicit = {p["name"] for ep in custom.values() for p in (ep or {}).get("enabled") or ()}
    merged: dict[str, dict[str, Any]] = {
        "multiPoint": _merge_set({"enabled": DEFAULT_MULTI_POINT}, custom.get("multiPoint") or {})}
    for ep, _ in EXTENSION_POINTS:
        merged[ep] = _merge_set({}, custom.get(ep) or {})
    # Default plugins whose package is absent are left out; plugins the user names must exist.
    for name in sorted(explicit):
        if not registry.available(name):
            raise ConfigError(f"plugin {name!r} is not registered")
    multi = [p for p in merged["multiPoint"]["enabled"] if registry.available(p["name"])]
    result: dict[str, list[tuple[str, int]]] = {}
    for ep, method in EXTENSION_POINTS:
        specific = [p for p in merged[ep]["enabled"] if registry.available(p["name"])]
        specific_names = [p["name"] for p in specific]
        disabled = {p["name"] for p in merged[ep]["disabled"]}
        weights = {p["name"]: int(p.get("weight") or 0) for p in specific}
        overrides: list[str] = []
        from_multi: list[str] = []
        if "*" not in disabled:
            for p in multi:
                name = p["name"]
                if not implements(registry.lookup(name), method) or name in disabled:
                    continue
                if name in specific_names:
                    overrides.append(name)
                    continue
                if name in from_multi:
                    raise ConfigError(f"plugin {name!r} already registered as {ep!r}")
                from_multi.append(name)
                weights.setdefault(name, int(p.get("weight") or 0))
        ordered = [n for n in specific_names if n in overrides] + from_multi + \
                  [n for n in specific_names if n not in overrides]
        for name in ordered:
            if not implements(registry.lookup(name), method):
                raise ConfigError(f"plugin {name!r} does not extend {ep} plugin")
        result[ep] = [(n, weights.get(n) or 1) for n in ordered]
    if len(result["queueSort"]) != 1:
        raise ConfigError("exactly one queueSort plugin is required")
    if not result["bind"]:
        raise ConfigError("at least one bind plugin is needed")
    args = copy.deepcopy(DEFAULT_PLUGIN_ARGS)
    for pc in profile.get("pluginConfig") or ():
        a = dict(pc.get("args") or {})
        a.pop("apiVersion", None)
        a.pop("kind", None)
        args[pc["name"]] = a
    return ProfileConfig(profile.get("schedulerName") or DEFAULT_SCHEDULER_NAME, result, args,
                         profile.get("percentageOfNodesToScore"))


def parse_config(doc: dict[str, Any] | None) -> SchedulerConfig:
    doc = doc or {}
    if doc and (doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND):
        raise ConfigError(f"config must be {KIND} of apiVersion {API_VERSION}, got "
                          f"{doc.get('kind')!r} of {doc.get('apiVersion')!r}")
    profiles_spec = doc.get("profiles") or [{"schedulerName": DEFAULT_SCHEDULER_NAME}]
    profiles = [expand_profile(p) for p in profiles_spec]
    names = [p.scheduler_name for p in profiles]
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate profile schedulerName in {names}")
    sorts = {tuple(p.plugins["queueSort"]) for p in profiles}
    if len(sorts) > 1:
        raise ConfigError("all profiles must use the same queueSort plugin")
    pct = doc.get("percentageOfNodesToScore") or 0
    if not 0 <= pct <= 100:
        raise ConfigError("percentageOfNodesToScore must be in the range [0, 100]")
    return SchedulerConfig(
        profiles=profiles,
        percentage_of_nodes_to_score=int(pct),
        pod_initial_backoff_seconds=float(doc.get("podInitialBackoffSeconds") or 1),
        pod_max_backoff_seconds=float(doc.get("podMaxBackoffSeconds") or 10),
        leader_election=dict(doc.get("leaderElection") or {}),
        client_connection=dict(doc.get("clientConnection") or {}),
    )


def load_config(path: str | Path | None) -> SchedulerConfig:
    if path is None:
        return parse_config(None)
    return parse_config(yaml.safe_load(Path(path).read_text()))
