"""An events.k8s.io/v1 recorder that never blocks the scheduling cycle: events go out from a background pool."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog

from services.client import ApiError, Client, gvr

log = structlog.get_logger(__name__)

EVENTS = gvr("events.k8s.io/v1", "events")
NOTE_LENGTH_LIMIT = 1024
MAX_PENDING = 20000


def truncate_note(note: str) -> str:
    if len(note) <= NOTE_LENGTH_LIMIT:
        return note
    return note[: NOTE_LENGTH_LIMIT - 3] + "..."


class Recorder:
    """Records Events for one reporting controller (a profile's schedulerName)."""

    def __init__(self, sink: EventSink, controller: str, instance: str) -> None:
        self.sink = sink
        self.controller = controller
        self.instance = instance

    def eventf(self, regarding: dict[str, Any], related: dict[str, Any] | None, eventtype: str, reason: str,
               action: str, note: str) -> None:
        meta = regarding.get("metadata") or {}
        now = time.time()
        event: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name', '')}.{int(now * 1e9):x}", "namespace": meta.get("namespace")
                         or "default"},
            "eventTime": _micro_time(now),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "regarding": _ref(regarding),
            "note": truncate_note(note),
            "type": eventtype,
        }
        if related is not None:
            event["related"] = _ref(related)
        self.sink.post(event)


_second: list[Any] = [None, ""]


def _micro_time(now: float) -> str:
    """metav1.MicroTime of a time.time() value; the whole-second part is formatted once per second."""
    sec = int(now)
    if _second[0] != sec:
        _second[0], _second[1] = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    return f"{_second[1]}.{int((now - sec) * 1e6):06d}Z"


def _ref(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    ref = {"apiVersion": obj.get("apiVersion") or "v1", "kind": obj.get("kind") or "Pod",
           "name": meta.get("name", ""), "uid": meta.get("uid", ""),
           "resourceVersion": meta.get("resourceVersion", "")}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


class EventSink:
    """A bounded queue of events written by a few workers; drops (and logs) when the apiserver falls behind."""

    def __init__(self, client: Client, workers: int = 4) -> None:
        self.client = client
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self.dropped = 0

    def post(self, event: dict[str, Any]) -> None:
        if self._queue.qsize() >= MAX_PENDING:
            self.dropped += 1
            return
        self._queue.put_nowait(event)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self._workers)]

    async def _work(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self.client.create(EVENTS, event, event["metadata"]["namespace"])
            except ApiError as e:
                log.warning("could not record event", reason=event["reason"], error=str(e))
            except Exception:
                log.exception("could not record event", reason=event["reason"])
            finally:
                self._queue.task_done()

    async def flush(self) -> None:
        """Wait until every queued event was written (bound it with `asyncio.timeout`)."""
        await self._queue.join()

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
