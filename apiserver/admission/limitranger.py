"""The LimitRanger admission plugin, as upstream's plugin/pkg/admission/limitranger: the LimitRanges of
a namespace give its pods' containers default limits and requests (mutating phase), then bound what
each container, each pod as a whole and each PersistentVolumeClaim asks for (validating phase).

It runs before ResourceQuota in both phases, so a quota charges the defaulted pod. Pod updates are left
alone (their containers' resources are immutable), as are objects already being deleted.

LimitRanges are read from the watch cache; a namespace the cache shows none for is looked up in etcd
and the answer kept for 30 s (upstream's live lookup), so a pod created right after the namespace's
first LimitRange is not let through for the cache's lag.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import OrderedDict
from collections.abc import Iterable
from decimal import Decimal

from apiserver.admission.interfaces import (
    CREATE,
    UPDATE,
    Attributes,
    MutationInterface,
    Obj,
    PluginConfig,
    ValidationInterface,
)
from apiserver.registry.podspec import default_requests_to_limits
from apiserver.storage.cache import decode
from services.api import errors
from services.api.quantity import canonicalize_quantity, parse_quantity
from services.api.quota import ResourceList, containers_total

ANNOTATION = "kubernetes.io/limit-ranger"
CONTAINER = "Container"
POD = "Pod"
CLAIM = "PersistentVolumeClaim"
#: the largest value whose thousandths still fit an int64 (upstream's resource.MaxMilliValue)
MAX_MILLI_VALUE = (2**63 - 1) // 1000
LIVE_LOOKUP_TTL = 30.0
LIVE_LOOKUP_ENTRIES = 10000
#: pod fields whose containers LimitRanger defaults and checks, with the name its annotation uses
CONTAINER_FIELDS = (("containers", "container"), ("initContainers", "init container"))


class LimitRanger(MutationInterface, ValidationInterface):
    name = "LimitRanger"
    operations = frozenset({CREATE, UPDATE})
    resources = frozenset({("", "pods"), ("", "persistentvolumeclaims")})

    def __init__(self, config: PluginConfig) -> None:
        super().__init__(config)
        self.prefix = f"{config.root}limitranges/"
        self._live: OrderedDict[str, tuple[float, list[Obj]]] = OrderedDict()

    async def admit(self, a: Attributes) -> None:
        if a.resource.plural != "pods" or not self._applies(a):
            return
        for limit_range in await self._limit_ranges(a.namespace):
            default_pod_resources(a.obj, limit_range)

    async def validate(self, a: Attributes) -> None:
        if not self._applies(a):
            return
        check = validate_pod if a.resource.plural == "pods" else validate_claim
        for limit_range in await self._limit_ranges(a.namespace):
            problems = check(a.obj, limit_range)
            if problems:
                raise errors.forbidden(a.resource.plural, "", a.name, aggregate(problems))

    @staticmethod
    def _applies(a: Attributes) -> bool:
        """Upstream's SupportsAttributes and its skip of objects being deleted."""
        if a.operation == UPDATE and a.resource.plural == "pods":
            return False
        return not (a.old is not None and (a.old.get("metadata") or {}).get("deletionTimestamp"))

    async def _limit_ranges(self, namespace: str) -> list[Obj]:
        """The namespace's LimitRanges in name order: the watch cache's, else a recent live lookup's."""
        start = f"{self.prefix}{namespace}/"
        cache = self.config.cache.resources.get(self.prefix)
        if cache is not None:
            keys = cache.sorted_keys()
            found = []
            for key in keys[bisect.bisect_left(keys, start):]:
                if not key.startswith(start):
                    break
                found.append(cache.entries[key].obj)
            if found:
                return found
        now = time.monotonic()
        hit = self._live.get(namespace)
        if hit is not None and hit[0] > now:
            return hit[1]
        kvs, _, _ = await self.config.cache.store.list(start)
        items = [decode(kv.value, kv.mod_revision) for kv in kvs]
        self._live[namespace] = (now + LIVE_LOOKUP_TTL, items)
        self._live.move_to_end(namespace)
        while len(self._live) > LIVE_LOOKUP_ENTRIES:
            self._live.popitem(last=False)
        return items


def _limits(limit_range: Obj) -> list[Obj]:
    return [item for item in (limit_range.get("spec") or {}).get("limits") or [] if isinstance(item, dict)]


def _containers(pod: Obj) -> Iterable[tuple[str, Obj]]:
    spec = pod.get("spec") or {}
    for field, label in CONTAINER_FIELDS:
        for container in spec.get(field) or []:
            if isinstance(container, dict):
                yield label, container


# -- defaults (mutating phase) ---------------------------------------------------------------------

def default_pod_resources(pod: Obj, limit_range: Obj) -> None:
    """Give each container the Container type's default limits and requests it does not set itself,
    and say so in the pod's `kubernetes.io/limit-ranger` annotation (upstream's PodMutateLimitFunc)."""
    limits: ResourceList = {}
    requests: ResourceList = {}
    for item in _limits(limit_range):
        if item.get("type") == CONTAINER:
            requests.update(item.get("defaultRequest") or {})
            limits.update(item.get("default") or {})
    notes: list[str] = []
    for label, container in _containers(pod):
        # Defaulting copies a container's own limits to its unset requests; upstream does that before
        # admission, so those requests are the container's, not the LimitRange's to fill.
        default_requests_to_limits(container)
        set_limits = _fill(container, "limits", limits)
        set_requests = _fill(container, "requests", requests)
        name = container.get("name") or ""
        if set_requests:
            notes.append(f"{', '.join(set_requests)} request for {label} {name}")
        if set_limits:
            notes.append(f"{', '.join(set_limits)} limit for {label} {name}")
    if notes:
        meta = pod.setdefault("metadata", {})
        annotations = meta.get("annotations")
        if not isinstance(annotations, dict):
            annotations = meta["annotations"] = {}
        annotations[ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)


def _fill(container: Obj, which: str, defaults: ResourceList) -> list[str]:
    """Set the defaults the container's `resources.<which>` lacks; the names set, sorted."""
    resources = container.get("resources")
    own = resources.get(which) if isinstance(resources, dict) else None
    missing = sorted(k for k in defaults if not isinstance(own, dict) or k not in own)
    if missing:
        if not isinstance(resources, dict):
            resources = container["resources"] = {}
        if not isinstance(own, dict):
            own = resources[which] = {}
        own.update({k: defaults[k] for k in missing})
    return missing


# -- constraints (validating phase) ----------------------------------------------------------------

def _comparable(*quantities: str | None) -> list[int]:
    """The quantities at a common precision, as upstream's requestLimitEnforcedValues: thousandths when
    none is too large for that, whole units otherwise, each rounded up; a missing one counts as 0."""
    values = [parse_quantity(q) if q is not None else Decimal(0) for q in quantities]
    whole = [math.ceil(v) for v in values]
    if all(w <= MAX_MILLI_VALUE for w in whole):
        return [math.ceil(v * 1000) for v in values]
    return whole


def _text(quantity: str) -> str:
    return canonicalize_quantity(quantity)


def min_constraint(kind: str, name: str, enforced: str, requests: ResourceList, limits: ResourceList) -> str:
    req, lim = requests.get(name), limits.get(name)
    observed_req, observed_lim, floor = _comparable(req, lim, enforced)
    if req is None:
        return f"minimum {name} usage per {kind} is {_text(enforced)}.  No request is specified"
    if observed_req < floor:
        return f"minimum {name} usage per {kind} is {_text(enforced)}, but request is {_text(req)}"
    if lim is not None and observed_lim < floor:
        return f"minimum {name} usage per {kind} is {_text(enforced)}, but limit is {_text(lim)}"
    return ""


def max_constraint(kind: str, name: str, enforced: str, requests: ResourceList, limits: ResourceList) -> str:
    req, lim = requests.get(name), limits.get(name)
    observed_req, observed_lim, ceiling = _comparable(req, lim, enforced)
    if lim is None:
        return f"maximum {name} usage per {kind} is {_text(enforced)}.  No limit is specified"
    if observed_lim > ceiling:
        return f"maximum {name} usage per {kind} is {_text(enforced)}, but limit is {_text(lim)}"
    if req is not None and observed_req > ceiling:
        return f"maximum {name} usage per {kind} is {_text(enforced)}, but request is {_text(req)}"
    return ""


def max_request_constraint(kind: str, name: str, enforced: str, requests: ResourceList) -> str:
    """The max of a kind that has requests only (claims)."""
    req = requests.get(name)
    observed_req, _, ceiling = _comparable(req, None, enforced)
    if req is None:
        return f"maximum {name} usage per {kind} is {_text(enforced)}.  No request is specified"
    if observed_req > ceiling:
        return f"maximum {name} usage per {kind} is {_text(enforced)}, but request is {_text(req)}"
    return ""


def ratio_constraint(kind: str, name: str, enforced: str, requests: ResourceList, limits: ResourceList) -> str:
    req, lim = requests.get(name), limits.get(name)
    observed_req, observed_lim, _ = _comparable(req, lim, enforced)
    if req is None or observed_req == 0:
        return (f"{name} max limit to request ratio per {kind} is {_text(enforced)}, but no request is "
                "specified or request is 0")
    if lim is None or observed_lim == 0:
        return (f"{name} max limit to request ratio per {kind} is {_text(enforced)}, but no limit is "
                "specified or limit is 0")
    ratio = observed_lim / observed_req
    shown = ratio
    allowed = parse_quantity(enforced)
    ceiling = float(math.ceil(allowed))
    if math.ceil(allowed) <= MAX_MILLI_VALUE:
        ratio *= 1000
        ceiling = float(math.ceil(allowed * 1000))
    if ratio > ceiling:
        return f"{name} max limit to request ratio per {kind} is {_text(enforced)}, but provided ratio is {shown:f}"
    return ""


def _check(item: Obj, kind: str, requests: ResourceList, limits: ResourceList) -> list[str]:
    problems = [min_constraint(kind, k, v, requests, limits) for k, v in (item.get("min") or {}).items()]
    problems += [max_constraint(kind, k, v, requests, limits) for k, v in (item.get("max") or {}).items()]
    problems += [ratio_constraint(kind, k, v, requests, limits)
                 for k, v in (item.get("maxLimitRequestRatio") or {}).items()]
    return [p for p in problems if p]


def _resources(container: Obj, which: str) -> ResourceList:
    return (container.get("resources") or {}).get(which) or {}


def validate_pod(pod: Obj, limit_range: Obj) -> list[str]:
    """What the pod's containers (each) and the pod (their sum) break of the LimitRange (upstream's
    PodValidateLimitFunc)."""
    problems: list[str] = []
    for item in _limits(limit_range):
        kind = item.get("type")
        if kind == CONTAINER:
            for _, container in _containers(pod):
                problems += _check(item, CONTAINER, _resources(container, "requests"), _resources(container, "limits"))
        elif kind == POD:
            spec = pod.get("spec") or {}
            problems += _check(item, POD, containers_total(spec, "requests"), containers_total(spec, "limits"))
    return problems


def validate_claim(claim: Obj, limit_range: Obj) -> list[str]:
    """The claim's storage request against the PersistentVolumeClaim type's min and max (limits are
    not the user's to give on a claim, so only the request counts)."""
    requests = ((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}
    problems: list[str] = []
    for item in _limits(limit_range):
        if item.get("type") != CLAIM:
            continue
        problems += [min_constraint(CLAIM, k, v, requests, {}) for k, v in (item.get("min") or {}).items()]
        problems += [max_request_constraint(CLAIM, k, v, requests) for k, v in (item.get("max") or {}).items()]
    return [p for p in problems if p]


def aggregate(messages: list[str]) -> str:
    """Several errors as upstream's utilerrors.Aggregate prints them: duplicates once, `[a, b]`."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]"
