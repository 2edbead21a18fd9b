"""Mutating admission the apiserver runs on creates before defaulting and validation.

Only what every upstream cluster enables and what pyk8s's components rely on: the
Priority plugin resolves `priorityClassName` into `spec.priority` and `preemptionPolicy`.
"""

from __future__ import annotations

from typing import Any

from services.api import errors
from services.api.catalog import Resource

Obj = dict[str, Any]

SYSTEM_PRIORITY_CLASSES = (
    ("system-node-critical", 2000001000, "Used for system critical pods that must not be moved from their "
     "current node."),
    ("system-cluster-critical", 2000000000, "Used for system critical pods that must run in the cluster, but "
     "can be moved to another node if necessary."),
)


class Admission:
    """The admission chain; reads other objects from the watch cache, like upstream's informers."""

    def __init__(self, cache: Any, root: str) -> None:
        self.cache = cache
        self.root = root

    async def admit_create(self, res: Resource, obj: Obj) -> None:
        if res.group == "" and res.plural == "pods":
            self._priority(obj)

    def _priority_classes(self) -> dict[str, Obj]:
        cache = self.cache.resources.get(f"{self.root}priorityclasses/")
        if cache is None:
            return {}
        return {e.obj["metadata"]["name"]: e.obj for e in cache.entries.values()}

    def _priority(self, pod: Obj) -> None:
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        name = pod.get("metadata", {}).get("name", "")
        classes = self._priority_classes()
        class_name = spec.get("priorityClassName")
        if class_name:
            pc = classes.get(class_name)
            if pc is None:
                raise errors.forbidden("pods", "", name, f"no PriorityClass with name {class_name} was found")
        else:
            pc = next((c for c in classes.values() if c.get("globalDefault")), None)
            if pc is not None:
                spec["priorityClassName"] = pc["metadata"]["name"]
        value = int(pc.get("value", 0)) if pc is not None else 0
        given = spec.get("priority")
        if given is not None and given != value:
            raise errors.forbidden("pods", "", name, f"the integer value of priority ({given}) must not be "
                                   "provided in pod spec; priority admission controller computed "
                                   f"{value} from the given PriorityClass name")
        spec["priority"] = value
        policy = (pc or {}).get("preemptionPolicy") or "PreemptLowerPriority"
        if spec.get("preemptionPolicy") is None:
            spec["preemptionPolicy"] = policy
