"""One etcd lease shared by many expiring objects, as upstream's storage lease manager does.

A LeaseGrant is a Raft write of its own; granting one per Event would double the cost of every
event. So a lease is granted for `ttl + reuse` seconds and every object written while at least
`ttl` of it remains is attached to it: each object lives between `ttl` and `ttl + reuse` seconds,
and a burst of writes costs a single grant. The reuse window is the smaller of
`reuse_seconds` and `reuse_percent` of the TTL, so short TTLs stay accurate; a lease also stops
being handed out once `max_objects` objects hang on it, so no single expiry deletes too many keys.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

DEFAULT_REUSE_SECONDS = 60
DEFAULT_REUSE_PERCENT = 0.05
DEFAULT_MAX_OBJECTS = 1000


class LeaseManager:
    """Hands out lease IDs for a TTL, granting a new lease only when the current one no longer fits."""

    def __init__(
        self,
        grant: Callable[[int], Awaitable[int]],
        reuse_seconds: int = DEFAULT_REUSE_SECONDS,
        reuse_percent: float = DEFAULT_REUSE_PERCENT,
        max_objects: int = DEFAULT_MAX_OBJECTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`grant(ttl)` asks etcd for a lease of `ttl` seconds and returns its ID."""
        self._grant = grant
        self.reuse_seconds = reuse_seconds
        self.reuse_percent = reuse_percent
        self.max_objects = max_objects
        self._clock = clock
        self._lock = asyncio.Lock()
        self._id = 0
        self._expires = 0.0
        self._attached = 0
        self.grants = 0

    def reuse_window(self, ttl: int) -> int:
        """Extra seconds granted on top of `ttl`: how long one lease keeps being handed out."""
        return min(int(self.reuse_percent * ttl), self.reuse_seconds)

    def _take(self, ttl: int, now: float) -> int:
        """The current lease's ID if an object written now may hang on it, else 0."""
        if (
            self._id
            and self._attached < self.max_objects
            and now + ttl < self._expires <= now + ttl + self.reuse_window(ttl)
        ):
            self._attached += 1
            return self._id
        return 0

    async def lease(self, ttl: int) -> int:
        """A lease ID that keeps an object written now for at least `ttl` seconds."""
        lease_id = self._take(ttl, self._clock())
        if lease_id:
            return lease_id
        async with self._lock:
            # Writers that queued behind a grant take the lease it brought.
            now = self._clock()
            lease_id = self._take(ttl, now)
            if lease_id:
                return lease_id
            granted = ttl + self.reuse_window(ttl)
            lease_id = await self._grant(granted)
            self.grants += 1
            # Counted from before the request, so the lease is never believed to live longer than it does.
            self._id, self._expires, self._attached = lease_id, now + granted, 1
            return lease_id

    def forget(self, lease_id: int) -> None:
        """Stop handing out a lease etcd no longer has (revoked, or expired early)."""
        if self._id == lease_id:
            self._id = 0
