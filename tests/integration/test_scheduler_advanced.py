"""The real scheduler against a real apiserver: anti-affinity, topology spread and priority preemption.

The scheduler runs with a profile of its own (`advanced-scheduler`) so that another scheduler in the
same test session never touches these pods, and every test labels its nodes and pins its pods to
them with a nodeSelector so nodes left by other tests do not change the outcome.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO

SCHEDULER_NAME = "advanced-scheduler"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
TEST_LABEL = "pyk8s.test/advanced"
WAIT_SECONDS = 30


@pytest.fixture(scope="module")
def scheduler(kubeconfig: Path, workdir: Path, apiserver: str) -> Iterator[subprocess.Popen[bytes]]:
    config = workdir / "advanced-scheduler.yaml"
    config.write_text(json.dumps({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": SCHEDULER_NAME}],
    }))
    log_path = workdir / "advanced-scheduler.log"
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler", "--kubeconfig", str(kubeconfig), "--config", str(config),
         "--secure-port", "0", "--log-format", "console"],
        cwd=REPO, stdout=log, stderr=log,
    )
    yield proc
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture(scope="module")
def pv_controller(apiserver: str, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The controller-manager's PersistentVolume controller, which completes the claims the
    scheduler's VolumeBinding binds on the volume side."""
    log = open(workdir / "advanced-pv-controller.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller_manager", "--master", apiserver, "--secure-port", "0",
         "--leader-elect=false", "--controllers", "persistentvolume-binder", "--log-format", "console"],
        cwd=REPO, stdout=log, stderr=log,
    )
    yield proc
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture
async def api(apiserver: str, scheduler: subprocess.Popen[bytes]) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=apiserver, timeout=30) as client:
        yield client
    assert scheduler.poll() is None, "the scheduler process died during the test"


class Cluster:
    """Nodes and pods of one test, removed afterwards."""

    def __init__(self, api: httpx.AsyncClient) -> None:
        self.api = api
        self.tag = uuid.uuid4().hex[:8]
        self.ns = f"adv-{self.tag}"
        self.nodes: list[str] = []

    async def setup(self) -> None:
        r = await self.api.post("/api/v1/namespaces", json={"metadata": {"name": self.ns}})
        assert r.status_code == 201, r.text

    async def node(self, name: str, cpu: str = "4", **labels: str) -> None:
        full = f"{name}-{self.tag}"
        body = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": full, "labels": {HOST: full, TEST_LABEL: self.tag, **labels}},
            "status": {
                "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        }
        r = await self.api.post("/api/v1/nodes", json=body)
        assert r.status_code == 201, r.text
        if not (r.json().get("status") or {}).get("allocatable"):
            r = await self.api.patch(f"/api/v1/nodes/{full}/status", json={"status": body["status"]},
                                     headers={"Content-Type": "application/merge-patch+json"})
            assert r.status_code == 200, r.text
        self.nodes.append(full)

    def node_name(self, short: str) -> str:
        return f"{short}-{self.tag}"

    async def pod(self, name: str, labels: dict[str, str] | None = None, cpu: str = "100m",
                  **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels or {}},
            "spec": {
                "schedulerName": SCHEDULER_NAME,
                "nodeSelector": {TEST_LABEL: self.tag},
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"requests": {"cpu": cpu}}}],
                **spec,
            },
        }
        r = await self.api.post(f"/api/v1/namespaces/{self.ns}/pods", json=body)
        assert r.status_code == 201, r.text
        return r.json()

    async def get_pod(self, name: str) -> dict[str, Any]:
        r = await self.api.get(f"/api/v1/namespaces/{self.ns}/pods/{name}")
        assert r.status_code == 200, r.text
        return r.json()

    async def wait_pod(self, name: str, check: Any) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
        while True:
            pod = await self.get_pod(name)
            if check(pod):
                return pod
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"pod {name} never reached the expected state: {json.dumps(pod)[:2000]}")
            await asyncio.sleep(0.2)

    async def wait_bound(self, name: str) -> str:
        pod = await self.wait_pod(name, lambda p: p["spec"].get("nodeName"))
        return pod["spec"]["nodeName"]

    async def wait_unschedulable(self, name: str) -> str:
        def unschedulable(p: dict) -> bool:
            return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                       and c.get("reason") == "Unschedulable" for c in (p.get("status") or {}).get("conditions") or ())
        pod = await self.wait_pod(name, unschedulable)
        cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        return cond["message"]

    async def teardown(self) -> None:
        await self.api.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods",
                               json={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
        for n in self.nodes:
            await self.api.delete(f"/api/v1/nodes/{n}")
        await self.api.delete(f"/api/v1/namespaces/{self.ns}")


@pytest.fixture
async def cluster(api: httpx.AsyncClient) -> AsyncIterator[Cluster]:
    c = Cluster(api)
    await c.setup()
    yield c
    await c.teardown()


WEB_ANTI_AFFINITY = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}]}}


async def test_required_anti_affinity_spreads_one_pod_per_node(cluster: Cluster) -> None:
    for i, zone in enumerate("abc"):
        await cluster.node(f"n{i}", **{ZONE: zone})
    for i in range(3):
        await cluster.pod(f"web-{i}", {"app": "web"}, affinity=WEB_ANTI_AFFINITY)
    placed = [await cluster.wait_bound(f"web-{i}") for i in range(3)]
    assert sorted(placed) == sorted(cluster.nodes)
    await cluster.pod("web-3", {"app": "web"}, affinity=WEB_ANTI_AFFINITY)
    message = await cluster.wait_unschedulable("web-3")
    assert message.startswith("0/") and "3 node(s) didn't match pod anti-affinity rules" in message, message
    # A pod the others' anti-affinity does not cover still fits; one they cover does not.
    await cluster.pod("cache", {"app": "cache"})
    await cluster.wait_bound("cache")


async def test_existing_pods_anti_affinity_keeps_matching_pods_away(cluster: Cluster) -> None:
    await cluster.node("n0")
    await cluster.node("n1")
    await cluster.pod("guard", {"app": "guard"}, affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": HOST}]}})
    guard_node = await cluster.wait_bound("guard")
    for i in range(3):
        await cluster.pod(f"noisy-{i}", {"app": "noisy"})
    for i in range(3):
        assert await cluster.wait_bound(f"noisy-{i}") != guard_node


async def test_topology_spread_across_zones(cluster: Cluster) -> None:
    await cluster.node("a1", **{ZONE: "a"})
    await cluster.node("a2", **{ZONE: "a"})
    await cluster.node("b1", **{ZONE: "b"})
    await cluster.node("c1", **{ZONE: "c"})
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "spread"}}}]
    for i in range(6):
        await cluster.pod(f"s-{i}", {"app": "spread"}, topologySpreadConstraints=spread)
    zone_of = {cluster.node_name("a1"): "a", cluster.node_name("a2"): "a", cluster.node_name("b1"): "b",
               cluster.node_name("c1"): "c"}
    zones = Counter([zone_of[await cluster.wait_bound(f"s-{i}")] for i in range(6)])
    assert zones == {"a": 2, "b": 2, "c": 2}


async def test_topology_spread_missing_label_and_skew_messages(cluster: Cluster) -> None:
    await cluster.node("a1", cpu="1", **{ZONE: "a"})
    await cluster.node("b1", cpu="1", **{ZONE: "b"})
    await cluster.node("nozone")
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "s"}}}]
    # Fill zone b so only zone a has room; a second pod in zone a would make the skew 2.
    await cluster.pod("filler", {"app": "other"}, cpu="900m",
                      nodeSelector={TEST_LABEL: cluster.tag, ZONE: "b"})
    await cluster.wait_bound("filler")
    await cluster.pod("s-0", {"app": "s"}, topologySpreadConstraints=spread)
    assert await cluster.wait_bound("s-0") == cluster.node_name("a1")
    # Zone b has no room, zone a would reach skew 2, the node without a zone has no domain.
    await cluster.pod("s-1", {"app": "s"}, cpu="200m", topologySpreadConstraints=spread)
    message = await cluster.wait_unschedulable("s-1")
    assert "1 Insufficient cpu" in message, message
    assert "1 node(s) didn't match pod topology spread constraints, " in message, message
    assert "1 node(s) didn't match pod topology spread constraints (missing required label)" in message, message


async def priority_class(api: httpx.AsyncClient, name: str, value: int) -> None:
    r = await api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                       json={"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                             "metadata": {"name": name}, "value": value})
    assert r.status_code in (201, 409), r.text


async def test_priority_preemption_evicts_victim_and_binds_preemptor(cluster: Cluster, api: httpx.AsyncClient) -> None:
    await priority_class(api, "adv-low", 10)
    await priority_class(api, "adv-high", 1000)
    await cluster.node("n0", cpu="2")
    await cluster.pod("victim", {"app": "low"}, cpu="1500m", priorityClassName="adv-low", priority=10,
                      terminationGracePeriodSeconds=30)
    node = await cluster.wait_bound("victim")
    await cluster.pod("never", cpu="1500m", priorityClassName="adv-high", priority=1000, preemptionPolicy="Never")
    message = await cluster.wait_unschedulable("never")
    assert "1 Insufficient cpu" in message and "preemption: not eligible due to preemptionPolicy=Never." in message
    await api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/never", params={"gracePeriodSeconds": "0"})

    await cluster.pod("preemptor", cpu="1500m", priorityClassName="adv-high", priority=1000)
    victim = await cluster.wait_pod("victim", lambda p: p["metadata"].get("deletionTimestamp"))
    assert victim["spec"]["nodeName"] == node
    conditions = {c["type"]: c for c in victim["status"].get("conditions") or ()}
    assert conditions["DisruptionTarget"]["reason"] == "PreemptionByScheduler"
    assert conditions["DisruptionTarget"]["status"] == "True"
    preemptor = await cluster.wait_pod("preemptor", lambda p: (p.get("status") or {}).get("nominatedNodeName"))
    assert preemptor["status"]["nominatedNodeName"] == node
    assert not preemptor["spec"].get("nodeName"), "bound before the victim is gone"
    # The kubelet would now stop the victim and remove it for good.
    r = await api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/victim", params={"gracePeriodSeconds": "0"})
    assert r.status_code == 200, r.text
    assert await cluster.wait_bound("preemptor") == node


async def test_no_preemption_of_equal_or_higher_priority(cluster: Cluster, api: httpx.AsyncClient) -> None:
    await priority_class(api, "adv-high", 1000)
    await cluster.node("n0", cpu="1")
    await cluster.pod("holder", cpu="800m", priorityClassName="adv-high", priority=1000)
    await cluster.wait_bound("holder")
    await cluster.pod("same", cpu="800m", priorityClassName="adv-high", priority=1000)
    message = await cluster.wait_unschedulable("same")
    assert "1 Insufficient cpu" in message, message
    assert "preemption: " in message and "1 No preemption victims found for incoming pod" in message, message
    holder = await cluster.get_pod("holder")
    assert not holder["metadata"].get("deletionTimestamp")


async def test_wait_for_first_consumer_static_binding(
        cluster: Cluster, api: httpx.AsyncClient, pv_controller: subprocess.Popen[bytes]) -> None:
    sc = f"local-{cluster.tag}"
    r = await api.post("/apis/storage.k8s.io/v1/storageclasses", json={
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": sc},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"})
    assert r.status_code == 201, r.text
    await cluster.node("n0")
    await cluster.node("n1")
    pv_name = f"pv-{cluster.tag}"
    r = await api.post("/api/v1/persistentvolumes", json={
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                 "local": {"path": "/mnt/disk"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": HOST, "operator": "In", "values": [cluster.node_name("n1")]}]}]}}}})
    assert r.status_code == 201, r.text
    r = await api.post(f"/api/v1/namespaces/{cluster.ns}/persistentvolumeclaims", json={
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                 "resources": {"requests": {"storage": "1Gi"}}}})
    assert r.status_code == 201, r.text
    try:
        await cluster.pod("user", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
        assert await cluster.wait_bound("user") == cluster.node_name("n1")
        pvc = (await api.get(f"/api/v1/namespaces/{cluster.ns}/persistentvolumeclaims/data")).json()
        assert pvc["spec"]["volumeName"] == pv_name and pvc["status"]["phase"] == "Bound"
        pv = (await api.get(f"/api/v1/persistentvolumes/{pv_name}")).json()
        assert pv["spec"]["claimRef"]["name"] == "data" and pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
        # The volume is taken: a second claim finds nothing to bind on any node.
        r = await api.post(f"/api/v1/namespaces/{cluster.ns}/persistentvolumeclaims", json={
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "more"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                     "resources": {"requests": {"storage": "1Gi"}}}})
        assert r.status_code == 201, r.text
        await cluster.pod("second", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "more"}}])
        message = await cluster.wait_unschedulable("second")
        assert "2 node(s) didn't find available persistent volumes to bind" in message, message
    finally:
        await api.delete(f"/api/v1/persistentvolumes/{pv_name}")
        await api.delete(f"/apis/storage.k8s.io/v1/storageclasses/{sc}")
