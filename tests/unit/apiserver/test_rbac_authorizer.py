"""The RBAC authorizer, request attributes, impersonation and the static token file, on real caches."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from apiserver.auth.authn import impersonate, load_token_file, read_credentials
from apiserver.auth.authz import ALLOW, NO_OPINION, AlwaysAllow, AlwaysDeny, Chain, forbidden, request_attributes
from apiserver.auth.rbac import RBACAuthorizer, compact_rules, compact_string
from apiserver.storage.cache import ResourceCache
from services.api import errors
from services.auth.identity import UserInfo

ROOT = "/registry/"
JANE = UserInfo("jane", groups=("devs", "system:authenticated"))


def _cache(plural: str, objs: list[dict[str, Any]]) -> ResourceCache:
    cache = ResourceCache(f"{ROOT}{plural}/")
    kvs = []
    for i, obj in enumerate(objs, 2):
        meta = obj["metadata"]
        key = f"{ROOT}{plural}/" + (f"{meta['namespace']}/" if meta.get("namespace") else "") + meta["name"]
        kvs.append(SimpleNamespace(key=key, value=orjson.dumps(obj), mod_revision=i))
    cache.load(kvs, len(objs) + 1)
    return cache


def _binding(name: str, kind: str, role: str, subjects: list[dict[str, Any]], ns: str = "") -> dict[str, Any]:
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    return {"metadata": meta, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": subjects}


@pytest.fixture
def rbac() -> RBACAuthorizer:
    roles = _cache("roles", [{"metadata": {"name": "pods", "namespace": "a"}, "rules": [
        {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]}]}])
    cluster_roles = _cache("clusterroles", [
        {"metadata": {"name": "cm-one"}, "rules": [
            {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["x"]}]},
        {"metadata": {"name": "scaler"}, "rules": [
            {"verbs": ["update"], "apiGroups": ["*"], "resources": ["*/scale"]}]},
        {"metadata": {"name": "health"}, "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz/*", "/version"]}]},
    ])
    role_bindings = _cache("rolebindings", [
        _binding("jane-pods", "Role", "pods", [{"kind": "User", "name": "jane"}], "a"),
        _binding("devs-cm", "ClusterRole", "cm-one", [{"kind": "Group", "name": "devs"}], "b"),
        _binding("bot", "Role", "pods", [{"kind": "ServiceAccount", "name": "bot"}], "a"),
        _binding("dangling", "Role", "missing", [{"kind": "User", "name": "jane"}], "c"),
    ])
    cluster_bindings = _cache("clusterrolebindings", [
        _binding("scale", "ClusterRole", "scaler", [{"kind": "User", "name": "other"},
                                                    {"kind": "Group", "name": "devs"}]),
        _binding("health", "ClusterRole", "health", [{"kind": "Group", "name": "system:authenticated"}]),
    ])
    return RBACAuthorizer(roles, cluster_roles, role_bindings, cluster_bindings)


def _ask(rbac: RBACAuthorizer, user: UserInfo, method: str, path: str, query: str = "") -> tuple[str, str]:
    return rbac.authorize(request_attributes(user, method, path, query))


def test_request_attributes_follow_upstream_request_info() -> None:
    a = request_attributes(JANE, "GET", "/api/v1/namespaces/a/pods", "watch=true")
    assert (a.verb, a.namespace, a.resource, a.api_group, a.api_version) == ("watch", "a", "pods", "", "v1")
    a = request_attributes(JANE, "GET", "/api/v1/watch/namespaces/a/pods/p")
    assert (a.verb, a.name) == ("watch", "p")
    a = request_attributes(JANE, "DELETE", "/apis/apps/v1/namespaces/a/deployments")
    assert (a.verb, a.api_group, a.resource) == ("deletecollection", "apps", "deployments")
    a = request_attributes(JANE, "GET", "/api/v1/namespaces/a/pods/p/log")
    assert (a.verb, a.resource, a.subresource, a.name) == ("get", "pods", "log", "p")
    a = request_attributes(JANE, "GET", "/api/v1/namespaces/a")
    assert (a.verb, a.namespace, a.resource, a.name) == ("get", "a", "namespaces", "a")
    a = request_attributes(JANE, "PUT", "/api/v1/namespaces/a/finalize")
    assert (a.verb, a.resource, a.name, a.subresource) == ("update", "namespaces", "a", "finalize")
    a = request_attributes(JANE, "GET", "/api/v1/namespaces/a/configmaps", "fieldSelector=metadata.name%3Dx")
    assert (a.verb, a.name) == ("list", "x")
    for path in ("/api", "/api/v1", "/apis/apps/v1", "/healthz", "/openapi/v2"):
        a = request_attributes(JANE, "GET", path)
        assert not a.resource_request and a.verb == "get" and a.path == path
    assert request_attributes(JANE, "POST", "/logs").verb == "post"


def test_role_binding_grants_in_its_namespace_only(rbac: RBACAuthorizer) -> None:
    assert _ask(rbac, JANE, "GET", "/api/v1/namespaces/a/pods") == (
        ALLOW, 'RBAC: allowed by RoleBinding "jane-pods/a" of Role "pods" to User "jane"')
    assert _ask(rbac, JANE, "GET", "/api/v1/namespaces/a/pods/p/log")[0] == ALLOW
    assert _ask(rbac, JANE, "GET", "/api/v1/namespaces/a/pods/p/exec")[0] == NO_OPINION
    assert _ask(rbac, JANE, "GET", "/api/v1/namespaces/z/pods") == (NO_OPINION, "")
    assert _ask(rbac, JANE, "GET", "/api/v1/pods") == (NO_OPINION, "")
    assert _ask(rbac, JANE, "DELETE", "/api/v1/namespaces/a/pods/p")[0] == NO_OPINION
    # A binding to a missing role is reported in the reason, as upstream does.
    assert _ask(rbac, JANE, "GET", "/api/v1/namespaces/c/pods") == (
        NO_OPINION, 'RBAC: role.rbac.authorization.k8s.io "missing" not found')


def test_cluster_role_in_role_binding_groups_names_wildcards(rbac: RBACAuthorizer) -> None:
    assert _ask(rbac, JANE, "GET", "/api/v1/namespaces/b/configmaps/x") == (
        ALLOW, 'RBAC: allowed by RoleBinding "devs-cm/b" of ClusterRole "cm-one" to Group "devs"')
    assert _ask(rbac, JANE, "GET", "/api/v1/namespaces/b/configmaps/y")[0] == NO_OPINION
    assert _ask(rbac, JANE, "GET", "/api/v1/namespaces/a/configmaps/x")[0] == NO_OPINION
    assert _ask(rbac, JANE, "PUT", "/apis/apps/v1/namespaces/q/deployments/d/scale") == (
        ALLOW, 'RBAC: allowed by ClusterRoleBinding "scale" of ClusterRole "scaler" to Group "devs"')
    assert _ask(rbac, JANE, "PUT", "/apis/apps/v1/namespaces/q/deployments/d")[0] == NO_OPINION
    assert _ask(rbac, JANE, "GET", "/healthz/etcd")[0] == ALLOW
    assert _ask(rbac, JANE, "GET", "/version")[0] == ALLOW
    assert _ask(rbac, JANE, "GET", "/version/x")[0] == NO_OPINION
    assert _ask(rbac, UserInfo("nobody"), "GET", "/healthz/etcd")[0] == NO_OPINION


def test_service_account_subject_defaults_to_binding_namespace(rbac: RBACAuthorizer) -> None:
    bot = UserInfo("system:serviceaccount:a:bot", groups=("system:serviceaccounts",))
    assert _ask(rbac, bot, "GET", "/api/v1/namespaces/a/pods") == (
        ALLOW, 'RBAC: allowed by RoleBinding "bot/a" of Role "pods" to ServiceAccount "bot/a"')
    other = UserInfo("system:serviceaccount:b:bot")
    assert _ask(rbac, other, "GET", "/api/v1/namespaces/a/pods")[0] == NO_OPINION


def test_index_follows_cache_changes(rbac: RBACAuthorizer) -> None:
    carl = UserInfo("carl")
    assert _ask(rbac, carl, "GET", "/api/v1/namespaces/a/pods")[0] == NO_OPINION
    bindings = rbac.caches[2]
    obj = _binding("carl", "Role", "pods", [{"kind": "User", "name": "carl"}], "a")
    bindings.apply(SimpleNamespace(key=f"{ROOT}rolebindings/a/carl", value=orjson.dumps(obj), revision=50,
                                   deleted=False))
    assert _ask(rbac, carl, "GET", "/api/v1/namespaces/a/pods")[0] == ALLOW
    bindings.apply(SimpleNamespace(key=f"{ROOT}rolebindings/a/carl", value=b"", revision=51, deleted=True))
    assert _ask(rbac, carl, "GET", "/api/v1/namespaces/a/pods")[0] == NO_OPINION


def test_rules_for_and_escalation_message(rbac: RBACAuthorizer) -> None:
    resource, non_resource, incomplete, problem = rbac.rules_for(JANE, "a")
    assert {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]} in resource
    assert non_resource == [{"verbs": ["get"], "nonResourceURLs": ["/healthz/*", "/version"]}]
    assert (incomplete, problem) == (False, "")
    assert rbac.rules_for(JANE, "c")[2:] == (True, 'role.rbac.authorization.k8s.io "missing" not found')
    held = [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]
    assert rbac.confirm_no_escalation(JANE, "a", held) == ""
    assert rbac.confirm_no_escalation(JANE, "a", [{"verbs": ["get"], "nonResourceURLs": ["/healthz/x"]}]) == ""
    message = rbac.confirm_no_escalation(JANE, "a", [
        {"verbs": ["get", "delete", "list"], "apiGroups": ["", "apps"], "resources": ["pods"]},
        {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1", "s2"]}])
    assert message == (
        'user "jane" (groups=["devs" "system:authenticated"]) is attempting to grant RBAC permissions not currently '
        'held:\n'
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}\n'
        '{APIGroups:[""], Resources:["secrets"], ResourceNames:["s1"], Verbs:["get"]}\n'
        '{APIGroups:[""], Resources:["secrets"], ResourceNames:["s2"], Verbs:["get"]}\n'
        '{APIGroups:["apps"], Resources:["pods"], Verbs:["get" "delete" "list"]}')


def test_compaction_and_compact_string() -> None:
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
             {"nonResourceURLs": ["/x"], "verbs": ["get"]}]
    assert [compact_string(r) for r in compact_rules(rules)] == [
        '{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}', '{NonResourceURLs:["/x"], Verbs:["get"]}']


def test_chain_short_circuits_masters_and_forbidden_messages(rbac: RBACAuthorizer) -> None:
    chain = Chain([rbac])
    root = UserInfo("root", groups=("system:masters",))
    assert chain.authorize(request_attributes(root, "DELETE", "/api/v1/nodes/n")) == (ALLOW, "")
    assert not chain.always_allow and Chain([AlwaysAllow()]).always_allow
    attrs = request_attributes(JANE, "GET", "/apis/apps/v1/deployments")
    err = forbidden(attrs)
    assert err.to_status()["message"] == ('deployments.apps is forbidden: User "jane" cannot list resource '
                                          '"deployments" in API group "apps" at the cluster scope')
    assert err.details == {"kind": "deployments", "group": "apps"}
    denied = Chain([AlwaysDeny()]).authorize(request_attributes(JANE, "GET", "/logs"))
    assert forbidden(request_attributes(JANE, "GET", "/logs"), denied[1]).message == (
        'forbidden: User "jane" cannot get path "/logs": Everything is forbidden.')


def test_impersonation() -> None:
    allowed: list[tuple[str, str, str, str]] = []

    def authorize(attrs: Any) -> tuple[str, str]:
        allowed.append((attrs.resource, attrs.subresource, attrs.namespace, attrs.name))
        return (NO_OPINION, "") if attrs.name == "nope" else (ALLOW, "")

    creds = read_credentials([(b"authorization", b"Bearer abc"), (b"impersonate-user", b"system:serviceaccount:n:s"),
                              (b"impersonate-extra-scopes%2fx", b"v1"), (b"impersonate-uid", b"42")])
    assert creds.token == "abc"
    user = impersonate(JANE, creds.impersonate, authorize)
    assert user == UserInfo("system:serviceaccount:n:s", "42",
                            ("system:serviceaccounts", "system:serviceaccounts:n", "system:authenticated"))
    assert user.extra == {"scopes/x": ["v1"]}
    assert allowed == [("serviceaccounts", "", "n", "s"), ("userextras", "scopes/x", "", "v1"), ("uids", "", "", "42")]
    anonymous = impersonate(JANE, [("impersonate-user", "system:anonymous")], authorize)
    assert anonymous.groups == ("system:unauthenticated",)
    with pytest.raises(errors.StatusError) as refused:
        impersonate(JANE, [("impersonate-user", "bob"), ("impersonate-group", "nope")], authorize)
    assert refused.value.message == ('groups "nope" is forbidden: User "jane" cannot impersonate resource "groups" in '
                                     'API group "" at the cluster scope')
    with pytest.raises(errors.StatusError) as no_user:
        impersonate(JANE, [("impersonate-group", "g")], authorize)
    assert no_user.value.code == 500


def test_token_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.csv"
    path.write_text('t1,alice,1\n\nt2,bob,2,"a,b"\n')
    users = load_token_file(str(path))
    assert users["t1"] == UserInfo("alice", "1", ("system:authenticated",))
    assert users["t2"] == UserInfo("bob", "2", ("a", "b", "system:authenticated"))
    path.write_text("only,two\n")
    with pytest.raises(ValueError):
        load_token_file(str(path))


def test_escalation_refusal_rules(rbac: RBACAuthorizer) -> None:
    nothing = UserInfo("nobody", groups=("system:authenticated",))
    never: list[Any] = []

    def deny(attrs: Any) -> bool:
        never.append((attrs.verb, attrs.resource, attrs.name))
        return False

    role = {"metadata": {"name": "r"}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}
    assert "not currently held" in rbac.escalation_refusal(deny, nothing, "Role", "a", "r", role, None)
    assert never == [("escalate", "roles", "r")]
    # Relabelling leaves the rules alone and is never checked.
    assert rbac.escalation_refusal(deny, nothing, "Role", "a", "r", {**role, "metadata": {"labels": {"x": "y"}}},
                                   role) == ""
    aggregated = {"metadata": {"name": "agg"}, "rules": [], "aggregationRule": {"clusterRoleSelectors": []}}
    assert rbac.escalation_refusal(deny, JANE, "ClusterRole", "", "agg", aggregated, None) == \
        "must have cluster-admin privileges to use the aggregationRule"
    binding = _binding("b", "Role", "pods", [{"kind": "User", "name": "x"}], "a")
    assert rbac.escalation_refusal(deny, JANE, "RoleBinding", "a", "b", binding, None) == ""
    assert "not currently held" in rbac.escalation_refusal(deny, nothing, "RoleBinding", "a", "b", binding, None)
    assert rbac.escalation_refusal(lambda attrs: attrs.verb == "bind", nothing, "RoleBinding", "a", "b", binding,
                                   None) == ""
    with pytest.raises(errors.StatusError) as missing:
        rbac.escalation_refusal(deny, nothing, "RoleBinding", "a", "b", {**binding, "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ghost"}}, None)
    assert (missing.value.code, missing.value.message) == (
        404, 'clusterrole.rbac.authorization.k8s.io "ghost" not found')


def test_a_missing_or_malformed_token_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from apiserver.__main__ import parse_args

    short = tmp_path / "short.csv"
    short.write_text("only-a-token\n")
    for path, says in ((tmp_path / "missing.csv", "No such file"), (short, "at least 3 required")):
        with pytest.raises(SystemExit) as exited:
            parse_args(["--token-auth-file", str(path)])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "--token-auth-file" in err and says in err
