"""Namespaces and Nodes: the cluster-scoped core objects with lifecycle rules of their own."""

from __future__ import annotations

import copy
import ipaddress

from apiserver.registry.base import MetaStrategy, child, get
from apiserver.registry.podspec import TAINT_EFFECTS
from apiserver.registry.strategy import Cause, Obj
from services.api import errors
from services.api import validation as v

NAME_LABEL = "kubernetes.io/metadata.name"
KUBERNETES_FINALIZER = "kubernetes"


class NamespaceStrategy(MetaStrategy):
    name_fn = staticmethod(v.name_is_dns_label)

    def defaults(self, obj: Obj) -> None:
        name = get(obj, "metadata", "name")
        if name:
            child(obj, "metadata", "labels")[NAME_LABEL] = name

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Active"}
        finalizers = child(obj, "spec").setdefault("finalizers", [])
        if KUBERNETES_FINALIZER not in finalizers:
            finalizers.append(KUBERNETES_FINALIZER)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        """spec.finalizers only change through the finalize subresource; status only through status."""
        super().prepare_for_update(new, old)
        new["spec"] = copy.deepcopy(old.get("spec") or {})

    def validate_spec(self, obj: Obj) -> list[Cause]:
        return _validate_spec_finalizers(obj)

    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        fields["status.phase"] = get(obj, "status", "phase", default="")
        return fields

    def prepare_for_finalize(self, new: Obj, old: Obj) -> None:
        """PUT namespaces/<name>/finalize: only spec.finalizers change; 422 when one is malformed."""
        finalizers = get(new, "spec", "finalizers", default=[])
        for key in list(new):
            if key not in ("apiVersion", "kind", "metadata"):
                del new[key]
        for key, value in old.items():
            if key not in ("apiVersion", "kind", "metadata"):
                new[key] = copy.deepcopy(value)
        child(new, "spec")["finalizers"] = finalizers
        causes = _validate_spec_finalizers(new)
        if causes:
            raise errors.invalid(self.resource.kind, self.resource.group, get(old, "metadata", "name", default=""),
                                 causes)

    def deletion_blocked(self, obj: Obj) -> bool:
        """A namespace stays until the namespace controller has emptied spec.finalizers."""
        return bool(get(obj, "spec", "finalizers"))

    def prepare_for_delete(self, obj: Obj) -> None:
        child(obj, "status")["phase"] = "Terminating"


def _validate_spec_finalizers(obj: Obj) -> list[Cause]:
    causes: list[Cause] = []
    for i, name in enumerate(get(obj, "spec", "finalizers", default=[])):
        path = f"spec.finalizers[{i}]"
        errs = v.is_qualified_name(name)
        causes.extend(v.invalid(path, name, m) for m in errs)
        if not errs and "/" not in name and name not in v.STANDARD_FINALIZERS:
            causes.append(v.invalid(path, name, "name is neither a standard finalizer name nor is it fully qualified"))
    return causes


class NodeStrategy(MetaStrategy):
    def defaults(self, obj: Obj) -> None:
        status = obj.get("status")
        if isinstance(status, dict) and status.get("capacity") and status.get("allocatable") is None:
            status["allocatable"] = copy.deepcopy(status["capacity"])

    def prepare_for_create(self, obj: Obj) -> None:
        """Nodes may carry status at create: the kubelet registers with what it found."""

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        for i, taint in enumerate(spec.get("taints") or []):
            path = f"spec.taints[{i}]"
            key = taint.get("key") or ""
            if not key:
                causes.append(v.required(f"{path}.key"))
            else:
                causes.extend(v.invalid(f"{path}.key", key, m) for m in v.is_qualified_name(key))
            value = taint.get("value") or ""
            causes.extend(v.invalid(f"{path}.value", value, m) for m in v.is_label_value(value))
            effect = taint.get("effect") or ""
            if not effect:
                causes.append(v.required(f"{path}.effect"))
            elif effect not in TAINT_EFFECTS:
                causes.append(v.not_supported(f"{path}.effect", effect, TAINT_EFFECTS))
        for i, cidr in enumerate(spec.get("podCIDRs") or []):
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                causes.append(v.invalid(f"spec.podCIDRs[{i}]", cidr, "must be a valid CIDR value, (e.g. 10.9.8.0/24 "
                                                                     "or 2001:db8::/64)"))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        if old_spec.get("podCIDR") and new_spec.get("podCIDR") != old_spec.get("podCIDR"):
            causes.append(v.forbidden("spec.podCIDR", "node updates may not change podCIDR except from \"\" to "
                                                      "valid"))
        if old_spec.get("podCIDRs") and new_spec.get("podCIDRs") != old_spec.get("podCIDRs"):
            causes.append(v.forbidden("spec.podCIDRs", "node updates may not change podCIDR except from \"\" to "
                                                       "valid"))
        if old_spec.get("providerID") and new_spec.get("providerID") != old_spec.get("providerID"):
            causes.append(v.forbidden("spec.providerID", "node updates may not change providerID except from \"\" "
                                                         "to valid"))
        return causes

    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        fields["spec.unschedulable"] = "true" if get(obj, "spec", "unschedulable") else "false"
        return fields
