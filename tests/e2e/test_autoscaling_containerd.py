"""Metrics and autoscaling on a real node: `pyk8s up --nodes 1` (containerd, the metrics server it starts
and registers), `kubectl top` with the containers' CPU and memory from CRI stats, and an HPA that scales
a Deployment of busybox pods burning CPU up, then back down once the burning stops."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import free_port
from tests.e2e.test_cluster_up import UP_TIMEOUT, Cluster, pyk8s, short_state_dir, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("containerd"), reason="real nodes need root and containerd"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    state_dir = short_state_dir()
    started = time.monotonic()
    result = pyk8s("up", "--state-dir", str(state_dir), "--port", str(free_port()), "--nodes", "1",
                   timeout=UP_TIMEOUT)
    try:
        assert result.returncode == 0, f"pyk8s up failed:\n{result.stdout}\n{result.stderr}"
        yield Cluster(state_dir, time.monotonic() - started, result.stdout)
    finally:
        pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
        shutil.rmtree(state_dir.parent, ignore_errors=True)


def _millicores(text: str) -> int:
    return int(text.removesuffix("m")) if text.endswith("m") else int(float(text) * 1000)


def _burner(name: str, stop_at: int) -> dict[str, Any]:
    """Busybox burning a core until the epoch second `stop_at`, then idling; 100m requested."""
    script = f"while [ $(date +%s) -lt {stop_at} ]; do :; done; exec sleep 3600"
    return {"name": name, "image": "busybox", "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", script],
            "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}}}


def test_kubectl_top_shows_real_containers(cluster: Cluster) -> None:
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "top-burner", "namespace": "default"},
                   "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                       _burner("burn", int(time.time()) + 600),
                       {"name": "idle", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", "exec sleep 3600"]}]}})
    cluster.wait_pod("default", "top-burner", ("Running",))
    rows: dict[str, list[str]] = {}

    def measured() -> bool:
        out = cluster.kubectl("top", "pods", "top-burner", "--containers", check=False)
        rows.clear()
        rows.update({line.split()[1]: line.split()[2:] for line in out.splitlines()[1:] if line.strip()})
        return set(rows) == {"burn", "idle"}

    assert wait_for(measured, 90), f"kubectl top pods never listed both containers: {rows}"
    assert _millicores(rows["burn"][0]) >= 200, rows
    assert _millicores(rows["idle"][0]) < 50, rows
    assert rows["burn"][1].endswith("Mi") and rows["idle"][1].endswith("Mi")
    nodes = cluster.kubectl("top", "nodes").splitlines()
    assert nodes[0].split()[:3] == ["NAME", "CPU(cores)", "CPU(%)"]
    node = next(line.split() for line in nodes[1:] if line.startswith("node-1"))
    assert _millicores(node[1]) >= 200 and node[3].endswith("Mi")
    cluster.kubectl("delete", "pod", "top-burner", "--wait=false")


def test_hpa_scales_a_burning_deployment_up_and_back_down(cluster: Cluster) -> None:
    stop_at = int(time.time()) + 75
    labels = {"app": "burn"}
    cluster.apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "burn", "namespace": "default"},
                   "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                       "metadata": {"labels": labels},
                       "spec": {"terminationGracePeriodSeconds": 1, "containers": [_burner("burn", stop_at)]}}}})
    cluster.apply({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                   "metadata": {"name": "burn", "namespace": "default"},
                   "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "burn"},
                            "minReplicas": 1, "maxReplicas": 2,
                            "metrics": [{"type": "Resource", "resource": {
                                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}],
                            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 5, "policies": [
                                {"type": "Percent", "value": 100, "periodSeconds": 5}]}}}})
    started = time.monotonic()

    def replicas() -> int:
        return int(cluster.get("deployment", "burn", "-n", "default")["spec"].get("replicas") or 0)

    assert wait_for(lambda: replicas() == 2, 60), cluster.get("hpa", "burn", "-n", "default").get("status")
    scaled_up = time.monotonic() - started
    hpa = cluster.get("hpa", "burn", "-n", "default")
    reasons = {c["type"]: c["reason"] for c in hpa["status"]["conditions"]}
    assert reasons["ScalingActive"] == "ValidMetricFound"
    assert hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"] > 50
    events = cluster.get("events", "-n", "default", "--field-selector", "involvedObject.name=burn,"
                                                                        "involvedObject.kind=HorizontalPodAutoscaler")
    assert any(e["reason"] == "SuccessfulRescale" and "New size: 2" in e["message"] for e in events["items"])
    wait = max(stop_at - time.time(), 0) + 90
    assert wait_for(lambda: replicas() == 1, wait), cluster.get("hpa", "burn", "-n", "default").get("status")
    print(f"HPA scaled up in {scaled_up:.1f}s and back down {time.time() - stop_at:.1f}s after the load stopped")
