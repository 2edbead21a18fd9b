"""The HPA controller's sync on the fake apiserver: resource metrics to a replica count (utilization and
average value, the tolerance, pods without metrics), min/max, behavior (stabilization windows,
policies, selectPolicy), the conditions and events upstream writes, and any kind with a scale
subresource. Metrics come from a fake metrics source the test sets; everything else is the real sync."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from controller_manager.controllers import podautoscaler
from controller_manager.controllers.podautoscaler.controller import HPAS, HorizontalController
from controller_manager.controllers.podautoscaler.replicas import MetricsError, PodMetric, Settings, resource_replicas
from controller_manager.resources import DEPLOYMENTS, EVENTS, PODS, STATEFUL_SETS
from tests.conftest import eventually
from tests.unit.controller_manager.harness import Harness, harness

NS = "default"
START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class Metrics:
    """Per-pod usage the test sets; raises like the metrics API when there is none."""

    def __init__(self) -> None:
        self.usage: dict[str, float] = {}
        self.clock: Clock | None = None

    async def pod_metrics(self, namespace: str, selector: str, resource: str) -> dict[str, PodMetric]:
        if not self.usage:
            raise MetricsError(f"unable to get metrics for resource {resource}: no metrics returned from resource "
                               "metrics API")
        at = self.clock() if self.clock else START
        return {name: PodMetric(value, at, timedelta(seconds=15)) for name, value in self.usage.items()}


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, cpu: str = "100m", memory: str = "64Mi") -> tuple[Any, dict[str, Any]]:
    started = START - timedelta(minutes=10)
    meta = {"name": name, "namespace": NS, "labels": {"app": "web"}}
    return PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                  "spec": {"containers": [{"name": "c", "image": "busybox",
                                           "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
                  "status": {"phase": "Running", "startTime": _stamp(started), "conditions": [
                      {"type": "Ready", "status": "True", "lastTransitionTime": _stamp(started)}]}}


def deployment(replicas: int) -> tuple[Any, dict[str, Any]]:
    return DEPLOYMENTS, {"apiVersion": "apps/v1", "kind": "Deployment",
                         "metadata": {"name": "web", "namespace": NS},
                         "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                                  "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}},
                         "status": {"replicas": replicas, "selector": "app=web"}}


def hpa(low: int = 1, high: int = 10, target: dict[str, Any] | None = None, behavior: dict[str, Any] | None = None,
        kind: str = "Deployment") -> tuple[Any, dict[str, Any]]:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": "web"}, "minReplicas": low,
        "maxReplicas": high, "metrics": [{"type": "Resource", "resource": {
            "name": "cpu", "target": target or {"type": "Utilization", "averageUtilization": 50}}}]}
    if behavior is not None:
        spec["behavior"] = behavior
    return HPAS, {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                  "metadata": {"name": "web", "namespace": NS, "generation": 1}, "spec": spec}


def build(metrics: Metrics, clock: Clock) -> Any:
    metrics.clock = clock
    return lambda ctx: HorizontalController(ctx, metrics=metrics, clock=clock)


def conditions(env: Harness) -> dict[str, tuple[str, str]]:
    status = env.api.get(HPAS, "web", NS)["status"]
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def replicas(env: Harness, resource: Any = DEPLOYMENTS) -> int:
    return env.api.get(resource, "web", NS)["spec"]["replicas"]


async def events(env: Harness) -> list[tuple[str, str]]:
    async def written() -> list[tuple[str, str]]:
        return [(e["reason"], e["message"]) for e in env.api.list(EVENTS, NS)]

    await eventually(written, limit=5.0, what="events")
    return await written()


async def test_utilization_above_target_scales_up_with_upstreams_conditions_and_event() -> None:
    metrics, clock = Metrics(), Clock()
    metrics.usage = {"p1": 0.1, "p2": 0.1}  # 100% of a 100m request against a 50% target
    async with harness(podautoscaler, [deployment(2), pod("p1"), pod("p2"), hpa()],
                       build=build(metrics, clock)) as env:
        delay = await env.sync(f"{NS}/web")
        assert delay == 15.0
        assert replicas(env) == 4
        status = env.api.get(HPAS, "web", NS)["status"]
        assert status["currentReplicas"] == 2 and status["desiredReplicas"] == 4
        assert status["currentMetrics"] == [{"type": "Resource", "resource": {
            "name": "cpu", "current": {"averageValue": "100m", "averageUtilization": 100}}}]
        assert status["lastScaleTime"] == _stamp(START)
        assert conditions(env) == {"AbleToScale": ("True", "SucceededRescale"),
                                   "ScalingActive": ("True", "ValidMetricFound"),
                                   "ScalingLimited": ("False", "DesiredWithinRange")}
        assert ("SuccessfulRescale", "New size: 4; reason: cpu resource utilization (percentage of request) above "
                                     "target") in await events(env)
        scale_writes = [a for a in env.api.writes("deployments") if a.subresource == "scale"]
        assert [a.body["spec"]["replicas"] for a in scale_writes] == [4]


async def test_within_tolerance_nothing_changes() -> None:
    metrics, clock = Metrics(), Clock()
    metrics.usage = {"p1": 0.054, "p2": 0.054}  # 108% of target: inside the 10% tolerance
    async with harness(podautoscaler, [deployment(2), pod("p1"), pod("p2"), hpa()],
                       build=build(metrics, clock)) as env:
        await env.sync(f"{NS}/web")
        assert replicas(env) == 2
        assert conditions(env)["AbleToScale"] == ("True", "ReadyForNewScale")


async def test_max_and_min_replicas_are_enforced() -> None:
    metrics, clock = Metrics(), Clock()
    metrics.usage = {"p1": 1.0, "p2": 1.0}
    async with harness(podautoscaler, [deployment(2), pod("p1"), pod("p2"), hpa(high=5)],
                       build=build(metrics, clock)) as env:
        await env.sync(f"{NS}/web")
        assert replicas(env) == 4  # at most double (or 4) per step without behavior
        assert conditions(env)["ScalingLimited"] == ("True", "ScaleUpLimit")
        env.update(*deployment(4))
        await env.sync(f"{NS}/web")
        assert replicas(env) == 5
        assert conditions(env)["ScalingLimited"] == ("True", "TooManyReplicas")
    async with harness(podautoscaler, [deployment(1), pod("p1"), hpa(low=3)], build=build(Metrics(), clock)) as env:
        await env.sync(f"{NS}/web")
        assert replicas(env) == 3
        assert ("SuccessfulRescale", "New size: 3; reason: Current number of replicas below Spec.MinReplicas") in \
            await events(env)


async def test_scale_down_waits_out_the_stabilization_window_then_policies_limit_the_rate() -> None:
    metrics, clock = Metrics(), Clock()
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                              "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30}]},
                "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}]}}
    seed = [deployment(4), *(pod(f"p{i}") for i in range(4)), hpa(behavior=behavior)]
    async with harness(podautoscaler, seed, build=build(metrics, clock)) as env:
        metrics.usage = {f"p{i}": 0.05 for i in range(4)}  # exactly on target
        await env.sync(f"{NS}/web")
        assert replicas(env) == 4
        metrics.usage = {f"p{i}": 0.01 for i in range(4)}  # 20% of target: 1 replica would do
        clock.now += timedelta(seconds=15)
        await env.sync(f"{NS}/web")
        assert replicas(env) == 4
        assert conditions(env)["AbleToScale"] == ("True", "ScaleDownStabilized")
        clock.now += timedelta(seconds=61)
        await env.sync(f"{NS}/web")
        assert replicas(env) == 3  # one pod per 30 s
        assert conditions(env)["ScalingLimited"] == ("True", "ScaleDownLimit")
        env.update(*deployment(3))
        clock.now += timedelta(seconds=10)
        await env.sync(f"{NS}/web")
        assert replicas(env) == 3  # still inside the policy's period
        clock.now += timedelta(seconds=25)
        await env.sync(f"{NS}/web")
        assert replicas(env) == 2


async def test_scale_up_policies_and_select_policy() -> None:
    metrics, clock = Metrics(), Clock()
    behavior = {"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Min", "policies": [
        {"type": "Pods", "value": 1, "periodSeconds": 60}, {"type": "Percent", "value": 100, "periodSeconds": 60}]},
        "scaleDown": {"selectPolicy": "Disabled"}}
    async with harness(podautoscaler, [deployment(2), pod("p1"), pod("p2"), hpa(behavior=behavior)],
                       build=build(metrics, clock)) as env:
        metrics.usage = {"p1": 0.5, "p2": 0.5}
        await env.sync(f"{NS}/web")
        assert replicas(env) == 3  # Min of (+1 pod, +100%)
        assert conditions(env)["ScalingLimited"] == ("True", "ScaleUpLimit")
        env.update(*deployment(3))
        metrics.usage = {"p1": 0.001, "p2": 0.001}
        clock.now += timedelta(minutes=10)
        await env.sync(f"{NS}/web")
        assert replicas(env) == 3  # scale-down disabled


async def test_average_value_target_on_a_statefulset() -> None:
    metrics, clock = Metrics(), Clock()
    metrics.usage = {"p1": 0.3, "p2": 0.3}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": NS},
           "spec": {"replicas": 2, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}},
           "status": {"replicas": 2, "selector": "app=web"}}
    target = {"type": "AverageValue", "averageValue": "200m"}
    async with harness(podautoscaler, [(STATEFUL_SETS, sts), pod("p1"), pod("p2"),
                                       hpa(target=target, kind="StatefulSet")], build=build(metrics, clock)) as env:
        await env.sync(f"{NS}/web")
        assert replicas(env, STATEFUL_SETS) == 3
        status = env.api.get(HPAS, "web", NS)["status"]
        assert status["currentMetrics"][0]["resource"]["current"] == {"averageValue": "300m"}


async def test_missing_metrics_and_missing_target_set_the_conditions() -> None:
    clock = Clock()
    async with harness(podautoscaler, [deployment(2), pod("p1"), pod("p2"), hpa()],
                       build=build(Metrics(), clock)) as env:
        await env.sync(f"{NS}/web")
        assert replicas(env) == 2
        assert conditions(env)["ScalingActive"] == ("False", "FailedGetResourceMetric")
        assert any(reason == "FailedGetResourceMetric" for reason, _ in await events(env))
    async with harness(podautoscaler, [hpa()], build=build(Metrics(), clock)) as env:
        await env.sync(f"{NS}/web")
        assert conditions(env)["AbleToScale"] == ("False", "FailedGetScale")


def test_pods_without_metrics_count_conservatively() -> None:
    settings = Settings()
    pods = [pod(f"p{i}")[1] for i in range(4)]
    at = START
    # Scaling up: the two pods without metrics count as using nothing, which damps the step.
    up = {"p0": PodMetric(0.2, at, timedelta(seconds=15)), "p1": PodMetric(0.2, at, timedelta(seconds=15))}
    assert resource_replicas(4, pods, up, "cpu", 50, None, settings).replicas == 8
    # Scaling down: they count as using their whole request, so it does not go below what that allows.
    down = {"p0": PodMetric(0.01, at, timedelta(seconds=15)), "p1": PodMetric(0.01, at, timedelta(seconds=15))}
    assert resource_replicas(4, pods, down, "cpu", 50, None, settings).replicas == 4
