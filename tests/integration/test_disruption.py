"""PodDisruptionBudgets end to end: the disruption controller in a real controller-manager fills in
their status from pods a hollow kubelet makes Ready, the eviction API spends the budget, and
`kubectl drain` gets through a node whose Deployment a budget protects (tests/integration/cluster.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from services.client import Client, ClientConfig, NotFound, gvr
from tests.conftest import Kubectl
from tests.integration import cluster as plane
from tests.integration.cluster import Cluster, Proc, eventually

cluster = plane.cluster
kubectl = plane.kubectl
unique_ns = plane.unique_ns

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
DEPLOYMENTS = gvr("apps/v1", "deployments")
PDBS = gvr("policy/v1", "poddisruptionbudgets")
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
DRAIN_TAINT = ("pyk8s.io/pdb-drain", "yes", "NoSchedule")


@pytest.fixture(scope="module")
def disruption_manager(cluster: Cluster) -> Iterator[Proc]:
    cm = cluster.controller_manager("cm-disruption", "--leader-elect=false",
                                    "--controllers=disruption,replicaset,deployment")
    yield cm
    cm.stop()
    print(cm.log_tail(80))  # shown by pytest when a test of this module failed


@pytest.fixture
async def client(cluster: Cluster, disruption_manager: Proc) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=cluster.url)) as c:
        yield c


def deployment(name: str, replicas: int, probe: bool = False, **pod_spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "nginx:1.25"}
    if probe:
        container["readinessProbe"] = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"terminationGracePeriodSeconds": 1, "containers": [container], **pod_spec}}},
    }


def budget(name: str, app: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": app}}, **spec}}


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


async def ready_pods(client: Client, ns: str, app: str, want: int, node: str | None = None) -> list[dict[str, Any]]:
    """Wait for exactly `want` live Ready pods of the app (on `node` if given) and return them."""
    async def check() -> list[dict[str, Any]] | None:
        items = (await client.list(PODS, ns, label_selector={"app": app}))["items"]
        live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
        ready = [p for p in live if is_ready(p) and (node is None or p["spec"].get("nodeName") == node)]
        return ready if len(ready) == want == len(live) else None
    return await eventually(check, 60, f"{want} ready pods of {app}")  # type: ignore[no-any-return]


async def status_is(client: Client, ns: str, name: str, **want: Any) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        pdb = await client.get(PDBS, name, ns)
        status = pdb.get("status") or {}
        return pdb if all(status.get(k) == v for k, v in want.items()) else None
    return await eventually(check, 60, f"status of {name} to be {want}")  # type: ignore[no-any-return]


async def evict(cluster: Cluster, ns: str, pod: str, dry_run: bool = False) -> httpx.Response:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}
    params = {"dryRun": "All"} if dry_run else None
    async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as http:
        return await http.post(f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", json=body, params=params)


def causes(response: httpx.Response) -> list[str]:
    return [c.get("message", "") for c in (response.json().get("details") or {}).get("causes") or []]


async def test_status_counts_for_int_percent_and_max_unavailable(
    client: Client, kubectl: Kubectl, unique_ns: str
) -> None:
    ns = unique_ns
    for name, replicas in (("by-int", 3), ("by-percent", 3), ("by-max", 4)):
        await client.create(DEPLOYMENTS, deployment(name, replicas), ns)
    await client.create(PDBS, budget("by-int", "by-int", minAvailable=2), ns)
    await client.create(PDBS, budget("by-percent", "by-percent", minAvailable="50%"), ns)
    await client.create(PDBS, budget("by-max", "by-max", maxUnavailable="30%"), ns)
    for name, replicas in (("by-int", 3), ("by-percent", 3), ("by-max", 4)):
        await ready_pods(client, ns, name, replicas)
    # 50% of 3 rounds up to 2; 30% of 4 rounds up to 2 unavailable, so 2 must stay healthy
    pdb = await status_is(client, ns, "by-int", expectedPods=3, desiredHealthy=2, currentHealthy=3,
                          disruptionsAllowed=1)
    await status_is(client, ns, "by-percent", expectedPods=3, desiredHealthy=2, currentHealthy=3,
                    disruptionsAllowed=1)
    await status_is(client, ns, "by-max", expectedPods=4, desiredHealthy=2, currentHealthy=4, disruptionsAllowed=2)
    assert pdb["status"]["observedGeneration"] == pdb["metadata"]["generation"] == 1
    [cond] = pdb["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionAllowed", "True", "SufficientPods")
    assert "disruptedPods" not in pdb["status"]

    out = await asyncio.to_thread(kubectl.run, "get", "pdb", "-n", ns)
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
    rows = {line.split()[0]: line.split()[1:4] for line in lines[1:]}
    assert rows == {"by-int": ["2", "N/A", "1"], "by-percent": ["50%", "N/A", "1"], "by-max": ["N/A", "30%", "2"]}

    # Scaling the Deployment moves the budget: 30% of 7 is 3 unavailable, 4 must stay healthy.
    await client.patch(DEPLOYMENTS, "by-max", {"spec": {"replicas": 7}}, ns)
    await ready_pods(client, ns, "by-max", 7)
    await status_is(client, ns, "by-max", expectedPods=7, desiredHealthy=4, currentHealthy=7, disruptionsAllowed=3)


async def test_eviction_spends_the_budget_then_is_refused(
    client: Client, cluster: Cluster, disruption_manager: Proc, unique_ns: str
) -> None:
    ns = unique_ns
    await client.create(DEPLOYMENTS, deployment("web", 3), ns)
    await client.create(PDBS, budget("web", "web", minAvailable=2), ns)
    first, second, third = (p["metadata"]["name"] for p in await ready_pods(client, ns, "web", 3))
    await status_is(client, ns, "web", currentHealthy=3, disruptionsAllowed=1)

    dry = await evict(cluster, ns, first, dry_run=True)
    assert dry.status_code == 201, dry.text
    pdb = await client.get(PDBS, "web", ns)
    assert pdb["status"]["disruptionsAllowed"] == 1 and "disruptedPods" not in pdb["status"]
    assert not (await client.get(PODS, first, ns))["metadata"].get("deletionTimestamp")

    # The kubelet stands still, so no replacement becomes Ready and gives the budget back.
    with cluster.kubelet.frozen():
        allowed = await evict(cluster, ns, first)
        assert allowed.status_code == 201, allowed.text
        evicted = await client.get(PODS, first, ns)
        assert evicted["metadata"].get("deletionTimestamp")
        target = next(c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget")
        assert (target["status"], target["reason"]) == ("True", "EvictionByEvictionAPI")
        pdb = await client.get(PDBS, "web", ns)
        assert pdb["status"]["disruptionsAllowed"] == 0

        refused = await evict(cluster, ns, second)
        assert refused.status_code == 429, refused.text
        assert refused.json()["reason"] == "TooManyRequests" and refused.json()["message"] == BUDGET_MESSAGE
        assert any("The disruption budget web needs 2 healthy pods" in m for m in causes(refused)), refused.text
        assert not (await client.get(PODS, second, ns))["metadata"].get("deletionTimestamp")
        await status_is(client, ns, "web", currentHealthy=2, desiredHealthy=2, disruptionsAllowed=0)

        # A spec change the controller has not seen yet holds every eviction back.
        with disruption_manager.frozen():
            await client.patch(PDBS, "web", {"spec": {"minAvailable": 1}}, ns)
            pending = await evict(cluster, ns, second)
            assert pending.status_code == 429, pending.text
            assert causes(pending) == ["The disruption budget web is still being processed by the server."]
        await status_is(client, ns, "web", observedGeneration=2, desiredHealthy=1, disruptionsAllowed=1)
        assert (await evict(cluster, ns, second)).status_code == 201

        await client.create(PDBS, {**budget("everything", "web"), "spec": {"selector": {}, "maxUnavailable": 1}}, ns)
        await eventually(lambda: _has_budget(client, ns, "everything"))
        both = await evict(cluster, ns, third)
        assert both.status_code == 500, both.text
        assert both.json()["message"] == ("This pod has more than one PodDisruptionBudget, which the eviction "
                                          "subresource does not support.")


async def _has_budget(client: Client, ns: str, name: str) -> bool:
    return bool((await client.get(PDBS, name, ns)).get("status", {}).get("observedGeneration"))


async def test_unready_pod_is_evicted_without_spending_a_met_budget(
    client: Client, cluster: Cluster, unique_ns: str
) -> None:
    ns = unique_ns
    await client.create(DEPLOYMENTS, deployment("probed", 3, probe=True), ns)
    await client.create(PDBS, budget("probed", "probed", minAvailable=2), ns)
    pods = [p["metadata"]["name"] for p in await ready_pods(client, ns, "probed", 3)]
    await client.patch(PODS, pods[0], {"metadata": {"annotations": {"hollow.pyk8s.io/ready": "false"}}}, ns)
    await status_is(client, ns, "probed", currentHealthy=2, desiredHealthy=2, disruptionsAllowed=0)

    healthy = await evict(cluster, ns, pods[1])
    assert healthy.status_code == 429, healthy.text
    unready = await evict(cluster, ns, pods[0])
    assert unready.status_code == 201, unready.text
    pdb = await client.get(PDBS, "probed", ns)
    assert pods[0] not in (pdb["status"].get("disruptedPods") or {})


async def test_drain_respects_the_budget_and_completes(
    client: Client, cluster: Cluster, kubectl: Kubectl, unique_ns: str
) -> None:
    """The key journey: draining a node whose three replicas a minAvailable=2 budget protects evicts one
    pod at a time, each next eviction let through once the replacement is Ready on the other node."""
    ns = unique_ns
    prefix = f"pdb-drain-{unique_ns[-3:]}"
    old, new = f"{prefix}-0", f"{prefix}-1"
    taint = f"{DRAIN_TAINT[0]}={DRAIN_TAINT[1]}:{DRAIN_TAINT[2]}"
    nodes = cluster.hollow_kubelet(prefix, 2, "--node-labels", f"pdb-drain={prefix}", "--register-with-taints", taint)
    try:
        await asyncio.to_thread(cluster.wait_nodes_ready, [old, new])
        await asyncio.to_thread(kubectl.run, "cordon", new)
        spec = {"nodeSelector": {"pdb-drain": prefix},
                "tolerations": [{"key": DRAIN_TAINT[0], "operator": "Equal", "value": DRAIN_TAINT[1],
                                 "effect": DRAIN_TAINT[2]}]}
        await client.create(DEPLOYMENTS, deployment("guarded", 3, **spec), ns)
        await ready_pods(client, ns, "guarded", 3, node=old)
        await client.create(PDBS, budget("guarded", "guarded", minAvailable=2), ns)
        await status_is(client, ns, "guarded", currentHealthy=3, disruptionsAllowed=1)
        await asyncio.to_thread(kubectl.run, "uncordon", new)

        drained = await asyncio.to_thread(
            kubectl.run, "drain", old, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s",
            check=False, timeout=120,
        )
        assert drained.returncode == 0, drained.stdout + drained.stderr
        assert f"node/{old} drained" in drained.stdout, drained.stdout
        # Two of the three evictions had to wait for the budget.
        assert BUDGET_MESSAGE in drained.stderr, drained.stderr
        await ready_pods(client, ns, "guarded", 3, node=new)
        await status_is(client, ns, "guarded", currentHealthy=3, disruptionsAllowed=1)
    finally:
        nodes.stop()
        for name in (old, new):
            with contextlib.suppress(NotFound):
                await client.delete(NODES, name)
