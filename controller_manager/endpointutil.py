"""What the Endpoints, EndpointSlice and mirroring controllers share, like upstream's
pkg/controller/util/endpoint and pkg/api/v1/endpoints: which pods belong in endpoints, port
resolution, the services a pod change touches, the last-change-trigger-time tracker, and the
canonical packing of Endpoints subsets.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from controller_manager.podutil import is_ready
from services.api.conditions import get_condition
from services.api.meta import parse_time
from services.api.selectors import LabelSelector
from services.client import gvr

Obj = dict[str, Any]

SERVICES = gvr("v1", "services")
ENDPOINTS = gvr("v1", "endpoints")
ENDPOINT_SLICES = gvr("discovery.k8s.io/v1", "endpointslices")

TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"
LABEL_SERVICE_NAME = "kubernetes.io/service-name"
LABEL_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
LABEL_HEADLESS = "service.kubernetes.io/headless"
#: the deprecated annotation that predates spec.publishNotReadyAddresses
TOLERATE_UNREADY_ANNOTATION = "service.alpha.kubernetes.io/tolerate-unready-endpoints"
#: stands in for "no ports" while repacking, as upstream's Port: -1 sentinel
_NO_PORT = ("", -1, "", None)


def is_ipv6(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).version == 6
    except ValueError:
        return False


def is_service_ip_set(service: Obj) -> bool:
    """A ClusterIP that is neither empty nor None (i.e. not headless)."""
    ip = (service.get("spec") or {}).get("clusterIP") or ""
    return ip not in ("", "None")


def publish_not_ready(service: Obj) -> bool:
    spec = service.get("spec") or {}
    annotations = (service.get("metadata") or {}).get("annotations") or {}
    return bool(spec.get("publishNotReadyAddresses")) or annotations.get(TOLERATE_UNREADY_ANNOTATION) == "true"


def service_selector(service: Obj) -> LabelSelector | None:
    """The pods a Service selects, or None for a selector-less Service (user-managed endpoints)."""
    selector = (service.get("spec") or {}).get("selector")
    if selector is None:
        return None
    return LabelSelector.from_set(selector)


def pod_ips(pod: Obj) -> list[str]:
    status = pod.get("status") or {}
    ips = [entry.get("ip") for entry in status.get("podIPs") or [] if entry.get("ip")]
    if not ips and status.get("podIP"):
        ips = [status["podIP"]]
    return ips


def should_pod_be_in_endpoints(pod: Obj, include_terminating: bool) -> bool:
    """Has an IP, is not finished for good, and is not terminating unless those are wanted."""
    if not pod_ips(pod):
        return False
    if not include_terminating and (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    phase = (pod.get("status") or {}).get("phase")
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    if policy == "Never":
        return phase not in ("Failed", "Succeeded")
    if policy == "OnFailure":
        return phase != "Succeeded"
    return True


def should_set_hostname(pod: Obj, service: Obj) -> bool:
    """A pod's hostname is published only for the headless Service named by its subdomain."""
    spec = pod.get("spec") or {}
    return bool(spec.get("hostname")) and spec.get("subdomain") == service["metadata"]["name"] and (
        (service.get("spec") or {}).get("clusterIP") == "None"
    )


def find_port(pod: Obj, service_port: Obj) -> int | None:
    """The container port a Service port targets: a number as is, a name looked up in the pod's
    containers (and restartable init containers) with the same protocol.
    """
    target = service_port.get("targetPort")
    if target in (None, "", 0):
        target = service_port.get("port")
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    protocol = service_port.get("protocol") or "TCP"
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or [])
    containers += [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for container in containers:
        for port in container.get("ports") or []:
            if port.get("name") == target and (port.get("protocol") or "TCP") == protocol:
                return int(port["containerPort"])
    return None


def service_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def pod_service_keys(services: Iterable[Obj], pod: Obj) -> set[str]:
    """Keys of the Services (in the pod's namespace) whose selector matches the pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    keys = set()
    for service in services:
        selector = service_selector(service)
        if selector is not None and selector.matches(labels):
            keys.add(service_key(service["metadata"]["namespace"], service["metadata"]["name"]))
    return keys


def _ips(pod: Obj) -> list[str]:
    return [entry.get("ip") for entry in (pod.get("status") or {}).get("podIPs") or []]


def pod_endpoints_changed(old: Obj, new: Obj) -> tuple[bool, bool]:
    """(the pod's endpoint changed, its service membership may have changed)."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    labels_changed = (old_meta.get("labels") or {}) != (new_meta.get("labels") or {})
    changed = (
        old_meta.get("deletionTimestamp") != new_meta.get("deletionTimestamp")
        or old_spec.get("hostname") != new_spec.get("hostname")
        or old_spec.get("subdomain") != new_spec.get("subdomain")
        or is_ready(old) != is_ready(new)
        or _ips(old) != _ips(new)
        or (old.get("status") or {}).get("podIP") != (new.get("status") or {}).get("podIP")
        or (old.get("status") or {}).get("phase") != (new.get("status") or {}).get("phase")
    )
    return changed, labels_changed


def services_to_update(services: list[Obj], old: Obj, new: Obj) -> set[str]:
    """The Services a pod update concerns: none when nothing endpoint-relevant changed."""
    if (old.get("metadata") or {}).get("resourceVersion") == (new.get("metadata") or {}).get("resourceVersion"):
        return set()
    changed, labels_changed = pod_endpoints_changed(old, new)
    if not changed and not labels_changed:
        return set()
    current = pod_service_keys(services, new)
    if not labels_changed:
        return current
    previous = pod_service_keys(services, old)
    return current | previous if changed else current ^ previous


def format_time(moment: datetime) -> str:
    """RFC 3339 with nanosecond-style trimmed fraction, as Go's time.RFC3339Nano prints UTC times."""
    base = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        base += "." + f"{moment.microsecond:06d}".rstrip("0")
    return base + "Z"


class TriggerTimeTracker:
    """Remembers, per Service, the trigger times seen at its last sync, so each sync can report the
    earliest change (pod Ready transition or Service creation) it is the first to publish.
    """

    def __init__(self) -> None:
        self._states: dict[str, tuple[dict[str, datetime], datetime | None]] = {}

    def compute(self, namespace: str, service: Obj, pods: list[Obj]) -> datetime | None:
        key = service_key(namespace, service["metadata"]["name"])
        previous_pods, previous_service = self._states.get(key, ({}, None))
        earliest: datetime | None = None
        seen: dict[str, datetime] = {}
        for pod in pods:
            ready = get_condition(pod, "Ready")
            moment = parse_time(ready.get("lastTransitionTime")) if ready else None
            if moment is None:
                continue
            name = pod["metadata"]["name"]
            seen[name] = moment
            before = previous_pods.get(name)
            if before is None or moment > before:
                earliest = moment if earliest is None else min(earliest, moment)
        created = parse_time((service.get("metadata") or {}).get("creationTimestamp"))
        if created is not None and (previous_service is None or created > previous_service):
            earliest = created if earliest is None else min(earliest, created)
        self._states[key] = (seen, created)
        return earliest

    def forget(self, namespace: str, name: str) -> None:
        self._states.pop(service_key(namespace, name), None)


def _address_key(address: Obj) -> tuple[str, str]:
    return address.get("ip", ""), (address.get("targetRef") or {}).get("uid", "")


def _port_key(port: Obj) -> tuple[str, int, str, str | None]:
    return port.get("name") or "", int(port.get("port") or 0), port.get("protocol") or "", port.get("appProtocol")


def _subset_sort_key(subset: Obj) -> tuple[Any, ...]:
    addresses = subset.get("addresses") or subset.get("notReadyAddresses") or []
    return (_address_key(addresses[0]) if addresses else ("", ""),
            [_port_key(p) for p in subset.get("ports") or []])


def repack_subsets(subsets: list[Obj]) -> list[Obj]:
    """Canonical subsets: addresses offering the same ports with the same readiness grouped together.

    An address not ready on some port is not ready on it even if listed ready elsewhere, and an
    address without ports keeps a subset of its own (upstream's RepackSubsets).
    """
    addresses: dict[tuple[str, str], Obj] = {}
    ready_by_port: dict[tuple[str, int, str, str | None], dict[tuple[str, str], bool]] = {}
    ports: dict[tuple[str, int, str, str | None], Obj] = {}
    for subset in subsets:
        subset_ports = subset.get("ports") or [None]
        for port in subset_ports:
            pkey = _NO_PORT if port is None else _port_key(port)
            if port is not None:
                ports.setdefault(pkey, port)
            seen = ready_by_port.setdefault(pkey, {})
            for field, ready in (("addresses", True), ("notReadyAddresses", False)):
                for address in subset.get(field) or []:
                    akey = _address_key(address)
                    addresses.setdefault(akey, address)
                    if seen.get(akey, True):
                        seen[akey] = ready
    groups: dict[frozenset[tuple[tuple[str, str], bool]], list[Obj]] = {}
    for pkey, seen in ready_by_port.items():
        members = groups.setdefault(frozenset(seen.items()), [])
        if pkey != _NO_PORT:
            members.append(ports[pkey])
    final = []
    for members_key, group_ports in groups.items():
        ready = sorted((addresses[a] for a, r in members_key if r), key=_address_key)
        not_ready = sorted((addresses[a] for a, r in members_key if not r), key=_address_key)
        subset: Obj = {}
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        if group_ports:
            subset["ports"] = sorted(group_ports, key=_port_key)
        if ready or not_ready:
            final.append(subset)
    return sorted(final, key=_subset_sort_key)
