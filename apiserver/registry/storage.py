"""storage.k8s.io/v1 StorageClass."""

from __future__ import annotations

from apiserver.registry.base import MetaStrategy, setdefault
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

RECLAIM_POLICIES = ("Delete", "Retain")
BINDING_MODES = ("Immediate", "WaitForFirstConsumer")


class StorageClassStrategy(MetaStrategy):
    def defaults(self, obj: Obj) -> None:
        setdefault(obj, "reclaimPolicy", "Delete")
        setdefault(obj, "volumeBindingMode", "Immediate")

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        provisioner = obj.get("provisioner") or ""
        if not provisioner:
            causes.append(v.required("provisioner"))
        else:
            causes.extend(v.invalid("provisioner", provisioner, m) for m in v.is_qualified_name(provisioner.lower()))
        policy = obj.get("reclaimPolicy") or ""
        if policy not in RECLAIM_POLICIES:
            causes.append(v.not_supported("reclaimPolicy", policy, RECLAIM_POLICIES))
        mode = obj.get("volumeBindingMode") or ""
        if mode not in BINDING_MODES:
            causes.append(v.not_supported("volumeBindingMode", mode, BINDING_MODES))
        params = obj.get("parameters") or {}
        if len(params) > 512:
            causes.append(v.too_long("parameters", 512))
        for key in params:
            if not key:
                causes.append(v.invalid("parameters", params, "key must be non-empty"))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        if (new.get("parameters") or {}) != (old.get("parameters") or {}):
            causes.append(v.forbidden("parameters", "updates to parameters are forbidden."))
        if new.get("provisioner") != old.get("provisioner"):
            causes.append(v.forbidden("provisioner", "updates to provisioner are forbidden."))
        if new.get("reclaimPolicy") != old.get("reclaimPolicy"):
            causes.append(v.forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden."))
        if new.get("volumeBindingMode") != old.get("volumeBindingMode"):
            causes.append(v.invalid("volumeBindingMode", new.get("volumeBindingMode"), v.FIELD_IMMUTABLE))
        return causes
