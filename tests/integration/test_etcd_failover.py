"""The apiserver survives losing the etcd member it talks to, without losing or repeating anything.

A three-member etcd cluster; one apiserver given all three endpoints, the member it uses
(listed first) being the Raft leader, so killing it forces both an endpoint failover in
the apiserver and a leader election in etcd. Writers and watchers run across the kill.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import APIServerProcess, Etcd, start_apiserver, start_etcd_cluster, start_member, wait_etcd

NAMESPACE = "failover"
PREFIX = f"/registry/configmaps/{NAMESPACE}/"
WRITE_BEFORE_KILL = 2.0
WRITE_AFTER_KILL = 6.0


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _member_status(url: str) -> dict[str, Any]:
    return httpx.post(f"{url}/v3/maintenance/status", json={}, timeout=3).json()


def _leader_first(members: list[Etcd]) -> list[Etcd]:
    """The members with the current Raft leader first (waits for a leader, bounded)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ids = {}
        leader = None
        for m in members:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                status = _member_status(m.client_url)
                ids[status["header"]["member_id"]] = m
                leader = status.get("leader") or leader
        if leader in ids and len(ids) == len(members):
            first = ids[leader]
            return [first, *(m for m in members if m is not first)]
        time.sleep(0.1)
    raise RuntimeError("the etcd cluster elected no leader")


def _local_count(url: str, prefix: str) -> int:
    """Keys under `prefix` as this member alone has them (a serializable read)."""
    end = bytearray(prefix.encode())
    end[-1] += 1
    body = {"key": _b64(prefix.encode()), "range_end": _b64(bytes(end)), "count_only": True, "serializable": True}
    return int(httpx.post(f"{url}/v3/kv/range", json=body, timeout=3).json().get("count", 0))


@pytest.fixture(scope="module")
def cluster(workdir: Path) -> Iterator[tuple[list[Etcd], APIServerProcess]]:
    members = _leader_first(start_etcd_cluster(3, workdir / "failover-etcd"))
    server = None
    try:
        server = start_apiserver([m.client_url for m in members], workdir / "failover-apiserver")
        yield members, server
    finally:
        if server is not None:
            server.stop()
        for m in members:
            m.kill()


def _is_status(r: httpx.Response) -> bool:
    try:
        body = r.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("kind") == "Status" and body.get("code") == r.status_code


@dataclass
class Writer:
    """Creates ConfigMaps one after another and records what the apiserver answered."""

    client: httpx.AsyncClient
    prefix: str
    generate: bool = False
    acked: dict[str, int] = field(default_factory=dict)
    ambiguous: list[str] = field(default_factory=list)
    rejected: list[tuple[str, int, str]] = field(default_factory=list)
    not_status: list[tuple[str, int, str]] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        seq = 0
        while not stop.is_set():
            tag = f"{self.prefix}-{seq:05d}"
            seq += 1
            meta: dict[str, Any] = {"annotations": {"test/tag": tag}}
            if self.generate:
                meta["generateName"] = f"{self.prefix}-"
            else:
                meta["name"] = tag
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"tag": tag}}
            try:
                r = await self.client.post(f"/api/v1/namespaces/{NAMESPACE}/configmaps", json=body)
            except httpx.HTTPError:
                self.ambiguous.append(tag)
                await asyncio.sleep(0.05)
                continue
            if r.status_code == 201:
                self.acked[tag] = int(r.json()["metadata"]["resourceVersion"])
            elif r.status_code >= 500 or r.status_code == 429:
                self.ambiguous.append(tag)
                if not _is_status(r):
                    self.not_status.append((tag, r.status_code, r.text[:200]))
                await asyncio.sleep(0.05)
            else:
                self.rejected.append((tag, r.status_code, r.text[:300]))


@dataclass
class Watcher:
    """One HTTP watch from a known resourceVersion; resumes from the last event like a reflector."""

    client: httpx.AsyncClient
    resource_version: str
    events: list[tuple[str, str, int]] = field(default_factory=list)
    restarts: int = 0
    errors: list[str] = field(default_factory=list)
    progress: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def last(self) -> int:
        return self.events[-1][2] if self.events else int(self.resource_version)

    async def run(self) -> None:
        try:
            await self._follow()
        finally:
            self.progress.set()

    async def _follow(self) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
        while True:
            params = {"watch": "1", "resourceVersion": str(self.last), "timeoutSeconds": "300"}
            try:
                async with self.client.stream("GET", path, params=params, timeout=httpx.Timeout(10, read=None)) as r:
                    if r.status_code != 200:
                        self.errors.append(f"watch answered {r.status_code}: {(await r.aread())[:300]!r}")
                        return
                    async for line in r.aiter_lines():
                        if not line.strip():
                            continue
                        ev = orjson.loads(line)
                        if ev["type"] == "ERROR":
                            self.errors.append(f"ERROR event: {ev['object']}")
                            return
                        if ev["type"] == "BOOKMARK":
                            continue
                        meta = ev["object"]["metadata"]
                        self.events.append((ev["type"], meta["name"], int(meta["resourceVersion"])))
                        self.progress.set()
            except httpx.HTTPError as exc:
                self.errors.append(f"watch stream broke: {exc!r}")
            self.restarts += 1
            self.progress.set()
            await asyncio.sleep(0.2)


async def _caught_up(watchers: list[Watcher], revision: int, within: float) -> None:
    """Wait (bounded) until every watcher that is still healthy has seen events up to `revision`."""
    deadline = time.monotonic() + within
    for w in watchers:
        while w.last < revision and not w.errors and time.monotonic() < deadline:
            w.progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(w.progress.wait(), max(deadline - time.monotonic(), 0.01))


async def _list_configmaps(client: httpx.AsyncClient) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    last = ""
    while time.monotonic() < deadline:
        try:
            r = await client.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps")
            if r.status_code == 200:
                return r.json()
            last = f"{r.status_code} {r.text[:300]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        await asyncio.sleep(0.2)
    raise AssertionError(f"could not list ConfigMaps after the failover: {last}")


async def test_kill_the_etcd_member_in_use(cluster: tuple[list[Etcd], APIServerProcess]) -> None:
    members, server = cluster
    first = members[0]
    async with httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(8)) as client:
        r = await client.post("/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}})
        assert r.status_code == 201, r.text
        start_rv = (await client.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps")).json()["metadata"][
            "resourceVersion"]

        watchers = [Watcher(client, start_rv) for _ in range(3)]
        watch_tasks = [asyncio.create_task(w.run()) for w in watchers]
        writers = [Writer(client, f"w{i}") for i in range(3)] + [Writer(client, "gen", generate=True)]
        stop = asyncio.Event()
        write_tasks = [asyncio.create_task(w.run(stop)) for w in writers]
        try:
            await asyncio.sleep(WRITE_BEFORE_KILL)
            acked_before_kill = sum(len(w.acked) for w in writers)
            await asyncio.to_thread(first.kill)
            killed_at = time.monotonic()
            await asyncio.sleep(WRITE_AFTER_KILL)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*write_tasks), 30)
            acked_after_kill = sum(len(w.acked) for w in writers) - acked_before_kill
            listed = await _list_configmaps(client)
            final_rv = int(listed["metadata"]["resourceVersion"])
            await _caught_up(watchers, final_rv, 15)
        finally:
            stop.set()
            for t in [*watch_tasks, *write_tasks]:
                t.cancel()
            await asyncio.gather(*watch_tasks, *write_tasks, return_exceptions=True)

        logs = server.log_tail(40)
        assert acked_before_kill > 0, f"no write succeeded before the kill\n{logs}"
        assert acked_after_kill > 0, f"no write succeeded in {WRITE_AFTER_KILL}s after the kill\n{logs}"

        items = listed["items"]
        tags = [it["metadata"]["annotations"]["test/tag"] for it in items]
        names = [it["metadata"]["name"] for it in items]
        assert len(tags) == len(set(tags)), f"a write is stored twice: {sorted({t for t in tags if tags.count(t) > 1})}"
        assert len(names) == len(set(names))
        stored = {it["metadata"]["annotations"]["test/tag"]: int(it["metadata"]["resourceVersion"]) for it in items}
        for w in writers:
            missing = sorted(set(w.acked) - set(stored))
            assert not missing, f"acknowledged writes are not stored: {missing}\n{logs}"
            for tag, rv in w.acked.items():
                assert stored[tag] == rv, f"{tag}: acknowledged at rv {rv}, stored at rv {stored[tag]}"
            phantom = set(stored) & {t for t in stored if t.startswith(f"{w.prefix}-")} - set(w.acked)
            sent = set(w.ambiguous) | {tag for tag, _, _ in w.rejected}
            assert phantom <= sent, f"stored writes nobody sent: {sorted(phantom - sent)}"

        by_name = {it["metadata"]["name"]: int(it["metadata"]["resourceVersion"]) for it in items}
        for i, w in enumerate(watchers):
            assert not w.errors, f"watcher {i}: {w.errors}\n{logs}"
            kinds = {kind for kind, _, _ in w.events}
            assert kinds <= {"ADDED"}, f"watcher {i} saw unexpected event types {kinds}"
            seen = [name for _, name, _ in w.events]
            dupes = sorted({n for n in seen if seen.count(n) > 1})
            assert not dupes, f"watcher {i} saw ADDED twice for {dupes[:10]}"
            revisions = [rv for _, _, rv in w.events]
            assert revisions == sorted(revisions), f"watcher {i} saw events out of resourceVersion order"
            missed = sorted(set(by_name) - set(seen), key=by_name.__getitem__)
            assert not missed, (f"watcher {i} missed ADDED for {len(missed)} stored objects, first "
                                f"{[(n, by_name[n]) for n in missed[:5]]}\n{logs}")
            extra = sorted(set(seen) - set(by_name))
            assert not extra, f"watcher {i} saw objects that are not stored: {extra[:10]}"
            assert {n: rv for _, n, rv in w.events} == by_name
        # A fresh name sent once must not come back AlreadyExists; failures must still be Status objects.
        for w in writers:
            assert not w.rejected, f"writes rejected outright: {w.rejected[:5]}\n{logs}"
            assert not w.not_status, f"failed writes answered without a Status body: {w.not_status[:5]}\n{logs}"

    # The killed member rejoins with its old data and catches up: the cluster is whole again.
    initial = ",".join(f"{m.name}={m.peer_url}" for m in members)
    await asyncio.to_thread(start_member, first, initial, "existing")
    await asyncio.to_thread(wait_etcd, first.client_url, 30)
    expected = await asyncio.to_thread(_local_count, members[1].client_url, PREFIX)
    assert expected == len(items)
    deadline = time.monotonic() + 20
    count = -1
    while time.monotonic() < deadline:
        count = await asyncio.to_thread(_local_count, first.client_url, PREFIX)
        if count == expected:
            break
        await asyncio.sleep(0.2)
    assert count == expected, f"the restarted member holds {count} of {expected} keys"
    assert time.monotonic() - killed_at < 120
