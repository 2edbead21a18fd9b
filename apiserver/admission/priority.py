"""The Priority admission plugin: a new pod's `priorityClassName` (or the cluster's globalDefault
class) resolves into `spec.priority` and `spec.preemptionPolicy`; naming a missing class, or a
priority that differs from the class's, is refused. An update keeps what the create resolved."""

from __future__ import annotations

from apiserver.admission.interfaces import CREATE, UPDATE, Attributes, MutationInterface, Obj
from services.api import errors

DEFAULT_PREEMPTION_POLICY = "PreemptLowerPriority"


class Priority(MutationInterface):
    name = "Priority"
    operations = frozenset({CREATE, UPDATE})
    resources = frozenset({("", "pods")})

    async def admit(self, a: Attributes) -> None:
        spec = a.obj.get("spec")
        if not isinstance(spec, dict):
            return
        if a.operation == UPDATE:
            old_spec = (a.old or {}).get("spec") or {}
            for key in ("priority", "preemptionPolicy"):
                if spec.get(key) is None and old_spec.get(key) is not None:
                    spec[key] = old_spec[key]
            return
        self._resolve(a.name, spec)

    def _classes(self) -> dict[str, Obj]:
        cache = self.config.cache.resources.get(f"{self.config.root}priorityclasses/")
        if cache is None:
            return {}
        return {e.obj["metadata"]["name"]: e.obj for e in cache.entries.values()}

    def _resolve(self, name: str, spec: Obj) -> None:
        classes = self._classes()
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
        if spec.get("preemptionPolicy") is None:
            spec["preemptionPolicy"] = (pc or {}).get("preemptionPolicy") or DEFAULT_PREEMPTION_POLICY
