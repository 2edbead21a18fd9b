"""What the Endpoints, EndpointSlice and mirroring controllers share, like upstream's
k8s.io/endpointslice/util: which pods belong in endpoints, port resolution, the services a pod
change touches, the last-change-trigger-time tracker and the tracker of slices this process wrote.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from controller_manager.podutil import condition, is_ready
from services.api.meta import parse_time
from services.api.selectors import LabelSelector
from services.client import Forbidden, gvr

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
NAMESPACE_TERMINATING_CAUSE = "NamespaceTerminating"


def deep_copy(obj: Obj) -> Obj:
    return copy.deepcopy(obj)


def namespace_terminating(exc: BaseException) -> bool:
    """Creates into a Terminating namespace fail with a Forbidden naming NamespaceTerminating."""
    if not isinstance(exc, Forbidden):
        return False
    causes = (exc.details or {}).get("causes") or []
    return any(c.get("reason") == NAMESPACE_TERMINATING_CAUSE for c in causes) or "being terminated" in str(exc)


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
            ready = condition(pod, "Ready")
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


#: generation recorded for a slice this process deleted
_DELETION_EXPECTED = -1


class SliceTracker:
    """The generation of every EndpointSlice this controller last wrote, by Service, so a sync can
    tell a stale cache (its own write not seen yet) from a change made by someone else.
    """

    def __init__(self) -> None:
        self._by_service: dict[str, dict[str, int]] = {}

    @staticmethod
    def _service_of(slice_: Obj) -> str:
        meta = slice_.get("metadata") or {}
        return service_key(meta.get("namespace") or "", (meta.get("labels") or {}).get(LABEL_SERVICE_NAME, ""))

    def has(self, slice_: Obj) -> bool:
        return slice_["metadata"].get("uid") in self._by_service.get(self._service_of(slice_), {})

    def should_sync(self, slice_: Obj) -> bool:
        """True when the cached slice is not one of our own writes (unknown, or newer than ours)."""
        recorded = self._by_service.get(self._service_of(slice_), {}).get(slice_["metadata"].get("uid", ""))
        return recorded is None or int(slice_["metadata"].get("generation") or 0) > recorded

    def stale(self, key: str, slices: list[Obj]) -> bool:
        """The cache lacks a write of ours, or still holds a slice we deleted."""
        recorded = self._by_service.get(key)
        if not recorded:
            return False
        present = set()
        for slice_ in slices:
            uid = slice_["metadata"].get("uid", "")
            present.add(uid)
            generation = recorded.get(uid)
            if generation is not None and (
                generation == _DELETION_EXPECTED or generation > int(slice_["metadata"].get("generation") or 0)
            ):
                return True
        return any(g != _DELETION_EXPECTED and uid not in present for uid, g in recorded.items())

    def update(self, slice_: Obj) -> None:
        meta = slice_["metadata"]
        self._by_service.setdefault(self._service_of(slice_), {})[meta["uid"]] = int(meta.get("generation") or 0)

    def expect_deletion(self, slice_: Obj) -> None:
        uid = slice_["metadata"].get("uid")
        if uid:
            self._by_service.setdefault(self._service_of(slice_), {})[uid] = _DELETION_EXPECTED

    def handle_deletion(self, slice_: Obj) -> bool:
        """Forget a deleted slice; True when we had not deleted it ourselves."""
        key = self._service_of(slice_)
        recorded = self._by_service.get(key, {})
        generation = recorded.pop(slice_["metadata"].get("uid", ""), None)
        if not recorded:
            self._by_service.pop(key, None)
        return generation != _DELETION_EXPECTED

    def forget_service(self, key: str) -> None:
        self._by_service.pop(key, None)


def managed_service_key(slice_: dict[str, Any], controller_name: str) -> str | None:
    """The Service key a slice belongs to when `controller_name` manages it."""
    meta = slice_.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != controller_name or not labels.get(LABEL_SERVICE_NAME):
        return None
    return service_key(meta.get("namespace") or "", labels[LABEL_SERVICE_NAME])


class ManagedSlices:
    """What the EndpointSlice and mirroring controllers share about the slices they manage: a change
    to one requeues its Service (unless it is the controller's own write, per the tracker)."""

    controller_name: str
    tracker: SliceTracker
    slices: Any
    queue: Any

    def _slice_changed(self, slice_: dict[str, Any]) -> None:
        key = managed_service_key(slice_, self.controller_name)
        if key is not None and self.tracker.should_sync(slice_):
            self.queue.add(key)

    def _slice_updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        previous = managed_service_key(old, self.controller_name)
        if previous is not None and previous != managed_service_key(new, self.controller_name):
            self.queue.add(previous)
        self._slice_changed(new)

    def _slice_deleted(self, slice_: dict[str, Any]) -> None:
        key = managed_service_key(slice_, self.controller_name)
        if key is not None and self.tracker.handle_deletion(slice_):
            self.queue.add(key)

    def managed_slices(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return [s for s in self.slices.store.by_label(LABEL_SERVICE_NAME, name)
                if s["metadata"].get("namespace") == namespace
                and (s["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == self.controller_name]
