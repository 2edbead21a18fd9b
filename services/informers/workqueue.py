"""The work queue controllers drain, with client-go's guarantees: a key waiting in the queue
appears once however often it is added, no two workers hold the same key at once, a key
added while being processed is queued again when its worker is done, and failures come
back later with per-key exponential backoff under an overall rate limit.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from services.client.ratelimit import TokenBucket

T = TypeVar("T", bound=Hashable)

_BUCKETS = tuple(10.0**e for e in range(-8, 2))

DEPTH = Gauge("workqueue_depth", "Current depth of workqueue", ["name"])
ADDS = Counter("workqueue_adds_total", "Total number of adds handled by workqueue", ["name"])
QUEUE_LATENCY = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested.",
    ["name"],
    buckets=_BUCKETS,
)
WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    ["name"],
    buckets=_BUCKETS,
)
RETRIES = Counter("workqueue_retries_total", "Total number of retries handled by workqueue", ["name"])


class ShutDown(Exception):
    """The queue was shut down and has nothing left to hand out."""


class RateLimiter(Generic[T]):
    """Says how long an item must wait before its next try."""

    def when(self, item: T) -> float:
        raise NotImplementedError

    def forget(self, item: T) -> None:
        raise NotImplementedError

    def num_requeues(self, item: T) -> int:
        raise NotImplementedError


class ItemExponentialFailureRateLimiter(RateLimiter[T]):
    """base * 2^failures per item, capped; forget() resets the item."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        if exp > 62:
            return self.max_delay
        return min(self.base_delay * (2**exp), self.max_delay)

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter(RateLimiter[T]):
    """An overall token bucket across all items (qps, burst)."""

    def __init__(self, qps: float = 10.0, burst: int = 100) -> None:
        self._bucket = TokenBucket(qps, burst)

    def when(self, item: T) -> float:
        return self._bucket.reserve()

    def forget(self, item: T) -> None:
        return None

    def num_requeues(self, item: T) -> int:
        return 0


class MaxOfRateLimiter(RateLimiter[T]):
    """The longest wait any of its limiters asks for."""

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        self.limiters = limiters

    def when(self, item: T) -> float:
        return max(limiter.when(item) for limiter in self.limiters)

    def forget(self, item: T) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter() -> MaxOfRateLimiter[Hashable]:
    """client-go's default: per item 5 ms doubling to 1000 s, overall 10 qps with burst 100."""
    return MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter(10.0, 100))


class WorkQueue(Generic[T]):
    """FIFO of distinct items with dirty/processing sets; `get` hands out, `done` releases."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._added_at: dict[T, float] = {}
        self._started_at: dict[T, float] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._drained: asyncio.Event | None = None
        self._shutting_down = False

    def _wake_one(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _wake_all(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    def add(self, item: T) -> None:
        if self._shutting_down or item in self._dirty:
            return
        if self.name:
            ADDS.labels(self.name).inc()
        self._dirty.add(item)
        if item in self._processing:
            return
        self._enqueue(item)

    def _enqueue(self, item: T) -> None:
        self._queue.append(item)
        self._added_at.setdefault(item, time.monotonic())
        if self.name:
            DEPTH.labels(self.name).set(len(self._queue))
        self._wake_one()

    def __len__(self) -> int:
        return len(self._queue)

    async def get(self) -> T:
        """Wait for an item and mark it processing; raises ShutDown once shut down and empty."""
        while not self._queue:
            if self._shutting_down:
                raise ShutDown()
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._wake_one()
                raise
        item = self._queue.popleft()
        now = time.monotonic()
        added = self._added_at.pop(item, now)
        if self.name:
            DEPTH.labels(self.name).set(len(self._queue))
            QUEUE_LATENCY.labels(self.name).observe(now - added)
        self._started_at[item] = now
        self._processing.add(item)
        self._dirty.discard(item)
        return item

    def done(self, item: T) -> None:
        """Release `item`; if it was added meanwhile it goes back in the queue now."""
        self._processing.discard(item)
        started = self._started_at.pop(item, None)
        if self.name and started is not None:
            WORK_DURATION.labels(self.name).observe(time.monotonic() - started)
        if item in self._dirty:
            self._enqueue(item)
        elif not self._processing and self._drained is not None:
            self._drained.set()

    def shut_down(self) -> None:
        """Refuse new items; waiting `get` calls return what is left and then raise ShutDown."""
        self._shutting_down = True
        self._wake_all()

    async def shut_down_with_drain(self) -> None:
        """Shut down and wait until every item handed out has been marked done."""
        self.shut_down()
        if self._processing:
            self._drained = asyncio.Event()
            await self._drained.wait()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def processing(self) -> set[T]:
        return set(self._processing)


class DelayingQueue(WorkQueue[T]):
    """Adds `add_after`: an item waiting for several deadlines keeps only the earliest."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self._waiting: dict[T, tuple[float, asyncio.TimerHandle]] = {}

    def add_after(self, item: T, delay: float) -> None:
        if self._shutting_down:
            return
        if self.name:
            RETRIES.labels(self.name).inc()
        if delay <= 0:
            self.add(item)
            return
        loop = asyncio.get_running_loop()
        ready = loop.time() + delay
        existing = self._waiting.get(item)
        if existing is not None:
            if existing[0] <= ready:
                return
            existing[1].cancel()
        self._waiting[item] = (ready, loop.call_at(ready, self._fire, item))

    def _fire(self, item: T) -> None:
        self._waiting.pop(item, None)
        self.add(item)

    def waiting(self) -> int:
        return len(self._waiting)

    def shut_down(self) -> None:
        for _, handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()
        super().shut_down()


class RateLimitingQueue(DelayingQueue[T]):
    """The controller queue: failures come back after the rate limiter's delay."""

    def __init__(self, name: str | None = None, rate_limiter: RateLimiter[T] | None = None) -> None:
        super().__init__(name)
        self.rate_limiter: RateLimiter[T] = rate_limiter or default_controller_rate_limiter()  # type: ignore[assignment]

    def add_rate_limited(self, item: T) -> None:
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Stop tracking failures for `item` (call after it was processed successfully)."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self.rate_limiter.num_requeues(item)

    def requeue(self, item: T, max_retries: int | None = None) -> bool:
        """Retry `item` with backoff unless it already failed `max_retries` times; then forget it.

        Returns whether it was requeued, so the caller can log that it gave up.
        """
        if max_retries is not None and self.num_requeues(item) >= max_retries:
            self.forget(item)
            return False
        self.add_rate_limited(item)
        return True
