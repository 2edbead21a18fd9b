"""Upstream's ReplicaCalculator for resource metrics: a desired replica count from the pods' usage
against a target utilization (percent of requests) or average value, with the 10 % tolerance, pods
without metrics and not-yet-ready pods treated the conservative way upstream does."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from services.api.conditions import get_condition
from services.api.meta import parse_time
from services.api.quantity import parse_quantity

Obj = dict[str, Any]


class MetricsError(Exception):
    """No replica count can be computed from this metric (the ScalingActive condition says why)."""


@dataclass(frozen=True)
class PodMetric:
    """A pod's usage of one resource (cores or bytes), when it was measured and over what window."""

    value: float
    timestamp: datetime
    window: timedelta


@dataclass(frozen=True)
class Settings:
    tolerance: float = 0.1
    cpu_initialization_period: timedelta = timedelta(minutes=5)
    initial_readiness_delay: timedelta = timedelta(seconds=30)


def _requests(pod: Obj, resource: str) -> float:
    total = 0.0
    meta = pod.get("metadata") or {}
    for c in (pod.get("spec") or {}).get("containers") or ():
        value = ((c.get("resources") or {}).get("requests") or {}).get(resource)
        if value is None:
            raise MetricsError(f"missing request for {resource} in container {c.get('name')} of Pod "
                               f"{meta.get('name')}")
        total += float(parse_quantity(str(value)))
    return total


def _unready(pod: Obj, resource: str, metric: PodMetric, settings: Settings) -> bool:
    """Whether a CPU sample of a pod that is still starting up must not count (upstream's groupPods)."""
    if resource != "cpu":
        return False
    ready = get_condition(pod, "Ready")
    start = parse_time((pod.get("status") or {}).get("startTime"))
    if ready is None or start is None:
        return True
    changed = parse_time(ready.get("lastTransitionTime")) or start
    if start + settings.cpu_initialization_period > metric.timestamp:
        return ready.get("status") != "True" or metric.timestamp < changed + metric.window
    return ready.get("status") != "True" and start + settings.initial_readiness_delay > changed


def _group(pods: list[Obj], metrics: dict[str, PodMetric], resource: str,
           settings: Settings) -> tuple[int, set[str], set[str], set[str]]:
    """(ready pods with a metric, unready ones, missing ones, ignored ones), as upstream groups them."""
    ready, unready, missing, ignored = 0, set(), set(), set()
    for pod in pods:
        name = pod["metadata"]["name"]
        phase = (pod.get("status") or {}).get("phase")
        if pod["metadata"].get("deletionTimestamp") or phase == "Failed":
            ignored.add(name)
            continue
        if phase == "Pending":
            unready.add(name)
            continue
        metric = metrics.get(name)
        if metric is None:
            missing.add(name)
            continue
        if _unready(pod, resource, metric, settings):
            unready.add(name)
        else:
            ready += 1
    return ready, unready, missing, ignored


def _ratio(metrics: dict[str, PodMetric], requests: dict[str, float] | None, target: float) -> tuple[float, float]:
    """(usage ratio to the target, the current value: utilization percent or average)."""
    total = sum(m.value for m in metrics.values())
    if requests is None:
        current = total / len(metrics)
        return current / target, current
    requested = sum(requests[name] for name in metrics if name in requests)
    if requested == 0:
        raise MetricsError("no metrics returned matched known pods")
    utilization = total * 100 / requested
    return utilization / target, utilization


@dataclass(frozen=True)
class Proposal:
    replicas: int
    #: the current utilization in percent of requests (Utilization targets) and the average usage
    utilization: int | None
    average: float


def resource_replicas(current: int, pods: list[Obj], metrics: dict[str, PodMetric], resource: str,
                      target_utilization: int | None, target_average: float | None,
                      settings: Settings) -> Proposal:
    """Upstream's GetResourceReplicas (utilization) and GetRawResourceReplicas (average value)."""
    if not pods:
        raise MetricsError("no pods returned by selector while calculating replica count")
    ready, unready, missing, ignored = _group(pods, metrics, resource, settings)
    usable = {n: m for n, m in metrics.items() if n not in unready and n not in ignored}
    if not usable:
        raise MetricsError("did not receive metrics for targeted pods (pods might be unready)")
    requests = None
    if target_utilization is not None:
        requests = {p["metadata"]["name"]: _requests(p, resource) for p in pods}
    target = float(target_utilization) if target_utilization is not None else float(target_average or 0)
    if target <= 0:
        raise MetricsError("invalid metrics target")
    ratio, value = _ratio(usable, requests, target)
    average = sum(m.value for m in usable.values()) / len(usable)
    utilization = int(value) if requests is not None else None
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not missing and not scale_up_with_unready:
        if abs(1.0 - ratio) <= settings.tolerance:
            return Proposal(current, utilization, average)
        return Proposal(math.ceil(ratio * ready), utilization, average)
    filled = dict(usable)
    now = next(iter(usable.values())).timestamp
    for name in missing:
        # Scaling down, a pod without metrics counts as using all it asked for; scaling up, nothing.
        if ratio < 1.0:
            assumed = requests[name] if requests is not None else target
        else:
            assumed = 0.0
        filled[name] = PodMetric(assumed, now, timedelta())
    if scale_up_with_unready:
        for name in unready:
            filled[name] = PodMetric(0.0, now, timedelta())
    new_ratio, _ = _ratio(filled, requests, target)
    if abs(1.0 - new_ratio) <= settings.tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return Proposal(current, utilization, average)
    replicas = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return Proposal(current, utilization, average)
    return Proposal(replicas, utilization, average)
