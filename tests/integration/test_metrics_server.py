"""The metrics server behind its APIService, against a real apiserver, kubectl and a hollow kubelet whose
/metrics/resource reports its pods' configured usage (tests/e2e/test_metrics_containerd.py has real CRI
stats). `kubectl top` goes through the aggregator to the metrics server, which scrapes the kubelet."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from services.api.quantity import parse_quantity
from tests.conftest import REPO, Kubectl, free_port, start_apiserver
from tests.integration.extension.frontproxy import front_proxy_flags
from tests.integration.test_aggregator import _condition, _wait

APISERVICE = "v1beta1.metrics.k8s.io"
NODE = "metrics-node"


@dataclass
class Metrics:
    url: str
    kubectl: Kubectl
    metrics_port: int


def _spawn(root: Path, name: str, *argv: str) -> subprocess.Popen[bytes]:
    log = open(root / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
    return subprocess.Popen([sys.executable, *argv], cwd=REPO, stdout=log, stderr=log)


def kubeconfig_for(root: Path, url: str, user: dict[str, str] | None = None, name: str = "kubeconfig") -> Path:
    path = root / name
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": url}}], "users": [{"name": "t", "user": user or {}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}))
    return path


def start_metrics_server(root: Path, url: str, kubeconfig: Path, resolution: str = "1s") -> tuple[Any, int]:
    """`kubeconfig` is also what it shows kubelets (a client certificate in it, when it has one)."""
    port = free_port()
    proc = _spawn(root, "metrics-server", "-m", "metrics_server", "--kubeconfig", str(kubeconfig), "--bind-address",
                  "127.0.0.1", "--secure-port", str(port), "--cert-dir", str(root / "metrics-certs"),
                  "--metric-resolution", resolution, "--kubelet-insecure-tls",
                  "--kubelet-preferred-address-types=InternalIP", "--log-format", "console")
    cert = root / "metrics-certs" / "apiserver.crt"
    _wait(cert.exists, what="metrics server certificate")
    ca = x509.load_pem_x509_certificates(cert.read_bytes())[-1]
    with httpx.Client(base_url=url) as c:
        assert c.post("/api/v1/namespaces/kube-system/services", json={
            "metadata": {"name": "metrics-server"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}).status_code == 201
        assert c.post("/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices", json={
            "metadata": {"name": "metrics-server-1", "labels": {"kubernetes.io/service-name": "metrics-server"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}).status_code == 201
        r = c.post("/apis/apiregistration.k8s.io/v1/apiservices", json={
            "metadata": {"name": APISERVICE},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                     "versionPriority": 100, "caBundle": base64.b64encode(ca.public_bytes(Encoding.PEM)).decode(),
                     "service": {"namespace": "kube-system", "name": "metrics-server"}}})
        assert r.status_code == 201, r.text
    _wait(lambda: (_condition(url, APISERVICE) or {}).get("status") == "True", what="metrics Available")
    return proc, port


@pytest.fixture(scope="module")
def metrics(etcd_server: str, workdir: Path) -> Iterator[Metrics]:
    root = workdir / f"metrics-{uuid.uuid4().hex[:6]}"
    root.mkdir(parents=True)
    apiserver = start_apiserver([etcd_server], root, "--etcd-prefix", f"/metrics-{uuid.uuid4().hex[:8]}",
                                *front_proxy_flags(root))
    url = apiserver.url
    kubeconfig = kubeconfig_for(root, url)
    procs = [_spawn(root, "kubelet", "-m", "kubelet_agent", "--kubeconfig", str(kubeconfig), "--hollow",
                    "--hostname-override", NODE, "--node-ip", "127.0.0.1", "--address", "127.0.0.1", "--port",
                    str(free_port()), "--healthz-port", "0", "--anonymous-auth=true", "--authorization-mode",
                    "AlwaysAllow", "--log-format", "console")]
    try:
        proc, port = start_metrics_server(root, url, kubeconfig)
        procs.append(proc)
        yield Metrics(url, Kubectl(kubeconfig), port)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(15)
        apiserver.stop()


def _pod(namespace: str, name: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name},
                         "annotations": {"hollow.pyk8s.io/usage": json.dumps(usage)}},
            "spec": {"nodeName": NODE, "containers": [
                {"name": "a", "image": "busybox"},
                {"name": "b", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}]}}


def test_kubectl_top_nodes_and_pods_through_the_aggregator(metrics: Metrics) -> None:
    k = metrics.kubectl
    ns = f"top-{uuid.uuid4().hex[:5]}"
    k.run("create", "namespace", ns)
    k.run("create", "-f", "-", stdin=json.dumps(_pod(ns, "burner", {"a": {"cpu": "250m", "memory": "64Mi"}})))
    k.run("create", "-f", "-", stdin=json.dumps(_pod(ns, "idler", {"a": {"cpu": "10m", "memory": "8Mi"}})))

    def top_pods() -> list[list[str]] | None:
        out = k.run("top", "pods", "-n", ns, "--containers", check=False)
        rows = [line.split() for line in out.stdout.splitlines()[1:]]
        return rows if out.returncode == 0 and len(rows) == 4 else None

    rows = _wait(top_pods, 60, "kubectl top pods --containers")
    assert out_header(k, ns) == ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    by_container = {(r[0], r[1]): (r[2], r[3]) for r in rows}
    assert by_container[("burner", "a")] == ("250m", "64Mi")
    assert by_container[("burner", "b")] == ("100m", "32Mi")
    assert by_container[("idler", "a")] == ("10m", "8Mi")
    selected = k.run("top", "pods", "-n", ns, "-l", "app=burner").stdout.splitlines()
    assert [line.split()[:3] for line in selected[1:]] == [["burner", "350m", "96Mi"]]

    def top_node() -> list[str] | None:
        out = k.run("top", "nodes", check=False)
        row = next((line.split() for line in out.stdout.splitlines() if line.startswith(NODE)), None)
        return row if row is not None and row[1] == "460m" else None

    row = _wait(top_node, 60, "kubectl top nodes")
    assert row[3] == "136Mi"


def out_header(k: Kubectl, ns: str) -> list[str]:
    return k.run("top", "pods", "-n", ns, "--containers").stdout.splitlines()[0].split()


def test_metrics_objects_tables_and_errors(metrics: Metrics) -> None:
    base = f"{metrics.url}/apis/metrics.k8s.io/v1beta1"
    node = _wait(lambda: (r := httpx.get(f"{base}/nodes/{NODE}")).status_code == 200 and r.json(), 60,
                 "NodeMetrics")
    assert node["kind"] == "NodeMetrics" and node["metadata"]["name"] == NODE
    assert node["window"].endswith("s")
    # The node burns what its pods do (the hollow kubelet adds nothing of its own).
    pods = httpx.get(f"{base}/pods").json()
    assert pods["kind"] == "PodMetricsList"
    total = sum(int(parse_quantity(c["usage"]["cpu"]) * 1000) for p in pods["items"] for c in p["containers"])
    assert int(parse_quantity(node["usage"]["cpu"]) * 1000) == total
    listed = httpx.get(f"{base}/nodes", params={"labelSelector": "kubernetes.io/hostname"}).json()
    assert listed["kind"] == "NodeMetricsList"
    table = httpx.get(f"{base}/nodes", headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "CPU", "Memory", "Window"]
    missing = httpx.get(f"{base}/namespaces/default/pods/nope")
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"
    assert missing.json()["message"] == 'pods.metrics.k8s.io "nope" not found'
    bad = httpx.get(f"{base}/nodes", params={"labelSelector": "a in (b"})
    assert bad.status_code == 400
    assert "metrics.k8s.io/v1beta1" in metrics.kubectl.run("api-resources", "--api-group=metrics.k8s.io").stdout


def test_metrics_server_refuses_requests_not_from_the_front_proxy(metrics: Metrics) -> None:
    direct = httpx.get(f"https://127.0.0.1:{metrics.metrics_port}/apis/metrics.k8s.io/v1beta1/nodes",
                       headers={"X-Remote-User": "mallory", "X-Remote-Group": "system:masters"}, verify=False)
    assert direct.status_code == 401
