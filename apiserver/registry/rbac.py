"""RBAC: Roles, ClusterRoles and their bindings. Names only need to be valid path segments."""

from __future__ import annotations

import json

from apiserver.registry.base import MetaStrategy
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v
from services.api.errors import cause

RBAC_GROUP = "rbac.authorization.k8s.io"
SUBJECT_KINDS = ("ServiceAccount", "User", "Group")


def _go_strings(values: list[str]) -> str:
    """A []string as Go's %#v prints it in upstream's field errors."""
    return "[]string{" + ", ".join(json.dumps(x) for x in values) + "}"


def _go_role_ref(ref: Obj) -> str:
    """A RoleRef as Go's %#v prints the internal rbac.RoleRef."""
    fields = ", ".join(f"{go}:{json.dumps(ref.get(key) or '')}"
                       for go, key in (("APIGroup", "apiGroup"), ("Kind", "kind"), ("Name", "name")))
    return f"rbac.RoleRef{{{fields}}}"


def validate_rules(rules: list[Obj], namespaced: bool) -> list[Cause]:
    causes: list[Cause] = []
    for i, rule in enumerate(rules or []):
        path = f"rules[{i}]"
        if not rule.get("verbs"):
            causes.append(v.required(f"{path}.verbs", "verbs must contain at least one value"))
        urls = rule.get("nonResourceURLs") or []
        if urls:
            shown = f"Invalid value: {_go_strings(urls)}: "
            if namespaced:
                causes.append(cause(f"{path}.nonResourceURLs",
                                    shown + "namespaced rules cannot apply to non-resource URLs", v.INVALID))
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                causes.append(cause(f"{path}.nonResourceURLs",
                                    shown + "rules cannot apply to both regular resources and non-resource URLs",
                                    v.INVALID))
            continue
        if not rule.get("apiGroups"):
            causes.append(v.required(f"{path}.apiGroups", "resource rules must supply at least one api group"))
        if not rule.get("resources"):
            causes.append(v.required(f"{path}.resources", "resource rules must supply at least one resource"))
    return causes


class RoleStrategy(MetaStrategy):
    name_fn = staticmethod(v.name_is_path_segment)

    def validate_spec(self, obj: Obj) -> list[Cause]:
        return validate_rules(obj.get("rules") or [], self.resource.namespaced)


class ClusterRoleStrategy(RoleStrategy):
    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes = validate_rules(obj.get("rules") or [], False)
        aggregation = obj.get("aggregationRule")
        if aggregation is not None:
            if not aggregation.get("clusterRoleSelectors"):
                causes.append(v.required("aggregationRule.clusterRoleSelectors",
                                         "at least one clusterRoleSelector required if aggregationRule is non-nil"))
            for i, selector in enumerate(aggregation.get("clusterRoleSelectors") or []):
                causes.extend(v.validate_label_selector(selector, f"aggregationRule.clusterRoleSelectors[{i}]"))
        return causes


class RoleBindingStrategy(MetaStrategy):
    name_fn = staticmethod(v.name_is_path_segment)

    def defaults(self, obj: Obj) -> None:
        """Upstream's v1 defaults: the RBAC group for roleRef and for User and Group subjects."""
        ref = obj.get("roleRef")
        if isinstance(ref, dict) and not ref.get("apiGroup"):
            ref["apiGroup"] = RBAC_GROUP
        for subject in obj.get("subjects") or []:
            if isinstance(subject, dict) and not subject.get("apiGroup") and subject.get("kind") in ("User", "Group"):
                subject["apiGroup"] = RBAC_GROUP

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        ref = obj.get("roleRef") or {}
        allowed = ("Role", "ClusterRole") if self.resource.namespaced else ("ClusterRole",)
        if ref.get("apiGroup") != RBAC_GROUP:
            causes.append(v.not_supported("roleRef.apiGroup", ref.get("apiGroup") or "", (RBAC_GROUP,)))
        if ref.get("kind") not in allowed:
            causes.append(v.not_supported("roleRef.kind", ref.get("kind") or "", allowed))
        name = ref.get("name") or ""
        if not name:
            causes.append(v.required("roleRef.name"))
        else:
            causes.extend(v.invalid("roleRef.name", name, m) for m in v.is_path_segment_name(name))
        for i, subject in enumerate(obj.get("subjects") or []):
            path = f"subjects[{i}]"
            kind = subject.get("kind") or ""
            subject_name = subject.get("name") or ""
            if not subject_name:
                causes.append(v.required(f"{path}.name"))
            if kind == "ServiceAccount":
                if subject_name:
                    causes.extend(v.invalid(f"{path}.name", subject_name, m)
                                  for m in v.name_is_dns_subdomain(subject_name, False))
                if subject.get("apiGroup"):
                    causes.append(v.not_supported(f"{path}.apiGroup", subject["apiGroup"], ("",)))
                if not subject.get("namespace") and not self.resource.namespaced:
                    causes.append(v.required(f"{path}.namespace"))
            elif kind in ("User", "Group"):
                if subject.get("apiGroup") != RBAC_GROUP:
                    causes.append(v.not_supported(f"{path}.apiGroup", subject.get("apiGroup") or "", (RBAC_GROUP,)))
            else:
                causes.append(v.not_supported(f"{path}.kind", kind, SUBJECT_KINDS))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        if new.get("roleRef") != old.get("roleRef"):
            causes.append(cause("roleRef", f"Invalid value: {_go_role_ref(new.get('roleRef') or {})}: "
                                "cannot change roleRef", v.INVALID))
        return causes
