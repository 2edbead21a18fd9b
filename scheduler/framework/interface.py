"""The plugin-facing side of the scheduling framework: what a plugin receives and returns.

Mirrors upstream's `pkg/scheduler/framework` types. Objects are plain dicts (the API's JSON);
the types here only wrap them with what the scheduler needs to decide quickly: parsed resource
requests, affinity terms and per-node aggregates. Filter and Score run synchronously over the
snapshot (they are CPU only); PostFilter, Permit, PreBind and Bind are coroutines because they
may talk to the apiserver.
"""

from __future__ import annotations

import enum
import itertools
from array import array
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from scheduler.framework.podindex import PodIndex
from services.api.quantity import parse_quantity
from services.api.selectors import LabelSelector, Requirement

if TYPE_CHECKING:
    from services.client import Client
    from services.informers import SharedInformerFactory

Obj = dict[str, Any]

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0
MAX_TOTAL_SCORE = 2**63 - 1

# Requests assumed for a container that asks for nothing, so empty pods still spread (upstream values).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024


# --------------------------------------------------------------------------------------------------
# Status


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6

    def __str__(self) -> str:
        return _CODE_NAMES[self]


_CODE_NAMES = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
    Code.PENDING: "Pending",
}


class Status:
    """A plugin's verdict. `None` is accepted everywhere a Status is and means Success."""

    __slots__ = ("code", "reasons", "plugin", "err")

    def __init__(
        self, code: Code = Code.SUCCESS, *reasons: str, plugin: str = "", err: BaseException | None = None,
    ) -> None:
        self.code = code
        self.reasons = list(reasons)
        self.plugin = plugin
        self.err = err
        if err is not None and not self.reasons:
            self.reasons = [str(err)]

    @classmethod
    def error(cls, err: BaseException | str, plugin: str = "") -> Status:
        exc = err if isinstance(err, BaseException) else RuntimeError(err)
        return cls(Code.ERROR, plugin=plugin, err=exc)

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, *reasons, plugin=plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, *reasons, plugin=plugin)

    def with_plugin(self, plugin: str) -> Status:
        self.plugin = plugin
        return self

    def is_success(self) -> bool:
        return self.code == Code.SUCCESS

    def is_wait(self) -> bool:
        return self.code == Code.WAIT

    def is_skip(self) -> bool:
        return self.code == Code.SKIP

    def is_rejected(self) -> bool:
        """Unschedulable, UnschedulableAndUnresolvable or Pending: the pod cannot go there now."""
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING)

    def message(self) -> str:
        return ", ".join(self.reasons)

    def as_error(self) -> BaseException:
        if self.err is not None:
            return self.err
        return RuntimeError(self.message())

    def __repr__(self) -> str:
        return f"Status({self.code}, {self.reasons!r}, plugin={self.plugin!r})"


def is_success(status: Status | None) -> bool:
    return status is None or status.code == Code.SUCCESS


def status_code(status: Status | None) -> Code:
    return Code.SUCCESS if status is None else status.code


# --------------------------------------------------------------------------------------------------
# Cycle state


class CycleState:
    """Per-cycle scratch space plugins share between their extension points (keyed by plugin)."""

    __slots__ = ("_data", "skip_filter_plugins", "skip_score_plugins", "skip_pre_bind_plugins", "nodes_start")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()
        self.skip_pre_bind_plugins: set[str] = set()
        # When the nodes being scored are the snapshot's list rotated to begin at this position (no node
        # was filtered out), that position, else -1: a hint that lets scorers keep results per position.
        self.nodes_start = -1

    def read(self, key: str) -> Any:
        """The value stored under `key`; KeyError when a PreFilter/PreScore did not write it."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def clone(self) -> CycleState:
        """A copy for what-if runs (preemption): values with a `clone()` method are cloned too."""
        other = CycleState()
        other._data = {k: (v.clone() if hasattr(v, "clone") else v) for k, v in self._data.items()}
        other.skip_filter_plugins = set(self.skip_filter_plugins)
        other.skip_score_plugins = set(self.skip_score_plugins)
        other.skip_pre_bind_plugins = set(self.skip_pre_bind_plugins)
        other.nodes_start = self.nodes_start
        return other


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


# --------------------------------------------------------------------------------------------------
# Snapshot: what plugins read during a cycle


class NodeInfoLister(Protocol):
    def list(self) -> list[NodeInfo]: ...
    def have_pods_with_affinity_list(self) -> list[NodeInfo]: ...
    def have_pods_with_required_anti_affinity_list(self) -> list[NodeInfo]: ...
    def get(self, node_name: str) -> NodeInfo: ...


class StorageInfoLister(Protocol):
    def is_pvc_used_by_pods(self, key: str) -> bool: ...


def _free(ni: NodeInfo) -> tuple[int, int, int, int]:
    alloc, used = ni.allocatable, ni.requested
    return (alloc.allowed_pod_number - len(ni.pods), alloc.milli_cpu - used.milli_cpu, alloc.memory - used.memory,
            alloc.ephemeral_storage - used.ephemeral_storage)


@dataclass(frozen=True, slots=True)
class NodeTraits:
    """Whether any node of a snapshot is unschedulable, has taints, or has images."""

    unschedulable: bool
    taints: bool
    images: bool


class Snapshot:
    """The cluster as one scheduling cycle sees it; the cache refreshes it incrementally each cycle."""

    def __init__(self, node_infos: Iterable[NodeInfo] = ()) -> None:
        self.node_info_map: dict[str, NodeInfo] = {}
        self.node_info_list: list[NodeInfo] = []
        # node_info_list's generations, in its order: cycles compare them without touching every node.
        self.generations = array("q")
        self._positions: dict[str, int] = {}
        self.generation = 0
        self.pod_index = PodIndex()
        self._keyed_nodes: dict[tuple[str, ...], dict[str, NodeInfo]] = {}
        self._domains: dict[tuple[int, str], set[str]] = {}
        # Derived from node_info_list on first use after a change (most cycles never ask).
        self._with_affinity: list[NodeInfo] | None = None
        self._with_required_anti_affinity: list[NodeInfo] | None = None
        self._used_pvcs: set[str] | None = None
        self._traits: NodeTraits | None = None
        # A lower bound of every listed node's free (pod slots, milli-cpu, memory, ephemeral storage):
        # lowered as nodes change, recomputed when the node set does. A pod asking for no more fits all.
        self.free_floor: tuple[int, int, int, int] = (0, 0, 0, 0)
        infos = list(node_infos)
        if infos:
            for ni in infos:
                self.node_info_map[ni.name] = ni
                if ni.node is not None:
                    for pi in ni.pods:
                        self.pod_index.add(pi, ni.name, ni.labels)
            self.rebuild_lists(infos)

    def node_labels_changed(self) -> None:
        """Forget what was derived from node labels (the cache calls it when a node's labels change)."""
        self._keyed_nodes.clear()
        self._domains.clear()

    def nodes_changed(self) -> None:
        """Forget what was derived from the Node objects (the cache calls it when one is replaced)."""
        self._traits = None

    def traits(self) -> NodeTraits:
        """What no node of the snapshot has, so plugins can skip their per-node loop for every pod."""
        if self._traits is None:
            nodes = self.node_info_list
            self._traits = NodeTraits(
                any(ni.unschedulable for ni in nodes), any(ni.taints for ni in nodes),
                any(ni.image_states for ni in nodes))
        return self._traits

    def nodes_with_keys(self, keys: tuple[str, ...]) -> dict[str, NodeInfo]:
        """The nodes carrying every label in `keys`, by name; kept until nodes or their labels change."""
        found = self._keyed_nodes.get(keys)
        if found is None:
            found = self._keyed_nodes[keys] = {
                ni.name: ni for ni in self.node_info_list if all(k in ni.labels for k in keys)}
        return found

    def domains(self, nodes: dict[str, NodeInfo], key: str) -> set[str]:
        """The values of label `key` among `nodes` (a `nodes_with_keys` result), kept alongside it."""
        cache_key = (id(nodes), key)
        found = self._domains.get(cache_key)
        if found is None:
            found = self._domains[cache_key] = {ni.labels[key] for ni in nodes.values()}
        return found

    def rebuild_lists(self, ordered: list[NodeInfo]) -> None:
        self._keyed_nodes.clear()
        self._domains.clear()
        self._traits = None
        self.node_info_list = [ni for ni in ordered if ni.node is not None]
        self.generations = array("q", [ni.generation for ni in self.node_info_list])
        self._positions = {ni.name: i for i, ni in enumerate(self.node_info_list)}
        frees = [_free(ni) for ni in self.node_info_list]
        self.free_floor = tuple(map(min, *frees)) if len(frees) > 1 else (frees[0] if frees else (0, 0, 0, 0))
        self.pods_changed()

    def node_changed(self, ni: NodeInfo) -> None:
        """Keep `free_floor` a lower bound and `generations` current after `ni` (a listed node) changed."""
        self.free_floor = tuple(map(min, self.free_floor, _free(ni)))  # type: ignore[assignment]
        pos = self._positions.get(ni.name)
        if pos is not None:
            self.generations[pos] = ni.generation

    def pods_changed(self) -> None:
        """Drop the lists derived from the nodes' pods; they are recomputed when next asked for."""
        self._with_affinity = None
        self._with_required_anti_affinity = None
        self._used_pvcs = None

    # NodeInfoLister
    def node_infos(self) -> Snapshot:
        return self

    def storage_infos(self) -> Snapshot:
        return self

    def list(self) -> list[NodeInfo]:
        return self.node_info_list

    def have_pods_with_affinity_list(self) -> list[NodeInfo]:
        if self._with_affinity is None:
            self._with_affinity = [ni for ni in self.node_info_list if ni.pods_with_affinity]
        return self._with_affinity

    def have_pods_with_required_anti_affinity_list(self) -> list[NodeInfo]:
        if self._with_required_anti_affinity is None:
            self._with_required_anti_affinity = [
                ni for ni in self.node_info_list if ni.pods_with_required_anti_affinity]
        return self._with_required_anti_affinity

    def get(self, node_name: str) -> NodeInfo:
        """The node's info; KeyError when it is not in the snapshot."""
        return self.node_info_map[node_name]

    def num_nodes(self) -> int:
        return len(self.node_info_list)

    # StorageInfoLister
    def is_pvc_used_by_pods(self, key: str) -> bool:
        if self._used_pvcs is None:
            self._used_pvcs = {k for ni in self.node_info_list for k in ni.pvc_ref_counts}
        return key in self._used_pvcs


# --------------------------------------------------------------------------------------------------
# Cluster events (EventsToRegister)


class ActionType(enum.IntFlag):
    ADD = 1
    DELETE = 2
    UPDATE_NODE_ALLOCATABLE = 4
    UPDATE_NODE_LABEL = 8
    UPDATE_NODE_TAINT = 16
    UPDATE_NODE_CONDITION = 32
    UPDATE_NODE_ANNOTATION = 64
    UPDATE_POD_LABEL = 128
    UPDATE_POD_SCALE_DOWN = 256
    UPDATE_POD_TOLERATIONS = 512
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1024
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 2048
    UPDATE_OTHER = 4096
    UPDATE = (UPDATE_NODE_ALLOCATABLE | UPDATE_NODE_LABEL | UPDATE_NODE_TAINT | UPDATE_NODE_CONDITION
              | UPDATE_NODE_ANNOTATION | UPDATE_POD_LABEL | UPDATE_POD_SCALE_DOWN | UPDATE_POD_TOLERATIONS
              | UPDATE_POD_SCHEDULING_GATES_ELIMINATED | UPDATE_POD_GENERATED_RESOURCE_CLAIM | UPDATE_OTHER)
    ALL = ADD | DELETE | UPDATE


class EventResource(enum.StrEnum):
    POD = "Pod"
    # An assigned pod (spec.nodeName set) vs one still waiting: upstream splits them the same way.
    ASSIGNED_POD = "AssignedPod"
    UNSCHEDULED_POD = "UnschedulablePod"
    NODE = "Node"
    PERSISTENT_VOLUME = "PersistentVolume"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    STORAGE_CLASS = "StorageClass"
    CSI_NODE = "CSINode"
    CSI_DRIVER = "CSIDriver"
    CSI_STORAGE_CAPACITY = "CSIStorageCapacity"
    VOLUME_ATTACHMENT = "VolumeAttachment"
    WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    resource: EventResource
    action_type: ActionType
    label: str = ""

    def matches(self, incoming: ClusterEvent) -> bool:
        """Does a registered event (self) cover an incoming one? Wildcards match everything."""
        if self.resource == EventResource.WILDCARD:
            return True
        res_ok = self.resource == incoming.resource or (
            self.resource == EventResource.POD
            and incoming.resource in (EventResource.ASSIGNED_POD, EventResource.UNSCHEDULED_POD))
        return res_ok and bool(self.action_type & incoming.action_type)

    def __str__(self) -> str:
        return self.label or f"{self.resource}{self.action_type.name or int(self.action_type)}"


class QueueingHint(enum.IntEnum):
    QUEUE_SKIP = 0
    QUEUE = 1


# (pod waiting, old object or None, new object or None) -> whether the event may make it schedulable.
QueueingHintFn = Callable[[Obj, Obj | None, Obj | None], QueueingHint]


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    event: ClusterEvent
    hint: QueueingHintFn | None = None


# --------------------------------------------------------------------------------------------------
# Results


@dataclass(slots=True)
class PreFilterResult:
    """Restricts the nodes worth filtering; `node_names=None` means every node."""

    node_names: set[str] | None = None

    def all_nodes(self) -> bool:
        return self.node_names is None

    def merge(self, other: PreFilterResult | None) -> PreFilterResult:
        if other is None or other.node_names is None:
            return PreFilterResult(self.node_names)
        if self.node_names is None:
            return PreFilterResult(set(other.node_names))
        return PreFilterResult(self.node_names & other.node_names)


@dataclass(slots=True)
class NominatingInfo:
    nominated_node_name: str = ""
    # "override" sets status.nominatedNodeName to nominated_node_name; "noop" leaves it alone.
    mode: str = "noop"


@dataclass(slots=True)
class PostFilterResult:
    nominating_info: NominatingInfo | None = None


class NodeScore:
    __slots__ = ("name", "score")

    def __init__(self, name: str, score: int) -> None:
        self.name = name
        self.score = score

    def __repr__(self) -> str:
        return f"NodeScore({self.name}, {self.score})"


class NodeToStatus:
    """Why each node was rejected; nodes not listed share `absent_nodes_status` (upstream's NodeToStatus)."""

    def __init__(self, statuses: dict[str, Status] | None = None,
                 absent_nodes_status: Status | None = None) -> None:
        self.statuses: dict[str, Status] = statuses if statuses is not None else {}
        self.absent_nodes_status = absent_nodes_status or Status.unresolvable()

    def get(self, node_name: str) -> Status:
        return self.statuses.get(node_name) or self.absent_nodes_status

    def set(self, node_name: str, status: Status) -> None:
        self.statuses[node_name] = status

    def __len__(self) -> int:
        return len(self.statuses)

    def nodes_for_status_code(self, lister: NodeInfoLister, code: Code) -> list[NodeInfo]:
        """Nodes whose rejection has `code`, including the absent ones when their shared status does."""
        out = [ni for name, st in self.statuses.items() if st.code == code
               for ni in (_maybe_get(lister, name),) if ni is not None]
        if self.absent_nodes_status.code == code:
            out.extend(ni for ni in lister.list() if ni.name not in self.statuses)
        return out


def _maybe_get(lister: NodeInfoLister, name: str) -> NodeInfo | None:
    try:
        return lister.get(name)
    except KeyError:
        return None


# --------------------------------------------------------------------------------------------------
# Handle: what the framework gives a plugin


class EventRecorder(Protocol):
    def eventf(self, regarding: Obj, related: Obj | None, eventtype: str, reason: str, action: str,
               note: str) -> None:
        """Record an events.k8s.io/v1 Event in the background (never blocks the cycle)."""


class PodNominator(Protocol):
    def add_nominated_pod(self, pod_info: PodInfo, nominating_info: NominatingInfo | None) -> None: ...
    def delete_nominated_pod_if_exists(self, pod: Obj) -> None: ...
    def update_nominated_pod(self, old_pod: Obj, new_pod_info: PodInfo) -> None: ...
    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]: ...


class WaitingPod(Protocol):
    pod: Obj

    def get_pending_plugins(self) -> list[str]: ...
    def allow(self, plugin: str) -> None: ...
    def reject(self, plugin: str, message: str) -> None: ...


class Handle(Protocol):
    """The framework as a plugin sees it (one per profile)."""

    client: Client
    informer_factory: SharedInformerFactory
    event_recorder: EventRecorder
    nominator: PodNominator
    profile_name: str
    # Namespace labels by name, kept by the scheduler's namespace informer (for namespaceSelector).
    namespace_labels: Callable[[str], Mapping[str, str] | None]

    def snapshot_shared_lister(self) -> Snapshot: ...

    def run_pre_filter_extension_add_pod(self, state: CycleState, pod_to_schedule: Obj,
                                         pod_info_to_add: PodInfo, node_info: NodeInfo) -> Status | None: ...

    def run_pre_filter_extension_remove_pod(self, state: CycleState, pod_to_schedule: Obj,
                                            pod_info_to_remove: PodInfo, node_info: NodeInfo) -> Status | None: ...

    def run_filter_plugins(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None: ...

    def run_filter_plugins_with_nominated_pods(self, state: CycleState, pod: Obj,
                                               node_info: NodeInfo) -> Status | None: ...

    def get_waiting_pod(self, uid: str) -> WaitingPod | None: ...

    def reject_waiting_pod(self, uid: str) -> bool: ...

    def iterate_over_waiting_pods(self) -> Iterable[WaitingPod]: ...

    def has_filter_plugins(self) -> bool: ...

    def has_score_plugins(self) -> bool: ...


# --------------------------------------------------------------------------------------------------
# Plugins


class Plugin:
    """Base of every plugin. Override the extension points you implement; the rest are never called.

    The framework finds a plugin's extension points by which of these methods the subclass
    overrides (see `implements`). Plugins are constructed as `cls(args, handle)` where `args` is
    the plugin's `pluginConfig[].args` (upstream camelCase field names, without apiVersion/kind),
    an empty dict when none is configured; each plugin applies its own upstream defaults.
    """

    name: ClassVar[str] = ""

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        self.args = args
        self.handle = handle

    # -- queueing ------------------------------------------------------------------------------------
    def pre_enqueue(self, pod: Obj) -> Status | None:
        """Gate a pod before it enters activeQ (e.g. scheduling gates): Unschedulable keeps it out."""
        raise NotImplementedError

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """QueueSort: does `a` go before `b`?"""
        raise NotImplementedError

    def sort_key(self, qp: QueuedPodInfo) -> Any:
        """QueueSort, optional: a key fixed while the pod waits in activeQ whose order is exactly
        `less`'s; the queue then compares keys instead of calling `less`. None: use `less`."""
        return None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """Cluster events that may make a pod this plugin rejected schedulable again."""
        return []

    # -- scheduling cycle (synchronous, CPU only over the snapshot) ----------------------------------
    def pre_filter(self, state: CycleState, pod: Obj,
                   nodes: list[NodeInfo]) -> tuple[PreFilterResult | None, Status | None]:
        """Compute per-cycle state; Skip excludes the plugin's Filter for this cycle."""
        raise NotImplementedError

    def pre_filter_extensions(self) -> Plugin | None:
        """Return self when `add_pod`/`remove_pod` keep this plugin's PreFilter state current."""
        return None

    def add_pod(self, state: CycleState, pod_to_schedule: Obj, pod_info_to_add: PodInfo,
                node_info: NodeInfo) -> Status | None:
        raise NotImplementedError

    def remove_pod(self, state: CycleState, pod_to_schedule: Obj, pod_info_to_remove: PodInfo,
                   node_info: NodeInfo) -> Status | None:
        raise NotImplementedError

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        raise NotImplementedError

    def filter_nodes(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> list[Status | None] | None:
        """Filter many nodes at once (one result per node, in order, or None when every node passes);
        the framework calls this. Override it to filter in one tight loop (it must agree with `filter`)."""
        f = self.filter
        return [f(state, pod, ni) for ni in nodes]

    async def post_filter(self, state: CycleState, pod: Obj,
                          filtered_node_status_map: NodeToStatus) -> tuple[PostFilterResult | None, Status | None]:
        raise NotImplementedError

    def pre_score(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> Status | None:
        """Skip excludes the plugin's Score for this cycle."""
        raise NotImplementedError

    def score(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> tuple[int, Status | None]:
        raise NotImplementedError

    def score_nodes(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> tuple[list[int], Status | None]:
        """Score many nodes at once; the framework calls this. Override it to score in one tight loop
        (it must agree with `score`); the default calls `score` per node."""
        out: list[int] = []
        for ni in nodes:
            s, st = self.score(state, pod, ni)
            if st is not None and not st.is_success():
                return out, st
            out.append(s)
        return out, None

    def node_scorer(self, state: CycleState, pod: Obj) -> tuple[Hashable, Callable[[NodeInfo], int]] | None:
        """When this cycle's score of a node depends only on what `NodeInfo.generation` tracks (the node's
        pods and allocatable) and on a hashable key of the pod, that key and a function scoring one node
        (agreeing with `score_nodes`); the framework then reuses scores across cycles. None otherwise."""
        return None

    def normalize_score(self, state: CycleState, pod: Obj, scores: list[NodeScore]) -> Status | None:
        """Rescale this plugin's raw scores in place to [MIN_NODE_SCORE, MAX_NODE_SCORE]."""
        raise NotImplementedError

    def normalize_values(self, state: CycleState, pod: Obj, nodes: list[NodeInfo],
                         values: list[int]) -> tuple[list[int], Status | None]:
        """NormalizeScore over plain scores in `nodes` order; the framework calls this. Override it to skip
        building NodeScore objects (it must agree with `normalize_score`)."""
        scores = [NodeScore(ni.name, v) for ni, v in zip(nodes, values, strict=True)]
        st = self.normalize_score(state, pod, scores)
        return [ns.score for ns in scores], st

    def reserve(self, state: CycleState, pod: Obj, node_name: str) -> Status | None:
        raise NotImplementedError

    def unreserve(self, state: CycleState, pod: Obj, node_name: str) -> None:
        raise NotImplementedError

    async def permit(self, state: CycleState, pod: Obj, node_name: str) -> tuple[Status | None, float]:
        """Success, Wait (with a timeout in seconds) or a rejection."""
        raise NotImplementedError

    # -- binding cycle ---------------------------------------------------------------------------------
    async def pre_bind(self, state: CycleState, pod: Obj, node_name: str) -> Status | None:
        raise NotImplementedError

    async def bind(self, state: CycleState, pod: Obj, node_name: str) -> Status | None:
        """Bind, or return Skip to let the next Bind plugin do it."""
        raise NotImplementedError

    def post_bind(self, state: CycleState, pod: Obj, node_name: str) -> None:
        raise NotImplementedError


EXTENSION_POINTS = (
    "pre_enqueue", "less", "pre_filter", "filter", "post_filter", "pre_score", "score", "normalize_score",
    "reserve", "permit", "pre_bind", "bind", "post_bind",
)


def implements(plugin: Plugin | type[Plugin], point: str) -> bool:
    """Whether the plugin overrides the extension point method `point` (e.g. "filter")."""
    cls = plugin if isinstance(plugin, type) else type(plugin)
    return getattr(cls, point) is not getattr(Plugin, point)


__all__ = [
    "MAX_NODE_SCORE", "MIN_NODE_SCORE", "ActionType", "AffinityTerm", "ClusterEvent", "ClusterEventWithHint",
    "Code", "CycleState", "EventRecorder", "EventResource", "Handle", "HostPortInfo",
    "ImageStateSummary", "NodeInfo", "NodeInfoLister", "NodeScore", "NodeToStatus", "NominatingInfo", "Obj",
    "Plugin", "PodInfo", "PodNominator", "PostFilterResult", "PreFilterResult", "QueueingHint",
    "QueueingHintFn", "QueuedPodInfo", "Resource", "Snapshot", "Status", "StorageInfoLister", "WaitingPod",
    "WeightedAffinityTerm", "implements", "is_success", "pod_key", "pod_priority", "pod_requests",
    "quantity_value", "status_code",
]
