"""Pod garbage collector: deletes terminated pods above --terminated-pod-gc-threshold (oldest
first), pods bound to nodes that stay missing, and terminating pods that were never scheduled.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import structlog

from controller_manager.context import ControllerContext
from controller_manager.podutil import is_terminal
from controller_manager.resources import NODES, PODS
from services.api.meta import now_rfc3339
from services.client import ApiError, NotFound

NAME = "podgc"

log = structlog.get_logger(__name__)


def new(ctx: ControllerContext) -> PodGCController:
    return PodGCController(ctx)


def terminated_to_delete(pods: list[dict[str, Any]], threshold: int) -> list[dict[str, Any]]:
    """The oldest terminated pods beyond `threshold` (none when threshold <= 0)."""
    if threshold <= 0:
        return []
    terminated = [p for p in pods if is_terminal(p) and not p["metadata"].get("deletionTimestamp")]
    excess = len(terminated) - threshold
    if excess <= 0:
        return []
    terminated.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"].get("name", "")))
    return terminated[:excess]


class PodGCController:
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.pods = ctx.informer(PODS)
        self.nodes = ctx.informer(NODES)
        self.threshold = int(ctx.options.terminated_pod_gc_threshold)
        self.period = float(ctx.options.podgc_period)
        self.grace = float(ctx.options.podgc_orphan_grace)
        #: node name -> when we first saw pods bound to it while it did not exist
        self.missing_since: dict[str, float] = {}

    async def run(self) -> None:
        await asyncio.gather(self.pods.wait_for_sync(), self.nodes.wait_for_sync())
        while True:
            try:
                await self.gc()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("pod gc pass failed")
            await asyncio.sleep(self.period)

    async def gc(self) -> None:
        pods = self.pods.list()
        await self._delete_all(terminated_to_delete(pods, self.threshold), force=False)
        await self.gc_orphaned(pods)
        unscheduled = [p for p in pods if p["metadata"].get("deletionTimestamp")
                       and not (p.get("spec") or {}).get("nodeName")]
        for pod in unscheduled:
            await self._mark_failed(pod, condition=None)
        await self._delete_all(unscheduled, force=True)

    async def gc_orphaned(self, pods: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        bound: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and self.nodes.get(node) is None:
                bound.setdefault(node, []).append(pod)
        for node in list(self.missing_since):
            if node not in bound:
                del self.missing_since[node]
        for node, orphans in bound.items():
            first = self.missing_since.setdefault(node, now)
            if now - first < self.grace:
                continue
            try:
                await self.client.get(NODES, node)
                continue
            except NotFound:
                pass
            for pod in orphans:
                await self._mark_failed(pod)
            await self._delete_all(orphans, force=True)

    async def _mark_failed(self, pod: dict[str, Any], condition: str | None = "PodGC: node no longer exists") -> None:
        """Like upstream's markFailedAndDeletePod: a non-terminal pod is marked Failed (with a
        DisruptionTarget condition saying why, for orphans) before it is force-deleted."""
        if is_terminal(pod):
            return
        status: dict[str, Any] = {"phase": "Failed"}
        if condition is not None:
            conditions = [c for c in (pod.get("status") or {}).get("conditions") or []
                          if c.get("type") != "DisruptionTarget"]
            conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                               "message": condition, "lastTransitionTime": now_rfc3339()})
            status["conditions"] = conditions
        meta = pod["metadata"]
        try:
            await self.client.patch_status(PODS, meta["name"], {"status": status}, meta["namespace"])
        except (ApiError, httpx.HTTPError) as exc:
            log.info("could not mark orphaned pod failed", pod=meta["name"], error=str(exc))

    async def _delete_all(self, pods: list[dict[str, Any]], *, force: bool) -> None:
        async def delete(pod: dict[str, Any]) -> None:
            meta = pod["metadata"]
            try:
                await self.client.delete(PODS, meta["name"], meta["namespace"],
                                         grace_period_seconds=0 if force else None,
                                         preconditions={"uid": meta["uid"]})
                log.info("garbage collected pod", namespace=meta["namespace"], name=meta["name"])
            except NotFound:
                pass
            except (ApiError, httpx.HTTPError) as exc:
                log.info("could not delete pod", pod=meta["name"], error=str(exc))

        for start in range(0, len(pods), 200):
            await asyncio.gather(*(delete(p) for p in pods[start:start + 200]))
