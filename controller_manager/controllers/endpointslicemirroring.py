"""EndpointSlice mirroring controller: the user-written Endpoints of a Service without a selector
are mirrored into EndpointSlices (one per subset and address type, owned by the Endpoints), unless
the Endpoints opts out with the endpointslice.kubernetes.io/skip-mirror label.
"""

from __future__ import annotations

import argparse
import ipaddress
from typing import Any

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.endpointslice_reconciler import (
    EndpointKey,
    Plan,
    PortKey,
    apply_plan,
    endpoint_key,
    endpoints_equal_beyond_key,
    owner_ref,
    port_map_key,
    recycle,
)
from controller_manager.endpointslice_tracker import ManagedSlices, SliceTracker
from controller_manager.endpointutil import (
    ENDPOINT_SLICES,
    ENDPOINTS,
    LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME,
    SERVICES,
    TRIGGER_TIME_ANNOTATION,
    repack_subsets,
)
from services.client import NotFound
from services.informers import split_key
from services.runtime.durations import duration_flag

NAME = "endpointslicemirroring"

Obj = dict[str, Any]

CONTROLLER_NAME = "endpointslicemirroring-controller.k8s.io"
LABEL_SKIP_MIRROR = "endpointslice.kubernetes.io/skip-mirror"
LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
DEFAULT_MAX_ENDPOINTS_PER_SUBSET = 1000
STALE_CACHE_RETRY = 0.1


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mirroring-concurrent-service-endpoint-syncs", type=int, default=5)
    parser.add_argument("--mirroring-max-endpoints-per-subset", type=int, default=DEFAULT_MAX_ENDPOINTS_PER_SUBSET,
                        help="the most addresses of one Endpoints subset mirrored to a slice")
    parser.add_argument("--mirroring-endpointslice-updates-batch-period", type=duration_flag, default=0.0,
                        help="delay before mirroring an Endpoints change, to batch updates")


def new(ctx: ControllerContext) -> MirroringController:
    return MirroringController(ctx)


# -- pure mirroring ----------------------------------------------------------------------------------


def should_mirror(endpoints: Obj | None) -> bool:
    if endpoints is None:
        return False
    meta = endpoints.get("metadata") or {}
    return (meta.get("labels") or {}).get(LABEL_SKIP_MIRROR) != "true" and (
        LEADER_ANNOTATION not in (meta.get("annotations") or {})
    )


def address_type_of(ip: str) -> str | None:
    try:
        return "IPv6" if ipaddress.ip_address(ip).version == 6 else "IPv4"
    except ValueError:
        return None


def address_to_endpoint(address: Obj, ready: bool) -> Obj:
    endpoint: Obj = {"addresses": [address["ip"]], "conditions": {"ready": ready}}
    if address.get("targetRef"):
        endpoint["targetRef"] = address["targetRef"]
    if address.get("nodeName"):
        endpoint["nodeName"] = address["nodeName"]
    if address.get("hostname"):
        endpoint["hostname"] = address["hostname"]
    return endpoint


def _slice_ports(ports: list[Obj]) -> list[Obj]:
    out = []
    for port in ports:
        item: Obj = {"name": port.get("name") or "", "port": port.get("port"),
                     "protocol": port.get("protocol") or "TCP"}
        if port.get("appProtocol"):
            item["appProtocol"] = port["appProtocol"]
        out.append(item)
    return out


def _mirrored_annotations(endpoints: Obj) -> dict[str, str]:
    annotations = dict((endpoints.get("metadata") or {}).get("annotations") or {})
    annotations.pop(TRIGGER_TIME_ANNOTATION, None)
    annotations.pop(LAST_APPLIED_ANNOTATION, None)
    return annotations


def mirrored_slice(endpoints: Obj, ports: list[Obj], address_type: str, name: str | None) -> Obj:
    meta = endpoints["metadata"]
    labels = dict(meta.get("labels") or {})
    labels[LABEL_SERVICE_NAME] = meta["name"]
    labels[LABEL_MANAGED_BY] = CONTROLLER_NAME
    slice_meta: Obj = {"namespace": meta.get("namespace", ""), "labels": labels,
                       "annotations": _mirrored_annotations(endpoints),
                       "ownerReferences": [owner_ref(endpoints, "Endpoints")]}
    if name:
        slice_meta["name"] = name
    else:
        slice_meta["generateName"] = f"{meta['name']}-"
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": slice_meta,
            "addressType": address_type, "endpoints": [], "ports": ports}


def _unchanged(endpoints: Obj, existing: Obj, desired: dict[EndpointKey, Obj]) -> bool:
    remaining = dict(desired)
    for endpoint in existing.get("endpoints") or []:
        want = remaining.pop(endpoint_key(endpoint), None)
        if want is None or not endpoints_equal_beyond_key(want, endpoint):
            return False
    if remaining:
        return False
    labels = dict((existing.get("metadata") or {}).get("labels") or {})
    labels.pop(LABEL_MANAGED_BY, None)
    labels.pop(LABEL_SERVICE_NAME, None)
    return labels == ((endpoints.get("metadata") or {}).get("labels") or {}) and (
        ((existing.get("metadata") or {}).get("annotations") or {}) == _mirrored_annotations(endpoints)
    )


def mirror_plan(endpoints: Obj, existing: list[Obj], max_per_subset: int = DEFAULT_MAX_ENDPOINTS_PER_SUBSET,
                ) -> tuple[Plan, int, int]:
    """The slice writes mirroring an Endpoints, and how many addresses were invalid or over the cap."""
    desired: dict[tuple[PortKey, str], dict[EndpointKey, Obj]] = {}
    ports_for: dict[tuple[PortKey, str], list[Obj]] = {}
    invalid = skipped = 0
    for subset in repack_subsets(endpoints.get("subsets") or []):
        ports = _slice_ports(subset.get("ports") or [])
        added = 0
        addresses = [(a, True) for a in subset.get("addresses") or []]
        addresses += [(a, False) for a in subset.get("notReadyAddresses") or []]
        for address, ready in addresses:
            if added >= max_per_subset:
                break
            address_type = address_type_of(address.get("ip") or "")
            if address_type is None:
                invalid += 1
                continue
            key = (port_map_key(ports), address_type)
            ports_for.setdefault(key, ports)
            endpoint = address_to_endpoint(address, ready)
            desired.setdefault(key, {})[endpoint_key(endpoint)] = endpoint
            added += 1
        skipped += len(addresses) - added
    existing_by_key: dict[tuple[PortKey, str], list[Obj]] = {}
    for slice_ in existing:
        existing_by_key.setdefault((port_map_key(slice_.get("ports") or []), slice_.get("addressType", "")),
                                   []).append(slice_)
    plan = Plan()
    for key, group in desired.items():
        current = existing_by_key.get(key, [])
        if not group:
            plan.delete += current
            continue
        plan.delete += current[1:]
        if current and _unchanged(endpoints, current[0], group):
            continue
        name = current[0]["metadata"]["name"] if current else None
        slice_ = mirrored_slice(endpoints, ports_for[key], key[1], name)
        slice_["endpoints"] = list(group.values())[:max_per_subset]
        (plan.update if name else plan.create).append(slice_)
    for key, slices in existing_by_key.items():
        if key not in desired:
            plan.delete += slices
    return recycle(plan, None), invalid, skipped


# -- controller --------------------------------------------------------------------------------------


class MirroringController(ManagedSlices, QueueController):
    controller_name = CONTROLLER_NAME

    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.services = ctx.informer(SERVICES)
        self.endpoints = ctx.informer(ENDPOINTS)
        self.slices = ctx.informer(ENDPOINT_SLICES)
        self.recorder = ctx.recorder("endpoint-slice-mirroring-controller")
        self.max_per_subset = int(getattr(ctx.options, "mirroring_max_endpoints_per_subset",
                                          DEFAULT_MAX_ENDPOINTS_PER_SUBSET))
        self.batch_period = float(getattr(ctx.options, "mirroring_endpointslice_updates_batch_period", 0.0) or 0.0)
        self.tracker = SliceTracker()
        super().__init__(NAME, [self.services, self.endpoints, self.slices],
                         int(getattr(ctx.options, "mirroring_concurrent_service_endpoint_syncs", 5)))
        self.services.add_event_handler(self.enqueue, lambda old, new: self.enqueue(new), self.enqueue)
        self.endpoints.add_event_handler(self._endpoints_changed, lambda old, new: self._endpoints_changed(new),
                                         self._endpoints_changed)
        self.slices.add_event_handler(self._slice_changed, self._slice_updated, self._slice_deleted)

    def _endpoints_changed(self, endpoints: Obj) -> None:
        if self.batch_period > 0:
            self.enqueue_after(endpoints, self.batch_period)
        else:
            self.enqueue(endpoints)

    async def _delete_mirrored(self, key: str, namespace: str, name: str) -> None:
        self.tracker.forget_service(key)
        for slice_ in self.managed_slices(namespace, name):
            try:
                await self.client.delete(ENDPOINT_SLICES, slice_["metadata"]["name"], namespace)
            except NotFound:
                pass

    async def sync(self, key: str) -> None:
        namespace, name = split_key(key)
        endpoints = self.endpoints.get(name, namespace)
        service = self.services.get(name, namespace)
        selector_less = service is not None and (service.get("spec") or {}).get("selector") is None
        if endpoints is None or not should_mirror(endpoints) or not selector_less:
            await self._delete_mirrored(key, namespace, name)
            return
        slices = [s for s in self.managed_slices(namespace, name) if not s["metadata"].get("deletionTimestamp")]
        if self.tracker.stale(key, slices):
            raise RequeueAfter(STALE_CACHE_RETRY)
        plan, invalid, skipped = mirror_plan(endpoints, slices, self.max_per_subset)
        target = {**endpoints, "kind": "Endpoints", "apiVersion": "v1"}
        if invalid:
            self.recorder.warning(target, "InvalidIPAddress",
                                  f"Skipped {invalid} invalid IP addresses when mirroring to EndpointSlices")
        if skipped > invalid:
            self.recorder.warning(target, "TooManyAddressesToMirror",
                                  f"A max of {self.max_per_subset} addresses can be mirrored to EndpointSlices "
                                  f"per Endpoints subset. {skipped - invalid} addresses were skipped")
        await apply_plan(self.client, namespace, plan, self.tracker, allow_create=True)
