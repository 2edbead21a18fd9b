"""ResourceQuota evaluation, shared by the apiserver's quota admission and the controller-manager's
quota controller, which must agree on what every object uses (upstream's pkg/quota/v1).

An evaluator knows one resource: which quota resource names it accounts for, what one object of it
uses, which quota scopes the object falls under, and what a pod must declare before a quota on
compute resources admits it. Resource lists are plain dicts of name to quantity string, as in JSON.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from services.api.quantity import canonicalize_quantity, format_quantity, parse_quantity

Obj = dict[str, Any]
ResourceList = dict[str, str]

#: resources upstream's quota never charges (its DefaultIgnoredResources)
IGNORED = frozenset({("", "events")})
#: resources counted under a legacy name as well as `count/<resource>`
LEGACY_ALIASES = {("", "configmaps"): "configmaps", ("", "resourcequotas"): "resourcequotas",
                  ("", "replicationcontrollers"): "replicationcontrollers", ("", "secrets"): "secrets"}
STORAGE_CLASS_SUFFIX = ".storageclass.storage.k8s.io/"
TERMINAL_PHASES = ("Succeeded", "Failed")

POD_RESOURCES = frozenset({
    "pods", "count/pods", "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory",
    "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage",
})
POD_RESOURCE_PREFIXES = ("hugepages-", "requests.hugepages-")
#: compute resources every container must declare once a matching quota limits them
MUST_SPECIFY = frozenset({"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"})
SERVICE_RESOURCES = frozenset({"services", "count/services", "services.nodeports", "services.loadbalancers"})
PVC_RESOURCES = frozenset({"persistentvolumeclaims", "requests.storage"})


# -- resource lists --------------------------------------------------------------------------------

def _value(quantity: Any) -> Decimal:
    try:
        return parse_quantity(quantity)
    except ValueError:
        return Decimal(0)


def _text(quantity: Any) -> str:
    """A quantity as upstream prints it (String() of the parsed value)."""
    try:
        return canonicalize_quantity(quantity)
    except ValueError:
        return "0"


def add(a: ResourceList, b: ResourceList) -> ResourceList:
    """a + b per name; a sum keeps the format of its first non-zero term, like Quantity.Add."""
    out = dict(a)
    for name, value in b.items():
        if name not in out:
            out[name] = _text(value)
            continue
        first = out[name]
        total = _value(first) + _value(value)
        out[name] = format_quantity(total, _text(first if _value(first) != 0 else value))
    return out


def mask(items: ResourceList, names: Iterable[str]) -> ResourceList:
    keep = set(names)
    return {k: v for k, v in items.items() if k in keep}


def equals(a: ResourceList, b: ResourceList) -> bool:
    """Same names with the same values (`1Gi` equals `1024Mi`)."""
    return a.keys() == b.keys() and all(_value(v) == _value(b[k]) for k, v in a.items())


def exceeded(used: ResourceList, hard: ResourceList) -> list[str]:
    """Names whose use is above the hard limit (upstream's LessThanOrEqual, the failing side)."""
    return [name for name, limit in hard.items() if name in used and _value(used[name]) > _value(limit)]


def is_zero(items: ResourceList) -> bool:
    return all(_value(v) == 0 for v in items.values())


def negative(items: ResourceList) -> list[str]:
    return sorted(k for k, v in items.items() if _value(v) < 0)


def pretty(items: ResourceList) -> str:
    """`name=value,...` sorted by name: how quota errors show resource lists."""
    return ",".join(f"{k}={_text(items[k])}" for k in sorted(items))


def _max(a: ResourceList, b: ResourceList) -> ResourceList:
    out = dict(a)
    for name, value in b.items():
        if name not in out or _value(value) > _value(out[name]):
            out[name] = _text(value)
    return out


# -- quotas ----------------------------------------------------------------------------------------

def scope_selectors(quota: Obj) -> list[Obj]:
    """spec.scopes as Exists requirements followed by spec.scopeSelector's expressions."""
    spec = quota.get("spec") or {}
    out: list[Obj] = [{"scopeName": s, "operator": "Exists"} for s in spec.get("scopes") or []]
    out.extend((spec.get("scopeSelector") or {}).get("matchExpressions") or [])
    return out


def status_hard(quota: Obj) -> ResourceList:
    return ((quota.get("status") or {}).get("hard")) or {}


def status_used(quota: Obj) -> ResourceList:
    return ((quota.get("status") or {}).get("used")) or {}


def matches(quota: Obj, evaluator: Evaluator, obj: Obj) -> bool:
    """Whether the quota, as the controller last computed it, limits something `obj` uses and its scopes take it."""
    if not evaluator.matching_resources(status_hard(quota)):
        return False
    return all(evaluator.matches_scope(s, obj) for s in scope_selectors(quota))


def has_usage_stats(quota: Obj, names: Iterable[str]) -> bool:
    used = status_used(quota)
    return all(name in used for name in names if name in status_hard(quota))


def total_usage(quota: Obj, evaluator: Evaluator, objects: Iterable[Obj], now: datetime | None = None) -> ResourceList:
    """What the objects the quota's scopes take use of the names its spec.hard tracks, zero included
    (upstream's CalculateUsageStats)."""
    tracked = evaluator.matching_resources((quota.get("spec") or {}).get("hard") or {})
    selectors = scope_selectors(quota)
    sums = dict.fromkeys(tracked, Decimal(0))
    formats: dict[str, str] = {}
    for obj in objects:
        if not all(evaluator.matches_scope(s, obj) for s in selectors):
            continue
        for name, value in evaluator.usage(obj, now).items():
            if name in sums:
                amount = _value(value)
                if name not in formats and amount != 0:
                    formats[name] = _text(value)
                sums[name] += amount
    return {name: format_quantity(total, formats.get(name, "")) for name, total in sums.items()}


def count_name(group: str, resource: str) -> str:
    return f"count/{resource}.{group}" if group else f"count/{resource}"


# -- evaluators ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Evaluator:
    """Object counts: `count/<resource>[.<group>]` and, for a few core resources, a legacy name."""

    group: str
    resource: str
    alias: str = ""

    def matching_resources(self, names: Iterable[str]) -> list[str]:
        mine = {count_name(self.group, self.resource), self.alias} - {""}
        return [n for n in names if n in mine]

    def usage(self, obj: Obj, now: datetime | None = None) -> ResourceList:
        out = {count_name(self.group, self.resource): "1"}
        if self.alias:
            out[self.alias] = "1"
        return out

    def matches_scope(self, selector: Obj, obj: Obj) -> bool:
        """Scopes select pods only: a scoped quota never counts anything else."""
        return False

    def constraints(self, required: Iterable[str], obj: Obj) -> str:
        """What the object lacks for quotas limiting `required`; empty when it may be admitted."""
        return ""

    def frees_usage(self, old: Obj, new: Obj) -> bool:
        """Whether an update may lower what the object uses, so quotas must be recalculated."""
        return False


class PodEvaluator(Evaluator):
    def matching_resources(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if n in POD_RESOURCES or n.startswith(POD_RESOURCE_PREFIXES)
                or (n.startswith("requests.") and _extended(n[len("requests."):]))]

    def usage(self, obj: Obj, now: datetime | None = None) -> ResourceList:
        """count/pods for every pod; compute resources and `pods` only while it is not finished."""
        out = {"count/pods": "1"}
        if not pod_counts(obj, now):
            return out
        spec = obj.get("spec") or {}
        return add(out, _compute_usage(pod_requests(spec), pod_limits(spec)))

    def matches_scope(self, selector: Obj, obj: Obj) -> bool:
        spec = obj.get("spec") or {}
        scope = selector.get("scopeName")
        if scope in ("Terminating", "NotTerminating"):
            deadline = spec.get("activeDeadlineSeconds")
            terminating = isinstance(deadline, int) and deadline >= 0
            return terminating if scope == "Terminating" else not terminating
        if scope in ("BestEffort", "NotBestEffort"):
            return best_effort(obj) == (scope == "BestEffort")
        if scope == "PriorityClass":
            value = spec.get("priorityClassName") or ""
            op = selector.get("operator")
            if op == "Exists":
                return bool(value)
            values = selector.get("values") or []
            return {"In": value in values, "NotIn": value not in values}.get(op, False)
        if scope == "CrossNamespacePodAffinity":
            return _cross_namespace_affinity(spec)
        return False

    def constraints(self, required: Iterable[str], obj: Obj) -> str:
        """Upstream's old rule: a quota on cpu or memory needs every container to declare them."""
        wanted = MUST_SPECIFY.intersection(required)
        if not wanted:
            return ""
        spec = obj.get("spec") or {}
        missing: dict[str, set[str]] = {}
        for container in _containers(spec, "containers") + _containers(spec, "initContainers"):
            resources = container.get("resources") or {}
            declared = _compute_usage(resources.get("requests") or {}, resources.get("limits") or {})
            for name in wanted.difference(declared):
                missing.setdefault(name, set()).add(str(container.get("name", "")))
        if not missing:
            return ""
        return "must specify " + "; ".join(f"{name} for: {','.join(sorted(missing[name]))}" for name in sorted(missing))

    def frees_usage(self, old: Obj, new: Obj) -> bool:
        return pod_counts(old) and not pod_counts(new)


class ServiceEvaluator(Evaluator):
    def matching_resources(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if n in SERVICE_RESOURCES]

    def usage(self, obj: Obj, now: datetime | None = None) -> ResourceList:
        spec = obj.get("spec") or {}
        ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
        kind = spec.get("type")
        node_ports = 0
        if kind == "NodePort" or (kind == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is not False):
            node_ports = len(ports)
        elif kind == "LoadBalancer":
            node_ports = sum(1 for p in ports if p.get("nodePort"))
        return {"count/services": "1", "services": "1", "services.nodeports": str(node_ports),
                "services.loadbalancers": "1" if kind == "LoadBalancer" else "0"}

    def frees_usage(self, old: Obj, new: Obj) -> bool:
        return _quota_service_type(old) != _quota_service_type(new)


class PVCEvaluator(Evaluator):
    def matching_resources(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if n in PVC_RESOURCES or n == "count/persistentvolumeclaims"
                or any(n.endswith(STORAGE_CLASS_SUFFIX + r) for r in PVC_RESOURCES)]

    def usage(self, obj: Obj, now: datetime | None = None) -> ResourceList:
        out = {"persistentvolumeclaims": "1", "count/persistentvolumeclaims": "1"}
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        spec = obj.get("spec") or {}
        storage_class = annotations.get("volume.beta.kubernetes.io/storage-class") or spec.get("storageClassName") or ""
        if storage_class:
            out[f"{storage_class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"] = "1"
        requested = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        allocated = ((obj.get("status") or {}).get("allocatedResources") or {}).get("storage")
        if allocated is not None and (requested is None or _value(allocated) > _value(requested)):
            requested = allocated
        if requested is not None:
            out["requests.storage"] = _text(requested)
            if storage_class:
                out[f"{storage_class}{STORAGE_CLASS_SUFFIX}requests.storage"] = _text(requested)
        return out

    def frees_usage(self, old: Obj, new: Obj) -> bool:
        return not equals(self.usage(old), self.usage(new))


@functools.cache
def evaluator_for(group: str, resource: str) -> Evaluator | None:
    """The evaluator of a resource, or None for resources quota ignores."""
    if (group, resource) in IGNORED:
        return None
    if group == "":
        special = {"pods": PodEvaluator, "services": ServiceEvaluator, "persistentvolumeclaims": PVCEvaluator}
        if resource in special:
            return special[resource](group, resource)
    return Evaluator(group, resource, LEGACY_ALIASES.get((group, resource), ""))


def evaluators_for(names: Iterable[str]) -> list[Evaluator]:
    """The evaluators that account for any of the quota resource names, each once."""
    names = list(names)
    out: list[Evaluator] = []
    candidates = [evaluator_for("", r) for r in ("pods", "services", "persistentvolumeclaims")]
    candidates += [evaluator_for(g, r) for g, r in LEGACY_ALIASES]
    for name in names:
        if name.startswith("count/"):
            resource, _, group = name[len("count/"):].partition(".")
            candidates.append(evaluator_for(group, resource))
    for ev in candidates:
        if ev is not None and ev not in out and ev.matching_resources(names):
            out.append(ev)
    return out


# -- pods ------------------------------------------------------------------------------------------

def _containers(spec: Obj, key: str) -> list[Obj]:
    return [c for c in spec.get(key) or [] if isinstance(c, dict)]


def _resources(container: Obj, kind: str) -> ResourceList:
    return ((container.get("resources") or {}).get(kind)) or {}


def containers_total(spec: Obj, kind: str) -> ResourceList:
    """Upstream's PodRequests/PodLimits without the pod's overhead (what LimitRanger checks): containers
    and sidecars add up; each regular init container, with the sidecars started before it, is only a floor."""
    total: ResourceList = {}
    for container in _containers(spec, "containers"):
        total = add(total, _resources(container, kind))
    sidecars: ResourceList = {}
    init_floor: ResourceList = {}
    for container in _containers(spec, "initContainers"):
        own = _resources(container, kind)
        if container.get("restartPolicy") == "Always":
            total = add(total, own)
            sidecars = add(sidecars, own)
            init_floor = _max(init_floor, sidecars)
        else:
            init_floor = _max(init_floor, add(own, sidecars))
    return _max(total, init_floor)


def pod_requests(spec: Obj) -> ResourceList:
    requests = containers_total(spec, "requests")
    overhead = spec.get("overhead") or {}
    return add(requests, overhead) if overhead else requests


def pod_limits(spec: Obj) -> ResourceList:
    """Overhead is added only to resources that have a limit."""
    limits = containers_total(spec, "limits")
    overhead = mask(spec.get("overhead") or {}, limits)
    return add(limits, overhead) if overhead else limits


def _extended(name: str) -> bool:
    """An extended resource (`example.com/gpu`): a domain that is not kubernetes.io's."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _compute_usage(requests: ResourceList, limits: ResourceList) -> ResourceList:
    out: ResourceList = {"pods": "1"}
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in requests:
            out[name] = out[f"requests.{name}"] = _text(requests[name])
        if name in limits:
            out[f"limits.{name}"] = _text(limits[name])
    for name, value in requests.items():
        if name.startswith("hugepages-"):
            out[name] = out[f"requests.{name}"] = _text(value)
        elif _extended(name):
            out[f"requests.{name}"] = _text(value)
    return out


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None


def pod_counts(pod: Obj, now: datetime | None = None) -> bool:
    """Whether a pod is charged for compute resources: not finished, and not stuck deleting past its grace."""
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return False
    meta = pod.get("metadata") or {}
    grace = meta.get("deletionGracePeriodSeconds")
    deleted = _parse_time(meta["deletionTimestamp"]) if meta.get("deletionTimestamp") else None
    if deleted is not None and isinstance(grace, int):
        moment = now or datetime.now(deleted.tzinfo)
        if (moment - deleted).total_seconds() > grace:
            return False
    return True


def best_effort(pod: Obj) -> bool:
    """QoS class BestEffort: no container asks for or caps cpu or memory."""
    qos = (pod.get("status") or {}).get("qosClass")
    if qos:
        return bool(qos == "BestEffort")
    spec = pod.get("spec") or {}
    for container in _containers(spec, "containers") + _containers(spec, "initContainers"):
        for kind in ("requests", "limits"):
            for name, value in _resources(container, kind).items():
                if name in ("cpu", "memory") and _value(value) > 0:
                    return False
    return True


def _cross_namespace_affinity(spec: Obj) -> bool:
    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        block = affinity.get(kind) or {}
        terms = list(block.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [t.get("podAffinityTerm") or {} for t in block.get("preferredDuringSchedulingIgnoredDuringExecution")
                  or [] if isinstance(t, dict)]
        if any(isinstance(t, dict) and (t.get("namespaces") or t.get("namespaceSelector") is not None) for t in terms):
            return True
    return False


def _quota_service_type(service: Obj) -> str:
    kind = (service.get("spec") or {}).get("type")
    return kind if kind in ("NodePort", "LoadBalancer") else ""
