"""The framework's data types: resources, pods and nodes as the scheduler tracks them.

Mirrors upstream's `pkg/scheduler/framework/types.go`. Objects are plain dicts (the API's JSON);
these types only wrap them with what the scheduler needs to decide quickly: parsed resource
requests, affinity terms and per-node aggregates.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from services.api.quantity import parse_quantity
from services.api.selectors import LabelSelector, Requirement

Obj = dict[str, Any]

# Requests assumed for a container that asks for nothing, so empty pods still spread (upstream values).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024


# --------------------------------------------------------------------------------------------------
# Resources


@lru_cache(maxsize=4096)
def _milli(value: str | int | float) -> int:
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


@lru_cache(maxsize=4096)
def _whole(value: str | int | float) -> int:
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


def quantity_value(name: str, value: str | int | float) -> int:
    """A resource quantity in the unit the scheduler counts it in: millicores for cpu, else units."""
    return _milli(value) if name == "cpu" else _whole(value)


def is_scalar_resource(name: str) -> bool:
    """Extended resources, hugepages and attachable volumes are counted as scalars, like upstream."""
    if name in ("cpu", "memory", "ephemeral-storage", "pods"):
        return False
    if name.startswith("hugepages-") or name.startswith("attachable-volumes-"):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


class Resource:
    """A set of resource amounts: cpu in millicores, memory and storage in bytes, scalars in units."""

    __slots__ = ("milli_cpu", "memory", "ephemeral_storage", "allowed_pod_number", "scalar")

    def __init__(
        self, milli_cpu: int = 0, memory: int = 0, ephemeral_storage: int = 0,
        allowed_pod_number: int = 0, scalar: dict[str, int] | None = None,
    ) -> None:
        self.milli_cpu = milli_cpu
        self.memory = memory
        self.ephemeral_storage = ephemeral_storage
        self.allowed_pod_number = allowed_pod_number
        self.scalar: dict[str, int] = scalar if scalar is not None else {}

    @classmethod
    def from_list(cls, rl: Mapping[str, Any] | None) -> Resource:
        r = cls()
        if rl:
            r.add_list(rl)
        return r

    def add_list(self, rl: Mapping[str, Any]) -> None:
        for name, q in rl.items():
            self.set(name, self.get(name) + quantity_value(name, q))

    def get(self, name: str) -> int:
        if name == "cpu":
            return self.milli_cpu
        if name == "memory":
            return self.memory
        if name == "ephemeral-storage":
            return self.ephemeral_storage
        if name == "pods":
            return self.allowed_pod_number
        return self.scalar.get(name, 0)

    def set(self, name: str, value: int) -> None:
        if name == "cpu":
            self.milli_cpu = value
        elif name == "memory":
            self.memory = value
        elif name == "ephemeral-storage":
            self.ephemeral_storage = value
        elif name == "pods":
            self.allowed_pod_number = value
        elif is_scalar_resource(name):
            self.scalar[name] = value

    def add(self, other: Resource, sign: int = 1) -> None:
        self.milli_cpu += sign * other.milli_cpu
        self.memory += sign * other.memory
        self.ephemeral_storage += sign * other.ephemeral_storage
        self.allowed_pod_number += sign * other.allowed_pod_number
        for name, v in other.scalar.items():
            self.scalar[name] = self.scalar.get(name, 0) + sign * v

    def set_max(self, other: Resource) -> None:
        self.milli_cpu = max(self.milli_cpu, other.milli_cpu)
        self.memory = max(self.memory, other.memory)
        self.ephemeral_storage = max(self.ephemeral_storage, other.ephemeral_storage)
        for name, v in other.scalar.items():
            if v > self.scalar.get(name, 0):
                self.scalar[name] = v

    def names(self) -> Iterable[str]:
        yield from ("cpu", "memory", "ephemeral-storage")
        yield from self.scalar

    def clone(self) -> Resource:
        return Resource(self.milli_cpu, self.memory, self.ephemeral_storage, self.allowed_pod_number,
                        dict(self.scalar))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Resource) and (
            self.milli_cpu, self.memory, self.ephemeral_storage, self.allowed_pod_number, self.scalar,
        ) == (other.milli_cpu, other.memory, other.ephemeral_storage, other.allowed_pod_number, other.scalar)

    def __repr__(self) -> str:
        return (f"Resource(cpu={self.milli_cpu}m, memory={self.memory}, ephemeral={self.ephemeral_storage}, "
                f"pods={self.allowed_pod_number}, scalar={self.scalar})")


def _container_requests(c: Mapping[str, Any]) -> Mapping[str, Any]:
    res = c.get("resources") or {}
    req = res.get("requests")
    if req is None:
        # Limits without requests default the requests (the apiserver does it; stay safe if it did not).
        return res.get("limits") or {}
    return req


def _is_sidecar(c: Mapping[str, Any]) -> bool:
    return c.get("restartPolicy") == "Always"


def pod_requests(pod: Obj, non_missing: bool = False) -> Resource:
    """What a pod asks for: max(sum(app containers) + sidecars, each init container's peak) + overhead.

    `non_missing` substitutes upstream's defaults (100m cpu, 200Mi memory) for containers that
    request no cpu or memory, which is what scoring uses so that best-effort pods still spread.
    """
    spec = pod.get("spec") or {}
    if spec.get("initContainers") or spec.get("overhead"):
        return _pod_requests(spec, non_missing)
    # Plain pods are remembered by their containers' requests: a cycle, the cache and the event
    # handlers each ask again for the same pod, and a workload's pods all ask alike.
    try:
        key = (non_missing, *[tuple(_container_requests(c).items()) for c in spec.get("containers") or ()])
        known = _REQUESTS_MEMO.get(key)
    except TypeError:
        return _pod_requests(spec, non_missing)
    if known is None:
        if len(_REQUESTS_MEMO) >= _REQUESTS_MEMO_MAX:
            _REQUESTS_MEMO.clear()
        known = _REQUESTS_MEMO[key] = _pod_requests(spec, non_missing)
    return known.clone()


_REQUESTS_MEMO: dict[tuple[Any, ...], Resource] = {}
_REQUESTS_MEMO_MAX = 1024


def _pod_requests(spec: Obj, non_missing: bool) -> Resource:
    def requests_of(c: Mapping[str, Any]) -> Resource:
        req = _container_requests(c)
        r = Resource.from_list(req)
        if non_missing:
            if "cpu" not in req:
                r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST
            if "memory" not in req:
                r.memory = DEFAULT_MEMORY_REQUEST
        return r

    total = Resource()
    for c in spec.get("containers") or ():
        total.add(requests_of(c))
    sidecars = Resource()
    init_peak = Resource()
    for c in spec.get("initContainers") or ():
        r = requests_of(c)
        if _is_sidecar(c):
            sidecars.add(r)
            total.add(r)
            init_peak.set_max(sidecars)
        else:
            # A regular init container runs alongside the sidecars started before it.
            step = sidecars.clone()
            step.add(r)
            init_peak.set_max(step)
    total.set_max(init_peak)
    overhead = spec.get("overhead")
    if overhead:
        total.add(Resource.from_list(overhead))
    return total


# --------------------------------------------------------------------------------------------------
# Pods


@dataclass(slots=True)
class AffinityTerm:
    """A parsed pod (anti-)affinity term: which pods (selector, namespaces) and where (topology key)."""

    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector
    topology_key: str

    def matches(self, pod: Obj, ns_labels: Mapping[str, str] | None) -> bool:
        """Does `pod` (whose namespace has `ns_labels`) fall under this term?"""
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace", "")
        if ns not in self.namespaces and not self.namespace_selector.matches(ns_labels or {}):
            return False
        return self.selector.matches(meta.get("labels") or {})


@dataclass(slots=True)
class WeightedAffinityTerm:
    term: AffinityTerm
    weight: int


def _parse_term(pod: Obj, term: Mapping[str, Any]) -> AffinityTerm:
    namespaces = frozenset(term.get("namespaces") or ())
    ns_sel_spec = term.get("namespaceSelector")
    if not namespaces and ns_sel_spec is None:
        namespaces = frozenset([(pod.get("metadata") or {}).get("namespace", "")])
    ns_sel = LabelSelector.from_dict(ns_sel_spec) if ns_sel_spec is not None else LabelSelector.nothing()
    selector_spec = term.get("labelSelector")
    selector = LabelSelector.from_dict(selector_spec) if selector_spec is not None else LabelSelector.nothing()
    labels = (pod.get("metadata") or {}).get("labels") or {}
    extra = [Requirement(k, "in", (labels[k],)) for k in term.get("matchLabelKeys") or () if k in labels]
    extra += [Requirement(k, "notin", (labels[k],)) for k in term.get("mismatchLabelKeys") or () if k in labels]
    if extra and selector_spec is not None:
        selector = LabelSelector([*selector.requirements, *extra])
    return AffinityTerm(selector, namespaces, ns_sel, term.get("topologyKey", ""))


class PodInfo:
    """A pod with its (anti-)affinity terms parsed once, shared by every cycle that looks at it."""

    __slots__ = (
        "pod", "required_affinity_terms", "required_anti_affinity_terms",
        "preferred_affinity_terms", "preferred_anti_affinity_terms", "_requests", "_non_zero", "_host_ports",
    )

    def __init__(self, pod: Obj) -> None:
        self.update(pod)

    def update(self, pod: Obj) -> None:
        self.pod = pod
        self._requests: Resource | None = None
        self._non_zero: Resource | None = None
        self._host_ports: list[tuple[str, str, int]] | None = None
        aff = ((pod.get("spec") or {}).get("affinity")) or {}
        pa = aff.get("podAffinity") or {}
        paa = aff.get("podAntiAffinity") or {}
        self.required_affinity_terms = [
            _parse_term(pod, t) for t in pa.get("requiredDuringSchedulingIgnoredDuringExecution") or ()]
        self.required_anti_affinity_terms = [
            _parse_term(pod, t) for t in paa.get("requiredDuringSchedulingIgnoredDuringExecution") or ()]
        self.preferred_affinity_terms = [
            WeightedAffinityTerm(_parse_term(pod, w.get("podAffinityTerm") or {}), int(w.get("weight", 0)))
            for w in pa.get("preferredDuringSchedulingIgnoredDuringExecution") or ()]
        self.preferred_anti_affinity_terms = [
            WeightedAffinityTerm(_parse_term(pod, w.get("podAffinityTerm") or {}), int(w.get("weight", 0)))
            for w in paa.get("preferredDuringSchedulingIgnoredDuringExecution") or ()]

    @property
    def requests(self) -> Resource:
        """The pod's effective requests (see `pod_requests`), computed once."""
        if self._requests is None:
            self._requests = pod_requests(self.pod)
        return self._requests

    @property
    def non_zero_requests(self) -> Resource:
        if self._non_zero is None:
            self._non_zero = pod_requests(self.pod, non_missing=True)
        return self._non_zero

    @property
    def host_ports(self) -> list[tuple[str, str, int]]:
        if self._host_ports is None:
            self._host_ports = pod_host_ports(self.pod)
        return self._host_ports

    @property
    def uid(self) -> str:
        return self.pod["metadata"].get("uid", "")

    @property
    def key(self) -> str:
        m = self.pod["metadata"]
        return f"{m.get('namespace', '')}/{m['name']}"

    def has_affinity(self) -> bool:
        return bool(self.required_affinity_terms or self.required_anti_affinity_terms
                    or self.preferred_affinity_terms or self.preferred_anti_affinity_terms)


def pod_key(pod: Obj) -> str:
    m = pod["metadata"]
    return f"{m.get('namespace', '')}/{m['name']}"


def pod_priority(pod: Obj) -> int:
    p = (pod.get("spec") or {}).get("priority")
    return int(p) if p is not None else 0


_arrival = itertools.count()


@dataclass(slots=True, eq=False)
class QueuedPodInfo:
    """A pod waiting in the scheduling queue, with the bookkeeping the queue and PostFilter need."""

    pod_info: PodInfo
    timestamp: float = 0.0
    initial_attempt_timestamp: float | None = None
    attempts: int = 0
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    gated: bool = False
    gating_plugin: str = ""
    seq: int = field(default_factory=lambda: next(_arrival))

    @property
    def pod(self) -> Obj:
        return self.pod_info.pod


# --------------------------------------------------------------------------------------------------
# Nodes


@dataclass(slots=True)
class ImageStateSummary:
    size: int
    num_nodes: int


def normalized_image_name(name: str) -> str:
    """`nginx` and `nginx:latest` name the same image; a digest or explicit tag stays as is."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


class HostPortInfo:
    """Host ports in use on a node: ip -> {(protocol, port)}; 0.0.0.0 conflicts with every ip."""

    __slots__ = ("_ports",)

    def __init__(self) -> None:
        self._ports: dict[str, set[tuple[str, int]]] = {}

    @staticmethod
    def _sanitize(ip: str | None, protocol: str | None) -> tuple[str, str]:
        return ip or "0.0.0.0", protocol or "TCP"

    def add(self, ip: str | None, protocol: str | None, port: int) -> None:
        if port <= 0:
            return
        ip, protocol = self._sanitize(ip, protocol)
        self._ports.setdefault(ip, set()).add((protocol, port))

    def remove(self, ip: str | None, protocol: str | None, port: int) -> None:
        if port <= 0:
            return
        ip, protocol = self._sanitize(ip, protocol)
        entries = self._ports.get(ip)
        if entries is not None:
            entries.discard((protocol, port))
            if not entries:
                del self._ports[ip]

    def check_conflict(self, ip: str | None, protocol: str | None, port: int) -> bool:
        if port <= 0:
            return False
        ip, protocol = self._sanitize(ip, protocol)
        pp = (protocol, port)
        if ip == "0.0.0.0":
            return any(pp in entries for entries in self._ports.values())
        return pp in self._ports.get("0.0.0.0", ()) or pp in self._ports.get(ip, ())

    def __len__(self) -> int:
        return sum(len(v) for v in self._ports.values())

    def clone(self) -> HostPortInfo:
        other = HostPortInfo()
        other._ports = {ip: set(v) for ip, v in self._ports.items()}
        return other


def pod_host_ports(pod: Obj) -> list[tuple[str, str, int]]:
    """(hostIP, protocol, hostPort) of every container port that claims a host port."""
    out = []
    spec = pod.get("spec") or {}
    for containers in (spec.get("initContainers") or (), spec.get("containers") or ()):
        for c in containers:
            for p in c.get("ports") or ():
                hp = p.get("hostPort") or 0
                if hp > 0:
                    out.append((p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", int(hp)))
    return out


_generation = itertools.count(1)


def next_generation() -> int:
    return next(_generation)


class NodeInfo:
    """A node and everything the scheduler tracks about it: pods, requested resources, ports, images."""

    __slots__ = (
        "node", "name", "pods", "pods_with_affinity", "pods_with_required_anti_affinity", "used_ports",
        "requested", "non_zero_requested", "allocatable", "image_states", "pvc_ref_counts", "generation",
        "labels", "taints", "unschedulable",
    )

    def __init__(self, node: Obj | None = None) -> None:
        self.node: Obj | None = None
        self.name = ""
        self.pods: list[PodInfo] = []
        self.pods_with_affinity: list[PodInfo] = []
        self.pods_with_required_anti_affinity: list[PodInfo] = []
        self.used_ports = HostPortInfo()
        self.requested = Resource()
        self.non_zero_requested = Resource()
        self.allocatable = Resource()
        self.image_states: dict[str, ImageStateSummary] = {}
        self.pvc_ref_counts: dict[str, int] = {}
        self.generation = next_generation()
        # Read from the node once: filters and scores look at them for every node every cycle.
        self.labels: Mapping[str, str] = {}
        self.taints: list[Obj] = []
        self.unschedulable = False
        if node is not None:
            self.set_node(node)

    def set_node(self, node: Obj) -> None:
        self.node = node
        self.name = node["metadata"]["name"]
        self.allocatable = Resource.from_list((node.get("status") or {}).get("allocatable"))
        self.labels = (node.get("metadata") or {}).get("labels") or {}
        spec = node.get("spec") or {}
        self.taints = spec.get("taints") or []
        self.unschedulable = bool(spec.get("unschedulable"))
        self.generation = next_generation()

    def remove_node(self) -> None:
        self.node = None
        self.labels = {}
        self.taints = []
        self.unschedulable = False
        self.generation = next_generation()

    def add_pod(self, pod: Obj | PodInfo) -> None:
        pi = pod if isinstance(pod, PodInfo) else PodInfo(pod)
        self.pods.append(pi)
        if pi.required_affinity_terms or pi.preferred_affinity_terms or pi.required_anti_affinity_terms \
                or pi.preferred_anti_affinity_terms:
            self.pods_with_affinity.append(pi)
        if pi.required_anti_affinity_terms:
            self.pods_with_required_anti_affinity.append(pi)
        self._account(pi, 1)

    def remove_pod(self, pod: Obj) -> bool:
        """Remove by uid; False when the pod is not on this node."""
        uid = pod["metadata"].get("uid", "")
        for i, pi in enumerate(self.pods):
            if pi.pod["metadata"].get("uid", "") == uid:
                del self.pods[i]
                self.pods_with_affinity = [p for p in self.pods_with_affinity if p is not pi]
                self.pods_with_required_anti_affinity = [
                    p for p in self.pods_with_required_anti_affinity if p is not pi]
                self._account(pi, -1)
                return True
        return False

    def _account(self, pi: PodInfo, sign: int) -> None:
        self.requested.add(pi.requests, sign)
        self.non_zero_requested.add(pi.non_zero_requests, sign)
        for ip, proto, port in pi.host_ports:
            if sign > 0:
                self.used_ports.add(ip, proto, port)
            else:
                self.used_ports.remove(ip, proto, port)
        ns = pi.pod["metadata"].get("namespace", "")
        for vol in (pi.pod.get("spec") or {}).get("volumes") or ():
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                key = f"{ns}/{claim}"
                n = self.pvc_ref_counts.get(key, 0) + sign
                if n > 0:
                    self.pvc_ref_counts[key] = n
                else:
                    self.pvc_ref_counts.pop(key, None)
        self.generation = next_generation()

    def clone(self) -> NodeInfo:
        """An independent copy (pods list and aggregates) for what-if evaluation such as preemption."""
        other = NodeInfo.__new__(NodeInfo)
        other.copy_from(self)
        return other

    def copy_from(self, src: NodeInfo) -> None:
        """Become an independent copy of `src` (the cache refreshes its snapshot's nodes in place)."""
        self.node = src.node
        self.name = src.name
        self.pods = list(src.pods)
        self.pods_with_affinity = list(src.pods_with_affinity)
        self.pods_with_required_anti_affinity = list(src.pods_with_required_anti_affinity)
        self.used_ports = src.used_ports.clone()
        self.requested = src.requested.clone()
        self.non_zero_requested = src.non_zero_requested.clone()
        self.allocatable = src.allocatable.clone()
        self.image_states = src.image_states
        self.pvc_ref_counts = dict(src.pvc_ref_counts)
        self.generation = src.generation
        self.labels = src.labels
        self.taints = src.taints
        self.unschedulable = src.unschedulable

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}, pods={len(self.pods)}, requested={self.requested})"
