"""The reflector keeps a local copy of one resource in step with the apiserver: list, then
watch from the list's resourceVersion, resume watches where they stopped, relist on 410 Gone.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from typing import Any, Protocol

import httpx
import structlog

from services.client.errors import ApiError, Gone, ServerError, TooManyRequests
from services.client.rest import Client, ResourceType

log = structlog.get_logger(__name__)

Obj = dict[str, Any]


class ReflectorSink(Protocol):
    """Where the reflector delivers what it learns (the shared informer)."""

    def on_replace(self, items: list[Obj], resource_version: str) -> None: ...

    def on_add(self, obj: Obj) -> None: ...

    def on_update(self, obj: Obj) -> None: ...

    def on_delete(self, obj: Obj) -> None: ...


class ShortWatch(Exception):
    """A watch closed within a second without any event: something is wrong, so back off and relist."""


class Reflector:
    """List-and-watch loop for one resource (optionally one namespace / selector)."""

    def __init__(
        self,
        client: Client,
        resource: ResourceType,
        sink: ReflectorSink,
        *,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
        field_selector: str | Mapping[str, str] | None = None,
        page_size: int = 500,
        min_watch_timeout: float = 300.0,
        backoff_initial: float = 0.8,
        backoff_max: float = 30.0,
    ) -> None:
        self.client = client
        self.resource = resource
        self.sink = sink
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.min_watch_timeout = min_watch_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.last_sync_resource_version = ""
        self.lists = 0
        self._log = log.bind(resource=getattr(resource, "plural", "?"), namespace=namespace or "")

    async def run(self) -> None:
        """List and watch until cancelled; failures back off exponentially (0.8 s doubling to 30 s)."""
        backoff = self.backoff_initial
        while True:
            started = time.monotonic()
            try:
                await self.list_and_watch()
                backoff = self.backoff_initial
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if time.monotonic() - started > 2 * self.backoff_max:
                    backoff = self.backoff_initial
                self._log.warning("list and watch failed", error=str(exc), error_type=type(exc).__name__,
                                  retry_in=round(backoff, 2))
                await asyncio.sleep(backoff * (1 + random.random() * 0.1))
                backoff = min(backoff * 2, self.backoff_max)

    async def list_and_watch(self) -> None:
        """One list followed by watches; returns when a relist is needed (410 Gone)."""
        await self._list()
        await self._watch_until_gone()

    async def _list(self) -> None:
        result = await self.client.list_all(
            self.resource, self.namespace, page_size=self.page_size,
            label_selector=self.label_selector, field_selector=self.field_selector,
        )
        rv = (result.get("metadata") or {}).get("resourceVersion", "")
        self.lists += 1
        self.sink.on_replace(list(result.get("items") or []), rv)
        self.last_sync_resource_version = rv

    async def _watch_until_gone(self) -> None:
        backoff = self.backoff_initial
        while True:
            timeout = int(self.min_watch_timeout * (1 + random.random()))
            started = time.monotonic()
            events = 0
            try:
                async with self.client.watch(
                    self.resource, self.namespace, resource_version=self.last_sync_resource_version,
                    label_selector=self.label_selector, field_selector=self.field_selector,
                    timeout_seconds=timeout, allow_watch_bookmarks=True,
                ) as stream:
                    async for kind, obj in stream:
                        events += 1
                        self._handle(kind, obj)
            except Gone as exc:
                self._log.info("watch expired, relisting", error=exc.message)
                return
            except (httpx.ConnectError, httpx.ConnectTimeout, TooManyRequests, ServerError) as exc:
                # The apiserver is down or overloaded; keep our place and retry the watch.
                retry = exc.retry_after if isinstance(exc, ApiError) and exc.retry_after else backoff
                self._log.info("watch could not start, retrying", error=str(exc), retry_in=round(retry, 2))
                await asyncio.sleep(retry)
                backoff = min(backoff * 2, self.backoff_max)
                continue
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.ReadTimeout) as exc:
                self._log.info("watch stream broke, resuming", error=str(exc),
                               resource_version=self.last_sync_resource_version)
                continue
            backoff = self.backoff_initial
            if events == 0 and time.monotonic() - started < 1.0:
                raise ShortWatch("very short watch: watch lasted less than a second and no items received")

    def _handle(self, kind: str, obj: Obj) -> None:
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "ADDED":
            self.sink.on_add(obj)
        elif kind == "MODIFIED":
            self.sink.on_update(obj)
        elif kind == "DELETED":
            self.sink.on_delete(obj)
        elif kind != "BOOKMARK":
            self._log.warning("unknown watch event type", type=kind)
            return
        if rv:
            self.last_sync_resource_version = rv
