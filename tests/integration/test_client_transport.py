"""services.client over the asyncio transport against the real apiserver, plus a create-throughput benchmark.

Benchmark (starts its own etcd and apiserver; one process, 64 tasks creating pods through `Client`):

    python -m tests.integration.test_client_transport --pods 3000 --tasks 64

It prints creates/s and the client's CPU per create for httpx's default transport (httpcore, the
client before this transport) and for `AsyncTransport`. Measured on the shared 2-core dev box
(load average 12-20, so the apiserver is the bottleneck of the second figure):

    httpx default transport:  60-88 creates/s, 6.3-6.4 ms client CPU per create
    AsyncTransport:          490-590 creates/s, 0.38-0.42 ms client CPU per create
    bench/apiserver.py RawClient on the same server: ~600 creates/s, 0.065 ms CPU per create
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.client import AlreadyExists, Client, ClientConfig, NotFound, gvr
from services.client.transport import EAGER_BODY_LIMIT, AsyncTransport

PODS = gvr("v1", "pods")
CONFIGMAPS = gvr("v1", "configmaps")
NAMESPACES = gvr("v1", "namespaces", namespaced=False)


def pod(name: str, padding: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app": "transport"}}
    if padding:
        meta["annotations"] = {"pad": "x" * padding}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}


async def make_namespace(client: Client, name: str) -> str:
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


async def test_concurrent_writes_share_a_bounded_pool(apiserver: str) -> None:
    transport = AsyncTransport(max_connections=16, max_idle=16)
    async with Client(ClientConfig(server=apiserver), transport=transport) as client:
        ns = await make_namespace(client, f"tr-pool-{time.time_ns() % 10**6}")
        names = iter(range(240))

        async def worker() -> None:
            for i in names:
                created = await client.create(PODS, pod(f"p-{i:03d}", padding=1500), ns)
                assert created["metadata"]["name"] == f"p-{i:03d}"

        await asyncio.gather(*(worker() for _ in range(32)))
        assert 1 <= transport.idle_connections() <= 16
        listed = await client.list(PODS, ns)
        assert sorted(p["metadata"]["name"] for p in listed["items"]) == [f"p-{i:03d}" for i in range(240)]
        raw = await client._http.get(f"/api/v1/namespaces/{ns}/pods")
        assert int(raw.headers["content-length"]) > EAGER_BODY_LIMIT, "the list must take the streamed path"
        with pytest.raises(AlreadyExists):
            await client.create(PODS, pod("p-000"), ns)
        with pytest.raises(NotFound):
            await client.get(PODS, "missing", ns)
        assert 1 <= transport.idle_connections() <= 16


async def test_watch_streams_events_and_frees_its_slot(apiserver: str) -> None:
    transport = AsyncTransport(max_connections=2)
    config = ClientConfig(server=apiserver, timeout=5)
    async with Client(config, transport=transport, max_retries=0) as client:
        ns = await make_namespace(client, f"tr-watch-{time.time_ns() % 10**6}")
        rv = (await client.list(CONFIGMAPS, ns))["metadata"]["resourceVersion"]
        async with client.watch(CONFIGMAPS, ns, resource_version=rv, timeout_seconds=60) as events:
            await client.create(CONFIGMAPS, {"metadata": {"name": "one"}, "data": {"k": "v"}}, ns)
            kind, obj = await asyncio.wait_for(anext(events), 10)
            assert (kind, obj["metadata"]["name"]) == ("ADDED", "one")
            await client.patch(CONFIGMAPS, "one", {"data": {"k": "w"}}, ns)
            kind, obj = await asyncio.wait_for(anext(events), 10)
            assert (kind, obj["data"]) == ("MODIFIED", {"k": "w"})
        rv = (await client.list(CONFIGMAPS, ns))["metadata"]["resourceVersion"]
        first = client.watch(CONFIGMAPS, ns, resource_version=rv, timeout_seconds=60)
        second = client.watch(CONFIGMAPS, ns, resource_version=rv, timeout_seconds=60)
        await client.create(CONFIGMAPS, {"metadata": {"name": "two"}}, ns)
        got = await asyncio.wait_for(asyncio.gather(anext(first), anext(second)), 10)
        assert [(k, o["metadata"]["name"]) for k, o in got] == [("ADDED", "two"), ("ADDED", "two")]
        await first.aclose()
        await second.aclose()


async def test_connection_closed_by_apiserver_while_idle_is_not_reused(apiserver: str) -> None:
    """uvicorn drops keep-alive connections idle for 5 s; a POST after that must not hit a dead socket."""
    async with Client(ClientConfig(server=apiserver), transport=AsyncTransport(keepalive_expiry=60),
                      max_retries=0) as client:
        ns = await make_namespace(client, f"tr-idle-{time.time_ns() % 10**6}")
        await client.create(CONFIGMAPS, {"metadata": {"name": "before"}}, ns)
        await asyncio.sleep(6)
        created = await client.create(CONFIGMAPS, {"metadata": {"name": "after"}}, ns)
        assert created["metadata"]["name"] == "after"


async def test_client_uses_the_asyncio_transport_by_default(apiserver: str) -> None:
    async with Client(ClientConfig(server=apiserver)) as client:
        assert isinstance(client._http._transport, AsyncTransport)
        assert (await client.request("GET", "/version"))["major"] == "1"


async def creates_per_second(
    url: str, total: int, tasks: int, transport: httpx.AsyncBaseTransport | None
) -> str:
    async with Client(ClientConfig(server=url), transport=transport) as client:
        ns = await make_namespace(client, f"bench-transport-{time.time_ns() % 10**9}")
        names = iter(range(total))

        async def worker() -> None:
            for i in names:
                await client.create(PODS, pod(f"p-{i:06d}"), ns)

        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(tasks)))
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return f"{total / elapsed:.0f} creates/s, {cpu / total * 1000:.2f} ms client CPU per create"


async def bench(url: str, total: int, tasks: int) -> None:
    old = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
    print(f"httpx default transport: {await creates_per_second(url, total, tasks, old)}", flush=True)
    print(f"AsyncTransport:          {await creates_per_second(url, total, tasks, None)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="pod creates/s through services.client, before and after")
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--server", help="a running apiserver URL instead of starting etcd and an apiserver")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.conftest import start_apiserver, start_etcd_cluster

    if args.server:
        asyncio.run(bench(args.server, args.pods, args.tasks))
        return
    work = Path(tempfile.mkdtemp(prefix="pyk8s-bench-transport-"))
    members = start_etcd_cluster(1, work / "etcd")
    server = start_apiserver([members[0].client_url], work / "apiserver")
    try:
        asyncio.run(bench(server.url, args.pods, args.tasks))
    finally:
        server.stop()
        for member in members:
            member.kill()


if __name__ == "__main__":
    main()
