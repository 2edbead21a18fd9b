"""storage.k8s.io/v1 StorageClass, CSIDriver and CSIStorageCapacity."""

from __future__ import annotations

from apiserver.registry.base import MetaStrategy, child, setdefault
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

RECLAIM_POLICIES = ("Delete", "Retain")
BINDING_MODES = ("Immediate", "WaitForFirstConsumer")
FS_GROUP_POLICIES = ("File", "None", "ReadWriteOnceWithFSType")
LIFECYCLE_MODES = ("Ephemeral", "Persistent")
CSI_DRIVER_NAME_MAX = 63
MIN_TOKEN_SECONDS = 600
MAX_TOKEN_SECONDS = 1 << 32


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


class CSIDriverStrategy(MetaStrategy):
    """Upstream's SetDefaults_CSIDriver and ValidateCSIDriver (SELinuxMountReadWriteOncePod on, as in v1.32)."""

    @staticmethod
    def name_fn(name: str, prefix: bool) -> list[str]:
        errs = [] if prefix or len(name) <= CSI_DRIVER_NAME_MAX else [v.max_len_error(CSI_DRIVER_NAME_MAX)]
        return errs + v.name_is_dns_subdomain(name.lower(), prefix)

    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        for key, value in (("attachRequired", True), ("podInfoOnMount", False), ("storageCapacity", False),
                           ("fsGroupPolicy", "ReadWriteOnceWithFSType"), ("requiresRepublish", False),
                           ("seLinuxMount", False)):
            setdefault(spec, key, value)
        if not spec.get("volumeLifecycleModes"):
            spec["volumeLifecycleModes"] = ["Persistent"]

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        for key in ("attachRequired", "podInfoOnMount", "storageCapacity", "requiresRepublish", "seLinuxMount"):
            if spec.get(key) is None:
                causes.append(v.required(f"spec.{key}"))
        policy = spec.get("fsGroupPolicy")
        if policy is not None and policy not in FS_GROUP_POLICIES:
            causes.append(v.not_supported("spec.fsGroupPolicy", policy, FS_GROUP_POLICIES))
        for i, mode in enumerate(spec.get("volumeLifecycleModes") or ()):
            if mode not in LIFECYCLE_MODES:
                causes.append(v.not_supported(f"spec.volumeLifecycleModes[{i}]", mode, LIFECYCLE_MODES))
        audiences: set[str] = set()
        for i, request in enumerate(spec.get("tokenRequests") or ()):
            path = f"spec.tokenRequests[{i}]"
            audience = (request or {}).get("audience") or ""
            if audience in audiences:
                causes.append(v.duplicate(f"{path}.audience", audience))
            audiences.add(audience)
            seconds = (request or {}).get("expirationSeconds")
            if isinstance(seconds, int) and seconds < MIN_TOKEN_SECONDS:
                causes.append(v.invalid(f"{path}.expirationSeconds", seconds,
                                        "may not specify a duration less than 10 minutes"))
            elif isinstance(seconds, int) and seconds > MAX_TOKEN_SECONDS:
                causes.append(v.invalid(f"{path}.expirationSeconds", seconds,
                                        "may not specify a duration larger than 2^32 seconds"))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        for key in ("attachRequired", "volumeLifecycleModes"):
            causes += v.validate_immutable(spec.get(key), old_spec.get(key), f"spec.{key}")
        return causes


class CSIStorageCapacityStrategy(MetaStrategy):
    """Upstream's ValidateCSIStorageCapacity: a valid class name and topology, a non-negative capacity."""

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes = v.validate_label_selector(obj.get("nodeTopology"), "nodeTopology")
        name = obj.get("storageClassName") or ""
        causes.extend(v.invalid("storageClassName", name, m) for m in v.name_is_dns_subdomain(name, False))
        for key in ("capacity", "maximumVolumeSize"):
            if obj.get(key) is not None:
                causes += v.validate_quantity(obj[key], key)
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        for key in ("nodeTopology", "storageClassName"):
            causes += v.validate_immutable(new.get(key), old.get(key), key)
        return causes

