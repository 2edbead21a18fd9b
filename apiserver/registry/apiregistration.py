"""apiregistration.k8s.io/v1 APIService: which group/version this apiserver serves itself (no service)
and which it proxies to an extension apiserver behind a Service."""

from __future__ import annotations

from typing import Any

from apiserver.registry.base import MetaStrategy, child, setdefault
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

GROUP = "apiregistration.k8s.io"


def required_name(spec: dict[str, Any]) -> str:
    """An APIService is named `<version>.<group>` (just `<version>` for the legacy group)."""
    version, group = str(spec.get("version") or ""), str(spec.get("group") or "")
    return f"{version}.{group}" if group else version


class APIServiceStrategy(MetaStrategy):
    def defaults(self, obj: Obj) -> None:
        service = (obj.get("spec") or {}).get("service")
        if isinstance(service, dict):
            setdefault(service, "port", 443)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {}

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        causes: list[Cause] = []
        name = str((obj.get("metadata") or {}).get("name") or "")
        expected = required_name(spec)
        if name and name != expected:
            causes.append(v.invalid("metadata.name", name, f"must be {expected}"))
        group, version = str(spec.get("group") or ""), str(spec.get("version") or "")
        if not group and version != "v1":
            causes.append(v.required("spec.group", "only v1 may have an empty group and it better be legacy kube"))
        if group:
            causes.extend(v.invalid("spec.group", group, m) for m in v.is_dns1123_subdomain(group))
        causes.extend(v.invalid("spec.version", version, m) for m in v.is_dns1035_label(version))
        for field, top in (("groupPriorityMinimum", 20000), ("versionPriority", 1000)):
            value = spec.get(field)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= top:
                causes.append(v.invalid(f"spec.{field}", value if value is not None else 0,
                                        f"must be positive and less than {top}"))
        service = spec.get("service")
        skip, bundle = bool(spec.get("insecureSkipTLSVerify")), spec.get("caBundle") or ""
        if service is None:
            if bundle:
                causes.append(v.invalid("spec.caBundle", bundle, "local APIServices may not have a caBundle"))
            if skip:
                causes.append(v.invalid("spec.insecureSkipTLSVerify", skip,
                                        "local APIServices may not have insecureSkipTLSVerify"))
            return causes
        namespace, svc = str(service.get("namespace") or ""), str(service.get("name") or "")
        if not namespace:
            causes.append(v.required("spec.service.namespace"))
        causes.extend(v.invalid("spec.service.namespace", namespace, m)
                      for m in (v.is_dns1123_label(namespace) if namespace else ()))
        if not svc:
            causes.append(v.required("spec.service.name"))
        causes.extend(v.invalid("spec.service.name", svc, m) for m in (v.is_dns1035_label(svc) if svc else ()))
        causes.extend(v.invalid("spec.service.port", service.get("port"), m)
                      for m in v.is_valid_port_num(service.get("port")))
        if skip and bundle:
            causes.append(v.invalid("spec.insecureSkipTLSVerify", skip, "may not be true if caBundle is present"))
        return causes

    def validate_status_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes: list[Cause] = []
        for i, cond in enumerate(child(new, "status").get("conditions") or []):
            if cond.get("status") not in ("True", "False", "Unknown"):
                causes.append(v.not_supported(f"status.conditions[{i}].status", cond.get("status"),
                                              ("False", "True", "Unknown")))
        return causes
