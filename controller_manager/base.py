"""The shape every controller shares with upstream: informer handlers enqueue keys, workers pop
a key, sync it from the cache, and requeue it with backoff when the sync fails.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import structlog

from services.client import ApiError
from services.informers import Informer, RateLimitingQueue, ShutDown, meta_namespace_key

log = structlog.get_logger(__name__)


class RequeueAfter(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a sync to have its key looked at again after `delay` seconds, without backoff."""

    def __init__(self, delay: float) -> None:
        super().__init__(f"requeue after {delay}s")
        self.delay = delay


class QueueController:
    """Subclasses set NAME, register handlers that call enqueue(), and implement sync(key)."""

    #: the controller's name as --controllers spells it
    NAME = ""
    #: sync failures tolerated per key before it is dropped until its next event (upstream: 15)
    MAX_RETRIES: int | None = 15

    def __init__(self, name: str, informers: list[Informer], workers: int = 1) -> None:
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(name)
        self.watched = informers
        self.workers = max(int(workers), 1)
        self.log = log.bind(controller=name)
        #: seconds between calls of resync(), for controllers upstream also re-examines periodically; 0: never
        self.resync_period = 0.0

    def enqueue(self, obj: dict[str, Any]) -> None:
        self.queue.add(meta_namespace_key(obj))

    def enqueue_after(self, obj: dict[str, Any], delay: float) -> None:
        self.queue.add_after(meta_namespace_key(obj), delay)

    async def sync(self, key: str) -> None:
        raise NotImplementedError

    def resync(self) -> None:
        """Queue what a periodic resync looks at again; called every resync_period once the caches synced."""

    async def run(self) -> None:
        """Wait for the caches, then run the workers (and the periodic resync) until cancelled."""
        await asyncio.gather(*(i.wait_for_sync() for i in self.watched))
        self.log.info("caches synced, starting workers", workers=self.workers)
        tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        if self.resync_period > 0:
            tasks.append(asyncio.create_task(self._resync_loop()))
        try:
            await asyncio.gather(*tasks)
        finally:
            self.queue.shut_down()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync_period)
            self.resync()

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            try:
                await self.sync(key)
                self.queue.forget(key)
            except asyncio.CancelledError:
                raise
            except RequeueAfter as again:
                self.queue.forget(key)
                self.queue.add_after(key, again.delay)
            except (ApiError, httpx.HTTPError) as exc:
                self._retry(key, exc)
            except Exception as exc:
                self.log.exception("sync failed", key=key)
                self._retry(key, exc)
            finally:
                self.queue.done(key)

    def _retry(self, key: str, exc: Exception) -> None:
        if self.queue.requeue(key, self.MAX_RETRIES):
            self.log.info("sync failed, retrying", key=key, error=str(exc))
        else:
            self.log.warning("dropping key after repeated failures", key=key, error=str(exc))
