"""Watch streams served from the watch cache: newline-delimited JSON events."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from prometheus_client import Gauge

from apiserver.registry.store import RESTStore
from apiserver.storage.cache import Change, Watcher
from services.api import errors

Obj = dict[str, Any]

WATCHERS = Gauge("apiserver_registered_watchers", "Open watch streams by resource.", ["group", "resource"])

BOOKMARK_INTERVAL = 5.0
DEFAULT_TIMEOUT = (1800, 3600)
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def _event_bytes(kind: str, obj_bytes: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + obj_bytes + b"}\n"


class WatchStream:
    """One client's watch: the initial state (if asked for), then changes, bookmarks and a timeout."""

    def __init__(
        self,
        store: RESTStore,
        namespace: str | None,
        name: str | None,
        predicate: Callable[[Obj], bool] | None,
        resource_version: str,
        send_initial_events: bool | None,
        allow_bookmarks: bool,
        timeout_seconds: int | None,
        render: Callable[[Obj, bool], bytes] | None,
    ) -> None:
        self.store = store
        self.cache = store.cache
        self.allow_bookmarks = allow_bookmarks
        self.render = render
        if timeout_seconds is None:
            timeout_seconds = random.randint(*DEFAULT_TIMEOUT)
        self.deadline = time.monotonic() + max(timeout_seconds, 0)
        key_prefix = store.ns_prefix(namespace)
        if name:
            key_prefix = store.key(namespace, name)
            base = predicate

            def by_name(obj: Obj) -> bool:
                m = obj.get("metadata", {})
                if m.get("name") != name:
                    return False
                return base(obj) if base else True

            predicate = by_name
        self.watcher = Watcher(key_prefix, predicate)
        self.resource_version = resource_version
        self.send_initial_events = send_initial_events
        self._first_render = True

    async def prepare(self) -> None:
        """Register with the cache; raises 410 (as a StatusError) when the revision is too old."""
        rv_text = self.resource_version
        rv = RESTStore._parse_rv(rv_text) if rv_text else 0
        cache_revision = self.store.ctx.cache
        if rv > 0 and not await cache_revision.wait_for(rv, 3.0):
            raise errors.too_large_resource_version(rv, cache_revision.revision)
        initial = self.send_initial_events
        if initial is None:
            initial = rv_text in ("", "0")
        self.initial_count = 0
        w = self.watcher
        if initial:
            for key in self.cache.sorted_keys():
                if key.startswith(w.key_prefix):
                    entry = self.cache.entries[key]
                    if w.predicate is None or w.predicate(entry.obj):
                        change = Change("ADDED", key, entry.obj, None, entry.revision, entry.raw)
                        w.queue.append(("ADDED", change))
                        self.initial_count += 1
            if self.send_initial_events:
                end = Change("BOOKMARK", "", {}, None, cache_revision.revision)
                w.queue.append(("BOOKMARK-END", end))
        elif rv > 0:
            changes = self.cache.changes_since(rv)
            if changes is None:
                raise errors.gone(f"too old resource version: {rv} ({self.cache.history_start + 1})")
            for change in changes:
                w.offer(change)
        self.cache.watchers.add(w)
        WATCHERS.labels(self.store.res.group, self.store.res.plural).inc()

    def close(self) -> None:
        if self.watcher in self.cache.watchers:
            self.cache.watchers.discard(self.watcher)
            WATCHERS.labels(self.store.res.group, self.store.res.plural).dec()

    def _bookmark(self, revision: int, initial_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(revision)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        obj = {"kind": self.store.res.kind, "apiVersion": self.store.res.api_version, "metadata": meta}
        return _event_bytes("BOOKMARK", orjson.dumps(obj))

    def _encode(self, kind: str, change: Change) -> bytes:
        if self.render is not None:
            body = self.render(self.store.out(change.obj), self._first_render)
            self._first_render = False
            return _event_bytes(kind, body)
        if self.store._converts:
            return _event_bytes(kind, orjson.dumps(self.store.out(change.obj)))
        return _event_bytes(kind, change.encoded())

    async def events(self) -> AsyncIterator[bytes]:
        w = self.watcher
        try:
            while True:
                if w.overflowed:
                    return
                if w.queue:
                    chunk: list[bytes] = []
                    while w.queue and len(chunk) < 500:
                        kind, change = w.queue.popleft()
                        if kind == "BOOKMARK-END":
                            chunk.append(self._bookmark(change.revision, initial_end=True))
                        else:
                            chunk.append(self._encode(kind, change))
                    yield b"".join(chunk)
                    await asyncio.sleep(0)
                    continue
                w.wakeup.clear()
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    return
                try:
                    # A timeout scope, not wait_for: no extra task per wake-up (one per change per watch).
                    async with asyncio.timeout(min(remaining, BOOKMARK_INTERVAL)):
                        await w.wakeup.wait()
                except TimeoutError:
                    if self.allow_bookmarks and not w.queue and time.monotonic() < self.deadline:
                        yield self._bookmark(self.store.ctx.cache.revision)
        finally:
            self.close()


def error_event(err: errors.StatusError) -> bytes:
    return _event_bytes("ERROR", orjson.dumps(err.to_status()))
