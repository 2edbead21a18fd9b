"""Endpoints controller: the v1 Endpoints of every Service with a selector, built from the pods it
selects (ready and not-ready addresses, named target ports resolved per pod, hostnames for
headless Services), repacked into subsets and capped at 1000 addresses as upstream does.
Services without a selector keep whatever Endpoints their users write.
"""

from __future__ import annotations

import argparse
import copy
import math
from typing import Any

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from controller_manager.endpointutil import (
    ENDPOINTS,
    LABEL_HEADLESS,
    SERVICES,
    TRIGGER_TIME_ANNOTATION,
    TriggerTimeTracker,
    find_port,
    format_time,
    is_ipv6,
    is_service_ip_set,
    pod_ips,
    pod_service_keys,
    publish_not_ready,
    repack_subsets,
    service_selector,
    services_to_update,
    should_pod_be_in_endpoints,
    should_set_hostname,
)
from controller_manager.podutil import is_ready
from controller_manager.resources import PODS
from services.client import ApiError, NotFound, namespace_terminating
from services.informers import split_key
from services.runtime.durations import duration_flag

NAME = "endpoint"

Obj = dict[str, Any]

#: upstream's maxCapacity: addresses beyond this are dropped and the object annotated
MAX_CAPACITY = 1000
OVER_CAPACITY_ANNOTATION = "endpoints.kubernetes.io/over-capacity"
TRUNCATED = "truncated"
LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint-updates-batch-period", type=duration_flag, default=0.0,
                        help="delay before syncing a Service after its pods change, to batch updates")


def new(ctx: ControllerContext) -> EndpointsController:
    return EndpointsController(ctx)


# -- building subsets --------------------------------------------------------------------------------


def endpoint_address(service: Obj, pod: Obj) -> Obj | None:
    """The pod's address in the Service's (first) IP family, with its node and a reference to it."""
    spec = service.get("spec") or {}
    families = spec.get("ipFamilies") or []
    if families:
        want_v6 = families[0] == "IPv6"
    elif is_service_ip_set(service):
        want_v6 = is_ipv6(spec["clusterIP"])
    else:
        want_v6 = is_ipv6((pod.get("status") or {}).get("podIP") or "")
    ip = next((ip for ip in pod_ips(pod) if is_ipv6(ip) == want_v6), None)
    if ip is None:
        return None
    meta = pod["metadata"]
    address: Obj = {"ip": ip}
    if should_set_hostname(pod, service):
        address["hostname"] = pod["spec"]["hostname"]
    if (pod.get("spec") or {}).get("nodeName"):
        address["nodeName"] = pod["spec"]["nodeName"]
    address["targetRef"] = {"kind": "Pod", "namespace": meta.get("namespace", ""), "name": meta["name"],
                            "uid": meta.get("uid", "")}
    return address


def endpoint_port(service_port: Obj, number: int) -> Obj:
    port: Obj = {"name": service_port.get("name") or "", "port": number,
                 "protocol": service_port.get("protocol") or "TCP"}
    if service_port.get("appProtocol"):
        port["appProtocol"] = service_port["appProtocol"]
    return port


def desired_subsets(service: Obj, pods: list[Obj]) -> list[Obj]:
    """One subset per (pod, service port) before repacking, ready or not-ready by the pod's state."""
    spec = service.get("spec") or {}
    tolerate = publish_not_ready(service)
    ports = spec.get("ports") or []
    subsets: list[Obj] = []
    for pod in pods:
        if not should_pod_be_in_endpoints(pod, tolerate):
            continue
        address = endpoint_address(service, pod)
        if address is None:
            continue
        field = "addresses" if tolerate or is_ready(pod) else "notReadyAddresses"
        if not ports:
            if spec.get("clusterIP") == "None":
                subsets.append({field: [address], "ports": []})
            continue
        for service_port in ports:
            number = find_port(pod, service_port)
            if number is not None:
                subsets.append({field: [address], "ports": [endpoint_port(service_port, number)]})
    return repack_subsets(subsets)


def truncate_subsets(subsets: list[Obj], capacity: int = MAX_CAPACITY) -> tuple[list[Obj], bool]:
    """Keep at most `capacity` addresses, ready ones first, spread over subsets in proportion."""
    total_ready = sum(len(s.get("addresses") or []) for s in subsets)
    total_not_ready = sum(len(s.get("notReadyAddresses") or []) for s in subsets)
    if total_ready + total_not_ready <= capacity:
        return subsets, False
    truncate_ready = total_ready > capacity
    room = capacity if truncate_ready else capacity - total_ready
    total = total_ready if truncate_ready else total_not_ready
    left = room
    out = []
    for subset in subsets:
        subset = dict(subset)
        field = "addresses" if truncate_ready else "notReadyAddresses"
        members = subset.get(field) or []
        share = min(math.ceil(len(members) / total * room), left) if total else 0
        kept = members[:share]
        left -= len(kept)
        if kept:
            subset[field] = kept
        else:
            subset.pop(field, None)
        if truncate_ready:
            subset.pop("notReadyAddresses", None)
        if subset.get("addresses") or subset.get("notReadyAddresses"):
            out.append(subset)
    return out, True


def normalized_subsets(subsets: list[Obj] | None) -> list[Obj]:
    """Subsets as stored, minus empty fields and pod resourceVersions, for comparison."""
    out = []
    for subset in subsets or []:
        norm: Obj = {}
        for field in ("addresses", "notReadyAddresses"):
            items = []
            for address in subset.get(field) or []:
                item = {k: v for k, v in address.items() if v not in (None, "") and k != "targetRef"}
                ref = {k: v for k, v in (address.get("targetRef") or {}).items() if v and k != "resourceVersion"}
                if ref:
                    item["targetRef"] = ref
                items.append(item)
            if items:
                norm[field] = items
        ports = [{k: v for k, v in p.items() if v not in (None, "")} for p in subset.get("ports") or []]
        if ports:
            norm["ports"] = ports
        out.append(norm)
    return out


# -- controller --------------------------------------------------------------------------------------


class EndpointsController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.services = ctx.informer(SERVICES)
        self.pods = ctx.informer(PODS)
        self.endpoints = ctx.informer(ENDPOINTS)
        self.recorder = ctx.recorder("endpoint-controller")
        self.batch_period = float(getattr(ctx.options, "endpoint_updates_batch_period", 0.0) or 0.0)
        self.trigger_times = TriggerTimeTracker()
        #: service key -> (resourceVersion our last write replaced, the object it returned), so a sync
        #: that runs before the cache has seen that write builds on it instead of conflicting
        self.written: dict[str, tuple[str, Obj]] = {}
        super().__init__(NAME, [self.services, self.pods, self.endpoints],
                         int(ctx.options.concurrent_endpoint_syncs))
        self.services.add_event_handler(self.enqueue, lambda old, new: self.enqueue(new), self.enqueue)
        self.pods.add_event_handler(self._pod_added, self._pod_updated, self._pod_added)
        self.endpoints.add_event_handler(on_delete=self.enqueue)

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

    async def run(self) -> None:
        await self.endpoints.wait_for_sync()
        self._check_leftover_endpoints()
        await super().run()

    def _check_leftover_endpoints(self) -> None:
        """Look at every Endpoints once at start, so those whose Service is gone get deleted."""
        for endpoints in self.endpoints.list():
            if LEADER_ANNOTATION not in ((endpoints.get("metadata") or {}).get("annotations") or {}):
                self.enqueue(endpoints)

    async def sync(self, key: str) -> None:
        namespace, name = split_key(key)
        service = self.services.get(name, namespace)
        if service is None:
            try:
                await self.client.delete(ENDPOINTS, name, namespace)
            except NotFound:
                pass
            self.trigger_times.forget(namespace, name)
            self.written.pop(key, None)
            return
        spec = service.get("spec") or {}
        selector = service_selector(service)
        if spec.get("type") == "ExternalName" or selector is None:
            return
        pods = [p for p in self.pods.list(namespace) if selector.matches(p["metadata"].get("labels"))]
        trigger = self.trigger_times.compute(namespace, service, pods)
        subsets, truncated = truncate_subsets(desired_subsets(service, pods))
        labels = dict((service.get("metadata") or {}).get("labels") or {})
        labels.pop(LABEL_HEADLESS, None)
        if not is_service_ip_set(service):
            labels[LABEL_HEADLESS] = ""
        current = self._latest(key, self.endpoints.get(name, namespace))
        if current is not None:
            annotations = (current.get("metadata") or {}).get("annotations") or {}
            if (
                normalized_subsets(current.get("subsets")) == normalized_subsets(subsets)
                and ((current.get("metadata") or {}).get("labels") or {}) == labels
                and (annotations.get(OVER_CAPACITY_ANNOTATION) == TRUNCATED) == truncated
            ):
                return
            body = copy.deepcopy(current)
        else:
            body = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": namespace}}
        meta = body["metadata"]
        annotations = dict(meta.get("annotations") or {})
        if trigger is not None:
            annotations[TRIGGER_TIME_ANNOTATION] = format_time(trigger)
        else:
            annotations.pop(TRIGGER_TIME_ANNOTATION, None)
        if truncated:
            annotations[OVER_CAPACITY_ANNOTATION] = TRUNCATED
        else:
            annotations.pop(OVER_CAPACITY_ANNOTATION, None)
        meta["annotations"] = annotations
        meta["labels"] = labels
        body["subsets"] = subsets
        replaced = (current or {}).get("metadata", {}).get("resourceVersion", "")
        result = await self._write(service, body, create=current is None)
        if result is not None:
            self.written[key] = (replaced, result)

    def _latest(self, key: str, cached: Obj | None) -> Obj | None:
        """The cached Endpoints, or our own newer write when the cache still shows what it replaced."""
        written = self.written.get(key)
        if written is None:
            return cached
        cached_rv = (cached or {}).get("metadata", {}).get("resourceVersion", "")
        if cached_rv == written[0]:
            return written[1]
        del self.written[key]
        return cached

    async def _write(self, service: Obj, body: Obj, create: bool) -> Obj | None:
        namespace = body["metadata"]["namespace"]
        try:
            if create:
                return await self.client.create(ENDPOINTS, body, namespace)
            return await self.client.replace(ENDPOINTS, body, namespace=namespace)
        except ApiError as exc:
            if create and namespace_terminating(exc):
                return None
            target = f"{namespace}/{service['metadata']['name']}"
            event_target = {**body, "kind": "Endpoints", "apiVersion": "v1"}
            if create:
                self.recorder.warning(event_target, "FailedToCreateEndpoint",
                                      f"Failed to create endpoint for service {target}: {exc}")
            else:
                self.recorder.warning(event_target, "FailedToUpdateEndpoint",
                                      f"Failed to update endpoint {target}: {exc}")
            raise
