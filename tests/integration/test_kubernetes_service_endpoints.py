"""The `default/kubernetes` Service lists every live apiserver, as upstream's lease endpoint reconciler does.

Two apiserver processes on one etcd of their own, each advertising its own address with a short lease
TTL: both appear in the Endpoints and in the EndpointSlice; one that stops cleanly takes itself out
before it exits; one that is killed leaves once its lease expires, within TTL plus one interval.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import APIServerProcess, eventually, start_apiserver, start_etcd_cluster

TTL = 3
INTERVAL = TTL * 2 / 3
ADDRESSES = ("127.0.0.11", "127.0.0.12")


@pytest.fixture(scope="module")
def etcd(workdir: Path) -> Iterator[str]:
    """An etcd of their own, so the session's apiservers (advertising the host's address) stay out of it."""
    members = start_etcd_cluster(1, workdir / "kubernetes-service-etcd")
    yield members[0].client_url
    for m in members:
        m.kill()


def start(etcd: str, workdir: Path, address: str) -> APIServerProcess:
    return start_apiserver([etcd], workdir / f"kubernetes-service-{address}", "--advertise-address", address,
                           "--endpoint-reconciler-ttl", f"{TTL}s")


@pytest.fixture
def apiservers(etcd: str, workdir: Path) -> Iterator[tuple[APIServerProcess, APIServerProcess]]:
    a = start(etcd, workdir, ADDRESSES[0])
    try:
        b = start(etcd, workdir, ADDRESSES[1])
    except BaseException:
        a.stop()
        raise
    yield a, b
    b.stop()
    a.stop()


async def get(url: str, path: str, **params: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        response = await client.get(path, params=params)
        assert response.status_code == 200, response.text
        return dict(response.json())


async def endpoint_ips(url: str) -> tuple[set[str], set[str]]:
    """The IPs in the `kubernetes` Endpoints and in its EndpointSlice, read through the apiserver at `url`."""
    endpoints = await get(url, "/api/v1/namespaces/default/endpoints/kubernetes")
    slices = await get(url, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
                       labelSelector="kubernetes.io/service-name=kubernetes")
    from_endpoints = {a["ip"] for s in endpoints.get("subsets") or [] for a in s.get("addresses") or []}
    from_slices = {ip for s in slices["items"] for e in s.get("endpoints") or [] for ip in e["addresses"]}
    return from_endpoints, from_slices


async def listed(url: str, expected: set[str]) -> bool:
    return await endpoint_ips(url) == (expected, expected)


async def test_every_apiserver_is_an_endpoint_of_the_kubernetes_service(
    apiservers: tuple[APIServerProcess, APIServerProcess],
) -> None:
    a, b = apiservers
    ports = {int(p.url.rsplit(":", 1)[1]) for p in apiservers}
    await eventually(lambda: listed(a.url, set(ADDRESSES)), what="both apiservers in the endpoints")
    assert await endpoint_ips(b.url) == (set(ADDRESSES), set(ADDRESSES))

    endpoints = await get(a.url, "/api/v1/namespaces/default/endpoints/kubernetes")
    assert endpoints["metadata"]["labels"] == {"endpointslice.kubernetes.io/skip-mirror": "true"}
    [subset] = endpoints["subsets"]
    assert [addr["ip"] for addr in subset["addresses"]] == sorted(ADDRESSES)
    [port] = subset["ports"]
    assert port["name"] == "https" and port["protocol"] == "TCP" and port["port"] in ports

    slice_ = await get(a.url, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes")
    assert slice_["metadata"]["labels"] == {"kubernetes.io/service-name": "kubernetes"}
    assert slice_["addressType"] == "IPv4"
    assert slice_["endpoints"] == [{"addresses": [ip], "conditions": {"ready": True}} for ip in sorted(ADDRESSES)]
    assert slice_["ports"] == [{"name": "https", "port": port["port"], "protocol": "TCP"}]

    service = await get(a.url, "/api/v1/namespaces/default/services/kubernetes")
    assert service["metadata"]["labels"] == {"component": "apiserver", "provider": "kubernetes"}
    assert service["spec"]["clusterIP"] == "10.96.0.1" and service["spec"]["type"] == "ClusterIP"
    assert "selector" not in service["spec"]
    [service_port] = service["spec"]["ports"]
    assert service_port["name"] == "https" and service_port["port"] == 443 and service_port["protocol"] == "TCP"
    assert service_port["targetPort"] in ports

    # A clean stop takes the apiserver out before the process exits, not a TTL later.
    await asyncio.to_thread(b.stop)
    assert b.proc.returncode is not None
    assert await endpoint_ips(a.url) == ({ADDRESSES[0]}, {ADDRESSES[0]}), b.log_tail()


async def test_a_killed_apiserver_leaves_within_its_lease_ttl(
    apiservers: tuple[APIServerProcess, APIServerProcess],
) -> None:
    a, b = apiservers
    await eventually(lambda: listed(a.url, set(ADDRESSES)), what="both apiservers in the endpoints")
    b.proc.kill()
    await asyncio.to_thread(b.proc.wait, 10)
    killed = time.monotonic()
    # A killed apiserver removes nothing: its lease (refreshed at most one interval ago) still lists it.
    assert await endpoint_ips(a.url) == (set(ADDRESSES), set(ADDRESSES))
    await eventually(lambda: listed(a.url, {ADDRESSES[0]}), interval=0.1, what="the killed apiserver to leave")
    elapsed = time.monotonic() - killed
    print(f"killed apiserver left the endpoints after {elapsed:.1f}s (TTL {TTL}s, interval {INTERVAL:.1f}s)")
    # Its lease was refreshed at most one interval before the kill, expires TTL after that refresh at the
    # latest, and the survivor notices at its next reconcile: TTL + interval, plus etcd's expiry tick.
    assert elapsed < TTL + INTERVAL + 1.5, f"left after {elapsed:.1f}s"
