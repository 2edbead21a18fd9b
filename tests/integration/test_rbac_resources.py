"""RBAC resources through real kubectl: the bootstrap policy is there, bindings print as upstream's,
and a binding's roleRef cannot change."""

from __future__ import annotations

import json

from tests.conftest import Kubectl


def test_bootstrap_policy_present(kubectl: Kubectl) -> None:
    roles = {i["metadata"]["name"] for i in kubectl.json("get", "clusterroles")["items"]}
    assert {"cluster-admin", "admin", "edit", "view", "system:node-proxier",
            "system:controller:replicaset-controller"} <= roles
    admin = kubectl.json("get", "clusterrolebinding", "cluster-admin")
    assert admin["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]
    assert admin["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] == "true"
    reader = kubectl.json("get", "role", "-n", "kube-system", "extension-apiserver-authentication-reader")
    assert reader["rules"][0]["resourceNames"] == ["extension-apiserver-authentication"]


def test_binding_columns(kubectl: Kubectl) -> None:
    out = kubectl.run("get", "clusterrolebindings", "-o", "wide").stdout.splitlines()
    assert out[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    row = next(line.split() for line in out if line.startswith("system:public-info-viewer "))
    assert row[1] == "ClusterRole/system:public-info-viewer"
    assert row[3] == "system:authenticated," and row[4] == "system:unauthenticated"
    row = next(line.split() for line in out if line.startswith("system:controller:job-controller "))
    assert row[-1] == "kube-system/job-controller"
    out = kubectl.run("get", "rolebindings", "-n", "kube-system").stdout.splitlines()
    assert out[0].split() == ["NAME", "ROLE", "AGE"]
    assert any(line.split()[:2] == ["system::extension-apiserver-authentication-reader",
                                    "Role/extension-apiserver-authentication-reader"] for line in out)
    assert kubectl.run("get", "clusterroles").stdout.splitlines()[0].split() == ["NAME", "CREATED", "AT"]


def test_role_ref_cannot_change(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("create", "rolebinding", "rb", "-n", unique_ns, "--clusterrole=view", "--user=alice")
    binding = kubectl.json("get", "rolebinding", "rb", "-n", unique_ns)
    binding["roleRef"]["name"] = "edit"
    result = kubectl.run("replace", "-f", "-", stdin=json.dumps(binding), check=False)
    assert result.returncode != 0
    assert ('roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", '
            'Name:"edit"}: cannot change roleRef') in result.stderr
    bad = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": "bad", "namespace": unique_ns},
           "roleRef": {"apiGroup": "example.com", "kind": "ClusterRole", "name": "view"},
           "subjects": [{"kind": "Robot", "name": "r"}]}
    result = kubectl.run("create", "-f", "-", stdin=json.dumps(bad), check=False)
    assert 'roleRef.apiGroup: Unsupported value: "example.com"' in result.stderr
    assert 'subjects[0].kind: Unsupported value: "Robot"' in result.stderr
