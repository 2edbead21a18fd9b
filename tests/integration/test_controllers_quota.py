"""The ResourceQuota controller in a real controller-manager, with the apiserver's quota admission,
the real scheduler and a hollow kubelet (tests/integration/cluster.py): the controller fills in a
quota's status, gives back what finished and deleted objects used, follows limit changes, and
kubectl shows the result.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from services.client import Client, ClientConfig, Forbidden, gvr
from tests.conftest import Kubectl
from tests.integration import cluster as plane
from tests.integration.cluster import Cluster, Proc, eventually, script

cluster = plane.cluster
kubectl = plane.kubectl
unique_ns = plane.unique_ns

PODS = gvr("v1", "pods")
QUOTAS = gvr("v1", "resourcequotas")
DEPLOYMENTS = gvr("apps/v1", "deployments")


@pytest.fixture(scope="module")
def controller_manager(cluster: Cluster) -> Iterator[Proc]:
    cm = cluster.controller_manager("cm-quota", "--leader-elect=false", "--controllers", "resourcequota,namespace")
    yield cm
    cm.stop()


@pytest.fixture
async def client(cluster: Cluster, controller_manager: Proc) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=cluster.url)) as c:
        yield c


def pod(name: str, annotations: dict[str, str] | None = None, resources: dict[str, Any] | None = None,
        **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources or {}}],
                     "terminationGracePeriodSeconds": 0, **spec}}


async def quota_status(client: Client, ns: str, name: str) -> dict[str, Any]:
    return (await client.get(QUOTAS, name, ns)).get("status") or {}


async def wait_used(client: Client, ns: str, name: str, used: dict[str, str], what: str) -> None:
    async def check() -> bool:
        return (await quota_status(client, ns, name)).get("used") == used

    await eventually(check, within=20, what=what)


async def test_status_follows_pods_that_start_finish_and_go(client: Client, unique_ns: str) -> None:
    ns = unique_ns
    await client.create(PODS, pod("existing"), ns)
    hard = {"pods": "2", "count/pods": "10"}
    await client.create(QUOTAS, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
                                 "spec": {"hard": hard}}, ns)
    await wait_used(client, ns, "q", {"pods": "1", "count/pods": "1"}, "usage of the pod made before the quota")
    assert (await quota_status(client, ns, "q"))["hard"] == hard
    await client.create(PODS, pod("done", script("c", "exit=0,after=1"), restartPolicy="Never"), ns)
    with pytest.raises(Forbidden) as refused:
        await client.create(PODS, pod("third"), ns)
    assert refused.value.message == ('pods "third" is forbidden: exceeded quota: q, requested: pods=1, '
                                     "used: pods=2, limited: pods=2")

    async def finished() -> bool:
        return ((await client.get(PODS, "done", ns)).get("status") or {}).get("phase") == "Succeeded"

    await eventually(finished, what="the scripted pod to succeed")
    # A finished pod still exists (count/pods) but no longer holds a pod slot.
    await wait_used(client, ns, "q", {"pods": "1", "count/pods": "2"}, "the finished pod's slot given back")
    await client.create(PODS, pod("third"), ns)
    await client.delete(PODS, "existing", ns, grace_period_seconds=0)
    await wait_used(client, ns, "q", {"pods": "1", "count/pods": "2"}, "the deleted pod given back")
    await client.patch(QUOTAS, "q", {"spec": {"hard": {"pods": "3", "count/pods": "10", "requests.memory": "1Gi"}}},
                       ns)

    async def new_limits() -> bool:
        status = await quota_status(client, ns, "q")
        return status.get("hard") == {"pods": "3", "count/pods": "10", "requests.memory": "1Gi"} and status.get(
            "used") == {"pods": "1", "count/pods": "2", "requests.memory": "0"}

    await eventually(new_limits, within=20, what="status to follow the new limits")


async def test_scoped_usage_counts_only_pods_in_scope(client: Client, unique_ns: str) -> None:
    ns = unique_ns
    await client.create(PODS, pod("best-effort"), ns)
    await client.create(PODS, pod("burstable", resources={"requests": {"cpu": "250m", "memory": "64Mi"}}), ns)
    await client.create(PODS, pod("job", resources={"requests": {"cpu": "100m"}}, activeDeadlineSeconds=600), ns)
    for name, scopes in (("be", ["BestEffort"]), ("nbe", ["NotBestEffort"]), ("long", ["NotTerminating"])):
        await client.create(QUOTAS, {"metadata": {"name": name},
                                     "spec": {"hard": {"pods": "9"} if name == "be" else
                                              {"pods": "9", "requests.cpu": "2", "requests.memory": "1Gi"},
                                              "scopes": scopes}}, ns)
    await wait_used(client, ns, "be", {"pods": "1"}, "BestEffort usage")
    await wait_used(client, ns, "nbe", {"pods": "2", "requests.cpu": "350m", "requests.memory": "64Mi"},
                    "NotBestEffort usage")
    await wait_used(client, ns, "long", {"pods": "2", "requests.cpu": "250m", "requests.memory": "64Mi"},
                    "NotTerminating usage")


async def test_count_of_deployments(client: Client, unique_ns: str) -> None:
    ns = unique_ns

    def deployment(name: str) -> dict[str, Any]:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": {
            "replicas": 0, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}

    await client.create(DEPLOYMENTS, deployment("d1"), ns)
    await client.create(QUOTAS, {"metadata": {"name": "apps"}, "spec": {"hard": {"count/deployments.apps": "2"}}}, ns)
    await wait_used(client, ns, "apps", {"count/deployments.apps": "1"}, "deployments counted")
    await client.create(DEPLOYMENTS, deployment("d2"), ns)
    with pytest.raises(Forbidden) as refused:
        await client.create(DEPLOYMENTS, deployment("d3"), ns)
    assert refused.value.message == (
        'deployments.apps "d3" is forbidden: exceeded quota: apps, requested: count/deployments.apps=1, '
        "used: count/deployments.apps=2, limited: count/deployments.apps=2")
    await client.delete(DEPLOYMENTS, "d1", ns)
    await wait_used(client, ns, "apps", {"count/deployments.apps": "1"}, "the deleted deployment given back")
    await client.create(DEPLOYMENTS, deployment("d3"), ns)


async def test_kubectl_create_get_and_describe_quota(client: Client, kubectl: Kubectl, unique_ns: str) -> None:
    ns = unique_ns
    kubectl.run("create", "quota", "compute", "--hard=pods=3,requests.cpu=1,limits.memory=1Gi", "-n", ns)
    await wait_used(client, ns, "compute", {"pods": "0", "requests.cpu": "0", "limits.memory": "0"}, "first count")
    await client.create(PODS, pod("p", resources={"limits": {"cpu": "100m", "memory": "128Mi"}}), ns)
    await wait_used(client, ns, "compute", {"pods": "1", "requests.cpu": "100m", "limits.memory": "128Mi"},
                    "the pod charged")
    out = kubectl.run("describe", "quota", "compute", "-n", ns).stdout
    rows = [re.split(r"\s+", line.strip()) for line in out.splitlines()]
    assert ["Name:", "compute"] in rows and ["Namespace:", ns] in rows
    assert ["Resource", "Used", "Hard"] in rows
    assert ["limits.memory", "128Mi", "1Gi"] in rows and ["pods", "1", "3"] in rows
    assert ["requests.cpu", "100m", "1"] in rows
    lines = kubectl.run("get", "quota", "-n", ns).stdout.splitlines()
    assert re.split(r"\s{2,}", lines[0].strip()) == ["NAME", "AGE", "REQUEST", "LIMIT"]
    cells = re.split(r"\s{2,}", lines[1].strip())
    assert cells[0] == "compute" and cells[2:] == ["pods: 1/3, requests.cpu: 100m/1", "limits.memory: 128Mi/1Gi"]
    refused = kubectl.run("run", "big", "--image=busybox", "-n", ns, "--overrides",
                          '{"spec":{"containers":[{"name":"big","image":"busybox","resources":{"limits":'
                          '{"cpu":"2","memory":"1Mi"}}}]}}', check=False)
    assert refused.returncode != 0
    assert ('pods "big" is forbidden: exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=100m, '
            "limited: requests.cpu=1") in refused.stderr
