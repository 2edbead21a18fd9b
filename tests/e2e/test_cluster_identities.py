"""`pyk8s up` with least privilege: every component talks to the apiserver as its own identity (none but
the admin is system:masters), each controller as its own service account, a kubelet's credentials
are scoped to its node by the Node authorizer and NodeRestriction, and the cluster still does its
work with no component refused anything along the way.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.bootstrap import node_client
from tests.conftest import KUBECTL, free_port
from tests.e2e.test_cluster_up import (
    POD_TIMEOUT,
    UP_TIMEOUT,
    Cluster,
    pod_manifest,
    pyk8s,
    short_state_dir,
    wait_for,
)
from tests.e2e.test_cluster_up import pytestmark as cluster_up_marks
from tests.integration.test_certificates import csr_body, new_request

pytestmark = cluster_up_marks

#: each component's kubeconfig and who the apiserver must see
IDENTITIES = {
    "scheduler": ("system:kube-scheduler", []),
    "controller-manager": ("system:kube-controller-manager", []),
    "kube-proxy": ("system:kube-proxy", []),
    "kubelet-node-1": ("system:node:node-1", ["system:nodes"]),
    "kubelet-node-2": ("system:node:node-2", ["system:nodes"]),
    "cluster-dns": ("system:serviceaccount:kube-system:coredns",
                    ["system:serviceaccounts", "system:serviceaccounts:kube-system"]),
}
#: the controllers whose service accounts a rollout, a job and a namespace deletion go through
CONTROLLER_ACCOUNTS = ("deployment-controller", "replicaset-controller", "job-controller", "namespace-controller",
                       "generic-garbage-collector", "endpointslice-controller", "service-account-controller",
                       "root-ca-cert-publisher", "node-controller", "certificate-controller")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    state_dir = short_state_dir()
    result = pyk8s("up", "--state-dir", str(state_dir), "--port", str(free_port()), "--nodes", "2",
                   timeout=UP_TIMEOUT)
    try:
        assert result.returncode == 0, f"pyk8s up failed:\n{result.stdout}\n{result.stderr}"
        yield Cluster(state_dir, 0.0, result.stdout)
    finally:
        pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
        shutil.rmtree(state_dir.parent, ignore_errors=True)


def kubectl_as(cluster: Cluster, identity: str, *argv: str) -> subprocess.CompletedProcess[str]:
    config = cluster.state.component_kubeconfig(identity)
    return subprocess.run([KUBECTL, "--kubeconfig", str(config), *argv], capture_output=True, text=True, timeout=60,
                          check=False)


def test_no_component_but_the_admin_is_system_masters(cluster: Cluster) -> None:
    for identity, (user, groups) in IDENTITIES.items():
        result = kubectl_as(cluster, identity, "auth", "whoami", "-o", "json")
        assert result.returncode == 0, f"{identity}: {result.stderr}"
        info = json.loads(result.stdout)["status"]["userInfo"]
        assert info["username"] == user, identity
        assert "system:masters" not in info.get("groups", []), identity
        assert set(groups) <= set(info.get("groups", [])), identity
    admin = json.loads(cluster.kubectl("auth", "whoami", "-o", "json"))["status"]["userInfo"]
    assert "system:masters" in admin["groups"]
    # and the running processes were handed those kubeconfigs, none the admin's
    state = cluster.state
    handed = {}
    for pid_file in (state.root / "run").glob("*.pid"):
        try:
            argv = Path(f"/proc/{pid_file.read_text().strip()}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        for arg in argv:
            if arg.startswith(b"--kubeconfig="):
                handed[pid_file.stem] = Path(arg.decode().split("=", 1)[1])
    assert state.kubeconfig not in handed.values(), handed
    assert handed["scheduler"] == state.component_kubeconfig("scheduler")
    assert handed["controller-manager"] == state.component_kubeconfig("controller-manager")
    assert handed["cluster-dns"] == state.component_kubeconfig("cluster-dns")
    assert handed["kubelet-node-1"] == state.component_kubeconfig("kubelet-node-1")
    assert handed["kube-proxy-node-2"] == state.component_kubeconfig("kube-proxy")
    # the scheduler may bind pods but not read secrets; kube-proxy may not even list pods
    assert kubectl_as(cluster, "scheduler", "auth", "can-i", "get", "secrets", "-A").stdout.strip() == "no"
    assert kubectl_as(cluster, "kube-proxy", "auth", "can-i", "list", "pods").stdout.strip() == "no"


def test_a_kubelet_reads_and_writes_only_what_is_its_nodes(cluster: Cluster) -> None:
    ns = f"nodes-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    for node in ("node-1", "node-2"):
        cluster.kubectl("create", "secret", "generic", f"for-{node}", "-n", ns, f"--from-literal=who={node}")
        manifest = pod_manifest(f"on-{node}", node, "echo $WHO; sleep 3600")
        manifest["metadata"]["namespace"] = ns
        manifest["spec"]["containers"][0]["env"] = [
            {"name": "WHO", "valueFrom": {"secretKeyRef": {"name": f"for-{node}", "key": "who"}}}]
        cluster.apply(manifest)
    for node in ("node-1", "node-2"):
        cluster.wait_pod(ns, f"on-{node}", ("Running",))
    own = kubectl_as(cluster, "kubelet-node-1", "get", "secret", "for-node-1", "-n", ns, "-o", "jsonpath={.data.who}")
    assert own.returncode == 0, own.stderr
    other = kubectl_as(cluster, "kubelet-node-1", "get", "secret", "for-node-2", "-n", ns)
    assert other.returncode == 1
    assert (f'secrets "for-node-2" is forbidden: User "system:node:node-1" cannot get resource "secrets" in API '
            f"group \"\" in the namespace \"{ns}\": no relationship found between node 'node-1' and this object"
            ) in other.stderr
    labelled = kubectl_as(cluster, "kubelet-node-1", "label", "node", "node-1", "example.com/e2e=yes")
    assert labelled.returncode == 0, labelled.stderr
    # kubectl reads a Node before it patches it, which the Node authorizer refuses first: patch directly
    state = cluster.state
    tls = ssl.create_default_context(cafile=str(state.pki.ca[0]))
    tls.load_cert_chain(*state.pki.client(node_client("node-1")))
    with httpx.Client(base_url=state.server, verify=tls) as kubelet:
        foreign = kubelet.patch("/api/v1/nodes/node-2", content=b'{"metadata":{"labels":{"example.com/e2e":"yes"}}}',
                                headers={"content-type": "application/merge-patch+json"})
    assert foreign.status_code == 403
    assert foreign.json()["message"] == ('nodes "node-2" is forbidden: node "node-1" is not allowed to modify node '
                                         '"node-2"')
    read = kubectl_as(cluster, "kubelet-node-1", "get", "node", "node-2")
    assert "node 'node-1' cannot read 'node-2', only its own Node object" in read.stderr
    cluster.kubectl("delete", "namespace", ns, "--wait=false")


def test_controllers_run_as_their_own_service_accounts_and_the_cluster_converges(cluster: Cluster) -> None:
    ns = f"work-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("create", "deployment", "web", "-n", ns, "--image=busybox", "--replicas=2", "--",
                    "sh", "-c", "sleep 3600")
    cluster.kubectl("rollout", "status", "deployment/web", "-n", ns, f"--timeout={int(POD_TIMEOUT)}s")
    cluster.kubectl("create", "job", "once", "-n", ns, "--image=busybox", "--", "sh", "-c", "true")
    cluster.kubectl("wait", "--for=condition=Complete", "job/once", "-n", ns, f"--timeout={int(POD_TIMEOUT)}s")
    # the GC removes a deleted deployment's replica sets and pods, and the namespace controller the rest
    cluster.kubectl("delete", "deployment", "web", "-n", ns)
    assert wait_for(lambda: not cluster.get("pods", "-n", ns, "-l", "app=web")["items"], POD_TIMEOUT)
    cluster.kubectl("delete", "namespace", ns, f"--timeout={int(POD_TIMEOUT)}s")
    # the CSR signer issues an approved client certificate
    request, _ = new_request("e2e-user", ("e2e",))
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    cluster.apply(csr_body(name, request, "kubernetes.io/kube-apiserver-client", ["client auth"]))
    cluster.kubectl("certificate", "approve", name)
    assert wait_for(lambda: bool(cluster.get("csr", name).get("status", {}).get("certificate")), POD_TIMEOUT)
    accounts = {sa["metadata"]["name"] for sa in cluster.get("serviceaccounts", "-n", "kube-system")["items"]}
    assert set(CONTROLLER_ACCOUNTS) <= accounts


def test_no_component_was_refused_anything(cluster: Cluster) -> None:
    """A missing RBAC rule shows as a 403 in the log of the component that needed it; the tests before
    this one made every controller do its work."""
    logs = Path(cluster.state_dir) / "logs"
    refused = []
    for log in sorted(logs.glob("*.log")):
        if log.name.startswith(("apiserver", "etcd")):
            continue
        for line in log.read_text(errors="replace").splitlines():
            if "forbidden" in line.lower() or " 403" in line:
                refused.append(f"{log.name}: {line[:400]}")
    assert not refused, "\n".join(refused[:30])
