"""ResourceQuota controller: keeps every quota's `status.hard` equal to `spec.hard` and its
`status.used` equal to what the objects of its namespace use, as upstream's resourcequota controller.

The apiserver's quota admission adds to `status.used` on every create; this controller is what
gives usage back. It recalculates a quota when the quota is created or its limits change, when a
tracked object is deleted or stops using what it used (a pod that finishes), and every
`--resource-quota-sync-period`. Tracked resources are watched from the first quota that names them;
status is written (with the quota's resourceVersion, so it never overwrites a charge the apiserver
made in between) only when it changed.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.discovery import APIResource, discover
from services.api import quota as q
from services.client import gvr
from services.informers import Informer, split_key
from services.runtime.durations import duration_flag

NAME = "resourcequota"
RESOURCE_QUOTAS = gvr("v1", "resourcequotas")
#: the least time between two discovery reads for a resource no quota named before
DISCOVERY_INTERVAL = 30.0
#: how long a sync waits for a newly watched resource's first list before retrying later
MONITOR_SYNC_TIMEOUT = 30.0

Obj = dict[str, Any]


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--resource-quota-sync-period", type=duration_flag, default=300.0,
                        help="how often every quota's usage is recalculated in full")
    parser.add_argument("--concurrent-resource-quota-syncs", type=int, default=5)


def new(ctx: ControllerContext) -> ResourceQuotaController:
    return ResourceQuotaController(ctx)


class ResourceQuotaController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.client = ctx.client
        self.quotas = ctx.informer(RESOURCE_QUOTAS)
        super().__init__(NAME, [self.quotas], int(ctx.options.concurrent_resource_quota_syncs))
        self.resync_period = float(ctx.options.resource_quota_sync_period)
        self.monitors: dict[tuple[str, str], Informer] = {}
        self.resources: dict[tuple[str, str], APIResource] = {}
        self._discovered_at = float("-inf")
        self._discovery = asyncio.Lock()
        self.quotas.add_event_handler(self.enqueue, self._quota_updated)

    def _quota_updated(self, old: Obj, new: Obj) -> None:
        """Limits changed, or status no longer shows them; usage written by the apiserver is no reason."""
        hard = (new.get("spec") or {}).get("hard") or {}
        if not q.equals(hard, (old.get("spec") or {}).get("hard") or {}) or not q.equals(hard, q.status_hard(new)):
            self.enqueue(new)

    def resync(self) -> None:
        """Every --resource-quota-sync-period, recount every quota, as upstream's full resync does."""
        for quota in self.quotas.list():
            self.enqueue(quota)

    # -- tracked resources -------------------------------------------------------------------------

    async def _resolve(self, group: str, resource: str) -> APIResource | None:
        """The served version of a resource, from discovery (read again at most every 30s for unknown ones)."""
        async with self._discovery:
            found = self.resources.get((group, resource))
            if found is None and time.monotonic() - self._discovered_at >= DISCOVERY_INTERVAL:
                listed = await discover(self.client)
                self._discovered_at = time.monotonic()
                self.resources = {(r.gvr.group, r.gvr.plural): r for r in listed.resources}
                found = self.resources.get((group, resource))
            return found

    async def _objects(self, evaluator: q.Evaluator, namespace: str) -> list[Obj] | None:
        """The namespace's objects of the evaluator's resource; None when the apiserver does not serve it."""
        informer = self.monitors.get((evaluator.group, evaluator.resource))
        if informer is None:
            api = await self._resolve(evaluator.group, evaluator.resource)
            if api is None or not api.supports("list", "watch"):
                return None
            if not api.gvr.namespaced:
                return []
            informer = self.monitors.get((evaluator.group, evaluator.resource))
            if informer is None:
                informer = self._monitor(evaluator, api)
        if not informer.has_synced():
            async with asyncio.timeout(MONITOR_SYNC_TIMEOUT):
                await informer.wait_for_sync()
        return informer.list(namespace)

    def _monitor(self, evaluator: q.Evaluator, api: APIResource) -> Informer:
        informer = self.ctx.informers.informer_for(api.gvr)

        def updated(old: Obj, new: Obj) -> None:
            if evaluator.frees_usage(old, new):
                self._replenish(evaluator, new)

        informer.add_event_handler(on_update=updated, on_delete=lambda obj: self._replenish(evaluator, obj))
        informer.start()
        self.monitors[(evaluator.group, evaluator.resource)] = informer
        return informer

    def _replenish(self, evaluator: q.Evaluator, obj: Obj) -> None:
        """Recalculate the quotas of the object's namespace that track its resource."""
        namespace = (obj.get("metadata") or {}).get("namespace")
        if not namespace:
            return
        for quota in self.quotas.list(namespace):
            if evaluator.matching_resources(q.status_hard(quota)):
                self.enqueue(quota)

    # -- sync --------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        namespace, name = split_key(key)
        quota = self.quotas.get(name, namespace)
        if quota is None:
            return
        hard: q.ResourceList = dict((quota.get("spec") or {}).get("hard") or {})
        status = quota.get("status") or {}
        now = datetime.now(UTC)
        calculated: q.ResourceList = {}
        unknown = False
        for evaluator in q.evaluators_for(hard):
            objects = await self._objects(evaluator, namespace)
            if objects is None:
                unknown = True
            else:
                calculated.update(q.total_usage(quota, evaluator, objects, now))
        # Resources no evaluator counts keep what was last observed, as upstream does.
        used = q.mask({**(status.get("used") or {}), **calculated}, hard)
        if (status.get("hard") is None or status.get("used") is None
                or not q.equals(hard, status["hard"]) or not q.equals(used, status["used"])):
            body = {**quota, "status": {"hard": hard, "used": used}}
            await self.client.replace_status(RESOURCE_QUOTAS, body, namespace)
        if unknown:
            # A resource the apiserver does not serve yet (a CRD on its way): look again after discovery may know it.
            raise RequeueAfter(DISCOVERY_INTERVAL)
