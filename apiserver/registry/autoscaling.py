"""HorizontalPodAutoscaler, served as autoscaling/v2 and v1 (stored as v2). Validation runs
on the v2 form so both versions give the same answers."""

from __future__ import annotations

from apiserver.registry.base import MetaStrategy, child, get, setdefault
from apiserver.registry.conversion import hpa_v1_to_v2
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

DEFAULT_CPU_UTILIZATION = 80
METRIC_TYPES = ("ContainerResource", "External", "Object", "Pods", "Resource")


class HorizontalPodAutoscalerStrategy(MetaStrategy):
    def _is_v1(self, obj: Obj) -> bool:
        """The store hands create bodies over as served, update bodies already converted to v2."""
        return self.resource.version == "v1" and obj.get("apiVersion") != "autoscaling/v2"

    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        setdefault(spec, "minReplicas", 1)
        if self._is_v1(obj):
            return
        if not spec.get("metrics"):
            spec["metrics"] = [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]
        behavior = spec.get("behavior")
        if isinstance(behavior, dict):
            up = child(behavior, "scaleUp")
            setdefault(up, "stabilizationWindowSeconds", 0)
            setdefault(up, "selectPolicy", "Max")
            setdefault(up, "policies", [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                        {"type": "Percent", "value": 100, "periodSeconds": 15}])
            down = child(behavior, "scaleDown")
            setdefault(down, "selectPolicy", "Max")
            setdefault(down, "policies", [{"type": "Percent", "value": 100, "periodSeconds": 15}])

    def validate_spec(self, obj: Obj) -> list[Cause]:
        hpa = hpa_v1_to_v2(obj) if self._is_v1(obj) else obj
        spec = hpa.get("spec") or {}
        causes: list[Cause] = []
        ref = spec.get("scaleTargetRef") or {}
        if not ref.get("kind"):
            causes.append(v.required("spec.scaleTargetRef.kind"))
        if not ref.get("name"):
            causes.append(v.required("spec.scaleTargetRef.name"))
        else:
            causes.extend(v.invalid("spec.scaleTargetRef.name", ref["name"], m)
                          for m in v.is_path_segment_name(ref["name"]))
        low = spec.get("minReplicas")
        high = spec.get("maxReplicas")
        if low is not None and low < 1:
            causes.append(v.invalid("spec.minReplicas", low, "must be greater than or equal to 1"))
        if high is None or high < 1:
            causes.append(v.invalid("spec.maxReplicas", high or 0, "must be greater than 0"))
        elif low is not None and high < low:
            causes.append(v.invalid("spec.maxReplicas", high, "must be greater than or equal to `minReplicas`"))
        for i, metric in enumerate(spec.get("metrics") or []):
            kind = metric.get("type") or ""
            if kind not in METRIC_TYPES:
                causes.append(v.not_supported(f"spec.metrics[{i}].type", kind, METRIC_TYPES))
            target = get(metric, "resource", "target", "averageUtilization")
            if target is not None and target <= 0:
                causes.append(v.invalid(f"spec.metrics[{i}].resource.target.averageUtilization", target,
                                        "must be greater than 0"))
        return causes
