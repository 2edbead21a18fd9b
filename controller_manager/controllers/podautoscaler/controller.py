"""The HorizontalPodAutoscaler controller (upstream's podautoscaler): each sync reads the target's
scale subresource, proposes a replica count per resource metric (the largest wins), stabilizes and
rate-limits it by `behavior`, keeps it within min and max, writes the new scale, and reports
currentMetrics, desiredReplicas and the AbleToScale, ScalingActive and ScalingLimited conditions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.controllers.podautoscaler.behavior import (
    Decision,
    History,
    longest_policy_period,
    with_behavior,
    without_behavior,
)
from controller_manager.controllers.podautoscaler.metrics import MetricsSource, ResourceMetricsClient
from controller_manager.controllers.podautoscaler.replicas import MetricsError, Settings, resource_replicas
from controller_manager.resources import PODS
from services.api.conditions import set_status_condition
from services.api.quantity import format_quantity, parse_quantity
from services.api.selectors import LabelSelector
from services.client import GVR, ApiError, Conflict, NotFound, gvr
from services.informers import split_key

Obj = dict[str, Any]
HPAS = gvr("autoscaling/v2", "horizontalpodautoscalers")


def _time(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Target:
    resource: GVR
    scale: Obj


class HorizontalController(QueueController):
    def __init__(self, ctx: ControllerContext, metrics: MetricsSource | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.client = ctx.client
        self.hpas = ctx.informer(HPAS)
        self.pods = ctx.informer(PODS)
        self.recorder = ctx.recorder("horizontal-pod-autoscaler")
        self.metrics = metrics or ResourceMetricsClient(ctx.client)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.sync_period = float(ctx.option("horizontal_pod_autoscaler_sync_period", 15.0))  # type: ignore[arg-type]
        self.down_window = timedelta(seconds=float(
            ctx.option("horizontal_pod_autoscaler_downscale_stabilization", 300.0)))  # type: ignore[arg-type]
        self.settings = Settings(
            tolerance=float(ctx.option("horizontal_pod_autoscaler_tolerance", 0.1)),  # type: ignore[arg-type]
            cpu_initialization_period=timedelta(seconds=float(
                ctx.option("horizontal_pod_autoscaler_cpu_initialization_period", 300.0))),  # type: ignore[arg-type]
            initial_readiness_delay=timedelta(seconds=float(
                ctx.option("horizontal_pod_autoscaler_initial_readiness_delay", 30.0))))  # type: ignore[arg-type]
        self.history: dict[str, History] = {}
        self._mappings: dict[tuple[str, str], GVR] = {}
        super().__init__("horizontal-pod-autoscaler", [self.hpas, self.pods],
                         int(ctx.option("concurrent_horizontal_pod_autoscaler_syncs", 5)))  # type: ignore[arg-type]
        self.hpas.add_event_handler(self.enqueue, lambda _old, new: self.enqueue(new), self._deleted)

    def _deleted(self, hpa: Obj) -> None:
        self.history.pop(f"{hpa['metadata'].get('namespace')}/{hpa['metadata']['name']}", None)

    # -- the target ------------------------------------------------------------------------------------
    async def _resource_for(self, api_version: str, kind: str) -> GVR:
        """The resource serving `kind` in `api_version`, from discovery (cached once found)."""
        found = self._mappings.get((api_version, kind))
        if found is not None:
            return found
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        doc = await self.client.request("GET", path)
        for res in doc.get("resources") or ():
            if res.get("kind") == kind and "/" not in res.get("name", ""):
                found = GVR(group, version, res["name"], bool(res.get("namespaced", True)))
                self._mappings[(api_version, kind)] = found
                return found
        raise NotFound(404, f'no matches for kind "{kind}" in version "{api_version}"', {})

    async def _target(self, hpa: Obj) -> Target:
        ref = hpa["spec"]["scaleTargetRef"]
        resource = await self._resource_for(ref.get("apiVersion") or "", ref.get("kind") or "")
        scale = await self.client.get_scale(resource, ref["name"], hpa["metadata"]["namespace"])
        return Target(resource, scale)

    # -- metrics ---------------------------------------------------------------------------------------
    async def _proposals(self, hpa: Obj, current: int, selector: str) -> tuple[int, list[Obj], str]:
        """(the largest proposal, currentMetrics, the metric name that won) over the resource metrics."""
        namespace = hpa["metadata"]["namespace"]
        try:
            parsed = LabelSelector.parse(selector)
        except ValueError as exc:
            raise MetricsError(f"couldn't convert selector into a corresponding internal selector object: "
                               f"{exc}") from exc
        pods = [p for p in self.pods.list(namespace) if parsed.matches((p.get("metadata") or {}).get("labels"))]
        best, statuses, winner, errors_seen = -1, [], "", []
        for spec in hpa["spec"].get("metrics") or ():
            if spec.get("type") != "Resource":
                errors_seen.append(f"unsupported metric source type {spec.get('type')!r}")
                continue
            source = spec.get("resource") or {}
            name, target = source.get("name") or "", source.get("target") or {}
            try:
                metrics = await self.metrics.pod_metrics(namespace, selector, name)
                utilization = target.get("averageUtilization") if target.get("type") == "Utilization" else None
                average = None
                if target.get("type") == "AverageValue":
                    average = float(parse_quantity(str(target.get("averageValue") or "0")))
                proposal = resource_replicas(current, pods, metrics, name, utilization, average, self.settings)
            except MetricsError as exc:
                errors_seen.append(str(exc))
                self.recorder.warning(hpa, "FailedGetResourceMetric", str(exc))
                continue
            current_status: Obj = {"averageValue": format_quantity(_milli(proposal.average))}
            if proposal.utilization is not None:
                current_status["averageUtilization"] = proposal.utilization
            statuses.append({"type": "Resource", "resource": {"name": name, "current": current_status}})
            if proposal.replicas > best:
                best, winner = proposal.replicas, f"{name} resource" + (
                    " utilization (percentage of request)" if utilization is not None else "")
        if best < 0:
            raise MetricsError("; ".join(errors_seen) or "no metrics to compute a replica count from")
        return best, statuses, winner

    # -- sync ------------------------------------------------------------------------------------------
    async def sync(self, key: str) -> None:
        namespace, name = split_key(key)
        hpa = self.hpas.get(name, namespace)
        if hpa is None:
            self.history.pop(key, None)
            return
        await self._reconcile(key, hpa)
        raise RequeueAfter(self.sync_period)

    async def _reconcile(self, key: str, hpa: Obj) -> None:
        now = self.clock()
        spec = hpa["spec"]
        status: Obj = {"conditions": list((hpa.get("status") or {}).get("conditions") or []),
                       "currentMetrics": (hpa.get("status") or {}).get("currentMetrics")}
        previous = hpa.get("status") or {}
        for kept in ("lastScaleTime", "observedGeneration"):
            if previous.get(kept) is not None:
                status[kept] = previous[kept]
        stamp = _time(now)
        ref = spec["scaleTargetRef"]
        reference = f"{ref.get('kind')}/{ref.get('name')}"
        try:
            target = await self._target(hpa)
        except (ApiError, httpx.HTTPError) as exc:
            message = f"the HPA controller was unable to get the target's current scale: {exc}"
            self.recorder.warning(hpa, "FailedGetScale", str(exc))
            set_status_condition(status, {"type": "AbleToScale", "status": "False", "reason": "FailedGetScale",
                                          "message": message}, stamp)
            await self._write_status(hpa, status, int(previous.get("currentReplicas") or 0),
                                     int(previous.get("desiredReplicas") or 0))
            return
        set_status_condition(status, {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale",
                                      "message": "the HPA controller was able to get the target's current scale"},
                             stamp)
        current = int((target.scale.get("spec") or {}).get("replicas") or 0)
        low, high = int(spec.get("minReplicas") or 1), int(spec["maxReplicas"])
        history = self.history.setdefault(key, History())
        rescale_reason = ""
        if current == 0 and low != 0:
            desired = 0
            set_status_condition(status, {"type": "ScalingActive", "status": "False", "reason": "ScalingDisabled",
                                          "message": "scaling is disabled since the replica count of the target "
                                                     "is zero"}, stamp)
        elif current > high:
            desired, rescale_reason = high, "Current number of replicas above Spec.MaxReplicas"
        elif current < low:
            desired, rescale_reason = low, "Current number of replicas below Spec.MinReplicas"
        else:
            selector = str((target.scale.get("status") or {}).get("selector") or "")
            if not selector:
                message = "the HPA target's scale is missing a selector"
                self.recorder.warning(hpa, "SelectorRequired", message)
                set_status_condition(status, {"type": "ScalingActive", "status": "False",
                                              "reason": "InvalidSelector", "message": message}, stamp)
                await self._write_status(hpa, status, current, current)
                return
            try:
                proposed, current_metrics, winner = await self._proposals(hpa, current, selector)
            except MetricsError as exc:
                set_status_condition(status, {"type": "ScalingActive", "status": "False",
                                              "reason": "FailedGetResourceMetric",
                                              "message": f"the HPA was unable to compute the replica count: {exc}"},
                                     stamp)
                await self._write_status(hpa, status, current, current)
                return
            status["currentMetrics"] = current_metrics
            set_status_condition(status, {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound",
                                          "message": "the HPA was able to successfully calculate a replica count "
                                                     f"from {winner}"}, stamp)
            decision = self._normalize(history, spec, current, proposed, low, high, now)
            set_status_condition(status, {"type": "AbleToScale", "status": "True",
                                          "reason": decision.stabilized_reason,
                                          "message": decision.stabilized_message}, stamp)
            set_status_condition(status, {"type": "ScalingLimited", "status": "True" if decision.limited else "False",
                                          "reason": decision.limit_reason, "message": decision.limit_message},
                                 stamp)
            desired = decision.replicas
            if desired > current:
                rescale_reason = f"{winner} above target"
            elif desired < current:
                rescale_reason = "All metrics below target"
        if desired != current:
            try:
                await self.client.replace_scale(target.resource, ref["name"], desired, hpa["metadata"]["namespace"])
            except (ApiError, httpx.HTTPError) as exc:
                self.recorder.warning(hpa, "FailedRescale", f"New size: {desired}; reason: {rescale_reason}; "
                                                            f"error: {exc}")
                set_status_condition(status, {"type": "AbleToScale", "status": "False", "reason": "FailedUpdateScale",
                                              "message": f"the HPA controller was unable to update the target scale: "
                                                         f"{exc}"}, stamp)
                await self._write_status(hpa, status, current, current)
                return
            set_status_condition(status, {"type": "AbleToScale", "status": "True", "reason": "SucceededRescale",
                                          "message": f"the HPA controller was able to update the target scale to "
                                                     f"{desired}"}, stamp)
            self.recorder.normal(hpa, "SuccessfulRescale", f"New size: {desired}; reason: {rescale_reason}")
            history.record_scale(now, desired - current, longest_policy_period(spec.get("behavior")))
            status["lastScaleTime"] = stamp
            self.log.info("rescaled", hpa=key, target=reference, old=current, new=desired, reason=rescale_reason)
        await self._write_status(hpa, status, current, desired)

    def _normalize(self, history: History, spec: Obj, current: int, proposed: int, low: int, high: int,
                   now: datetime) -> Decision:
        behavior = spec.get("behavior")
        if isinstance(behavior, dict):
            return with_behavior(history, behavior, current, proposed, low, high, self.down_window, now)
        return without_behavior(history, current, proposed, low, high, self.down_window, now)

    async def _write_status(self, hpa: Obj, status: Obj, current: int, desired: int) -> None:
        status["currentReplicas"] = current
        status["desiredReplicas"] = desired
        status["observedGeneration"] = hpa["metadata"].get("generation")
        if status.get("currentMetrics") is None:
            status.pop("currentMetrics", None)
        if status == hpa.get("status"):
            return
        body = {**hpa, "status": status}
        try:
            await self.client.replace_status(HPAS, body, hpa["metadata"]["namespace"])
        except (NotFound, Conflict):
            return


def _milli(value: float) -> Decimal:
    """A float usage as an exact quantity to the milli-unit (upstream reports averageValue in milli-units)."""
    return Decimal(round(value * 1000)) / 1000
