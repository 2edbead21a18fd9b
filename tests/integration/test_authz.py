"""Authentication and RBAC authorization against a real apiserver (TLS, client CA, static tokens) and kubectl."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.runtime import pki
from tests.conftest import KUBECTL, APIServerProcess, free_port, start_apiserver

TOKENS = {"jane": "jane-token-1", "bob": "bob-token-2", "carl": "carl-token-3"}
RBAC = "/apis/rbac.authorization.k8s.io/v1"
AUTHENTICATED = {"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}


@dataclass
class Cluster:
    secure: str
    insecure: str
    ca: Path
    admin_cert: tuple[str, str]
    workdir: Path
    process: APIServerProcess

    def client(self, user: str | None = None, **kw: Any) -> httpx.Client:
        """A TLS client: the admin certificate (system:masters), a static token user, or nobody."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if user == "admin":
            context.load_cert_chain(*self.admin_cert)
            return httpx.Client(base_url=self.secure, verify=context, **kw)
        headers = {"authorization": f"Bearer {TOKENS.get(user, user)}"} if user else {}
        return httpx.Client(base_url=self.secure, verify=context, headers=headers, **kw)

    def kubeconfig(self, name: str, user: dict[str, str]) -> Path:
        path = self.workdir / f"kubeconfig-{name}"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": self.secure, "certificate-authority": str(self.ca)}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }))
        return path

    def kubectl(self, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "KUBECACHEDIR": str(kubeconfig) + "-cache"})


def _pki(workdir: Path) -> tuple[Path, Path, Path, tuple[str, str]]:
    ca = pki.create_ca("authz-test-ca")
    ca_path = workdir / "ca.crt"
    ca.write(ca_path, workdir / "ca.key")
    serving = pki.issue_serving_cert(ca, ["localhost", "127.0.0.1"])
    serving.write(workdir / "apiserver.crt", workdir / "apiserver.key")
    admin = pki.issue_client_cert(ca, "kubernetes-admin", ["system:masters"])
    admin.write(workdir / "admin.crt", workdir / "admin.key")
    return ca_path, workdir / "apiserver.crt", workdir / "apiserver.key", (str(workdir / "admin.crt"),
                                                                          str(workdir / "admin.key"))


def _start(etcd: str, workdir: Path, *extra: str) -> tuple[APIServerProcess, str]:
    workdir.mkdir(parents=True, exist_ok=True)
    ca, cert, key, _ = _pki(workdir) if not (workdir / "ca.crt").exists() else (
        workdir / "ca.crt", workdir / "apiserver.crt", workdir / "apiserver.key", None)
    token_file = workdir / "tokens.csv"
    token_file.write_text("\n".join([f'{TOKENS["jane"]},jane,1001', f'{TOKENS["bob"]},bob,1002,"devs,qa"',
                                     f"{TOKENS['carl']},carl,1003"]) + "\n")
    port = free_port()
    process = start_apiserver(
        [etcd], workdir, "--secure-port", str(port), "--tls-cert-file", str(cert), "--tls-private-key-file",
        str(key), "--client-ca-file", str(ca), "--token-auth-file", str(token_file), "--authorization-mode", "RBAC",
        "--cert-dir", str(workdir / "certs"), "--etcd-prefix", f"/authz-{uuid.uuid4().hex[:8]}", *extra,
    )
    return process, f"https://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def cluster(etcd_server: str, workdir: Path) -> Iterator[Cluster]:
    root = workdir / "authz"
    root.mkdir(parents=True, exist_ok=True)
    ca, _, _, admin = _pki(root)
    process, secure = _start(etcd_server, root)
    c = Cluster(secure, process.url, ca, admin, root, process)
    try:
        with c.client("admin") as admin_client:
            # Discovery for every authenticated user, so kubectl works; the tests grant everything else.
            _create(admin_client, f"{RBAC}/clusterroles", {"metadata": {"name": "test-discovery"}, "rules": [
                {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/version",
                                                       "/openapi", "/openapi/*"]}]})
            _create(admin_client, f"{RBAC}/clusterrolebindings", _binding(
                "test-discovery", "test-discovery", [AUTHENTICATED], "ClusterRole"))
            _create(admin_client, f"{RBAC}/clusterroles", {"metadata": {"name": "test-self"}, "rules": [
                {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                 "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
                {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]}]})
            _create(admin_client, f"{RBAC}/clusterrolebindings", _binding(
                "test-self", "test-self", [AUTHENTICATED], "ClusterRole"))
        yield c
    finally:
        process.stop()


def _create(client: httpx.Client, path: str, body: dict[str, Any], expect: int = 201) -> httpx.Response:
    r = client.post(path, json=body)
    assert r.status_code == expect, r.text
    return r


def _eventually(check: Callable[[], bool], timeout: float = 10) -> None:
    """RBAC objects reach the authorizer through the watch cache: wait for it."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def _namespace(admin: httpx.Client, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    _create(admin, "/api/v1/namespaces", {"metadata": {"name": name}})
    return name


def _role(name: str, rules: list[dict[str, Any]], kind: str = "Role") -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name}, "rules": rules}


def _binding(name: str, role: str, subjects: list[dict[str, Any]], role_kind: str = "Role") -> dict[str, Any]:
    return {"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": subjects}


def _user(name: str) -> dict[str, str]:
    return {"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}


def _wait_status(client: httpx.Client, path: str, code: int) -> httpx.Response:
    holder: list[httpx.Response] = []

    def check() -> bool:
        holder[:] = [client.get(path)]
        return holder[0].status_code == code

    _eventually(check)
    return holder[0]


def test_unknown_token_is_401_and_anonymous_is_forbidden(cluster: Cluster) -> None:
    with cluster.client("no-such-token") as c:
        r = c.get("/api/v1/namespaces/default/pods")
        assert r.status_code == 401
        assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    with cluster.client() as c:
        r = c.get("/api/v1/namespaces/default/pods")
        assert r.status_code == 403
        assert r.json()["message"] == ('pods is forbidden: User "system:anonymous" cannot list resource "pods" in '
                                       'API group "" in the namespace "default"')
    with httpx.Client(base_url=cluster.insecure) as c:
        me = c.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json={}).json()["status"]["userInfo"]
        assert me == {"username": "system:unsecured", "groups": ["system:masters", "system:authenticated"]}
        assert c.get("/api/v1/namespaces/default/pods").status_code == 200
        as_jane = c.get("/api/v1/namespaces/default/pods", headers={"authorization": f"Bearer {TOKENS['jane']}"})
        assert as_jane.status_code == 403


def test_forbidden_messages_and_role_binding_in_one_namespace(cluster: Cluster) -> None:
    with cluster.client("admin") as admin, cluster.client("jane") as jane:
        ns, other = _namespace(admin, "rb"), _namespace(admin, "rb-other")
        r = jane.get(f"/api/v1/namespaces/{ns}/pods")
        assert r.status_code == 403
        assert r.json() == {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden",
            "code": 403, "details": {"kind": "pods"},
            "message": f'pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the '
                       f'namespace "{ns}"'}
        r = jane.get("/apis/apps/v1/deployments")
        assert r.json()["message"] == ('deployments.apps is forbidden: User "jane" cannot list resource '
                                       '"deployments" in API group "apps" at the cluster scope')
        r = jane.get(f"/api/v1/namespaces/{ns}/pods?watch=true")
        assert 'cannot watch resource "pods"' in r.json()["message"]
        r = jane.delete(f"/api/v1/namespaces/{ns}/pods/x")
        assert r.json()["message"] == (f'pods "x" is forbidden: User "jane" cannot delete resource "pods" in API '
                                       f'group "" in the namespace "{ns}"')
        assert r.json()["details"] == {"name": "x", "kind": "pods"}
        _create(admin, f"{RBAC}/namespaces/{ns}/roles", _role("pod-reader", [
            {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}]))
        _create(admin, f"{RBAC}/namespaces/{ns}/rolebindings", _binding("jane-reads", "pod-reader", [_user("jane")]))
        assert _wait_status(jane, f"/api/v1/namespaces/{ns}/pods", 200).json()["kind"] == "PodList"
        assert jane.get(f"/api/v1/namespaces/{other}/pods").status_code == 403
        assert jane.get("/api/v1/pods").status_code == 403
        assert jane.post(f"/api/v1/namespaces/{ns}/pods", json={}).status_code == 403
        review = admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json={"spec": {
            "user": "jane", "resourceAttributes": {"namespace": ns, "verb": "list", "resource": "pods"}}})
        assert review.status_code == 201
        assert review.json()["status"] == {
            "allowed": True,
            "reason": f'RBAC: allowed by RoleBinding "jane-reads/{ns}" of Role "pod-reader" to User "jane"'}
        denied = admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json={"spec": {
            "user": "jane", "resourceAttributes": {"namespace": other, "verb": "list", "resource": "pods"}}})
        assert denied.json()["status"] == {"allowed": False}
        local = admin.post(f"/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews", json={
            "spec": {"user": "jane", "resourceAttributes": {"verb": "get", "resource": "pods"}}})
        assert local.json()["status"]["allowed"] is True
        assert local.json()["spec"]["resourceAttributes"]["namespace"] == ns
        missing_user = admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json={"spec": {
            "resourceAttributes": {"verb": "get", "resource": "pods"}}})
        assert missing_user.status_code == 422


def test_cluster_role_through_role_binding_and_resource_names(cluster: Cluster) -> None:
    with cluster.client("admin") as admin, cluster.client("bob") as bob:
        ns, other = _namespace(admin, "crb"), _namespace(admin, "crb-other")
        for name in ("allowed", "hidden"):
            _create(admin, f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": name}})
        _create(admin, f"{RBAC}/clusterroles", _role("cm-reader-one", [
            {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["allowed"]},
            {"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"]}], "ClusterRole"))
        # Bob is in group "devs" through the token file; bind the group.
        _create(admin, f"{RBAC}/namespaces/{ns}/rolebindings", _binding(
            "devs-read", "cm-reader-one", [{"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}],
            "ClusterRole"))
        assert _wait_status(bob, f"/api/v1/namespaces/{ns}/configmaps/allowed", 200).json()["metadata"]["name"] \
            == "allowed"
        hidden = bob.get(f"/api/v1/namespaces/{ns}/configmaps/hidden")
        assert hidden.status_code == 403
        assert hidden.json()["message"] == (f'configmaps "hidden" is forbidden: User "bob" cannot get resource '
                                            f'"configmaps" in API group "" in the namespace "{ns}"')
        assert bob.get(f"/api/v1/namespaces/{ns}/configmaps").status_code == 200
        # A list narrowed to one name is authorized as that name, like upstream.
        assert bob.get(f"/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3Dallowed").status_code == 200
        assert bob.get(f"/api/v1/namespaces/{other}/configmaps").status_code == 403
        r = bob.get("/api/v1/configmaps")
        assert r.json()["message"] == ('configmaps is forbidden: User "bob" cannot list resource "configmaps" in '
                                       'API group "" at the cluster scope')


def test_subresources_and_non_resource_urls(cluster: Cluster) -> None:
    with cluster.client("admin") as admin, cluster.client("carl") as carl:
        ns = _namespace(admin, "sub")
        _create(admin, f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "image": "busybox"}]}})
        r = carl.get(f"/api/v1/namespaces/{ns}/pods/p/log")
        assert r.status_code == 403
        assert r.json()["message"] == (f'pods "p" is forbidden: User "carl" cannot get resource "pods/log" in API '
                                       f'group "" in the namespace "{ns}"')
        _create(admin, f"{RBAC}/namespaces/{ns}/roles", _role("logs", [
            {"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log", "pods/exec"]},
            {"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/status"]}]))
        _create(admin, f"{RBAC}/namespaces/{ns}/rolebindings", _binding("carl-logs", "logs", [_user("carl")]))
        _eventually(lambda: carl.get(f"/api/v1/namespaces/{ns}/pods/p/log").status_code != 403)
        assert carl.get(f"/api/v1/namespaces/{ns}/pods/p/status").status_code == 200
        assert carl.get(f"/api/v1/namespaces/{ns}/pods/p").status_code == 403
        # An exec upgrade is a GET, and also needs `create`, as upstream asks since 1.30.
        r = carl.get(f"/api/v1/namespaces/{ns}/pods/p/exec?command=ls")
        assert r.json()["message"] == (f'pods "p" is forbidden: User "carl" cannot create resource "pods/exec" in '
                                       f'API group "" in the namespace "{ns}"')
        r = carl.get("/metrics")
        assert r.status_code == 403
        assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": 'forbidden: User "carl" cannot get path "/metrics"', "reason": "Forbidden",
                            "details": {}, "code": 403}
        _create(admin, f"{RBAC}/clusterroles", _role("metrics-reader", [
            {"verbs": ["get"], "nonResourceURLs": ["/metr*"]}], "ClusterRole"))
        _create(admin, f"{RBAC}/clusterrolebindings", _binding("carl-metrics", "metrics-reader", [_user("carl")],
                                                               "ClusterRole"))
        _wait_status(carl, "/metrics", 200)
        assert carl.get("/healthz/etcd").status_code == 403


def test_service_account_tokens(cluster: Cluster) -> None:
    with cluster.client("admin") as admin:
        ns = _namespace(admin, "sa")
        _create(admin, f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "bot"}})
        token = admin.post(f"/api/v1/namespaces/{ns}/serviceaccounts/bot/token", json={}).json()["status"]["token"]
        with cluster.client(token) as bot:
            me = bot.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json={}).json()["status"]["userInfo"]
            assert me["username"] == f"system:serviceaccount:{ns}:bot"
            assert me["groups"] == ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
            r = bot.get(f"/api/v1/namespaces/{ns}/secrets")
            assert r.json()["message"] == (f'secrets is forbidden: User "system:serviceaccount:{ns}:bot" cannot list '
                                           f'resource "secrets" in API group "" in the namespace "{ns}"')
            _create(admin, f"{RBAC}/namespaces/{ns}/roles", _role("secrets", [
                {"verbs": ["list"], "apiGroups": [""], "resources": ["secrets"]}]))
            # A ServiceAccount subject without a namespace means the binding's own namespace.
            _create(admin, f"{RBAC}/namespaces/{ns}/rolebindings", _binding("bot", "secrets", [
                {"kind": "ServiceAccount", "name": "bot"}]))
            _wait_status(bot, f"/api/v1/namespaces/{ns}/secrets", 200)
            review = admin.post("/apis/authentication.k8s.io/v1/tokenreviews", json={"spec": {"token": token}})
            assert review.json()["status"]["user"]["username"] == f"system:serviceaccount:{ns}:bot"
            static = admin.post("/apis/authentication.k8s.io/v1/tokenreviews", json={"spec": {"token": TOKENS["bob"]}})
            assert static.json()["status"]["user"] == {"username": "bob", "uid": "1002",
                                                       "groups": ["devs", "qa", "system:authenticated"]}


def test_kubectl_can_i_whoami_and_impersonation(cluster: Cluster) -> None:
    with cluster.client("admin") as admin:
        ns = _namespace(admin, "kc")
        _create(admin, f"{RBAC}/namespaces/{ns}/roles", _role("pods", [
            {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]))
        _create(admin, f"{RBAC}/namespaces/{ns}/rolebindings", _binding("jane", "pods", [_user("jane")]))
        with cluster.client("jane") as jane:
            _wait_status(jane, f"/api/v1/namespaces/{ns}/pods", 200)
    jane_cfg = cluster.kubeconfig("jane", {"token": TOKENS["jane"]})
    admin_cfg = cluster.kubeconfig("admin", {"client-certificate": cluster.admin_cert[0],
                                             "client-key": cluster.admin_cert[1]})
    yes = cluster.kubectl(jane_cfg, "auth", "can-i", "list", "pods", "-n", ns)
    assert (yes.returncode, yes.stdout.strip()) == (0, "yes"), yes.stderr
    no = cluster.kubectl(jane_cfg, "auth", "can-i", "delete", "pods", "-n", ns)
    assert (no.returncode, no.stdout.strip()) == (1, "no")
    listed = cluster.kubectl(jane_cfg, "auth", "can-i", "--list", "-n", ns)
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:1] == ["pods"] and "[get list]" in line for line in listed.stdout.splitlines()), \
        listed.stdout
    whoami = cluster.kubectl(jane_cfg, "auth", "whoami", "-o", "json")
    assert json.loads(whoami.stdout)["status"]["userInfo"] == {"username": "jane", "uid": "1001",
                                                               "groups": ["system:authenticated"]}
    admin_me = cluster.kubectl(admin_cfg, "auth", "whoami", "-o", "json")
    assert json.loads(admin_me.stdout)["status"]["userInfo"]["username"] == "kubernetes-admin"
    # The admin (system:masters) impersonates jane and gets jane's answers.
    as_jane = cluster.kubectl(admin_cfg, "--as=jane", "get", "pods", "-n", "default")
    assert as_jane.returncode == 1
    assert ('pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "default"'
            in as_jane.stderr)
    assert cluster.kubectl(admin_cfg, "--as=jane", "get", "pods", "-n", ns).returncode == 0
    # Jane may not impersonate bob until a role lets her.
    refused = cluster.kubectl(jane_cfg, "--as=bob", "get", "pods", "-n", ns)
    assert refused.returncode == 1
    assert ('users "bob" is forbidden: User "jane" cannot impersonate resource "users" in API group "" at the '
            'cluster scope') in refused.stderr
    with cluster.client("admin") as admin:
        _create(admin, f"{RBAC}/clusterroles", _role("impersonate-bob", [
            {"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"]},
            {"verbs": ["impersonate"], "apiGroups": [""], "resources": ["groups"], "resourceNames": ["devs"]}],
            "ClusterRole"))
        _create(admin, f"{RBAC}/clusterrolebindings", _binding("jane-as-bob", "impersonate-bob", [_user("jane")],
                                                               "ClusterRole"))
    _eventually(lambda: cluster.kubectl(jane_cfg, "--as=bob", "auth", "whoami").returncode == 0)
    as_bob = cluster.kubectl(jane_cfg, "--as=bob", "--as-group=devs", "auth", "whoami", "-o", "json")
    assert json.loads(as_bob.stdout)["status"]["userInfo"] == {"username": "bob",
                                                               "groups": ["devs", "system:authenticated"]}
    group_refused = cluster.kubectl(jane_cfg, "--as=bob", "--as-group=qa", "get", "pods", "-n", ns)
    assert ('groups "qa" is forbidden: User "jane" cannot impersonate resource "groups" in API group "" at the '
            'cluster scope') in group_refused.stderr
    with cluster.client("jane") as jane:
        sa = jane.get("/api/v1/namespaces/default/pods", headers={"Impersonate-User": "system:serviceaccount:x:y"})
        assert sa.json()["message"] == ('serviceaccounts "y" is forbidden: User "jane" cannot impersonate resource '
                                        '"serviceaccounts" in API group "" in the namespace "x"')


def test_escalation_prevention(cluster: Cluster) -> None:
    with cluster.client("admin") as admin, cluster.client("jane") as jane:
        ns = _namespace(admin, "esc")
        _create(admin, f"{RBAC}/namespaces/{ns}/roles", _role("rbac-editor", [
            {"verbs": ["create", "get", "update", "patch"], "apiGroups": ["rbac.authorization.k8s.io"],
             "resources": ["roles", "rolebindings"]},
            {"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]))
        _create(admin, f"{RBAC}/namespaces/{ns}/rolebindings", _binding("jane-rbac", "rbac-editor", [_user("jane")]))
        _wait_status(jane, f"{RBAC}/namespaces/{ns}/roles/rbac-editor", 200)
        held = jane.post(f"{RBAC}/namespaces/{ns}/roles", json=_role("pod-lister", [
            {"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]))
        assert held.status_code == 201, held.text
        refused = jane.post(f"{RBAC}/namespaces/{ns}/roles", json=_role("sneaky", [
            {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["secrets"]},
            {"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]))
        assert refused.status_code == 403
        assert refused.json()["message"] == (
            'roles.rbac.authorization.k8s.io "sneaky" is forbidden: user "jane" (groups=["system:authenticated"]) is '
            'attempting to grant RBAC permissions not currently held:\n'
            '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}')
        widened = jane.patch(f"{RBAC}/namespaces/{ns}/roles/pod-lister", json={"rules": [
            {"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]}]},
            headers={"content-type": "application/merge-patch+json"})
        assert widened.status_code == 403
        assert 'Verbs:["delete"]' in widened.json()["message"]
        relabel = jane.patch(f"{RBAC}/namespaces/{ns}/roles/rbac-editor", json={"metadata": {"labels": {"a": "b"}}},
                             headers={"content-type": "application/merge-patch+json"})
        assert relabel.status_code == 200, relabel.text
        # Binding a role needs its permissions or `bind` on it.
        _create(admin, f"{RBAC}/clusterroles", _role("secret-reader", [
            {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}], "ClusterRole"))
        bind = _binding("jane-secrets", "secret-reader", [_user("bob")], "ClusterRole")
        r = jane.post(f"{RBAC}/namespaces/{ns}/rolebindings", json=bind)
        assert r.status_code == 403
        assert r.json()["message"] == (
            'rolebindings.rbac.authorization.k8s.io "jane-secrets" is forbidden: user "jane" '
            '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
            '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}')
        ok = jane.post(f"{RBAC}/namespaces/{ns}/rolebindings", json=_binding("lister", "pod-lister", [_user("bob")]))
        assert ok.status_code == 201, ok.text
        _create(admin, f"{RBAC}/namespaces/{ns}/roles", _role("granter", [
            {"verbs": ["bind"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "resourceNames": ["secret-reader"]},
            {"verbs": ["escalate"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"]}]))
        _create(admin, f"{RBAC}/namespaces/{ns}/rolebindings", _binding("jane-granter", "granter", [_user("jane")]))
        _eventually(lambda: jane.post(f"{RBAC}/namespaces/{ns}/rolebindings", json=bind).status_code == 201)
        escalated = jane.post(f"{RBAC}/namespaces/{ns}/roles", json=_role("sneaky", [
            {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["secrets"]}]))
        assert escalated.status_code == 201, escalated.text


def test_escalation_check_reads_nulls_as_the_handler_does(cluster: Cluster) -> None:
    """The escalation check sees the body decoded as the write will be: null rules and subjects are empty
    ones, which the handler then refuses by name (422), not a crash in the check (500)."""
    with cluster.client("admin") as admin, cluster.client("jane") as jane:
        ns = _namespace(admin, "escnull")
        _create(admin, f"{RBAC}/namespaces/{ns}/roles", _role("rbac-editor", [
            {"verbs": ["create", "get", "patch"], "apiGroups": ["rbac.authorization.k8s.io"],
             "resources": ["roles", "rolebindings"]}]))
        _create(admin, f"{RBAC}/namespaces/{ns}/rolebindings", _binding("jane-rbac", "rbac-editor", [_user("jane")]))
        _wait_status(jane, f"{RBAC}/namespaces/{ns}/roles/rbac-editor", 200)
        role = jane.post(f"{RBAC}/namespaces/{ns}/roles", json=_role("nulls", [
            None, {"verbs": None, "apiGroups": [None], "resources": None}]))
        assert role.status_code == 422, role.text
        assert "rules[0].verbs: Required value" in role.text
        binding = _binding("nulls", "rbac-editor", [None, {**_user("bob"), "namespace": None}])
        binding["roleRef"]["apiGroup"] = None
        bound = jane.post(f"{RBAC}/namespaces/{ns}/rolebindings", json=binding)
        assert bound.status_code == 422, bound.text
        assert "subjects[0].name: Required value" in bound.text
        patched = jane.patch(f"{RBAC}/namespaces/{ns}/roles/rbac-editor", json={"rules": [None]},
                             headers={"content-type": "application/merge-patch+json"})
        assert patched.status_code == 422, patched.text


def test_anonymous_disabled(etcd_server: str, workdir: Path) -> None:
    root = workdir / "authz-noanon"
    process, secure = _start(etcd_server, root, "--anonymous-auth=false")
    try:
        with httpx.Client(base_url=secure, verify=ssl.create_default_context(cafile=str(root / "ca.crt"))) as c:
            r = c.get("/api/v1/namespaces")
            assert r.status_code == 401 and r.json()["reason"] == "Unauthorized"
            assert c.get("/healthz").status_code == 401
            assert c.get("/api/v1/namespaces", headers={"authorization": f"Bearer {TOKENS['jane']}"}).status_code \
                == 403
    finally:
        process.stop()
