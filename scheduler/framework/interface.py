"""The plugin-facing side of the scheduling framework: extension points, Status and results.

Mirrors upstream's `pkg/scheduler/framework/interface.go`. Filter and Score run synchronously over
the snapshot (they are CPU only); PostFilter, Permit, PreBind and Bind are coroutines because they
may talk to the apiserver.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ClusterEventWithHint
from scheduler.framework.snapshot import NodeInfoLister, Snapshot
from scheduler.framework.types import NodeInfo, Obj, PodInfo, QueuedPodInfo

if TYPE_CHECKING:
    from services.client import Client
    from services.informers import SharedInformerFactory

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0
MAX_TOTAL_SCORE = 2**63 - 1


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
