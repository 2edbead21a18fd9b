"""core/v1 Events as upstream's record package writes them: fire-and-forget from controllers,
written in the background, with repeats of an identical event folded into one object whose
count and lastTimestamp grow (the EventCorrelator's aggregation of identical events).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import OrderedDict
from typing import Any

import httpx
import structlog

from controller_manager.resources import EVENTS
from services.api.meta import now_rfc3339
from services.client import ApiError, Client, NotFound

log = structlog.get_logger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

#: Upstream drops events rather than block a controller when its broadcaster falls behind.
QUEUE_LIMIT = 1000
CACHE_SIZE = 4096
#: upstream's EventSourceObjectSpamFilter: 25 events per source and object, then one per 5 minutes
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0

Key = tuple[str, ...]


def involved_object(obj: dict[str, Any]) -> dict[str, Any]:
    """The ObjectReference an event points at."""
    meta = obj.get("metadata") or {}
    ref = {
        "kind": obj.get("kind", ""),
        "apiVersion": obj.get("apiVersion", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return {k: v for k, v in ref.items() if v}


def spam_key(component: str, host: str, ref: dict[str, Any]) -> Key:
    """Events about one object from one source share a budget, whatever their reason."""
    return (
        component, host, ref.get("kind", ""), ref.get("namespace", ""), ref.get("name", ""), ref.get("uid", ""),
        ref.get("apiVersion", ""),
    )


class SpamFilter:
    """A token bucket per source and object, so a 10,000-pod scale-up writes 25 events, not 10,000."""

    def __init__(self, burst: int = SPAM_BURST, refill_seconds: float = SPAM_REFILL_SECONDS) -> None:
        self.burst = burst
        self.refill_seconds = refill_seconds
        self._buckets: OrderedDict[Key, tuple[float, float]] = OrderedDict()

    def allow(self, key: Key, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        tokens, last = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) / self.refill_seconds)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > CACHE_SIZE:
            self._buckets.popitem(last=False)
        return allowed


def correlation_key(event: dict[str, Any]) -> Key:
    """Events equal in all of these are the same event seen again."""
    ref = event["involvedObject"]
    return (
        event["source"].get("component", ""), event["source"].get("host", ""),
        ref.get("kind", ""), ref.get("namespace", ""), ref.get("name", ""), ref.get("uid", ""),
        ref.get("apiVersion", ""), event["type"], event["reason"], event["message"],
    )


class EventRecorder:
    """What a controller holds: `event(obj, type, reason, message)` never blocks and never fails."""

    def __init__(self, broadcaster: EventBroadcaster, component: str) -> None:
        self.broadcaster = broadcaster
        self.component = component

    def event(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Build and queue the event, unless the spam filter would drop it anyway (most of the events
        of a large scale-up, which would otherwise cost a timestamp and a dict each)."""
        ref = involved_object(obj)
        host = self.broadcaster.host
        if not self.broadcaster.allow(spam_key(self.component, host, ref)):
            return
        now = now_rfc3339()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{ref.get('name', '')}.{time.time_ns():x}",
                "namespace": ref.get("namespace") or "default",
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "source": {"component": self.component, "host": host},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": event_type,
        }
        self.broadcaster.submit(event)

    def normal(self, obj: dict[str, Any], reason: str, message: str) -> None:
        self.event(obj, NORMAL, reason, message)

    def warning(self, obj: dict[str, Any], reason: str, message: str) -> None:
        self.event(obj, WARNING, reason, message)


class EventBroadcaster:
    """Writes submitted events through the API with a few concurrent writers."""

    def __init__(self, client: Client, *, writers: int = 4, host: str | None = None) -> None:
        self.client = client
        self.host = host or socket.gethostname()
        self.writers = writers
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_LIMIT)
        #: correlation key -> (namespace, event name, count) of the event object already written.
        self._seen: OrderedDict[Key, tuple[str, str, int]] = OrderedDict()
        #: per-key lock and how many writers hold or wait for it, so identical events write in turn.
        self._locks: dict[Key, tuple[asyncio.Lock, int]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.spam = SpamFilter()
        self.dropped = 0

    def recorder(self, component: str) -> EventRecorder:
        return EventRecorder(self, component)

    def allow(self, key: Key) -> bool:
        """The spam filter's verdict on one more event under `key`; a refusal counts as dropped."""
        if self.spam.allow(key):
            return True
        self.dropped += 1
        return False

    def submit(self, event: dict[str, Any]) -> None:
        """Queue an event the spam filter has already let through."""
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._write_loop()) for _ in range(self.writers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def flush(self) -> None:
        """Wait until everything submitted so far has been written (tests and shutdown)."""
        await self._queue.join()

    async def _write_loop(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self.write(event)
            except asyncio.CancelledError:
                raise
            except (ApiError, httpx.HTTPError) as exc:
                log.info("could not write event", reason=event["reason"], error=str(exc))
            except Exception:
                log.exception("event write failed")
            finally:
                self._queue.task_done()

    async def write(self, event: dict[str, Any]) -> None:
        """Create the event, or bump count/lastTimestamp of the identical one written before."""
        key = correlation_key(event)
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        async with lock:
            try:
                seen = self._seen.get(key)
                if seen is not None:
                    namespace, name, count = seen
                    patch = {"count": count + 1, "lastTimestamp": event["lastTimestamp"]}
                    try:
                        await self.client.patch(EVENTS, name, patch, namespace)
                        self._remember(key, namespace, name, count + 1)
                        return
                    except NotFound:
                        self._seen.pop(key, None)
                created = await self.client.create(EVENTS, event, event["metadata"]["namespace"])
                meta = created.get("metadata") or event["metadata"]
                self._remember(key, meta["namespace"], meta["name"], int(created.get("count") or 1))
            finally:
                lock, users = self._locks[key]
                if users <= 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def _remember(self, key: Key, namespace: str, name: str, count: int) -> None:
        self._seen[key] = (namespace, name, count)
        self._seen.move_to_end(key)
        while len(self._seen) > CACHE_SIZE:
            self._seen.popitem(last=False)
