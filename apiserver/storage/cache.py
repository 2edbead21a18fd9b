"""The watch cache: every resource held in memory and kept current by one etcd watch.

One ordered stream of changes under the storage root feeds every resource, so the
cache always knows the last etcd revision it has applied. Lists, `resourceVersion=0`
reads and every client watch are served from here; etcd sees one watch per
apiserver instead of one per client.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog
from prometheus_client import Gauge

from apiserver.storage.etcd import Compacted, EtcdStore, WatchEvent

log = structlog.get_logger("apiserver.cache")

Obj = dict[str, Any]

CACHE_REVISION = Gauge("apiserver_watch_cache_revision", "Last etcd revision applied to the watch cache.")
CACHE_OBJECTS = Gauge("apiserver_watch_cache_objects", "Objects held in the watch cache.", ["prefix"])

HISTORY_LENGTH = 20000
WATCHER_BACKLOG_LIMIT = 200000


def decode(value: bytes, revision: int) -> Obj:
    """A stored object with its resourceVersion, which etcd holds as the key's revision."""
    obj = orjson.loads(value)
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    meta["resourceVersion"] = str(revision)
    return obj


@dataclass(slots=True)
class Entry:
    obj: Obj
    revision: int
    raw: bytes | None = None

    def encoded(self) -> bytes:
        if self.raw is None:
            self.raw = orjson.dumps(self.obj)
        return self.raw


@dataclass(slots=True)
class Change:
    """A change of one object, as the watch API will show it (before filtering)."""

    type: str
    key: str
    obj: Obj
    prev: Obj | None
    revision: int
    raw: bytes | None = None

    def encoded(self) -> bytes:
        if self.raw is None:
            self.raw = orjson.dumps(self.obj)
        return self.raw


@dataclass(eq=False)
class Watcher:
    """One client watch: a predicate and a queue of changes that passed it."""

    key_prefix: str
    predicate: Callable[[Obj], bool] | None
    queue: deque[tuple[str, Change]] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False

    def offer(self, change: Change) -> None:
        if not change.key.startswith(self.key_prefix):
            return
        kind = change.type
        if self.predicate is not None:
            now = kind != "DELETED" and self.predicate(change.obj)
            before = change.prev is not None and self.predicate(change.prev)
            if kind == "DELETED":
                if not before:
                    return
            elif now and not before:
                kind = "ADDED"
            elif before and not now:
                kind = "DELETED"
            elif not now:
                return
        self.queue.append((kind, change))
        if len(self.queue) > WATCHER_BACKLOG_LIMIT:
            self.overflowed = True
        self.wakeup.set()


class ResourceCache:
    """The objects under one key prefix, their recent changes, and their watchers."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.entries: dict[str, Entry] = {}
        self.history: deque[Change] = deque()
        self.history_start = 0
        self.watchers: set[Watcher] = set()
        self._sorted: list[str] | None = None
        self.ready = False
        self._pending: list[WatchEvent] = []

    def load(self, kvs: list[Any], revision: int) -> None:
        for kv in kvs:
            try:
                self.entries[kv.key] = Entry(decode(kv.value, kv.mod_revision), kv.mod_revision)
            except (orjson.JSONDecodeError, TypeError, AttributeError):
                log.warning("skipping undecodable object", key=kv.key)
        self.history_start = revision
        self._sorted = None
        self.ready = True
        pending, self._pending = self._pending, []
        for ev in pending:
            if ev.revision > revision:
                self.apply(ev)
        CACHE_OBJECTS.labels(self.prefix).set(len(self.entries))

    def apply(self, ev: WatchEvent) -> None:
        if not self.ready:
            self._pending.append(ev)
            return
        prev_entry = self.entries.get(ev.key)
        prev = prev_entry.obj if prev_entry else None
        if ev.deleted:
            if prev_entry is None:
                return
            del self.entries[ev.key]
            self._sorted = None
            obj = dict(prev_entry.obj)
            obj["metadata"] = dict(obj.get("metadata", {}), resourceVersion=str(ev.revision))
            change = Change("DELETED", ev.key, obj, prev, ev.revision)
        else:
            try:
                obj = decode(ev.value, ev.revision)
            except (orjson.JSONDecodeError, TypeError, AttributeError):
                log.warning("skipping undecodable object", key=ev.key)
                return
            if prev_entry is None:
                self._sorted = None
            self.entries[ev.key] = Entry(obj, ev.revision)
            change = Change("MODIFIED" if prev is not None else "ADDED", ev.key, obj, prev, ev.revision)
        self.history.append(change)
        if len(self.history) > HISTORY_LENGTH:
            dropped = self.history.popleft()
            self.history_start = dropped.revision
        for watcher in self.watchers:
            watcher.offer(change)

    def sorted_keys(self) -> list[str]:
        if self._sorted is None:
            self._sorted = sorted(self.entries)
        return self._sorted

    def changes_since(self, revision: int) -> list[Change] | None:
        """Changes after `revision`, or None when that revision is older than the history kept."""
        if revision < self.history_start:
            return None
        if not self.history or self.history[-1].revision <= revision:
            return []
        out = []
        for change in reversed(self.history):
            if change.revision <= revision:
                break
            out.append(change)
        out.reverse()
        return out


class WatchCache:
    """All resource caches of one apiserver, fed by a single ordered etcd watch."""

    def __init__(self, store: EtcdStore, root: str = "/registry/") -> None:
        self.store = store
        self.root = root
        self.revision = 0
        self.resources: dict[str, ResourceCache] = {}
        self._prefixes: list[tuple[str, ResourceCache]] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._started = asyncio.Event()
        self.last_event_time = time.monotonic()

    @property
    def compact_key(self) -> str:
        """The key where the apiservers record each etcd compaction (as upstream's compactor does)."""
        return f"{self.root}compact_rev_key"

    def _compacted(self, value: bytes) -> None:
        """After a compaction, watches from older revisions answer 410, as etcd itself would."""
        try:
            revision = int(value)
        except ValueError:
            return
        for cache in self.resources.values():
            cache.history_start = max(cache.history_start, revision)

    @property
    def started(self) -> bool:
        return self._started.is_set()

    def register(self, prefix: str) -> ResourceCache:
        """Cache the keys under `prefix` (e.g. `/registry/pods/`); idempotent."""
        cache = self.resources.get(prefix)
        if cache is None:
            cache = ResourceCache(prefix)
            self.resources[prefix] = cache
            self._prefixes.append((prefix, cache))
            self._prefixes.sort(key=lambda p: -len(p[0]))
            if self._started.is_set():
                asyncio.get_running_loop().create_task(self._load_late(cache))
        return cache

    async def _load_late(self, cache: ResourceCache) -> None:
        revision = self.revision
        kvs = await self._list_all(cache.prefix, revision)
        cache.load(kvs, revision)

    async def _list_all(self, prefix: str, revision: int) -> list[Any]:
        out: list[Any] = []
        start: str | None = None
        while True:
            kvs, _, more = await self.store.list(prefix, revision=revision, limit=2000, start=start, lenient=True)
            out.extend(kvs)
            if not more or not kvs:
                return out
            start = kvs[-1].key + "\0"

    async def start(self) -> None:
        """Load every registered resource, then follow etcd from that revision on."""
        revision = await self.store.current_revision()
        kvs = await self._list_all(self.root, revision)
        by_prefix: dict[str, list[Any]] = {p: [] for p in self.resources}
        for kv in kvs:
            cache = self._route(kv.key)
            if cache is not None:
                by_prefix[cache.prefix].append(kv)
        for prefix, cache in self.resources.items():
            cache.load(by_prefix[prefix], revision)
        self.revision = revision
        CACHE_REVISION.set(revision)
        self._task = asyncio.get_running_loop().create_task(self._follow(revision + 1))
        self._started.set()

    def _route(self, key: str) -> ResourceCache | None:
        for prefix, cache in self._prefixes:
            if key.startswith(prefix):
                return cache
        return None

    async def _follow(self, start: int) -> None:
        while True:
            try:
                async for ev in self.store.watch(self.root, start):
                    cache = self._route(ev.key)
                    if cache is not None:
                        cache.apply(ev)
                    elif ev.key == self.compact_key and not ev.deleted:
                        self._compacted(ev.value)
                    self.revision = ev.revision
                    start = ev.revision + 1
                    self.last_event_time = time.monotonic()
                    if self._waiters:
                        self._wake()
                CACHE_REVISION.set(self.revision)
            except Compacted:
                log.error("watch cache fell behind compaction; reloading", revision=start)
                await self._reload()
                start = self.revision + 1
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the cache must keep following etcd
                log.exception("watch cache stream failed; resuming", revision=start)
                await asyncio.sleep(0.5)

    async def _reload(self) -> None:
        revision = await self.store.current_revision()
        for cache in self.resources.values():
            kvs = await self._list_all(cache.prefix, revision)
            old = cache.entries
            cache.entries = {}
            cache.history.clear()
            cache.load(kvs, revision)
            for watcher in cache.watchers:
                watcher.overflowed = True
                watcher.wakeup.set()
            del old
        self.revision = revision

    def _wake(self) -> None:
        still = []
        for rev, fut in self._waiters:
            if rev <= self.revision:
                if not fut.done():
                    fut.set_result(None)
            else:
                still.append((rev, fut))
        self._waiters = still

    async def wait_for(self, revision: int, within: float) -> bool:
        """Wait until the cache has applied `revision`; False on timeout."""
        await self._started.wait()
        if self.revision >= revision:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((revision, fut))
        try:
            await asyncio.wait_for(fut, within)
            return True
        except TimeoutError:
            return False

    async def wait_started(self) -> None:
        await self._started.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
