"""Writes the set of apiserver IPs into the `kubernetes` Service's Endpoints and EndpointSlice, as upstream's
EndpointsAdapter does.

Both objects are written by the apiservers themselves, not by controllers: the Endpoints carries
`endpointslice.kubernetes.io/skip-mirror` so the mirroring controller leaves it alone, and the slice carries
only `kubernetes.io/service-name` (no managed-by label), so the EndpointSlice controller does not own it
either. Ports are written when missing and otherwise only when `reconcile_ports` asks for it, so replicas
that disagree on a port do not fight over it every interval.
"""

from __future__ import annotations

import asyncio
import copy
import ipaddress
from typing import Any

import structlog

from apiserver.registry.store import DeleteOptions, ListOptions, RESTStore, WriteOptions
from services.api import errors
from services.api.selectors import LabelSelector

log = structlog.get_logger("apiserver.controlplane")

LABEL_SKIP_MIRROR = "endpointslice.kubernetes.io/skip-mirror"
LABEL_SERVICE_NAME = "kubernetes.io/service-name"
#: Upstream writes these through its loopback client, whose user agent names the manager.
FIELD_MANAGER = "kube-apiserver"
_ATTEMPTS = 5

Obj = dict[str, Any]


def _writes() -> WriteOptions:
    return WriteOptions(field_manager=FIELD_MANAGER)


def _retriable(exc: errors.StatusError) -> bool:
    """Another apiserver wrote (409 Conflict) or created (409 AlreadyExists) the object first."""
    return exc.code == 409


async def _retrying(step: Any) -> None:
    delay = 0.01
    for attempt in range(_ATTEMPTS):
        try:
            await step()
            return
        except errors.StatusError as exc:
            if not _retriable(exc) or attempt == _ATTEMPTS - 1:
                raise
        await asyncio.sleep(delay)
        delay *= 5


class EndpointsAdapter:
    """Reads and writes the Endpoints and the EndpointSlice of one selector-less Service."""

    def __init__(self, endpoints: RESTStore, slices: RESTStore, namespace: str, name: str,
                 address_type: str) -> None:
        self.endpoints = endpoints
        self.slices = slices
        self.namespace = namespace
        self.name = name
        self.address_type = address_type

    def _family_matches(self, ip: str) -> bool:
        return (ipaddress.ip_address(ip).version == 4) == (self.address_type == "IPv4")

    async def sync(self, ips: set[str], ports: list[Obj], reconcile_ports: bool) -> None:
        """Make both objects list exactly `ips` (those of the Service's family), sorted."""
        wanted = sorted(ip for ip in ips if self._family_matches(ip))
        await _retrying(lambda: self._sync_endpoints(wanted, ports, reconcile_ports))
        await _retrying(lambda: self._sync_slices(wanted, ports, reconcile_ports))

    async def _get(self, store: RESTStore) -> Obj | None:
        try:
            return await store.get(self.namespace, self.name)
        except errors.StatusError as exc:
            if exc.code == 404:
                return None
            raise

    async def _sync_endpoints(self, ips: list[str], ports: list[Obj], reconcile_ports: bool) -> None:
        current = await self._get(self.endpoints)
        desired = copy.deepcopy(current) if current is not None else {
            "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": self.name, "namespace": self.namespace}}
        desired["metadata"]["labels"] = {LABEL_SKIP_MIRROR: "true"}
        subsets = desired.get("subsets") or []
        subset = subsets[0] if len(subsets) == 1 else {}
        subset["addresses"] = [{"ip": ip} for ip in ips]
        subset.pop("notReadyAddresses", None)
        if not subset.get("ports") or (reconcile_ports and subset["ports"] != ports):
            subset["ports"] = copy.deepcopy(ports)
        # An Endpoints object with no addresses has no subsets at all (upstream's RepackSubsets).
        desired["subsets"] = [subset] if ips else []
        if current is None:
            await self.endpoints.create(self.namespace, desired, _writes())
        elif current.get("subsets") != desired["subsets"] or current["metadata"].get("labels") != {
                LABEL_SKIP_MIRROR: "true"}:
            log.warning("resetting endpoints of the kubernetes service", namespace=self.namespace,
                        name=self.name, addresses=ips)
            await self.endpoints.update(self.namespace, self.name, desired, _writes())

    async def _sync_slices(self, ips: list[str], ports: list[Obj], reconcile_ports: bool) -> None:
        selector = LabelSelector.parse(f"{LABEL_SERVICE_NAME}={self.name}")
        items, _ = await self.slices.list(self.namespace, ListOptions(label_selector=selector))
        current: Obj | None = None
        for item in items:
            obj = item if isinstance(item, dict) else item.obj
            if obj["metadata"]["name"] == self.name and obj.get("addressType") == self.address_type:
                current = copy.deepcopy(obj)
                continue
            # Any other slice claiming this Service is stale (say, of another family after a downgrade).
            try:
                await self.slices.delete(self.namespace, obj["metadata"]["name"], DeleteOptions())
            except errors.StatusError as exc:
                if exc.code != 404:
                    raise
        desired = copy.deepcopy(current) if current is not None else {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": self.name, "namespace": self.namespace}}
        desired["metadata"]["labels"] = {LABEL_SERVICE_NAME: self.name}
        desired["addressType"] = self.address_type
        desired["endpoints"] = [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]
        slice_ports = [{"name": p["name"], "port": p["port"], "protocol": p["protocol"]} for p in ports]
        if not desired.get("ports") or (reconcile_ports and desired["ports"] != slice_ports):
            desired["ports"] = slice_ports
        if current is None:
            await self.slices.create(self.namespace, desired, _writes())
        elif any(current.get(f) != desired.get(f) for f in ("endpoints", "ports")) or \
                current["metadata"].get("labels") != desired["metadata"]["labels"]:
            await self.slices.update(self.namespace, self.name, desired, _writes())
