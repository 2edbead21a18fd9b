"""node.k8s.io/v1 RuntimeClass: which CRI handler runs a pod's sandbox, what it costs and where it can run."""

from __future__ import annotations

from typing import Any

from apiserver.registry.base import MetaStrategy
from apiserver.registry.podspec import validate_tolerations
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v
from services.api.quantity import is_valid_quantity, parse_quantity


def _validate_overhead(overhead: Any) -> list[Cause]:
    causes: list[Cause] = []
    for name, value in ((overhead or {}).get("podFixed") or {}).items():
        path = f"overhead.podFixed[{name}]"
        causes.extend(v.invalid(path, name, m) for m in v.is_qualified_name(name))
        if not is_valid_quantity(value):
            causes.append(v.invalid(path, value, "must be a valid quantity"))
        elif parse_quantity(value) < 0:
            causes.append(v.invalid(path, value, "must be greater than or equal to 0"))
    return causes


class RuntimeClassStrategy(MetaStrategy):
    def validate_spec(self, obj: Obj) -> list[Cause]:
        handler = obj.get("handler")
        handler = handler if isinstance(handler, str) else ""
        causes = [v.invalid("handler", handler, m) for m in v.is_dns1123_label(handler)]
        if obj.get("overhead") is not None:
            causes += _validate_overhead(obj["overhead"])
        scheduling = obj.get("scheduling")
        if scheduling is not None:
            causes += v.validate_labels(scheduling.get("nodeSelector"), "scheduling.nodeSelector")
            causes += validate_tolerations(scheduling.get("tolerations"), "scheduling.tolerations")
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        """Upstream checks only that the handler is unchanged on update."""
        if new.get("handler") != old.get("handler"):
            return [v.invalid("handler", new.get("handler"), v.FIELD_IMMUTABLE)]
        return []
