"""EndpointSlice controller: discovery.k8s.io/v1 EndpointSlices for every Service with a selector,
labelled with the Service's name and this controller as manager, owned by the Service, at most
--max-endpoints-per-slice endpoints each, changed with as little churn as upstream's reconciler.
"""

from __future__ import annotations

import argparse
from typing import Any

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.endpointslice_reconciler import (
    CONTROLLER_NAME,
    DEFAULT_MAX_ENDPOINTS_PER_SLICE,
    LABEL_ZONE,
    apply_plan,
    reconcile,
)
from controller_manager.endpointslice_tracker import ManagedSlices, SliceTracker
from controller_manager.endpointutil import (
    ENDPOINT_SLICES,
    SERVICES,
    TRIGGER_TIME_ANNOTATION,
    TriggerTimeTracker,
    format_time,
    pod_service_keys,
    service_selector,
    services_to_update,
)
from controller_manager.resources import NODES, PODS
from services.informers import NODE_NAME_INDEX, split_key
from services.runtime.durations import duration_flag

NAME = "endpointslice"

Obj = dict[str, Any]

#: how soon to look again when the cache has not caught up with our own writes
STALE_CACHE_RETRY = 0.1
#: how soon to look again at a Service some of whose pods sit on Nodes not known yet
MISSING_NODE_RETRY = 5.0


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-endpoints-per-slice", type=int, default=DEFAULT_MAX_ENDPOINTS_PER_SLICE,
                        help="the most endpoints one EndpointSlice holds (1-1000)")
    parser.add_argument("--endpointslice-updates-batch-period", type=duration_flag, default=0.0,
                        help="delay before syncing a Service after its pods change, to batch updates")


def new(ctx: ControllerContext) -> EndpointSliceController:
    return EndpointSliceController(ctx)


class EndpointSliceController(ManagedSlices, QueueController):
    controller_name = CONTROLLER_NAME

    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.services = ctx.informer(SERVICES)
        self.pods = ctx.informer(PODS)
        self.nodes = ctx.informer(NODES)
        self.slices = ctx.informer(ENDPOINT_SLICES)
        self.max_endpoints = min(max(int(getattr(ctx.options, "max_endpoints_per_slice", 100)), 1), 1000)
        self.batch_period = float(getattr(ctx.options, "endpointslice_updates_batch_period", 0.0) or 0.0)
        self.tracker = SliceTracker()
        self.trigger_times = TriggerTimeTracker()
        super().__init__(NAME, [self.services, self.pods, self.nodes, self.slices],
                         int(ctx.options.concurrent_service_endpoint_syncs))
        self.services.add_event_handler(self.enqueue, lambda old, new: self.enqueue(new), self.enqueue)
        self.pods.add_event_handler(self._pod_added, self._pod_updated, self._pod_added)
        self.nodes.add_event_handler(self._node_added, self._node_updated)
        self.slices.add_event_handler(self._slice_changed, self._slice_updated, self._slice_deleted)

    # -- handlers ------------------------------------------------------------------------------------

    def _queue_services(self, keys: set[str]) -> None:
        for key in keys:
            if self.batch_period > 0:
                self.queue.add_after(key, self.batch_period)
            else:
                self.queue.add(key)

    def _pod_added(self, pod: Obj) -> None:
        self._queue_services(pod_service_keys(self.services.list(pod["metadata"].get("namespace")), pod))

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self._queue_services(services_to_update(self.services.list(new["metadata"].get("namespace")), old, new))

    def _node_added(self, node: Obj) -> None:
        """Pods on a node that was unknown were left out; their Services can take them now."""
        for pod in self.pods.store.by_index(NODE_NAME_INDEX, node["metadata"]["name"]):
            self._pod_added(pod)

    def _node_updated(self, old: Obj, new: Obj) -> None:
        def zone(node: Obj) -> str | None:
            return ((node.get("metadata") or {}).get("labels") or {}).get(LABEL_ZONE)

        if zone(old) != zone(new):
            self._node_added(new)

    # -- sync ----------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        namespace, name = split_key(key)
        service = self.services.get(name, namespace)
        if service is None:
            self.tracker.forget_service(key)
            self.trigger_times.forget(namespace, name)
            return
        selector = service_selector(service)
        if (service.get("spec") or {}).get("type") == "ExternalName" or selector is None:
            return
        pods = [p for p in self.pods.list(namespace) if selector.matches(p["metadata"].get("labels"))]
        slices = [s for s in self.managed_slices(namespace, name) if not s["metadata"].get("deletionTimestamp")]
        if self.tracker.stale(key, slices):
            raise RequeueAfter(STALE_CACHE_RETRY)
        trigger = self.trigger_times.compute(namespace, service, pods)
        plan, problems = reconcile(service, pods, lambda n: self.nodes.get(n), slices, self.max_endpoints)
        for slice_ in plan.create + plan.update:
            annotations = dict(slice_["metadata"].get("annotations") or {})
            if trigger is not None:
                annotations[TRIGGER_TIME_ANNOTATION] = format_time(trigger)
            else:
                annotations.pop(TRIGGER_TIME_ANNOTATION, None)
            slice_["metadata"]["annotations"] = annotations
        allow_create = not service["metadata"].get("deletionTimestamp")
        await apply_plan(self.client, namespace, plan, self.tracker, allow_create)
        if problems:
            self.log.info("endpoints left out, will retry", service=key, problems=problems)
            raise RequeueAfter(MISSING_NODE_RETRY)
