"""The EndpointSlice reconciler as upstream's: desired endpoints grouped by port mapping, existing
slices updated in place, leftovers packed into the slices that fit them best before new ones are
made, a placeholder slice when a Service has no endpoints, and creates turned into updates of
slices that would otherwise be deleted. Planning is pure; `apply_plan` does the writes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller_manager.endpointslice_tracker import SliceTracker
from controller_manager.endpointutil import (
    ENDPOINT_SLICES,
    LABEL_HEADLESS,
    LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME,
    find_port,
    is_ipv6,
    is_service_ip_set,
    pod_ips,
    should_pod_be_in_endpoints,
    should_set_hostname,
)
from controller_manager.podutil import is_ready
from services.client import ApiError, Client, NotFound, namespace_terminating

Obj = dict[str, Any]
EndpointKey = tuple[tuple[str, ...], str, str, str]
PortKey = tuple[tuple[str, int, str, str], ...]

CONTROLLER_NAME = "endpointslice-controller.k8s.io"
DEFAULT_MAX_ENDPOINTS_PER_SLICE = 100
LABEL_ZONE = "topology.kubernetes.io/zone"
_RESERVED_LABELS = (LABEL_SERVICE_NAME, LABEL_MANAGED_BY, LABEL_HEADLESS)


@dataclass
class Plan:
    create: list[Obj] = field(default_factory=list)
    update: list[Obj] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)

    def extend(self, other: Plan) -> None:
        self.create += other.create
        self.update += other.update
        self.delete += other.delete


# -- endpoints and ports -----------------------------------------------------------------------------


def address_types(service: Obj) -> list[str]:
    """The slice address types a Service gets: one per IP family it has."""
    spec = service.get("spec") or {}
    families = spec.get("ipFamilies") or []
    if families:
        return ["IPv6" if f == "IPv6" else "IPv4" for f in families]
    if is_service_ip_set(service):
        return ["IPv6" if is_ipv6(spec["clusterIP"]) else "IPv4"]
    return ["IPv4", "IPv6"]


def endpoint_ports(service: Obj, pod: Obj) -> list[Obj]:
    """The Service's ports with target ports resolved for this pod; ports it lacks are left out."""
    out = []
    for service_port in (service.get("spec") or {}).get("ports") or []:
        number = find_port(pod, service_port)
        if number is None:
            continue
        port: Obj = {"name": service_port.get("name") or "", "port": number,
                     "protocol": service_port.get("protocol") or "TCP"}
        if service_port.get("appProtocol"):
            port["appProtocol"] = service_port["appProtocol"]
        out.append(port)
    return out


def port_map_key(ports: list[Obj]) -> PortKey:
    return tuple(sorted(
        (p.get("name") or "", int(p.get("port") or 0), p.get("protocol") or "TCP", p.get("appProtocol") or "")
        for p in ports
    ))


def pod_to_endpoint(pod: Obj, node: Obj | None, service: Obj, address_type: str) -> Obj:
    """The pod as an endpoint: terminating pods stay, serving by readiness, never ready while
    terminating unless the Service publishes not-ready addresses.
    """
    meta = pod["metadata"]
    serving = is_ready(pod)
    terminating = bool(meta.get("deletionTimestamp"))
    ready = bool((service.get("spec") or {}).get("publishNotReadyAddresses")) or (serving and not terminating)
    want_v6 = address_type == "IPv6"
    endpoint: Obj = {
        "addresses": [ip for ip in pod_ips(pod) if is_ipv6(ip) == want_v6],
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
        "targetRef": {"kind": "Pod", "namespace": meta.get("namespace", ""), "name": meta["name"],
                      "uid": meta.get("uid", "")},
    }
    node_name = (pod.get("spec") or {}).get("nodeName")
    if node_name:
        endpoint["nodeName"] = node_name
    zone = (((node or {}).get("metadata") or {}).get("labels") or {}).get(LABEL_ZONE)
    if zone:
        endpoint["zone"] = zone
    if should_set_hostname(pod, service):
        endpoint["hostname"] = pod["spec"]["hostname"]
    return endpoint


def endpoint_key(endpoint: Obj) -> EndpointKey:
    """What identifies an endpoint across syncs: its addresses, hostname and the object it points at."""
    ref = endpoint.get("targetRef") or {}
    return (tuple(sorted(endpoint.get("addresses") or [])), endpoint.get("hostname") or "",
            ref.get("namespace") or "", ref.get("name") or "")


def _comparable(endpoint: Obj) -> tuple[Any, ...]:
    conditions = endpoint.get("conditions") or {}
    ref = {k: v for k, v in (endpoint.get("targetRef") or {}).items() if v and k != "resourceVersion"}
    return (endpoint.get("nodeName") or "", endpoint.get("zone") or "", conditions.get("ready"),
            conditions.get("serving"), conditions.get("terminating"), endpoint.get("hints") or None, ref)


def endpoints_equal_beyond_key(a: Obj, b: Obj) -> bool:
    return _comparable(a) == _comparable(b)


# -- slices ------------------------------------------------------------------------------------------


def owner_ref(owner: Obj, kind: str) -> Obj:
    meta = owner["metadata"]
    return {"apiVersion": "v1", "kind": kind, "name": meta["name"], "uid": meta.get("uid", ""),
            "controller": True, "blockOwnerDeletion": True}


def owned_by(slice_: Obj, owner: Obj) -> bool:
    uid = owner["metadata"].get("uid")
    return any(ref.get("uid") == uid for ref in (slice_.get("metadata") or {}).get("ownerReferences") or [])


def slice_labels(slice_: Obj, service: Obj, controller_name: str) -> tuple[dict[str, str], bool]:
    """The labels a slice should carry (the Service's, plus the reserved ones) and whether they differ."""
    labels = {k: v for k, v in ((service.get("metadata") or {}).get("labels") or {}).items()
              if k not in _RESERVED_LABELS}
    if not is_service_ip_set(service):
        labels[LABEL_HEADLESS] = ""
    labels[LABEL_SERVICE_NAME] = service["metadata"]["name"]
    labels[LABEL_MANAGED_BY] = controller_name
    return labels, labels != ((slice_.get("metadata") or {}).get("labels") or {})


def new_slice(service: Obj, ports: list[Obj], address_type: str, controller_name: str) -> Obj:
    meta = service["metadata"]
    slice_: Obj = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"generateName": f"{meta['name']}-", "namespace": meta.get("namespace", ""),
                     "ownerReferences": [owner_ref(service, "Service")]},
        "addressType": address_type,
        "endpoints": [],
        "ports": ports,
    }
    slice_["metadata"]["labels"], _ = slice_labels(slice_, service, controller_name)
    return slice_


def _is_placeholder_of(existing: Obj, placeholder: Obj) -> bool:
    meta, want = existing.get("metadata") or {}, placeholder["metadata"]
    return (existing.get("addressType") == placeholder["addressType"] and not existing.get("endpoints")
            and not existing.get("ports") and meta.get("namespace") == want["namespace"]
            and (meta.get("labels") or {}) == want["labels"]
            and (meta.get("ownerReferences") or []) == want["ownerReferences"])


def slice_to_fill(slices: list[Obj], count: int, max_endpoints: int) -> Obj | None:
    """The slice that ends up closest to full when `count` endpoints are added, if any fits."""
    best, best_gap = None, max_endpoints
    for candidate in slices:
        gap = max_endpoints - (count + len(candidate.get("endpoints") or []))
        if 0 <= gap < best_gap:
            best, best_gap = candidate, gap
            if gap == 0:
                break
    return best


def reconcile_port_mapping(
    service: Obj, existing: list[Obj], desired: dict[EndpointKey, Obj], ports: list[Obj], address_type: str,
    max_endpoints: int, controller_name: str,
) -> Plan:
    """Minimal churn for one port mapping: keep endpoints where they are, drop the gone ones, then
    fill slices being updated anyway, then the unchanged slice that fits best, then new slices.
    """
    desired = dict(desired)
    by_name: dict[str, Obj] = {}
    unchanged: list[str] = []
    to_update: list[str] = []
    to_delete: list[str] = []
    for slice_ in existing:
        name = slice_["metadata"]["name"]
        by_name[name] = slice_
        kept: list[Obj] = []
        changed = False
        for endpoint in slice_.get("endpoints") or []:
            want = desired.pop(endpoint_key(endpoint), None)
            if want is not None:
                kept.append(want)
                changed = changed or not endpoints_equal_beyond_key(want, endpoint)
        labels, labels_changed = slice_labels(slice_, service, controller_name)
        if changed or len(kept) != len(slice_.get("endpoints") or []):
            if not kept:
                to_delete.append(name)
                continue
            copy_ = copy.deepcopy(slice_)
            copy_["endpoints"] = kept
            copy_["metadata"]["labels"] = labels
            by_name[name] = copy_
            to_update.append(name)
        elif labels_changed:
            copy_ = copy.deepcopy(slice_)
            copy_["metadata"]["labels"] = labels
            by_name[name] = copy_
            to_update.append(name)
        else:
            unchanged.append(name)

    remaining = list(desired.values())
    if remaining and to_update:
        for slice_ in sorted((by_name[n] for n in to_update), key=lambda s: -len(s["endpoints"])):
            room = max_endpoints - len(slice_["endpoints"])
            if room > 0:
                slice_["endpoints"] += remaining[:room]
                remaining = remaining[room:]
    creates: list[Obj] = []
    while remaining:
        target = None
        if len(remaining) < max_endpoints and unchanged:
            target = slice_to_fill([by_name[n] for n in unchanged], len(remaining), max_endpoints)
        if target is None:
            target = new_slice(service, ports, address_type, controller_name)
        else:
            target = copy.deepcopy(target)
            by_name[target["metadata"]["name"]] = target
        room = max_endpoints - len(target["endpoints"])
        target["endpoints"] = target["endpoints"] + remaining[:room]
        remaining = remaining[room:]
        name = target["metadata"].get("name")
        if name:
            to_update.append(name)
            unchanged.remove(name)
        else:
            creates.append(target)
    return Plan(create=creates, update=[by_name[n] for n in to_update], delete=[by_name[n] for n in to_delete])


def reconcile(
    service: Obj, pods: list[Obj], node_for: Callable[[str], Obj | None], existing: list[Obj],
    max_endpoints: int = DEFAULT_MAX_ENDPOINTS_PER_SLICE, controller_name: str = CONTROLLER_NAME,
) -> tuple[Plan, list[str]]:
    """The writes that make a Service's managed slices match its pods, and the problems seen
    (pods on unknown nodes), which the caller retries.
    """
    plan = Plan()
    problems: list[str] = []
    wanted_types = address_types(service)
    by_type: dict[str, list[Obj]] = {}
    for slice_ in existing:
        if slice_.get("addressType") in wanted_types:
            by_type.setdefault(slice_["addressType"], []).append(slice_)
        else:
            plan.delete.append(slice_)
    for address_type in wanted_types:
        sub, found = _reconcile_address_type(service, pods, node_for, by_type.get(address_type, []),
                                             address_type, max_endpoints, controller_name)
        plan.extend(sub)
        problems += found
    return recycle(plan, service), problems


def _reconcile_address_type(
    service: Obj, pods: list[Obj], node_for: Callable[[str], Obj | None], existing: list[Obj],
    address_type: str, max_endpoints: int, controller_name: str,
) -> tuple[Plan, list[str]]:
    plan = Plan()
    problems: list[str] = []
    existing_by_ports: dict[PortKey, list[Obj]] = {}
    for slice_ in existing:
        if owned_by(slice_, service):
            existing_by_ports.setdefault(port_map_key(slice_.get("ports") or []), []).append(slice_)
        else:
            plan.delete.append(slice_)
    desired: dict[PortKey, dict[EndpointKey, Obj]] = {}
    ports_for: dict[PortKey, list[Obj]] = {}
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    svc_name = f"{service['metadata'].get('namespace')}/{service['metadata']['name']}"
    for pod in pods:
        if not should_pod_be_in_endpoints(pod, True):
            continue
        ports = endpoint_ports(service, pod)
        key = port_map_key(ports)
        group = desired.setdefault(key, {})
        ports_for.setdefault(key, ports)
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        node = node_for(node_name) if node_name else None
        if node is None and not publish:
            problems.append(f"skipping Pod {pod['metadata']['name']} for Service {svc_name}: "
                            f"Node {node_name} Not Found")
            continue
        endpoint = pod_to_endpoint(pod, node, service, address_type)
        if endpoint["addresses"]:
            group[endpoint_key(endpoint)] = endpoint
    for key, group in desired.items():
        plan.extend(reconcile_port_mapping(service, existing_by_ports.get(key, []), group, ports_for[key],
                                           address_type, max_endpoints, controller_name))
    for key, slices in existing_by_ports.items():
        if key not in desired:
            plan.delete += slices
    if len(existing) == len(plan.delete) and not plan.create:
        placeholder = new_slice(service, [], address_type, controller_name)
        if len(plan.delete) == 1 and _is_placeholder_of(plan.delete[0], placeholder):
            plan.delete = []
        else:
            plan.create.append(placeholder)
    return plan, problems


def recycle(plan: Plan, owner: Obj | None) -> Plan:
    """Turn creates into updates of slices about to be deleted (same address type, same owner)."""
    creates = list(plan.create)
    deletes = []
    updates = list(plan.update)
    for doomed in plan.delete:
        match = next((c for c in reversed(creates) if c["addressType"] == doomed.get("addressType")
                      and (owner is None or owned_by(doomed, owner))), None)
        if match is None:
            deletes.append(doomed)
            continue
        creates.remove(match)
        match["metadata"].pop("generateName", None)
        match["metadata"]["name"] = doomed["metadata"]["name"]
        updates.append(match)
    return Plan(create=creates, update=updates, delete=deletes)


async def apply_plan(client: Client, namespace: str, plan: Plan, tracker: SliceTracker, allow_create: bool) -> None:
    """Write a plan: creates (unless the owner is going away), then updates, then deletes."""
    if allow_create:
        for slice_ in plan.create:
            try:
                created = await client.create(ENDPOINT_SLICES, slice_, namespace)
            except ApiError as exc:
                if namespace_terminating(exc):
                    return
                raise
            tracker.update(created)
    for slice_ in plan.update:
        tracker.update(await client.replace(ENDPOINT_SLICES, slice_, namespace=namespace))
    for slice_ in plan.delete:
        try:
            await client.delete(ENDPOINT_SLICES, slice_["metadata"]["name"], namespace)
        except NotFound:
            pass
        tracker.expect_deletion(slice_)
