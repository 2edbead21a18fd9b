"""EtcdStore.watch on the raw gRPC stream: puts and deletes in revision order, and Compacted for a start
revision that etcd has compacted away (failover while watching: test_etcd_failover.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from apiserver.storage.etcd import Compacted, EtcdStore, WatchEvent


@pytest.fixture
async def etcd(etcd_server: str) -> AsyncIterator[EtcdStore]:
    store = EtcdStore([etcd_server])
    try:
        yield store
    finally:
        await store.close()


async def take(it: AsyncIterator[WatchEvent], n: int) -> list[WatchEvent]:
    out = []
    async with asyncio.timeout(10):
        async for ev in it:
            out.append(ev)
            if len(out) == n:
                return out
    return out


async def test_events_in_order_with_deletes(etcd: EtcdStore) -> None:
    prefix = f"/ws-{time.time_ns()}/"
    start = await etcd.current_revision() + 1
    r1 = await etcd.create(prefix + "a", b"1")
    r2 = await etcd.update(prefix + "a", b"2", r1)
    r3 = await etcd.create(prefix + "b", b"x")
    r4 = await etcd.delete(prefix + "a", r2)
    await etcd.put_raw("/elsewhere", b"not under the prefix")
    it = etcd.watch(prefix, start)
    try:
        got = await take(it, 4)
    finally:
        await it.aclose()  # type: ignore[attr-defined]
    assert [(e.key, e.value, e.revision, e.deleted) for e in got] == [
        (prefix + "a", b"1", r1, False), (prefix + "a", b"2", r2, False),
        (prefix + "b", b"x", r3, False), (prefix + "a", b"", r4, True)]


async def test_compacted_start_revision(etcd: EtcdStore) -> None:
    prefix = f"/ws-{time.time_ns()}/"
    old = await etcd.create(prefix + "k", b"1")
    now = await etcd.update(prefix + "k", b"2", old)
    await etcd.compact(now)
    it = etcd.watch(prefix, old)
    try:
        with pytest.raises(Compacted) as info:
            await take(it, 1)
    finally:
        await it.aclose()  # type: ignore[attr-defined]
    assert info.value.compacted_revision == now
