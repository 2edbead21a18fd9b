"""Autoscaling at scale on hollow nodes: 100 Deployments, each with an HPA, all scaled at once by the
controller-manager from the metrics server, which scrapes the hollow nodes' kubelet APIs (each node
serves one, reporting its pods' configured usage). Real apiserver, scheduler, controller-manager,
metrics server and kubelet processes; nothing is written on their behalf."""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import httpx

from services.runtime import pki
from tests.conftest import start_apiserver
from tests.integration.extension.frontproxy import front_proxy_flags
from tests.integration.test_aggregator import _wait
from tests.integration.test_metrics_server import _spawn, kubeconfig_for, start_metrics_server

COUNT = 100
NODES = 4


def _deployment(name: str) -> dict:
    labels = {"app": name}
    usage = json.dumps({"c": {"cpu": "100m", "memory": "16Mi"}})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels, "annotations": {"hollow.pyk8s.io/usage": usage}},
                "spec": {"containers": [{"name": "c", "image": "busybox",
                                         "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}}}]}}}}


def _hpa(name: str) -> dict:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": 1, "maxReplicas": 2, "metrics": [{"type": "Resource", "resource": {
                         "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}}


def test_a_hundred_hpas_scale_their_deployments_at_once(etcd_server: str, workdir: Path) -> None:
    root = workdir / f"hpa-scale-{uuid.uuid4().hex[:6]}"
    root.mkdir(parents=True)
    apiserver = start_apiserver([etcd_server], root, "--etcd-prefix", f"/hpa-{uuid.uuid4().hex[:8]}",
                                *front_proxy_flags(root))
    url = apiserver.url
    kubeconfig = kubeconfig_for(root, url)
    # The kubelet APIs admit only certificates of their client CA, and ask the apiserver what each may do.
    client_ca = pki.create_ca("kubelet-client-ca")
    client_ca.write(root / "client-ca.crt", root / "client-ca.key")
    pki.issue_client_cert(client_ca, "metrics-server").write(root / "metrics.crt", root / "metrics.key")
    metrics_kubeconfig = kubeconfig_for(root, url, {"client-certificate": str(root / "metrics.crt"),
                                                    "client-key": str(root / "metrics.key")}, "metrics-kubeconfig")
    procs = [
        _spawn(root, "scheduler", "-m", "scheduler", "--master", url, "--secure-port", "0", "--leader-elect=false",
               "--log-format", "console"),
        _spawn(root, "controller-manager", "-m", "controller_manager", "--master", url, "--secure-port", "0",
               "--leader-elect=false", "--controllers=deployment,replicaset,horizontalpodautoscaling",
               "--horizontal-pod-autoscaler-sync-period=3s", "--log-format", "console"),
        _spawn(root, "kubelet", "-m", "kubelet_agent", "--kubeconfig", str(kubeconfig), "--hollow-nodes", str(NODES),
               "--hostname-override", "hpa", "--address", "127.0.0.1", "--anonymous-auth=false",
               f"--client-ca-file={root / 'client-ca.crt'}", "--authorization-mode", "Webhook",
               "--max-pods", "110", "--healthz-port", "0",
               "--root-dir", str(root / "kubelet"), "--log-format", "console"),
    ]
    ns = "scale"
    try:
        proc, _ = start_metrics_server(root, url, metrics_kubeconfig, resolution="2s")
        procs.append(proc)
        with httpx.Client(base_url=url, timeout=30) as c:
            nodes = _wait(lambda: len(c.get("/api/v1/nodes").json()["items"]) == NODES, 60, "hollow nodes")
            assert nodes
            for node in c.get("/api/v1/nodes").json()["items"]:
                assert node["status"]["addresses"][0]["address"] == "127.0.0.1"
                assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] != 10250
            assert c.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
            for i in range(COUNT):
                assert c.post(f"/apis/apps/v1/namespaces/{ns}/deployments", json=_deployment(f"d{i}")).status_code \
                    == 201
            started = time.monotonic()
            for i in range(COUNT):
                assert c.post(f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
                              json=_hpa(f"d{i}")).status_code == 201

            def scaled() -> bool:
                deployments = c.get(f"/apis/apps/v1/namespaces/{ns}/deployments").json()["items"]
                return len(deployments) == COUNT and all(d["spec"]["replicas"] == 2 for d in deployments)

            _wait(scaled, 240, f"all {COUNT} deployments scaled to 2")
            took = time.monotonic() - started
            hpas = c.get(f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers").json()["items"]
            assert all(h["status"]["desiredReplicas"] == 2 for h in hpas)
            assert all(h["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"] == 100
                       for h in hpas)
            print(f"{COUNT} HPAs scaled their deployments 1 -> 2 in {took:.1f}s on {NODES} hollow nodes",
                  file=sys.stderr)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(20)
        apiserver.stop()
