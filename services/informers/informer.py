"""Shared informers: one reflector and one cache per resource per process, fanning changes
out to any number of handlers, each fed through its own queue so a slow one delays no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from services.client.rest import Client, ResourceType
from services.informers.reflector import Reflector
from services.informers.store import BUILTIN_INDEXERS, IndexFunc, Obj, Store

log = structlog.get_logger(__name__)

AddHandler = Callable[[Obj], Any]
UpdateHandler = Callable[[Obj, Obj], Any]
DeleteHandler = Callable[[Obj], Any]
#: rewrites an object as it arrives, before it is cached or handed to any handler (client-go's TransformFunc)
Transform = Callable[[Obj], Obj]

_SYNCED = "synced"


def strip_managed_fields(obj: Obj) -> Obj:
    """A transform that drops metadata.managedFields, often the largest part of a cached object.

    Controllers never read them, and an update without them keeps the stored ones, so caches need not
    hold them (client-go's TransformStripManagedFields, which kube-controller-manager uses). The object
    is fresh from the decoder and owned by nobody else, so it is changed in place.
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class HandlerRegistration:
    """One set of callbacks on an informer; `has_synced` once it has seen the initial list."""

    def __init__(
        self,
        informer: Informer,
        on_add: AddHandler | None,
        on_update: UpdateHandler | None,
        on_delete: DeleteHandler | None,
        resync_period: float,
    ) -> None:
        self.informer = informer
        self.on_add = on_add
        self.on_update = on_update
        self.on_delete = on_delete
        self.resync_period = resync_period
        # A plain deque and one wake-up future rather than an asyncio.Queue: every event of a busy
        # resource goes through each handler's queue, and this costs less per event.
        self._events: deque[tuple[str, Obj | None, Obj | None]] = deque()
        self._wakeup: asyncio.Future[None] | None = None
        #: the event kinds this registration has a callback for; others are not queued at all
        self._kinds = {kind for kind, cb in (("add", on_add), ("update", on_update), ("delete", on_delete)) if cb}
        self._kinds.add(_SYNCED)
        self._synced = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        await self._synced.wait()

    def push(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        if kind not in self._kinds:
            return
        self._events.append((kind, old, new))
        waiter = self._wakeup
        if waiter is not None:
            self._wakeup = None
            if not waiter.done():
                waiter.set_result(None)

    def start(self) -> None:
        if self._tasks:
            return
        self._tasks.append(asyncio.create_task(self._deliver()))
        if self.resync_period > 0:
            self._tasks.append(asyncio.create_task(self._resync()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _deliver(self) -> None:
        events = self._events
        while True:
            if not events:
                self._wakeup = asyncio.get_running_loop().create_future()
                await self._wakeup
                continue
            kind, old, new = events.popleft()
            if kind == _SYNCED:
                self._synced.set()
                continue
            try:
                if kind == "add" and self.on_add is not None:
                    result = self.on_add(new)  # type: ignore[arg-type]
                elif kind == "update" and self.on_update is not None:
                    result = self.on_update(old, new)  # type: ignore[arg-type]
                elif kind == "delete" and self.on_delete is not None:
                    result = self.on_delete(old)  # type: ignore[arg-type]
                else:
                    continue
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event handler failed", event_type=kind)

    async def _resync(self) -> None:
        """Replay every cached object as an update(obj, obj), so level-triggered handlers revisit all."""
        while True:
            await asyncio.sleep(self.resync_period)
            if self.informer.has_synced():
                for obj in self.informer.store.list():
                    self.push("update", obj, obj)


class Informer:
    """Cache + reflector + handlers for one resource; `transform`, if given, rewrites every object the
    reflector delivers before the cache stores it and handlers see it."""

    def __init__(
        self,
        client: Client,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
        field_selector: str | Mapping[str, str] | None = None,
        resync_period: float = 0.0,
        indexers: Mapping[str, IndexFunc] | None = None,
        page_size: int = 500,
        min_watch_timeout: float = 300.0,
        transform: Transform | None = None,
    ) -> None:
        self.resource = resource
        self.resync_period = resync_period
        self.transform = transform
        self.store = Store(indexers={**BUILTIN_INDEXERS, **(indexers or {})})
        self.reflector = Reflector(
            client, resource, self, namespace=namespace, label_selector=label_selector,
            field_selector=field_selector, page_size=page_size, min_watch_timeout=min_watch_timeout,
        )
        self._handlers: list[HandlerRegistration] = []
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- handlers ----------------------------------------------------------------------------------

    def add_event_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
        resync_period: float | None = None,
    ) -> HandlerRegistration:
        """Register callbacks (plain or async). A late handler first gets an add for every cached object."""
        reg = HandlerRegistration(
            self, on_add, on_update, on_delete, self.resync_period if resync_period is None else resync_period
        )
        self._handlers.append(reg)
        if self.has_synced():
            for obj in self.store.list():
                reg.push("add", None, obj)
            reg.push(_SYNCED, None, None)
        if self._task is not None:
            reg.start()
        return reg

    async def remove_event_handler(self, reg: HandlerRegistration) -> None:
        self._handlers.remove(reg)
        await reg.stop()

    def _notify(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        for reg in self._handlers:
            reg.push(kind, old, new)

    # -- sync state --------------------------------------------------------------------------------

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        """Wait for the initial list; bound it with `asyncio.timeout` where needed."""
        await self._synced.wait()

    @property
    def last_sync_resource_version(self) -> str:
        return self.reflector.last_sync_resource_version

    # -- reads -------------------------------------------------------------------------------------

    def get(self, name: str, namespace: str | None = None) -> Obj | None:
        return self.store.get_by_name(namespace, name)

    def list(self, namespace: str | None = None) -> list[Obj]:
        return self.store.in_namespace(namespace) if namespace else self.store.list()

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is not None:
            return
        for reg in self._handlers:
            reg.start()
        self._task = asyncio.create_task(self.reflector.run())

    @property
    def started(self) -> bool:
        return self._task is not None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for reg in self._handlers:
            await reg.stop()

    # -- reflector sink ----------------------------------------------------------------------------

    def on_replace(self, items: list[Obj], resource_version: str) -> None:
        """A fresh list: objects missing from it are deleted, the rest added or updated (like Replace).

        A delete found this way hands handlers the last cached state, as the final one was never seen.
        """
        if self.transform is not None:
            items = [self.transform(o) for o in items]
        fresh = {self.store.key_func(o): o for o in items}
        for key in [k for k in self.store.list_keys() if k not in fresh]:
            old = self.store.delete_key(key)
            self._notify("delete", old, None)
        for obj in items:
            old = self.store.add(obj)
            if old is None:
                self._notify("add", None, obj)
            else:
                self._notify("update", old, obj)
        if not self._synced.is_set():
            self._synced.set()
            self._notify(_SYNCED, None, None)

    def on_add(self, obj: Obj) -> None:
        if self.transform is not None:
            obj = self.transform(obj)
        old = self.store.add(obj)
        self._notify("add", None, obj) if old is None else self._notify("update", old, obj)

    def on_update(self, obj: Obj) -> None:
        if self.transform is not None:
            obj = self.transform(obj)
        old = self.store.add(obj)
        self._notify("add", None, obj) if old is None else self._notify("update", old, obj)

    def on_delete(self, obj: Obj) -> None:
        if self.transform is not None:
            obj = self.transform(obj)
        self.store.delete(obj)
        self._notify("delete", obj, None)


class SharedInformerFactory:
    """Hands out one informer per resource (and namespace/selector), so a process watches each once;
    `transform` applies to every informer it makes (client-go's WithTransform)."""

    def __init__(
        self,
        client: Client,
        default_resync: float = 0.0,
        namespace: str | None = None,
        transform: Transform | None = None,
    ) -> None:
        self.client = client
        self.default_resync = default_resync
        self.namespace = namespace
        self.transform = transform
        self._informers: dict[tuple[Any, ...], Informer] = {}

    def informer_for(
        self,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resync_period: float | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
    ) -> Informer:
        ns = namespace if namespace is not None else self.namespace
        key = (resource.group, resource.version, resource.plural, ns, label_selector, field_selector)
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(
                self.client, resource, namespace=ns, label_selector=label_selector,
                field_selector=field_selector,
                resync_period=self.default_resync if resync_period is None else resync_period,
                indexers=indexers, transform=self.transform,
            )
            self._informers[key] = informer
        elif indexers:
            informer.store.add_indexers(indexers)
        return informer

    @property
    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    def start(self) -> None:
        """Start every informer not yet running; informers asked for later need another start()."""
        for informer in self._informers.values():
            informer.start()

    def has_synced(self) -> bool:
        return all(i.has_synced() for i in self._informers.values())

    async def wait_for_cache_sync(self) -> None:
        """Wait until every started informer has its initial list; bound it with `asyncio.timeout`."""
        await asyncio.gather(*(i.wait_for_sync() for i in self._informers.values() if i.started))

    async def shutdown(self) -> None:
        for informer in self._informers.values():
            await informer.stop()
