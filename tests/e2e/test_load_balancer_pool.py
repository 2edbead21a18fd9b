"""LoadBalancer addresses from a pool (`pyk8s up --service-lb-pool`): each Service gets one of its own,
the host routes it to a node that answers it (with externalTrafficPolicy Local, the node with the
endpoint), a requested loadBalancerIP is honoured, an exhausted pool leaves a Service pending until an
address comes free, and `down` takes the routes away."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.conftest import free_port
from tests.e2e.test_cluster_up import POD_TIMEOUT, UP_TIMEOUT, Cluster, pyk8s, short_state_dir, wait_for
from tests.e2e.test_load_balancer import NS, WEB, get, ingress, lb_service

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("containerd"), reason="real nodes need root and containerd"
)

POOL = "198.18.0.10-198.18.0.12"


def route(ip: str) -> str:
    return subprocess.run(["ip", "-4", "route", "show", ip], capture_output=True, text=True, timeout=30,
                          check=True).stdout


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    state_dir = short_state_dir()
    started = time.monotonic()
    result = pyk8s("up", "--state-dir", str(state_dir), "--port", str(free_port()), "--nodes", "2",
                   "--proxy-mode", "nftables", "--service-lb-pool", POOL, timeout=UP_TIMEOUT)
    try:
        assert result.returncode == 0, f"pyk8s up failed:\n{result.stdout}\n{result.stderr}"
        cluster = Cluster(state_dir, time.monotonic() - started, result.stdout)
        cluster.kubectl("create", "namespace", NS)
        cluster.apply({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": "node-2"}, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "web", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", WEB], "ports": [{"containerPort": 8080}]}]}})
        cluster.wait_pod(NS, "web", ("Running",))
        yield cluster
    finally:
        pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
        shutil.rmtree(state_dir.parent, ignore_errors=True)
    for ip in ("198.18.0.10", "198.18.0.11", "198.18.0.12"):
        assert route(ip) == "", f"down left a route to {ip}"


def test_pool_addresses_answer_from_the_host(cluster: Cluster) -> None:
    node2 = next(a["address"] for a in cluster.get("node", "node-2")["status"]["addresses"]
                 if a["type"] == "InternalIP")
    cluster.apply(lb_service("asks", 80, loadBalancerIP="198.18.0.12", externalTrafficPolicy="Local"))
    assert wait_for(lambda: ingress(cluster, "asks") == ["198.18.0.12"], POD_TIMEOUT), ingress(cluster, "asks")
    cluster.apply(lb_service("first", 80))
    assert wait_for(lambda: ingress(cluster, "first") == ["198.18.0.10"], POD_TIMEOUT), ingress(cluster, "first")
    for ip in ("198.18.0.10", "198.18.0.12"):
        assert wait_for(lambda ip=ip: get(f"http://{ip}/") == (200, "web\n"), 30), (get(f"http://{ip}/"), route(ip))
    assert f"via {node2}" in route("198.18.0.12"), "the Local Service is routed to a node without its endpoint"
    cluster.apply(lb_service("second", 80))
    assert wait_for(lambda: ingress(cluster, "second") == ["198.18.0.11"], POD_TIMEOUT)
    cluster.apply(lb_service("waits", 80))

    def pending() -> bool:
        events = cluster.get("events", "-n", NS, "--field-selector", "involvedObject.name=waits")["items"]
        return any("no address left in the pool" in e.get("message", "") for e in events)

    assert wait_for(pending, 30) and ingress(cluster, "waits") == []
    cluster.kubectl("delete", "service", "first", "-n", NS)
    assert wait_for(lambda: ingress(cluster, "waits") == ["198.18.0.10"], POD_TIMEOUT), ingress(cluster, "waits")
    assert wait_for(lambda: get("http://198.18.0.10/") == (200, "web\n"), 30), get("http://198.18.0.10/")
