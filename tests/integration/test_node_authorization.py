"""A kubelet's credentials against a real apiserver (`--authorization-mode=Node,RBAC`, NodeRestriction):
it reads the secrets and configMaps of pods bound to it and nothing else, writes its own Node and
its pods' status and nobody else's, with upstream's 403 messages, through httpx and kubectl."""

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

MERGE = {"content-type": "application/merge-patch+json"}


@dataclass
class Cluster:
    url: str
    ca: Path
    certs: dict[str, tuple[str, str]]
    workdir: Path
    process: APIServerProcess

    def client(self, who: str) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(*self.certs[who])
        return httpx.Client(base_url=self.url, verify=context, timeout=30)

    def kubectl(self, who: str, *args: str) -> subprocess.CompletedProcess[str]:
        cert, key = self.certs[who]
        path = self.workdir / f"kubeconfig-{who}"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": self.url, "certificate-authority": str(self.ca)}}],
            "users": [{"name": "u", "user": {"client-certificate": cert, "client-key": key}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }))
        return subprocess.run([KUBECTL, "--kubeconfig", str(path), *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "KUBECACHEDIR": str(path) + "-cache"})


@pytest.fixture(scope="module")
def cluster(etcd_server: str, workdir: Path) -> Iterator[Cluster]:
    root = workdir / f"nodeauthz-{uuid.uuid4().hex[:6]}"
    root.mkdir(parents=True)
    ca = pki.create_ca("nodeauthz-ca")
    ca.write(root / "ca.crt", root / "ca.key")
    pki.issue_serving_cert(ca, ["localhost", "127.0.0.1"]).write(root / "apiserver.crt", root / "apiserver.key")
    certs = {}
    for who, user, groups in (("admin", "kubernetes-admin", ["system:masters"]),
                              ("n1", "system:node:n1", ["system:nodes"]), ("n2", "system:node:n2", ["system:nodes"])):
        pki.issue_client_cert(ca, user, groups).write(root / f"{who}.crt", root / f"{who}.key")
        certs[who] = (str(root / f"{who}.crt"), str(root / f"{who}.key"))
    port = free_port()
    process = start_apiserver(
        [etcd_server], root, "--secure-port", str(port), "--tls-cert-file", str(root / "apiserver.crt"),
        "--tls-private-key-file", str(root / "apiserver.key"), "--client-ca-file", str(root / "ca.crt"),
        "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
        "--cert-dir", str(root / "certs"), "--etcd-prefix", f"/nodeauthz-{uuid.uuid4().hex[:8]}",
    )
    try:
        yield Cluster(f"https://127.0.0.1:{port}", root / "ca.crt", certs, root, process)
    finally:
        process.stop()


def eventually(check: Callable[[], bool], timeout: float = 15) -> None:
    """The graph follows the watch cache: wait for it."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def created(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post(path, json=body)
    assert r.status_code == 201, r.text
    return r.json()


def pod(name: str, node: str, secret: str, configmap: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {
        "nodeName": node,
        "containers": [{"name": "c", "image": "busybox", "envFrom": [{"configMapRef": {"name": configmap}}]}],
        "volumes": [{"name": "s", "secret": {"secretName": secret}}]}}


@pytest.fixture(scope="module")
def namespace(cluster: Cluster) -> str:
    ns = f"nodes-{uuid.uuid4().hex[:6]}"
    with cluster.client("admin") as admin:
        created(admin, "/api/v1/namespaces", {"metadata": {"name": ns}})
        for name in ("s1", "s2"):
            created(admin, f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": name}, "data": {"k": "dg=="}})
            created(admin, f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": f"cm-{name}"}})
        created(admin, f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "default"}})
        created(admin, f"/api/v1/namespaces/{ns}/pods", pod("p1", "n1", "s1", "cm-s1"))
        created(admin, f"/api/v1/namespaces/{ns}/pods", pod("p2", "n2", "s2", "cm-s2"))
    for who in ("n1", "n2"):
        with cluster.client(who) as node:
            created(node, "/api/v1/nodes", {"metadata": {"name": who, "labels": {"kubernetes.io/hostname": who}}})
    return ns


def test_a_node_reads_only_the_secrets_and_configmaps_of_its_own_pods(cluster: Cluster, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}"
    with cluster.client("n1") as n1:
        eventually(lambda: n1.get(f"{base}/secrets/s1").status_code == 200)
        assert n1.get(f"{base}/configmaps/cm-s1").status_code == 200
        r = n1.get(f"{base}/secrets/s2")
        assert r.status_code == 403
        assert r.json()["message"] == (
            f'secrets "s2" is forbidden: User "system:node:n1" cannot get resource "secrets" in API group "" in the '
            f"namespace \"{namespace}\": no relationship found between node 'n1' and this object")
        assert r.json()["reason"] == "Forbidden"
        assert n1.get(f"{base}/configmaps/cm-s2").status_code == 403
        assert n1.get(f"{base}/secrets").status_code == 403
        # a pod newly bound to n1 brings its secret along, and takes it away when it goes
        with cluster.client("admin") as admin:
            created(admin, f"{base}/pods", pod("p3", "n1", "s2", "cm-s2"))
            eventually(lambda: n1.get(f"{base}/secrets/s2").status_code == 200)
            assert admin.delete(f"{base}/pods/p3", params={"gracePeriodSeconds": "0"}).status_code == 200
        eventually(lambda: n1.get(f"{base}/secrets/s2").status_code == 403)
    refused = cluster.kubectl("n1", "get", "secret", "s2", "-n", namespace)
    assert refused.returncode == 1
    assert (f'Error from server (Forbidden): secrets "s2" is forbidden: User "system:node:n1" cannot get resource '
            f"\"secrets\" in API group \"\" in the namespace \"{namespace}\": no relationship found between node 'n1' "
            "and this object") in refused.stderr
    allowed = cluster.kubectl("n1", "get", "secret", "s1", "-n", namespace, "-o", "jsonpath={.data.k}")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout == "dg=="


def test_a_node_writes_only_its_own_node_and_pods(cluster: Cluster, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}"
    with cluster.client("n1") as n1:
        own = n1.patch("/api/v1/nodes/n1", content=b'{"metadata":{"labels":{"node.kubernetes.io/pool":"a"}}}',
                       headers=MERGE)
        assert own.status_code == 200, own.text
        other = n1.patch("/api/v1/nodes/n2", content=b'{"metadata":{"labels":{"x":"y"}}}', headers=MERGE)
        assert other.status_code == 403
        assert other.json()["message"] == 'nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2"'
        read = n1.get("/api/v1/nodes/n2")
        assert read.status_code == 403
        assert read.json()["message"].endswith("node 'n1' cannot read 'n2', only its own Node object")
        restricted = n1.patch("/api/v1/nodes/n1", headers=MERGE,
                              content=b'{"metadata":{"labels":{"node-restriction.kubernetes.io/trusted":"yes"}}}')
        assert restricted.status_code == 403
        assert restricted.json()["message"] == ('nodes "n1" is forbidden: is not allowed to modify labels: '
                                                "node-restriction.kubernetes.io/trusted")
        status = b'{"status":{"conditions":[{"type":"Ready","status":"True"}]}}'
        assert n1.patch(f"{base}/pods/p1/status", content=status, headers=MERGE).status_code == 200
        theirs = n1.patch(f"{base}/pods/p2/status", content=status, headers=MERGE)
        assert theirs.status_code == 403
        assert theirs.json()["message"] == ('pods "p2" is forbidden: node "n1" can only update pod status for pods '
                                            "with spec.nodeName set to itself")
        deleted = n1.delete(f"{base}/pods/p2")
        assert deleted.status_code == 403
        assert deleted.json()["message"] == ('pods "p2" is forbidden: node "n1" can only delete pods with '
                                             "spec.nodeName set to itself")
        plain = n1.post(f"{base}/pods", json=pod("mine", "n1", "s1", "cm-s1"))
        assert plain.status_code == 403
        assert "node \"n1\" can only create mirror pods" in plain.json()["message"]
        uid = n1.get(f"{base}/pods/p1").json()["metadata"]["uid"]
        other_uid = cluster.client("admin").get(f"{base}/pods/p2").json()["metadata"]["uid"]

        def token(name: str, pod_uid: str) -> httpx.Response:
            return n1.post(f"{base}/serviceaccounts/default/token", json={
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
                    "audiences": ["https://kubernetes.default.svc"],
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod_uid}}})

        assert token("p1", uid).status_code == 201
        stolen = token("p2", other_uid)
        assert stolen.status_code == 403
        assert stolen.json()["message"] == ('serviceaccounts "default" is forbidden: node requested token bound to a '
                                            "pod scheduled on a different node")
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n2"}}
        leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        with cluster.client("admin") as admin:
            admin.post("/api/v1/namespaces", json={"metadata": {"name": "kube-node-lease"}})
        eventually(lambda: n1.post(leases, json={**lease, "metadata": {"name": "n1"}}).status_code in (201, 409))
        foreign = n1.post(leases, json=lease)
        assert foreign.status_code == 403
        assert foreign.json()["message"] == ('leases.coordination.k8s.io "n2" is forbidden: can only access node lease '
                                             "with the same name as the requesting node")
    with cluster.client("n2") as n2:
        assert n2.delete(f"{base}/pods/p2", params={"gracePeriodSeconds": "0"}).status_code == 200
