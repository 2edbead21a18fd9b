"""core/v1 Events about pods, as the kubelet records them (Pulled, Created, Started, Killing, ...)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from services.api.meta import now_rfc3339
from services.client import Client, TokenBucket, gvr

log = structlog.get_logger(__name__)
EVENTS = gvr("v1", "events")


class EventRecorder:
    """Fire-and-forget event creation, rate limited so a crash loop cannot flood the API."""

    def __init__(self, client: Client, node_name: str, qps: float = 5.0, burst: int = 20) -> None:
        self.client = client
        self.node_name = node_name
        self._bucket = TokenBucket(qps, burst)
        self._tasks: set[asyncio.Task[None]] = set()

    def record(self, obj: dict[str, Any], event_type: str, reason: str, message: str,
               field_path: str = "") -> None:
        meta = obj.get("metadata") or {}
        now = now_rfc3339()
        ref: dict[str, Any] = {"kind": obj.get("kind") or "Pod", "apiVersion": "v1",
                               "namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")}
        if not meta.get("namespace"):
            ref.pop("namespace")
        if field_path:
            ref["fieldPath"] = field_path
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{time.time_ns():x}",
                         "namespace": meta.get("namespace") or "default"},
            "involvedObject": ref, "reason": reason, "message": message, "type": event_type,
            "source": {"component": "kubelet", "host": self.node_name},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        task = asyncio.create_task(self._send(body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, body: dict[str, Any]) -> None:
        await self._bucket.acquire()
        try:
            await self.client.create(EVENTS, body)
        except Exception as exc:  # noqa: BLE001 - events are best effort
            log.debug("event not recorded", reason=body["reason"], error=str(exc))
