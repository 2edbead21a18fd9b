"""scheduling.k8s.io/v1 PriorityClass."""

from __future__ import annotations

from apiserver.registry.base import MetaStrategy, setdefault
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
#: the classes every cluster has (upstream's SystemPriorityClasses): name -> (value, description)
SYSTEM_PRIORITY_CLASSES = {
    "system-node-critical": (2_000_001_000, "Used for system critical pods that must not be moved from their "
                                            "current node."),
    "system-cluster-critical": (2_000_000_000, "Used for system critical pods that must run in the cluster, but "
                                               "can be moved to another node if necessary."),
}
PREEMPTION_POLICIES = ("Never", "PreemptLowerPriority")


class PriorityClassStrategy(MetaStrategy):
    def defaults(self, obj: Obj) -> None:
        setdefault(obj, "preemptionPolicy", "PreemptLowerPriority")

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        name = (obj.get("metadata") or {}).get("name") or ""
        value = obj.get("value")
        if value is None:
            causes.append(v.required("value"))
        elif name in SYSTEM_PRIORITY_CLASSES:
            system_value = SYSTEM_PRIORITY_CLASSES[name][0]
            if value != system_value:
                causes.append(v.forbidden("metadata.name", f"{name} is a system critical priority class and must "
                                                           f"have value {system_value}"))
        elif name.startswith("system-"):
            causes.append(v.forbidden("metadata.name", "priority class names with 'system-' prefix are reserved."))
        elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
            causes.append(v.forbidden("value", f"maximum allowed value of a user defined priority is "
                                               f"{HIGHEST_USER_DEFINABLE_PRIORITY}"))
        policy = obj.get("preemptionPolicy")
        if policy is not None and policy not in PREEMPTION_POLICIES:
            causes.append(v.not_supported("preemptionPolicy", policy, PREEMPTION_POLICIES))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        if new.get("value") != old.get("value"):
            causes.append(v.forbidden("value", "may not be changed in an update."))
        if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
            causes.append(v.invalid("preemptionPolicy", new.get("preemptionPolicy"), v.FIELD_IMMUTABLE))
        return causes
