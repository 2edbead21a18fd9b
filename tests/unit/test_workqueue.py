"""The work queue's guarantees (dedup, one worker per key, delays, backoff, shutdown) and metrics."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from prometheus_client import REGISTRY

from services.informers.workqueue import (
    BucketRateLimiter,
    DelayingQueue,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimitingQueue,
    ShutDown,
    WorkQueue,
    default_controller_rate_limiter,
)

_names = itertools.count()


def qname() -> str:
    return f"test-queue-{next(_names)}"


async def test_add_dedups_waiting_items() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "a", "c", "b"):
        q.add(key)
    assert len(q) == 3
    assert [await q.get() for _ in range(3)] == ["a", "b", "c"]


async def test_item_added_while_processing_waits_for_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert await q.get() == "a"
    q.add("a")
    q.add("a")
    assert len(q) == 0, "a key being processed must not be handed to a second worker"
    q.done("a")
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


async def test_workers_never_share_a_key() -> None:
    q: WorkQueue[int] = WorkQueue()
    active: set[int] = set()
    overlaps: list[int] = []
    processed: list[int] = []

    async def worker() -> None:
        while True:
            try:
                key = await q.get()
            except ShutDown:
                return
            if key in active:
                overlaps.append(key)
            active.add(key)
            await asyncio.sleep(0.001)
            processed.append(key)
            active.discard(key)
            q.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    for round_ in range(30):
        for key in range(5):
            q.add(key)
        await asyncio.sleep(0.0005 * (round_ % 3))
    await q.shut_down_with_drain()
    await asyncio.gather(*workers)
    assert not overlaps
    assert set(processed) == set(range(5))


async def test_get_waits_for_add() -> None:
    q: WorkQueue[str] = WorkQueue()
    getter = asyncio.create_task(q.get())
    await asyncio.sleep(0.01)
    assert not getter.done()
    q.add("x")
    assert await asyncio.wait_for(getter, 1) == "x"


async def test_cancelled_getter_does_not_swallow_a_wakeup() -> None:
    q: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("x")
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(second, 1) == "x"


async def test_shutdown_drains_then_raises() -> None:
    q: WorkQueue[str] = WorkQueue()
    waiting = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.shut_down()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(waiting, 1)

    q2: WorkQueue[str] = WorkQueue()
    q2.add("left")
    q2.shut_down()
    q2.add("ignored")
    assert await q2.get() == "left"
    with pytest.raises(ShutDown):
        await q2.get()


async def test_shut_down_with_drain_waits_for_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    await q.get()
    drain = asyncio.create_task(q.shut_down_with_drain())
    await asyncio.sleep(0.02)
    assert not drain.done()
    q.done("a")
    await asyncio.wait_for(drain, 1)


async def test_add_after_delays_and_keeps_earliest_deadline() -> None:
    q: DelayingQueue[str] = DelayingQueue()
    loop = asyncio.get_running_loop()
    start = loop.time()
    q.add_after("slow", 0.3)
    q.add_after("slow", 0.05)
    q.add_after("slow", 10)
    assert len(q) == 0 and q.waiting() == 1
    assert await asyncio.wait_for(q.get(), 1) == "slow"
    elapsed = loop.time() - start
    assert 0.04 <= elapsed < 0.25
    q.done("slow")
    q.add_after("now", 0)
    assert len(q) == 1


async def test_shutdown_cancels_delayed_items() -> None:
    q: DelayingQueue[str] = DelayingQueue()
    q.add_after("later", 0.02)
    q.shut_down()
    await asyncio.sleep(0.05)
    assert len(q) == 0
    with pytest.raises(ShutDown):
        await q.get()


def test_item_exponential_backoff_doubles_to_cap_and_forgets() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [rl.when("a") for _ in range(5)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert rl.when("b") == pytest.approx(0.005)
    assert rl.num_requeues("a") == 5
    for _ in range(100):
        last = rl.when("a")
    assert last == 1000.0
    rl.forget("a")
    assert rl.num_requeues("a") == 0
    assert rl.when("a") == pytest.approx(0.005)


def test_bucket_limiter_allows_burst_then_spaces_items() -> None:
    rl: BucketRateLimiter[int] = BucketRateLimiter(10.0, 100)
    burst = [rl.when(i) for i in range(100)]
    assert max(burst) == 0.0
    after = [rl.when(i) for i in range(100, 103)]
    assert after[0] == pytest.approx(0.1, abs=0.01)
    assert after[2] == pytest.approx(0.3, abs=0.01)


def test_default_controller_limiter_is_max_of_both() -> None:
    rl = default_controller_rate_limiter()
    assert isinstance(rl, MaxOfRateLimiter)
    assert rl.when("k") == pytest.approx(0.005)
    assert rl.when("k") == pytest.approx(0.01)
    for i in range(98):
        rl.when(f"other-{i}")
    # The bucket (burst 100) is now spent: the next wait comes from it, not from the 5 ms item backoff.
    assert rl.when("fresh") == pytest.approx(0.1, abs=0.01)
    assert rl.num_requeues("k") == 2
    rl.forget("k")
    assert rl.num_requeues("k") == 0


async def test_rate_limited_requeue_and_retry_cap() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue(
        rate_limiter=ItemExponentialFailureRateLimiter(0.001, 0.01)
    )
    q.add("k")
    attempts = 0
    while True:
        key = await asyncio.wait_for(q.get(), 1)
        attempts += 1
        requeued = q.requeue(key, max_retries=3)
        q.done(key)
        if not requeued:
            break
    assert attempts == 4, "one try plus three retries"
    assert q.num_requeues("k") == 0, "giving up forgets the key"
    await asyncio.sleep(0.03)
    assert len(q) == 0


async def test_metrics_are_labelled_by_queue_name() -> None:
    name = qname()
    q: RateLimitingQueue[str] = RateLimitingQueue(name=name)

    def sample(metric: str) -> float:
        return REGISTRY.get_sample_value(metric, {"name": name}) or 0.0

    q.add("a")
    q.add("b")
    q.add("a")
    assert sample("workqueue_adds_total") == 2
    assert sample("workqueue_depth") == 2
    key = await q.get()
    assert sample("workqueue_depth") == 1
    assert sample("workqueue_queue_duration_seconds_count") == 1
    q.add_rate_limited(key)
    q.done(key)
    assert sample("workqueue_work_duration_seconds_count") == 1
    assert sample("workqueue_retries_total") == 1
