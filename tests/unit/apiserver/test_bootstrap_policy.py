"""The default RBAC policy against upstream's, and its reconciliation (unit level: no etcd)."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.auth import bootstrap_policy as bp
from apiserver.registry.rbac import validate_rules
from controller_manager.controllers.clusterroleaggregation import aggregate

Obj = dict[str, Any]


def by_name(objs: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objs}


ROLES = by_name(bp.cluster_roles() + bp.controller_roles())
BINDINGS = by_name(bp.cluster_role_bindings())


def effective(name: str) -> list[Obj]:
    """A role's rules once the aggregation controller has run to a fixed point."""
    roles = [dict(r) for r in ROLES.values()]
    for _ in range(5):
        for role in roles:
            if role.get("aggregationRule") is not None:
                role["rules"] = aggregate(role, roles)
    return next(r for r in roles if r["metadata"]["name"] == name)["rules"]


def allows(rules: list[Obj], verb: str, group: str, resource: str, name: str = "") -> bool:
    wanted = bp.rule((verb,), (group,), (resource,), names=(name,) if name else ())
    return not bp.uncovered(rules, [wanted])


def allows_url(rules: list[Obj], verb: str, url: str) -> bool:
    return not bp.uncovered(rules, [bp.rule((verb,), urls=(url,))])


def test_role_names_and_metadata_as_upstream() -> None:
    for name in ("cluster-admin", "admin", "edit", "view", "system:aggregate-to-admin", "system:aggregate-to-edit",
                 "system:aggregate-to-view", "system:discovery", "system:basic-user", "system:public-info-viewer",
                 "system:monitoring", "system:node", "system:node-proxier", "system:kube-scheduler",
                 "system:volume-scheduler", "system:kube-controller-manager", "system:kube-dns",
                 "system:auth-delegator", "system:controller:replicaset-controller",
                 "system:controller:clusterrole-aggregation-controller", "system:controller:node-controller"):
        meta = ROLES[name]["metadata"]
        assert meta["labels"]["kubernetes.io/bootstrapping"] == "rbac-defaults", name
        assert meta["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] == "true", name
    assert ROLES["admin"]["aggregationRule"] == {"clusterRoleSelectors": [
        {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]}
    assert ROLES["admin"]["rules"] == []
    assert ROLES["edit"]["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert ROLES["view"]["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    # upstream's rule builder sorts every list
    assert ROLES["system:aggregate-to-admin"]["rules"][1] == {
        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"]}


def test_view_edit_admin_after_aggregation() -> None:
    view, edit, admin = effective("view"), effective("edit"), effective("admin")
    assert allows(view, "list", "", "pods") and allows(view, "watch", "apps", "deployments")
    assert not allows(view, "get", "", "secrets")
    assert not allows(view, "create", "", "pods")
    assert allows(edit, "create", "apps", "deployments") and allows(edit, "get", "", "secrets")
    assert allows(edit, "create", "", "pods/exec")
    assert not allows(edit, "create", "rbac.authorization.k8s.io", "roles")
    assert not allows(edit, "create", "rbac.authorization.k8s.io", "rolebindings")
    assert allows(admin, "create", "rbac.authorization.k8s.io", "roles")
    assert allows(admin, "create", "rbac.authorization.k8s.io", "rolebindings")
    assert allows(admin, "create", "apps", "deployments")
    assert not allows(admin, "create", "", "namespaces") and not allows(admin, "get", "", "nodes")


def test_system_roles_grant_what_upstream_grants() -> None:
    proxier = ROLES["system:node-proxier"]["rules"]
    for verb in ("list", "watch"):
        assert allows(proxier, verb, "", "services") and allows(proxier, verb, "discovery.k8s.io", "endpointslices")
    assert not allows(proxier, "create", "", "services")
    assert allows(ROLES["cluster-admin"]["rules"], "escalate", "anything.io", "widgets")
    assert allows_url(ROLES["cluster-admin"]["rules"], "get", "/logs/x")
    assert allows_url(ROLES["system:discovery"]["rules"], "get", "/apis/apps/v1")
    assert not allows_url(ROLES["system:discovery"]["rules"], "get", "/metrics")
    assert allows_url(ROLES["system:public-info-viewer"]["rules"], "get", "/version")
    assert allows_url(ROLES["system:monitoring"]["rules"], "get", "/readyz/etcd")
    assert allows(ROLES["system:basic-user"]["rules"], "create", "authorization.k8s.io", "selfsubjectaccessreviews")
    scheduler = ROLES["system:kube-scheduler"]["rules"]
    assert allows(scheduler, "create", "", "pods/binding") and allows(scheduler, "update", "", "pods/status")
    assert allows(scheduler, "update", "coordination.k8s.io", "leases", "kube-scheduler")
    assert not allows(scheduler, "update", "coordination.k8s.io", "leases", "other")
    assert not allows(scheduler, "update", "coordination.k8s.io", "leases")
    kcm = ROLES["system:kube-controller-manager"]["rules"]
    assert allows(kcm, "watch", "apps", "replicasets") and not allows(kcm, "create", "", "pods")
    aggregation = ROLES["system:controller:clusterrole-aggregation-controller"]["rules"]
    assert allows(aggregation, "escalate", "rbac.authorization.k8s.io", "clusterroles")


def test_bindings_as_upstream() -> None:
    def subjects(name: str) -> list[tuple[str, str]]:
        return [(s["kind"], s["name"]) for s in BINDINGS[name].get("subjects") or []]

    assert subjects("cluster-admin") == [("Group", "system:masters")]
    assert subjects("system:discovery") == [("Group", "system:authenticated")]
    assert subjects("system:basic-user") == [("Group", "system:authenticated")]
    assert subjects("system:public-info-viewer") == [("Group", "system:authenticated"),
                                                      ("Group", "system:unauthenticated")]
    assert subjects("system:kube-scheduler") == [("User", "system:kube-scheduler")]
    assert subjects("system:kube-controller-manager") == [("User", "system:kube-controller-manager")]
    assert subjects("system:node-proxier") == [("User", "system:kube-proxy")]
    sa = BINDINGS["system:controller:replicaset-controller"]
    assert sa["subjects"] == [{"kind": "ServiceAccount", "name": "replicaset-controller", "namespace": "kube-system"}]
    assert sa["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": "system:controller:replicaset-controller"}
    for binding in BINDINGS.values():
        assert binding["roleRef"]["name"] in ROLES
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in bp.namespace_roles()}
    for binding in bp.namespace_role_bindings():
        assert (binding["metadata"]["namespace"], binding["roleRef"]["name"]) in roles
    assert ("kube-system", "extension-apiserver-authentication-reader") in roles
    assert ("kube-public", "system:controller:bootstrap-signer") in roles


def test_reconcile_role_adds_missing_and_keeps_user_rules() -> None:
    expected = ROLES["system:node-proxier"]
    user_rule = bp.rule(("get",), ("example.com",), ("widgets",))
    existing = {"metadata": {"name": "system:node-proxier", "labels": {"team": "x"}},
                "rules": [user_rule, expected["rules"][0]]}
    result = bp.reconcile_role(existing, expected)
    assert result is not None
    assert result["rules"][:2] == [user_rule, expected["rules"][0]]
    assert all(r in result["rules"] for r in expected["rules"])
    assert result["metadata"]["labels"] == {"team": "x", "kubernetes.io/bootstrapping": "rbac-defaults"}
    assert result["metadata"]["annotations"] == {bp.AUTOUPDATE: "true"}
    assert existing["rules"] == [user_rule, expected["rules"][0]]  # the input is not modified
    assert bp.reconcile_role(result, expected) is None


def test_reconcile_role_rules_covered_by_broader_ones_need_no_write() -> None:
    expected = ROLES["system:node-proxier"]
    existing = {"metadata": dict(expected["metadata"]), "rules": [bp.rule(("*",), ("*",), ("*",))]}
    assert bp.reconcile_role(existing, expected) is None


def test_reconcile_protected_objects_untouched() -> None:
    expected = ROLES["system:node-proxier"]
    existing = {"metadata": {"name": "system:node-proxier", "annotations": {bp.AUTOUPDATE: "false"}}, "rules": []}
    assert bp.reconcile_role(existing, expected) is None
    binding = BINDINGS["cluster-admin"]
    protected = {"metadata": {"name": "cluster-admin", "annotations": {bp.AUTOUPDATE: "false"}},
                 "roleRef": binding["roleRef"], "subjects": []}
    assert bp.reconcile_binding(protected, binding) is None


def test_reconcile_aggregated_role_gets_selector_and_keeps_rules() -> None:
    expected = ROLES["admin"]
    old_rules = [bp.rule(("get",), ("",), ("pods",))]
    existing = {"metadata": dict(expected["metadata"]), "rules": old_rules}
    result = bp.reconcile_role(existing, expected)
    assert result is not None
    assert result["aggregationRule"] == expected["aggregationRule"]
    assert result["rules"] == old_rules
    extra = {"matchLabels": {"mine": "true"}}
    mine = {**result, "aggregationRule": {"clusterRoleSelectors": [extra]}}
    merged = bp.reconcile_role(mine, expected)
    assert merged is not None
    assert merged["aggregationRule"]["clusterRoleSelectors"] == [extra, *expected["aggregationRule"][
        "clusterRoleSelectors"]]


def test_reconcile_binding_adds_subjects_and_flags_role_ref_change() -> None:
    expected = BINDINGS["system:public-info-viewer"]
    alice = bp.user("alice")
    existing = {"metadata": dict(expected["metadata"]), "roleRef": dict(expected["roleRef"]),
                "subjects": [alice, expected["subjects"][0]]}
    result = bp.reconcile_binding(existing, expected)
    assert result is not None
    assert result["subjects"] == [alice, *expected["subjects"]]
    assert bp.reconcile_binding(result, expected) is None
    moved = {**result, "roleRef": {**expected["roleRef"], "name": "view"}}
    assert bp.reconcile_binding(moved, expected)["roleRef"] == expected["roleRef"]  # type: ignore[index]


def test_empty_and_missing_lists_compare_equal() -> None:
    expected = BINDINGS["system:node"]
    existing = {"metadata": dict(expected["metadata"]), "roleRef": dict(expected["roleRef"]), "subjects": []}
    assert bp.reconcile_binding(existing, expected) is None
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": []}
    assert aggregate({"metadata": {"name": "a"}, "aggregationRule": {"clusterRoleSelectors": [{}]}},
                     [{"metadata": {"name": "b"}, "rules": [rule, {k: v for k, v in rule.items() if v}]}]) == [rule]


@pytest.mark.parametrize("role", sorted(ROLES))
def test_every_rule_is_valid(role: str) -> None:
    assert validate_rules(ROLES[role]["rules"], namespaced=False) == []
