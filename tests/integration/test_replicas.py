"""Two apiserver replicas on one etcd behave as one API server.

A write through one replica is visible through the other at once (lists are consistent
reads) and promptly on its watches; allocations (cluster IPs, node ports) never collide
across replicas; and optimistic concurrency holds across them (a stale write gets 409).
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import APIServerProcess, start_apiserver

_seq = itertools.count()


@pytest.fixture(scope="module")
def replicas(etcd_server: str, workdir: Path) -> Iterator[tuple[APIServerProcess, APIServerProcess]]:
    """Two replicas of our own on the session's etcd."""
    a = start_apiserver([etcd_server], workdir / "replica-a")
    try:
        b = start_apiserver([etcd_server], workdir / "replica-b")
    except BaseException:
        a.stop()
        raise
    yield a, b
    b.stop()
    a.stop()


@pytest.fixture
async def clients(
    replicas: tuple[APIServerProcess, APIServerProcess],
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    a, b = replicas
    async with httpx.AsyncClient(base_url=a.url, timeout=20) as ca, httpx.AsyncClient(
        base_url=b.url, timeout=20
    ) as cb:
        yield ca, cb


@pytest.fixture
async def namespace(clients: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> str:
    name = f"replicas-{next(_seq)}-{uuid.uuid4().hex[:6]}"
    r = await clients[0].post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


def _logs(replicas: tuple[APIServerProcess, APIServerProcess]) -> str:
    return "\n".join(f"--- {p.url}\n{p.log_tail(30)}" for p in replicas)


def _configmap(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def test_write_on_a_is_seen_by_watch_on_b(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient], namespace: str, replicas: Any
) -> None:
    ca, cb = clients
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    listed = await cb.get(path)
    assert listed.status_code == 200, listed.text
    rv = listed.json()["metadata"]["resourceVersion"]
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    opened = asyncio.Event()

    async def watch() -> None:
        params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "30"}
        async with cb.stream("GET", path, params=params) as resp:
            assert resp.status_code == 200
            opened.set()
            async for line in resp.aiter_lines():
                if line.strip():
                    await events.put(orjson.loads(line))

    task = asyncio.create_task(watch())
    try:
        await asyncio.wait_for(opened.wait(), 10)
        for i in range(10):
            name = f"seen-{i}"
            created = await ca.post(path, json=_configmap(name, i=str(i)))
            assert created.status_code == 201, created.text
            sent = time.monotonic()
            ev = await asyncio.wait_for(events.get(), 5)
            delay = time.monotonic() - sent
            assert ev["type"] == "ADDED", ev
            assert ev["object"]["metadata"]["name"] == name
            assert ev["object"]["metadata"]["resourceVersion"] == created.json()["metadata"]["resourceVersion"]
            assert delay < 1.0, f"replica B's watch saw the write {delay:.2f}s after A acknowledged it"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_list_on_b_right_after_write_on_a_is_consistent(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient], namespace: str
) -> None:
    ca, cb = clients
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    for i in range(30):
        created = await ca.post(path, json=_configmap(f"read-{i}"))
        assert created.status_code == 201, created.text
        rv = int(created.json()["metadata"]["resourceVersion"])
        listed = await cb.get(path)
        assert listed.status_code == 200, listed.text
        body = listed.json()
        names = {item["metadata"]["name"] for item in body["items"]}
        assert f"read-{i}" in names, f"list on B right after create on A (rv {rv}) misses the object"
        assert int(body["metadata"]["resourceVersion"]) >= rv
        got = await cb.get(f"{path}/read-{i}")
        assert got.status_code == 200, got.text
        # A change through A must be visible through B's list too, not only additions.
        updated = await ca.put(f"{path}/read-{i}", json={**created.json(), "data": {"v": "2"}})
        assert updated.status_code == 200, updated.text
        listed = await cb.get(path)
        item = next(it for it in listed.json()["items"] if it["metadata"]["name"] == f"read-{i}")
        assert item["data"] == {"v": "2"}
        assert item["metadata"]["resourceVersion"] == updated.json()["metadata"]["resourceVersion"]


async def test_cluster_ips_and_node_ports_never_collide_across_replicas(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient], namespace: str, replicas: Any
) -> None:
    ca, cb = clients
    path = f"/api/v1/namespaces/{namespace}/services"

    async def create(i: int) -> httpx.Response:
        client = ca if i % 2 == 0 else cb
        svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"svc-{i}"},
               "spec": {"selector": {"app": f"a{i}"}, "ports": [{"port": 80, "targetPort": 8080}],
                        "type": "NodePort" if i % 5 == 0 else "ClusterIP"}}
        return await client.post(path, json=svc)

    responses = await asyncio.gather(*(create(i) for i in range(60)))
    bad = [(r.status_code, r.text[:300]) for r in responses if r.status_code != 201]
    assert not bad, f"creates failed: {bad}\n{_logs(replicas)}"
    ips = [r.json()["spec"]["clusterIP"] for r in responses]
    cidr = ipaddress.ip_network("10.96.0.0/12")
    assert all(ipaddress.ip_address(ip) in cidr for ip in ips), ips
    listed = (await ca.get("/api/v1/services")).json()["items"]
    all_ips = [s["spec"]["clusterIP"] for s in listed if s["spec"].get("clusterIP") not in (None, "", "None")]
    dupes = {ip for ip in all_ips if all_ips.count(ip) > 1}
    assert not dupes, f"the same clusterIP was given to two Services: {sorted(dupes)}"
    assert len(set(ips)) == len(ips)
    ports = [p["nodePort"] for s in listed for p in s["spec"].get("ports", []) if p.get("nodePort")]
    assert len(ports) == len(set(ports)), f"duplicate nodePorts: {sorted(ports)}"
    assert len([r for r in responses if r.json()["spec"]["type"] == "NodePort"]) == 12
    # The stored objects agree with what each create answered.
    stored = {s["metadata"]["name"]: s["spec"]["clusterIP"] for s in listed if s["metadata"]["namespace"] == namespace}
    assert stored == {r.json()["metadata"]["name"]: r.json()["spec"]["clusterIP"] for r in responses}


async def test_stale_update_through_b_after_change_through_a_conflicts(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient], namespace: str
) -> None:
    ca, cb = clients
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    created = await ca.post(path, json=_configmap("stale", v="1"))
    assert created.status_code == 201, created.text
    seen_by_b = (await cb.get(f"{path}/stale")).json()
    changed = await ca.put(f"{path}/stale", json={**seen_by_b, "data": {"v": "2"}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["metadata"]["resourceVersion"] != seen_by_b["metadata"]["resourceVersion"]

    stale_put = await cb.put(f"{path}/stale", json={**seen_by_b, "data": {"v": "3"}})
    stale_patch = await cb.patch(
        f"{path}/stale", content=orjson.dumps({"metadata": {"resourceVersion": seen_by_b["metadata"]
                                                            ["resourceVersion"]}, "data": {"v": "4"}}),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    stale_delete = await cb.request(
        "DELETE", f"{path}/stale",
        content=orjson.dumps({"kind": "DeleteOptions", "apiVersion": "v1",
                              "preconditions": {"resourceVersion": seen_by_b["metadata"]["resourceVersion"]}}),
        headers={"Content-Type": "application/json"},
    )
    for r in (stale_put, stale_patch, stale_delete):
        assert r.status_code == 409, (r.request.method, r.text)
        status = r.json()
        assert status["kind"] == "Status" and status["code"] == 409 and status["reason"] == "Conflict", status
        assert status["details"]["name"] == "stale" and status["details"]["kind"] == "configmaps", status
    final = (await ca.get(f"{path}/stale")).json()
    assert final["data"] == {"v": "2"}
    assert final["metadata"]["resourceVersion"] == changed.json()["metadata"]["resourceVersion"]
    # The same write with the fresh resourceVersion goes through B.
    fresh = await cb.put(f"{path}/stale", json={**final, "data": {"v": "5"}})
    assert fresh.status_code == 200, fresh.text
