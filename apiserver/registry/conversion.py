"""Conversion between a served version and the version a resource is stored in.

Two resources are served in a version other than their storage version:
events.k8s.io/v1 Event (stored as core v1 Event) and autoscaling/v1
HorizontalPodAutoscaler (stored as autoscaling/v2). Everything else is identity.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from apiserver.registry.strategy import Obj
from services.api.catalog import Resource

# events.k8s.io/v1 name -> core/v1 name, for fields that are renamed.
_EVENT_RENAMES = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
)
_EVENT_SHARED = ("metadata", "eventTime", "series", "reportingInstance", "action", "reason", "related", "type")

HPA_METRICS_ANNOTATION = "autoscaling.alpha.kubernetes.io/metrics"
HPA_BEHAVIOR_ANNOTATION = "autoscaling.alpha.kubernetes.io/behavior"
HPA_CONDITIONS_ANNOTATION = "autoscaling.alpha.kubernetes.io/conditions"
HPA_CURRENT_METRICS_ANNOTATION = "autoscaling.alpha.kubernetes.io/current-metrics"


def _is_events_v1(res: Resource) -> bool:
    return res.group == "events.k8s.io"


def _is_hpa_v1(res: Resource) -> bool:
    return res.group == "autoscaling" and res.version == "v1"


def needs_conversion(res: Resource) -> bool:
    """Whether objects of `res` are stored in another group or version than the one it serves."""
    if res.custom:
        return res.version != res.stored_version
    return _is_events_v1(res) or _is_hpa_v1(res)


def to_storage(res: Resource, obj: Obj, *, shared: bool = False) -> Obj:
    """The object as it is stored, from the version `res` serves; `shared` when the result is only
    read (encoded, validated), so it may share nested values with `obj`."""
    if res.custom:
        return {**obj, "apiVersion": f"{res.group}/{res.stored_version}"}
    if _is_events_v1(res):
        return event_to_core(obj, shared=shared)
    if _is_hpa_v1(res):
        return hpa_v1_to_v2(obj)
    return obj


def from_storage(res: Resource, obj: Obj, *, shared: bool = False) -> Obj:
    """The stored object in the version `res` serves (custom resources: conversion strategy None);
    `shared` when `obj` is the caller's own, so the result may share nested values with it."""
    if res.custom:
        return {**obj, "apiVersion": res.api_version}
    if _is_events_v1(res):
        return event_from_core(obj, shared=shared)
    if _is_hpa_v1(res):
        return hpa_v2_to_v1(obj)
    return obj


def event_to_core(obj: Obj, *, shared: bool = False) -> Obj:
    """The core/v1 form of an events.k8s.io/v1 Event; `shared` skips copying nested values."""
    clone = _identity if shared else copy.deepcopy
    out: Obj = {"apiVersion": "v1", "kind": "Event"}
    for key in _EVENT_SHARED:
        if key in obj:
            out[key] = clone(obj[key])
    for new, old in _EVENT_RENAMES:
        if new in obj:
            out[old] = clone(obj[new])
    return out


def _identity(value: Any) -> Any:
    return value


def event_from_core(obj: Obj, *, shared: bool = False) -> Obj:
    """The events.k8s.io/v1 form of a core/v1 Event; `shared` skips copying nested values."""
    clone = _identity if shared else copy.deepcopy
    out: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    for key in _EVENT_SHARED:
        if key in obj:
            out[key] = clone(obj[key])
    for new, old in _EVENT_RENAMES:
        if old in obj:
            out[new] = clone(obj[old])
    return out


def _cpu_metric(percent: int) -> Obj:
    return {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                       "averageUtilization": percent}}}


def _is_cpu_utilization(metric: Obj) -> bool:
    resource = metric.get("resource") or {}
    return (
        metric.get("type") == "Resource"
        and resource.get("name") == "cpu"
        and (resource.get("target") or {}).get("type") == "Utilization"
    )


def _pop_json(annotations: dict[str, str], key: str) -> Any:
    raw = annotations.pop(key, None)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def hpa_v1_to_v2(obj: Obj) -> Obj:
    """autoscaling/v1 -> v2: the CPU target becomes a Resource metric; metrics, behavior and
    conditions a v1 client cannot see come back from the annotations v2->v1 put them in."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = "autoscaling/v2"
    meta = out.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    extra_metrics = _pop_json(annotations, HPA_METRICS_ANNOTATION) or []
    behavior = _pop_json(annotations, HPA_BEHAVIOR_ANNOTATION)
    conditions = _pop_json(annotations, HPA_CONDITIONS_ANNOTATION)
    current_extra = _pop_json(annotations, HPA_CURRENT_METRICS_ANNOTATION) or []
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    spec = out.get("spec")
    if isinstance(spec, dict):
        percent = spec.pop("targetCPUUtilizationPercentage", None)
        metrics = [m for m in extra_metrics if not _is_cpu_utilization(m)]
        if percent is not None:
            metrics.insert(0, _cpu_metric(percent))
        if metrics:
            spec["metrics"] = metrics
        if behavior is not None:
            spec["behavior"] = behavior
    status = out.get("status")
    if isinstance(status, dict):
        current = status.pop("currentCPUUtilizationPercentage", None)
        current_metrics = list(current_extra)
        if current is not None:
            current_metrics.insert(0, {"type": "Resource", "resource": {
                "name": "cpu", "current": {"averageUtilization": current}}})
        if current_metrics:
            status["currentMetrics"] = current_metrics
        if conditions is not None:
            status["conditions"] = conditions
    return out


def hpa_v2_to_v1(obj: Obj) -> Obj:
    """autoscaling/v2 -> v1: keep what v1 has a field for, tuck the rest into annotations."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = "autoscaling/v1"
    annotations: dict[str, str] = {}
    spec = out.get("spec")
    if isinstance(spec, dict):
        metrics = spec.pop("metrics", None) or []
        behavior = spec.pop("behavior", None)
        others = []
        for metric in metrics:
            if _is_cpu_utilization(metric) and "targetCPUUtilizationPercentage" not in spec:
                spec["targetCPUUtilizationPercentage"] = metric["resource"]["target"].get("averageUtilization")
            else:
                others.append(metric)
        if others:
            annotations[HPA_METRICS_ANNOTATION] = json.dumps(others, separators=(",", ":"))
        if behavior is not None:
            annotations[HPA_BEHAVIOR_ANNOTATION] = json.dumps(behavior, separators=(",", ":"))
    status = out.get("status")
    if isinstance(status, dict):
        current = status.pop("currentMetrics", None) or []
        conditions = status.pop("conditions", None)
        others = []
        for metric in current:
            resource = metric.get("resource") or {}
            utilization = (resource.get("current") or {}).get("averageUtilization")
            if (metric.get("type") == "Resource" and resource.get("name") == "cpu" and utilization is not None
                    and "currentCPUUtilizationPercentage" not in status):
                status["currentCPUUtilizationPercentage"] = utilization
            else:
                others.append(metric)
        if others:
            annotations[HPA_CURRENT_METRICS_ANNOTATION] = json.dumps(others, separators=(",", ":"))
        if conditions:
            annotations[HPA_CONDITIONS_ANNOTATION] = json.dumps(conditions, separators=(",", ":"))
        status.setdefault("currentReplicas", 0)
        status.setdefault("desiredReplicas", 0)
    if annotations:
        out.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
    return out
