"""Validation and defaults of Roles, ClusterRoles and their bindings, in upstream's words."""

from __future__ import annotations

import copy
from typing import Any

from apiserver.registry.strategies import strategy_for
from services.api.catalog import Catalog

RBAC = "rbac.authorization.k8s.io"
CATALOG = Catalog()


def strategy(plural: str) -> Any:
    return strategy_for(next(r for r in CATALOG if r.group == RBAC and r.plural == plural))


def create(plural: str, obj: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    s = strategy(plural)
    obj = copy.deepcopy(obj)
    s.defaults(obj)
    s.prepare_for_create(obj)
    return obj, s.validate(obj)


def messages(causes: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in causes]


def binding(kind: str = "ClusterRole", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": "b", "namespace": "d"}, "roleRef": {"kind": kind, "name": "view"}, **extra}


def test_binding_defaults_api_groups() -> None:
    obj, causes = create("rolebindings", binding(subjects=[
        {"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
        {"kind": "ServiceAccount", "name": "default"}]))
    assert causes == []
    assert obj["roleRef"]["apiGroup"] == RBAC
    assert [s.get("apiGroup") for s in obj["subjects"]] == [RBAC, RBAC, None]


def test_binding_role_ref_rules() -> None:
    _, causes = create("rolebindings", binding("Secret", roleRef={"apiGroup": "apps", "kind": "Secret", "name": ""}))
    assert messages(causes) == [
        ("roleRef.apiGroup", 'Unsupported value: "apps": supported values: "rbac.authorization.k8s.io"'),
        ("roleRef.kind", 'Unsupported value: "Secret": supported values: "Role", "ClusterRole"'),
        ("roleRef.name", "Required value"),
    ]
    crb = {"metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "r"}}
    _, causes = create("clusterrolebindings", crb)
    assert messages(causes) == [("roleRef.kind", 'Unsupported value: "Role": supported values: "ClusterRole"')]


def test_subject_rules() -> None:
    subjects = [{"kind": "ServiceAccount", "name": "x"}, {"kind": "Robot", "name": "r"}, {"kind": "User"},
                {"kind": "ServiceAccount", "name": "Bad_Name", "namespace": "d"},
                {"kind": "User", "name": "u", "apiGroup": "v1"}]
    crb = {"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": subjects}
    _, causes = create("clusterrolebindings", crb)
    assert [c["field"] for c in causes] == [
        "subjects[0].namespace", "subjects[1].kind", "subjects[2].name", "subjects[3].name", "subjects[4].apiGroup"]
    assert causes[1]["message"] == 'Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"'
    assert causes[3]["message"].startswith('Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain')
    # a RoleBinding's service account defaults to the binding's namespace, so none is required
    _, causes = create("rolebindings", binding(subjects=[{"kind": "ServiceAccount", "name": "x"}]))
    assert causes == []


def test_role_ref_is_immutable() -> None:
    old, _ = create("rolebindings", binding())
    new = copy.deepcopy(old)
    new["roleRef"]["name"] = "edit"
    causes = strategy("rolebindings").validate_update(new, old)
    assert messages(causes) == [("roleRef", 'Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", '
                                            'Kind:"ClusterRole", Name:"edit"}: cannot change roleRef')]
    new = copy.deepcopy(old)
    new["subjects"] = [{"kind": "User", "name": "bob", "apiGroup": RBAC}]
    assert strategy("rolebindings").validate_update(new, old) == []


def test_rule_rules() -> None:
    role = {"metadata": {"name": "r", "namespace": "d"},
            "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}, {"verbs": ["get"]}]}
    _, causes = create("roles", role)
    assert messages(causes) == [
        ("rules[0].nonResourceURLs",
         'Invalid value: []string{"/healthz"}: namespaced rules cannot apply to non-resource URLs'),
        ("rules[1].apiGroups", "Required value: resource rules must supply at least one api group"),
        ("rules[1].resources", "Required value: resource rules must supply at least one resource"),
    ]
    _, causes = create("clusterroles", {"metadata": {"name": "c"}, "aggregationRule": {}})
    assert messages(causes) == [("aggregationRule.clusterRoleSelectors",
                                 "Required value: at least one clusterRoleSelector required if aggregationRule is "
                                 "non-nil")]
    _, causes = create("clusterroles", {"metadata": {"name": "system:c"},
                                        "rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"]}]})
    assert causes == []
