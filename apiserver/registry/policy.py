"""policy/v1 PodDisruptionBudget."""

from __future__ import annotations

from apiserver.registry.apps import validate_int_or_percent
from apiserver.registry.base import GenerationStrategy, get
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

UNHEALTHY_POD_EVICTION_POLICIES = ("AlwaysAllow", "IfHealthyBudget")


class PodDisruptionBudgetStrategy(GenerationStrategy):
    initial_status = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            causes.append(v.invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
        for key in ("minAvailable", "maxUnavailable"):
            if spec.get(key) is not None:
                causes.extend(validate_int_or_percent(spec[key], f"spec.{key}"))
        causes.extend(v.validate_label_selector(spec.get("selector"), "spec.selector"))
        policy = spec.get("unhealthyPodEvictionPolicy")
        if policy is not None and policy not in UNHEALTHY_POD_EVICTION_POLICIES:
            causes.append(v.not_supported("spec.unhealthyPodEvictionPolicy", policy,
                                          UNHEALTHY_POD_EVICTION_POLICIES))
        return causes

    def validate_status_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes: list[Cause] = []
        for key in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
            causes.extend(v.validate_nonnegative(get(new, "status", key), f"status.{key}"))
        return causes
