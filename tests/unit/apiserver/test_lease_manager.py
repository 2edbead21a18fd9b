"""The lease manager shares one etcd lease between the objects written within its reuse window."""

from __future__ import annotations

import asyncio

import pytest

from apiserver.storage.lease import LeaseManager


class Grants:
    """Records each grant's TTL and answers with increasing IDs, optionally after a pause."""

    def __init__(self, pause: float = 0.0) -> None:
        self.ttls: list[int] = []
        self.pause = pause

    async def __call__(self, ttl: int) -> int:
        self.ttls.append(ttl)
        if self.pause:
            await asyncio.sleep(self.pause)
        return len(self.ttls)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_one_lease_for_many_objects_granted_with_the_reuse_window_on_top() -> None:
    grants, clock = Grants(), Clock()
    leases = LeaseManager(grants, clock=clock)
    ids = []
    for _ in range(50):
        ids.append(await leases.lease(3600))
        clock.now += 0.5
    assert set(ids) == {1}
    # 5% of an hour is 180s, capped at the 60s reuse duration.
    assert grants.ttls == [3660]


async def test_new_lease_once_the_remaining_time_falls_below_the_ttl() -> None:
    grants, clock = Grants(), Clock()
    leases = LeaseManager(grants, clock=clock)
    assert await leases.lease(3600) == 1
    clock.now += 59.9
    assert await leases.lease(3600) == 1
    clock.now += 0.2
    assert await leases.lease(3600) == 2
    assert grants.ttls == [3660, 3660]


async def test_reuse_window_is_a_share_of_short_ttls() -> None:
    leases = LeaseManager(Grants(), reuse_seconds=60)
    assert leases.reuse_window(3600) == 60
    assert leases.reuse_window(100) == 5
    # Below 20s the window is under a second: every object gets its own lease, so its TTL stays exact.
    assert leases.reuse_window(2) == 0
    grants, clock = Grants(), Clock()
    short = LeaseManager(grants, clock=clock)
    assert [await short.lease(2) for _ in range(3)] == [1, 2, 3]
    assert grants.ttls == [2, 2, 2]


async def test_new_lease_after_max_objects() -> None:
    grants, clock = Grants(), Clock()
    leases = LeaseManager(grants, max_objects=3, clock=clock)
    assert [await leases.lease(3600) for _ in range(7)] == [1, 1, 1, 2, 2, 2, 3]


async def test_a_burst_waits_for_one_grant() -> None:
    grants = Grants(pause=0.05)
    leases = LeaseManager(grants)
    ids = await asyncio.gather(*(leases.lease(3600) for _ in range(100)))
    assert set(ids) == {1} and len(grants.ttls) == 1


async def test_forgotten_lease_is_replaced() -> None:
    grants, clock = Grants(), Clock()
    leases = LeaseManager(grants, clock=clock)
    assert await leases.lease(3600) == 1
    leases.forget(7)
    assert await leases.lease(3600) == 1
    leases.forget(1)
    assert await leases.lease(3600) == 2


async def test_failed_grant_is_retried_by_the_next_writer() -> None:
    calls = 0

    async def flaky(ttl: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("etcd down")
        return 42

    leases = LeaseManager(flaky)
    with pytest.raises(ConnectionError):
        await leases.lease(60)
    assert await leases.lease(60) == 42
