"""Events expire like upstream's: every write of an Event (either API) hangs it on an etcd lease of
--event-ttl, etcd deletes it when the lease runs out, and clients see that as 404 and DELETED.
Other resources never get a lease; a burst of events shares one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import aetcd
import httpx
import orjson
import pytest
from aetcd import rpc

from services.api.meta import now_micro
from tests.conftest import REPO, APIServerProcess, start_apiserver

TTL = 3
SHORT_PREFIX = "/event-ttl-short"
LONG_PREFIX = "/event-ttl-long"


@pytest.fixture(scope="module")
def short_ttl(etcd_server: str, workdir: Path) -> Iterator[APIServerProcess]:
    server = start_apiserver([etcd_server], workdir / "event-ttl-short", f"--event-ttl={TTL}s",
                             "--etcd-prefix", SHORT_PREFIX)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def default_ttl(etcd_server: str, workdir: Path) -> Iterator[APIServerProcess]:
    """The default --event-ttl (1h): leases are reused for 60s."""
    server = start_apiserver([etcd_server], workdir / "event-ttl-long", "--etcd-prefix", LONG_PREFIX)
    yield server
    server.stop()


@pytest.fixture
async def etcd(etcd_server: str) -> AsyncIterator[aetcd.Client]:
    url = urlparse(etcd_server)
    client = aetcd.Client(host=url.hostname or "127.0.0.1", port=url.port or 2379)
    await client.connect()
    try:
        yield client
    finally:
        await client.close()


async def leases(etcd: aetcd.Client, prefix: str) -> dict[str, int]:
    """The lease each key under `prefix` hangs on (0: none), straight from etcd."""
    begin = prefix.encode()
    end = begin[:-1] + b"0"  # prefix ends in "/"; "0" is the next byte
    resp = await etcd.kvstub.Range(rpc.RangeRequest(key=begin, range_end=end))
    return {kv.key.decode().rsplit("/", 1)[1]: kv.lease for kv in resp.kvs}


async def namespace(client: httpx.AsyncClient) -> str:
    name = f"ttl-{uuid.uuid4().hex[:8]}"
    r = await client.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


def core_event(name: str, ns: str, message: str = "hello") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": ns},
            "type": "Normal", "reason": "Tested", "message": message, "source": {"component": "ttl-test"},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": "p"}}


def new_event(name: str, ns: str) -> dict[str, Any]:
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name, "namespace": ns},
            "eventTime": now_micro(), "reportingController": "pyk8s.io/ttl-test", "reportingInstance": "t1",
            "action": "Testing", "reason": "Tested", "type": "Normal", "note": "new style",
            "regarding": {"kind": "Pod", "namespace": ns, "name": "p", "apiVersion": "v1"}}


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


class Watch:
    """A watch on one path, collecting its events in the background."""

    def __init__(self, client: httpx.AsyncClient, path: str) -> None:
        self.client, self.path = client, path
        self.events: list[dict[str, Any]] = []
        self._opened = asyncio.Event()
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Watch:
        listed = await self.client.get(self.path)
        assert listed.status_code == 200, listed.text
        rv = listed.json()["metadata"]["resourceVersion"]
        self._task = asyncio.create_task(self._run(rv))
        await asyncio.wait_for(self._opened.wait(), 10)
        return self

    async def _run(self, rv: str) -> None:
        params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "60"}
        async with self.client.stream("GET", self.path, params=params) as resp:
            assert resp.status_code == 200
            self._opened.set()
            async for line in resp.aiter_lines():
                if line.strip():
                    self.events.append(orjson.loads(line))
                    self._arrived.set()

    def seen(self, kind: str) -> set[str]:
        return {e["object"]["metadata"]["name"] for e in self.events if e["type"] == kind}

    async def wait_deleted(self, names: set[str], within: float) -> None:
        """Wait until DELETED arrived for all `names`; give up quietly after `within` seconds."""
        try:
            async with asyncio.timeout(within):
                while not names <= self.seen("DELETED"):
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            pass

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def wait_gone(client: httpx.AsyncClient, path: str, within: float) -> float:
    """Poll GET until 404; the time it took."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        r = await client.get(path)
        if r.status_code == 404:
            return time.monotonic() - start
        assert r.status_code == 200, r.text
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} still there after {within}s")


async def test_events_of_both_apis_expire_and_watches_see_it(short_ttl: APIServerProcess, etcd: aetcd.Client) -> None:
    async with httpx.AsyncClient(base_url=short_ttl.url, timeout=20) as client:
        ns = await namespace(client)
        core_path = f"/api/v1/namespaces/{ns}/events"
        new_path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
        async with Watch(client, core_path) as core_watch, Watch(client, new_path) as new_watch:
            created = time.monotonic()
            r = await client.post(core_path, json=core_event("core-1", ns))
            assert r.status_code == 201, r.text
            r = await client.post(new_path, json=new_event("new-1", ns))
            assert r.status_code == 201, r.text
            r = await client.post(f"/api/v1/namespaces/{ns}/pods", json=pod("p"))
            assert r.status_code == 201, r.text
            r = await client.post(f"/api/v1/namespaces/{ns}/configmaps", json={"metadata": {"name": "cm"}})
            assert r.status_code == 201, r.text

            event_leases = await leases(etcd, f"{SHORT_PREFIX}/events/{ns}/")
            assert set(event_leases) == {"core-1", "new-1"} and all(event_leases.values()), event_leases
            for lease_id in set(event_leases.values()):
                info = await etcd.get_lease_info(lease_id, keys=False)
                assert info.grantedTTL == TTL, info
            assert await leases(etcd, f"{SHORT_PREFIX}/pods/{ns}/") == {"p": 0}
            assert await leases(etcd, f"{SHORT_PREFIX}/configmaps/{ns}/") == {"cm": 0}

            # Both read paths agree the events are there until the TTL has passed.
            assert (await client.get(f"{core_path}/new-1")).status_code == 200
            assert (await client.get(f"{new_path}/core-1")).status_code == 200
            await wait_gone(client, f"{core_path}/core-1", TTL + 5)
            await wait_gone(client, f"{new_path}/new-1", TTL + 5)
            assert time.monotonic() - created >= TTL - 0.5
            await core_watch.wait_deleted({"core-1", "new-1"}, 5)
            await new_watch.wait_deleted({"core-1", "new-1"}, 5)
            assert core_watch.seen("DELETED") == {"core-1", "new-1"}, core_watch.events
            assert new_watch.seen("DELETED") == {"core-1", "new-1"}, new_watch.events

        listed = await client.get(core_path)
        assert listed.json()["items"] == []
        listed = await client.get(core_path, params={"resourceVersion": "0"})
        assert listed.json()["items"] == []
        r = await client.get(f"/api/v1/namespaces/{ns}/pods/p")
        assert r.status_code == 200 and "deletionTimestamp" not in r.json()["metadata"]
        assert (await client.get(f"/api/v1/namespaces/{ns}/configmaps/cm")).status_code == 200


async def test_update_gives_an_event_a_new_lease(short_ttl: APIServerProcess, etcd: aetcd.Client) -> None:
    async with httpx.AsyncClient(base_url=short_ttl.url, timeout=20) as client:
        ns = await namespace(client)
        path = f"/api/v1/namespaces/{ns}/events"
        for name in ("kept", "control"):
            r = await client.post(path, json=core_event(name, ns))
            assert r.status_code == 201, r.text
        first = await leases(etcd, f"{SHORT_PREFIX}/events/{ns}/")
        await asyncio.sleep(TTL / 2)
        # A PUT and a PATCH both re-attach the lease, as upstream's TTLFunc does for updates.
        current = (await client.get(f"{path}/kept")).json()
        current["count"] = 2
        r = await client.put(f"{path}/kept", json=current)
        assert r.status_code == 200, r.text
        after_put = (await leases(etcd, f"{SHORT_PREFIX}/events/{ns}/"))["kept"]
        assert after_put and after_put != first["kept"]
        r = await client.patch(f"{path}/kept", json={"count": 3},
                               headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
        after_patch = (await leases(etcd, f"{SHORT_PREFIX}/events/{ns}/"))["kept"]
        assert after_patch and after_patch != after_put
        await wait_gone(client, f"{path}/control", TTL + 5)
        # The control event, written at the same moment, is gone; the updated one lives on.
        r = await client.get(f"{path}/kept")
        assert r.status_code == 200 and r.json()["count"] == 3
        await wait_gone(client, f"{path}/kept", TTL + 5)


async def test_burst_of_events_shares_one_lease(default_ttl: APIServerProcess, etcd: aetcd.Client) -> None:
    async with httpx.AsyncClient(base_url=default_ttl.url, timeout=30) as client:
        ns = await namespace(client)
        responses = await asyncio.gather(*(
            client.post(f"/api/v1/namespaces/{ns}/events", json=core_event(f"burst-{i}", ns)) for i in range(50)
        ))
        assert [r.status_code for r in responses] == [201] * 50
        stored = await leases(etcd, f"{LONG_PREFIX}/events/{ns}/")
        assert len(stored) == 50 and all(stored.values())
        distinct = set(stored.values())
        assert len(distinct) <= 2, distinct
        for lease_id in distinct:
            info = await etcd.get_lease_info(lease_id, keys=False)
            # An hour plus the 60s reuse window.
            assert info.grantedTTL == 3660, info
            assert info.TTL > 3600


async def test_revoked_lease_is_replaced(default_ttl: APIServerProcess, etcd: aetcd.Client) -> None:
    async with httpx.AsyncClient(base_url=default_ttl.url, timeout=20) as client:
        ns = await namespace(client)
        path = f"/api/v1/namespaces/{ns}/events"
        async with Watch(client, path) as watch:
            r = await client.post(path, json=core_event("before", ns))
            assert r.status_code == 201, r.text
            lease_id = (await leases(etcd, f"{LONG_PREFIX}/events/{ns}/"))["before"]
            await etcd.revoke_lease(lease_id)
            await watch.wait_deleted({"before"}, 5)
            assert watch.seen("DELETED") == {"before"}
            assert (await client.get(f"{path}/before")).status_code == 404
            # The apiserver still holds the revoked lease as current: the write must get a new one.
            r = await client.post(path, json=core_event("after", ns))
            assert r.status_code == 201, r.text
            replaced = (await leases(etcd, f"{LONG_PREFIX}/events/{ns}/"))["after"]
            assert replaced and replaced != lease_id


@pytest.mark.parametrize("value", ["forever", "30", "1x", "500ms", ""])
async def test_bad_event_ttl_is_a_usage_error(value: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "apiserver", f"--event-ttl={value}", "--etcd-servers", "http://127.0.0.1:1",
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2, err.decode()
    assert "argument --event-ttl" in err.decode() and "usage:" in err.decode()
