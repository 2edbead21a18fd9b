"""ResourceQuota admission on a real apiserver and etcd, without a quota controller: each test writes
the quota's status as the controller would (`status.hard` = `spec.hard`, `status.used` counted), then
checks what creates the apiserver admits, what it charges, and upstream's exact refusal messages.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import APIServerProcess, start_apiserver


@pytest.fixture(scope="module")
def second_apiserver(etcd_server: str, workdir: Path) -> Iterator[APIServerProcess]:
    """Another replica on the session's etcd: its creates race ours with no lock in common."""
    server = start_apiserver([etcd_server], workdir / "quota-replica")
    yield server
    server.stop()


@pytest.fixture
async def api(apiserver: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=apiserver, timeout=30) as client:
        yield client


@pytest.fixture
async def ns(api: httpx.AsyncClient) -> str:
    name = f"quota-{uuid.uuid4().hex[:8]}"
    r = await api.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


async def make_quota(api: httpx.AsyncClient, ns: str, name: str, hard: dict[str, str],
                     used: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A quota with the status the controller would give it: nothing used unless said otherwise."""
    r = await api.post(f"/api/v1/namespaces/{ns}/resourcequotas",
                       json={"metadata": {"name": name}, "spec": {"hard": hard, **spec}})
    assert r.status_code == 201, r.text
    quota = r.json()
    assert "status" not in quota or not quota["status"].get("hard")
    quota["status"] = {"hard": hard, "used": {k: "0" for k in hard} if used is None else used}
    r = await api.put(f"/api/v1/namespaces/{ns}/resourcequotas/{name}/status", json=quota)
    assert r.status_code == 200, r.text
    return r.json()


async def used(api: httpx.AsyncClient, ns: str, name: str) -> dict[str, str]:
    r = await api.get(f"/api/v1/namespaces/{ns}/resourcequotas/{name}")
    return r.json()["status"]["used"]


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"containers": list(containers) or [{"name": "c", "image": "busybox"}], **spec}}


def container(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"name": name, "image": "busybox", "resources": resources}


async def create_pod(api: httpx.AsyncClient, ns: str, body: dict[str, Any], **params: str) -> httpx.Response:
    return await api.post(f"/api/v1/namespaces/{ns}/pods", json=body, params=params)


def forbidden(r: httpx.Response) -> str:
    assert r.status_code == 403, r.text
    status = r.json()
    assert status["kind"] == "Status" and status["reason"] == "Forbidden"
    return str(status["message"])


async def test_pods_count_refuses_the_third_pod(api: httpx.AsyncClient, ns: str) -> None:
    await make_quota(api, ns, "q", {"pods": "2"})
    for name in ("p1", "p2"):
        assert (await create_pod(api, ns, pod(name))).status_code == 201
    assert await used(api, ns, "q") == {"pods": "2"}
    r = await create_pod(api, ns, pod("p3"))
    assert forbidden(r) == 'pods "p3" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2'
    assert r.json()["details"] == {"name": "p3", "kind": "pods"}
    assert (await api.get(f"/api/v1/namespaces/{ns}/pods/p3")).status_code == 404
    assert await used(api, ns, "q") == {"pods": "2"}


async def test_dry_run_is_checked_but_not_charged(api: httpx.AsyncClient, ns: str) -> None:
    await make_quota(api, ns, "q", {"pods": "1"})
    assert (await create_pod(api, ns, pod("dry"), dryRun="All")).status_code == 201
    assert await used(api, ns, "q") == {"pods": "0"}
    assert (await create_pod(api, ns, pod("real"))).status_code == 201
    assert "exceeded quota: q" in forbidden(await create_pod(api, ns, pod("dry2"), dryRun="All"))


async def test_a_quota_takes_part_once_its_status_is_computed(api: httpx.AsyncClient, ns: str) -> None:
    r = await api.post(f"/api/v1/namespaces/{ns}/resourcequotas",
                       json={"metadata": {"name": "fresh"}, "spec": {"hard": {"pods": "0"}}})
    assert r.status_code == 201
    # As upstream: a quota the controller has not seen yet (no status.hard) limits nothing.
    assert (await create_pod(api, ns, pod("before"))).status_code == 201
    quota = r.json()
    quota["status"] = {"hard": {"pods": "0", "requests.cpu": "1"}, "used": {"requests.cpu": "0"}}
    assert (await api.put(f"/api/v1/namespaces/{ns}/resourcequotas/fresh/status", json=quota)).status_code == 200
    r = await create_pod(api, ns, pod("after", container("c", requests={"cpu": "100m"})))
    assert forbidden(r) == 'pods "after" is forbidden: status unknown for quota: fresh, resources: pods,requests.cpu'


async def test_concurrent_creates_never_exceed_the_quota(api: httpx.AsyncClient, ns: str) -> None:
    await make_quota(api, ns, "q", {"pods": "5"})
    results = await asyncio.gather(*(create_pod(api, ns, pod(f"p{i}")) for i in range(10)))
    assert sorted(r.status_code for r in results) == [201] * 5 + [403] * 5
    for r in results:
        if r.status_code == 403:
            assert r.json()["message"].endswith("exceeded quota: q, requested: pods=1, used: pods=5, limited: pods=5")
    assert len((await api.get(f"/api/v1/namespaces/{ns}/pods")).json()["items"]) == 5
    assert await used(api, ns, "q") == {"pods": "5"}


async def test_concurrent_creates_on_two_replicas(
    api: httpx.AsyncClient, ns: str, second_apiserver: APIServerProcess
) -> None:
    await make_quota(api, ns, "q", {"configmaps": "10"})
    async with httpx.AsyncClient(base_url=second_apiserver.url, timeout=30) as other:
        results = await asyncio.gather(*(
            (api if i % 2 else other).post(f"/api/v1/namespaces/{ns}/configmaps", json={"metadata": {"name": f"c{i}"}})
            for i in range(40)
        ))
    assert sorted(r.status_code for r in results) == [201] * 10 + [403] * 30
    assert len((await api.get(f"/api/v1/namespaces/{ns}/configmaps")).json()["items"]) == 10
    assert await used(api, ns, "q") == {"configmaps": "10"}


async def test_compute_quota_needs_requests_and_limits(api: httpx.AsyncClient, ns: str) -> None:
    await make_quota(api, ns, "compute", {"requests.cpu": "1", "limits.memory": "1Gi", "memory": "2Gi"})
    r = await create_pod(api, ns, pod("bare", container("c1"), container("c2", requests={"cpu": "100m"})))
    assert forbidden(r) == ('pods "bare" is forbidden: failed quota: compute: must specify limits.memory for: c1,c2; '
                            "memory for: c1,c2; requests.cpu for: c1")
    # Limits alone will do: requests default to them before the quota looks.
    r = await create_pod(api, ns, pod("a", container("c", limits={"cpu": "600m", "memory": "512Mi"})))
    assert r.status_code == 201, r.text
    assert await used(api, ns, "compute") == {"requests.cpu": "600m", "limits.memory": "512Mi", "memory": "512Mi"}
    r = await create_pod(api, ns, pod("b", container("c", requests={"cpu": "500m"}, limits={"memory": "256Mi"})))
    assert forbidden(r) == ('pods "b" is forbidden: exceeded quota: compute, requested: requests.cpu=500m, '
                            "used: requests.cpu=600m, limited: requests.cpu=1")
    r = await create_pod(api, ns, pod("c", container("c", requests={"cpu": "0.4"}, limits={"memory": "512Mi"})))
    assert r.status_code == 201, r.text
    assert await used(api, ns, "compute") == {"requests.cpu": "1", "limits.memory": "1Gi", "memory": "1Gi"}
    r = await create_pod(api, ns, pod("d", container("c", requests={"cpu": "1m"}, limits={"memory": "1"})))
    assert forbidden(r) == ('pods "d" is forbidden: exceeded quota: compute, requested: limits.memory=1,requests.cpu=1m'
                            ", used: limits.memory=1Gi,requests.cpu=1, limited: limits.memory=1Gi,requests.cpu=1")


async def test_init_containers_sidecars_and_overhead_count_like_upstream(api: httpx.AsyncClient, ns: str) -> None:
    await make_quota(api, ns, "q", {"requests.cpu": "10", "limits.cpu": "10"})
    body = pod("p", container("main", requests={"cpu": "1"}, limits={"cpu": "1"}),
               initContainers=[container("big-init", limits={"cpu": "3"}),
                               {**container("sidecar", limits={"cpu": "500m"}), "restartPolicy": "Always"},
                               container("late-init", limits={"cpu": "2"})])
    assert (await create_pod(api, ns, body)).status_code == 201
    # max(main 1 + sidecar 0.5, big-init 3, sidecar 0.5 + late-init 2) = 3
    assert await used(api, ns, "q") == {"requests.cpu": "3", "limits.cpu": "3"}


async def test_best_effort_and_not_best_effort_scopes(api: httpx.AsyncClient, ns: str) -> None:
    await make_quota(api, ns, "besteffort", {"pods": "1"}, scopes=["BestEffort"])
    await make_quota(api, ns, "burstable", {"pods": "1", "requests.memory": "1Gi"}, scopes=["NotBestEffort"])
    assert (await create_pod(api, ns, pod("be1"))).status_code == 201
    r = await create_pod(api, ns, pod("be2"))
    assert forbidden(r) == ('pods "be2" is forbidden: exceeded quota: besteffort, requested: pods=1, used: pods=1, '
                            "limited: pods=1")
    sized = container("c", requests={"memory": "100Mi"})
    assert (await create_pod(api, ns, pod("bu1", sized))).status_code == 201
    assert await used(api, ns, "besteffort") == {"pods": "1"}
    assert await used(api, ns, "burstable") == {"pods": "1", "requests.memory": "100Mi"}
    r = await create_pod(api, ns, pod("bu2", sized))
    assert forbidden(r) == ('pods "bu2" is forbidden: exceeded quota: burstable, requested: pods=1, used: pods=1, '
                            "limited: pods=1")
    # A best-effort pod cannot satisfy the NotBestEffort quota's memory rule, but it is not in its scope.
    await api.delete(f"/api/v1/namespaces/{ns}/resourcequotas/besteffort")
    await asyncio.sleep(0.5)
    assert (await create_pod(api, ns, pod("be3"))).status_code == 201


async def test_priority_class_and_terminating_scopes(api: httpx.AsyncClient, ns: str) -> None:
    selector = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                      "values": ["system-node-critical"]}]}
    await make_quota(api, ns, "critical", {"pods": "1"}, scopeSelector=selector)
    await make_quota(api, ns, "jobs", {"pods": "1"}, scopes=["Terminating"])
    critical = {"priorityClassName": "system-node-critical"}
    assert (await create_pod(api, ns, pod("c1", **critical))).status_code == 201
    assert "exceeded quota: critical" in forbidden(await create_pod(api, ns, pod("c2", **critical)))
    assert (await create_pod(api, ns, pod("plain"))).status_code == 201
    assert (await create_pod(api, ns, pod("t1", activeDeadlineSeconds=60))).status_code == 201
    assert "exceeded quota: jobs" in forbidden(await create_pod(api, ns, pod("t2", activeDeadlineSeconds=60)))
    assert await used(api, ns, "critical") == {"pods": "1"}
    assert await used(api, ns, "jobs") == {"pods": "1"}


async def test_object_counts(api: httpx.AsyncClient, ns: str) -> None:
    await make_quota(api, ns, "counts", {"count/deployments.apps": "1", "configmaps": "1", "resourcequotas": "2",
                                         "services.nodeports": "1", "services.loadbalancers": "0"})
    deployment = {"metadata": {"name": "d1"}, "spec": {
        "selector": {"matchLabels": {"app": "d"}},
        "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    assert (await api.post(path, json=deployment)).status_code == 201
    deployment["metadata"]["name"] = "d2"
    assert forbidden(await api.post(path, json=deployment)) == (
        'deployments.apps "d2" is forbidden: exceeded quota: counts, requested: count/deployments.apps=1, '
        "used: count/deployments.apps=1, limited: count/deployments.apps=1")
    assert (await api.post(f"/api/v1/namespaces/{ns}/configmaps", json={"metadata": {"name": "a"}})).status_code == 201
    assert "exceeded quota: counts, requested: configmaps=1" in forbidden(
        await api.post(f"/api/v1/namespaces/{ns}/configmaps", json={"metadata": {"name": "b"}}))
    # Secrets and events are not limited here; events never are.
    assert (await api.post(f"/api/v1/namespaces/{ns}/secrets", json={"metadata": {"name": "s"}})).status_code == 201
    svc = {"metadata": {"name": "np"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "name": "a"},
                                                                            {"port": 81, "name": "b"}]}}
    assert forbidden(await api.post(f"/api/v1/namespaces/{ns}/services", json=svc)) == (
        'services "np" is forbidden: exceeded quota: counts, requested: services.nodeports=2, '
        "used: services.nodeports=0, limited: services.nodeports=1")
    svc["spec"]["ports"].pop()
    assert (await api.post(f"/api/v1/namespaces/{ns}/services", json=svc)).status_code == 201
    lb = {"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": False,
                                               "ports": [{"port": 80}]}}
    assert "requested: services.loadbalancers=1" in forbidden(
        await api.post(f"/api/v1/namespaces/{ns}/services", json=lb))
    assert (await api.post(f"/api/v1/namespaces/{ns}/services",
                           json={"metadata": {"name": "plain"}, "spec": {"ports": [{"port": 80}]}})).status_code == 201
    assert await used(api, ns, "counts") == {"count/deployments.apps": "1", "configmaps": "1", "resourcequotas": "0",
                                             "services.nodeports": "1", "services.loadbalancers": "0"}
    r = await api.post(f"/api/v1/namespaces/{ns}/resourcequotas",
                       json={"metadata": {"name": "second"}, "spec": {"hard": {"pods": "1"}}})
    assert r.status_code == 201
    assert (await used(api, ns, "counts"))["resourcequotas"] == "1"


async def test_storage_by_class(api: httpx.AsyncClient, ns: str) -> None:
    gold = "gold.storageclass.storage.k8s.io/requests.storage"
    await make_quota(api, ns, "storage", {"requests.storage": "1Gi", gold: "500Mi", "persistentvolumeclaims": "5"})

    def claim(name: str, size: str, storage_class: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
        if storage_class:
            spec["storageClassName"] = storage_class
        return {"metadata": {"name": name}, "spec": spec}

    path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
    assert forbidden(await api.post(path, json=claim("g1", "600Mi", "gold"))) == (
        f'persistentvolumeclaims "g1" is forbidden: exceeded quota: storage, requested: {gold}=600Mi, '
        f"used: {gold}=0, limited: {gold}=500Mi")
    assert (await api.post(path, json=claim("g2", "400Mi", "gold"))).status_code == 201
    assert (await api.post(path, json=claim("s1", "600Mi"))).status_code == 201
    assert "requested: requests.storage=100Mi, used: requests.storage=1000Mi, limited: requests.storage=1Gi" in (
        forbidden(await api.post(path, json=claim("s2", "100Mi"))))
    assert await used(api, ns, "storage") == {"requests.storage": "1000Mi", gold: "400Mi",
                                              "persistentvolumeclaims": "2"}


async def test_get_quota_table(api: httpx.AsyncClient, ns: str) -> None:
    await make_quota(api, ns, "q", {"pods": "3", "requests.cpu": "2", "limits.cpu": "4"})
    assert (await create_pod(api, ns, pod("p", container("c", limits={"cpu": "250m"})))).status_code == 201
    r = await api.get(f"/api/v1/namespaces/{ns}/resourcequotas",
                      headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    table = r.json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age", "Request", "Limit"]
    (row,) = table["rows"]
    assert row["cells"][0] == "q"
    assert row["cells"][2:] == ["pods: 1/3, requests.cpu: 250m/2", "limits.cpu: 250m/4"]
