"""Kubelet metrics only behind authentication, as upstream: the healthz port (10248) serves health alone,
and the kubelet API (10250) serves /metrics to whoever a real apiserver's TokenReview and
SubjectAccessReview let `get` the `nodes/metrics` subresource."""

from __future__ import annotations

import asyncio
import time
import types
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kubelet_agent.server.auth import AccessWebhook, KubeletAuth, TokenWebhook
from kubelet_agent.server.server import KubeletServer
from services.client.rest import Client
from tests.conftest import KUBECTL, eventually, free_port, hollow_kubelet_process, start_apiserver

NODE = "metrics-node"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture
async def rbac_apiserver(etcd_server: str, workdir: Path) -> AsyncIterator[str]:
    process = start_apiserver([etcd_server], workdir / "kubelet-metrics", "--authorization-mode=RBAC",
                              "--etcd-prefix", f"/kubelet-metrics-{uuid.uuid4().hex[:8]}")
    yield process.url
    process.stop()


async def test_kubelet_api_metrics_need_nodes_metrics(rbac_apiserver: str, tmp_path: Path) -> None:
    client = Client(rbac_apiserver)
    auth = KubeletAuth(tokens=TokenWebhook(client), access=AccessWebhook(client, NODE, 0.1, 0.1))
    kubelet = types.SimpleNamespace(name=NODE, workers={})
    server = KubeletServer(kubelet, address="127.0.0.1", port=0, cert_dir=str(tmp_path / "pki"),
                           hosts=["127.0.0.1"], auth=auth)
    await server.start()
    try:
        await client.request("POST", "/api/v1/namespaces/default/serviceaccounts",
                             body={"metadata": {"name": "scraper"}})
        kubectl = await asyncio.create_subprocess_exec(KUBECTL, "--server", rbac_apiserver, "create", "token",
                                                       "scraper", stdout=asyncio.subprocess.PIPE)
        token = (await kubectl.communicate())[0].decode().strip()
        bearer = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{server.port}", verify=False) as c:
            assert (await c.get("/healthz")).text == "ok"
            anonymous = await c.get("/metrics")
            assert (anonymous.status_code, anonymous.text) == (401, "Unauthorized")
            denied = await c.get("/metrics", headers=bearer)
            assert (denied.status_code, denied.text) == (403, "Forbidden (user=system:serviceaccount:default:scraper, "
                                                               "verb=get, resource=nodes, subresource=metrics)")
            await client.request("POST", f"{RBAC}/clusterroles", body={
                "metadata": {"name": "node-metrics"},
                "rules": [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]}]})
            await client.request("POST", f"{RBAC}/clusterrolebindings", body={
                "metadata": {"name": "scraper-node-metrics"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-metrics"},
                "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": "default"}]})

            async def allowed() -> httpx.Response | None:
                response = await c.get("/metrics", headers=bearer)
                return response if response.status_code == 200 else None

            metrics = await eventually(allowed, limit=20, what="nodes/metrics to be granted")
            assert "# HELP" in metrics.text
            still_denied = await c.get("/stats/summary", headers=bearer)
            assert still_denied.status_code == 403, "nodes/metrics grants metrics, not stats"
    finally:
        await server.stop()
        await client.close()


def test_kubelet_healthz_port_serves_health_but_no_metrics(kubeconfig: Path, workdir: Path) -> None:
    port = free_port()
    with hollow_kubelet_process(kubeconfig, workdir / "metrics-hollow.log", f"metrics-{uuid.uuid4().hex[:6]}", 1,
                                "--healthz-port", str(port)) as proc:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (workdir / "metrics-hollow.log").read_text()[-2000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "hollow kubelet never became healthy"
            time.sleep(0.2)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert (metrics.status_code, metrics.text) == (404, "404 page not found\n")
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).text == "ok"
