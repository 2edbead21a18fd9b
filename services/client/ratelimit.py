"""A token bucket with golang.org/x/time/rate's reservation semantics, shared by the REST
client's QPS limit and the work queue's overall rate limiter.
"""

from __future__ import annotations

import asyncio
import time


class TokenBucket:
    """`qps` tokens a second, at most `burst` saved up; qps <= 0 means no limit."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(burst, 1)
        self._tokens = float(self.burst)
        self._last = time.monotonic()

    @property
    def unlimited(self) -> bool:
        return self.qps <= 0

    def reserve(self) -> float:
        """Take a token now, possibly going into debt; return how long to wait before using it."""
        if self.unlimited:
            return 0.0
        now = time.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
