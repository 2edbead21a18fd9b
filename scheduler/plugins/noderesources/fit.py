"""NodeResourcesFit: the node must have room for the pod's requests; scoring by a configurable strategy."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from scheduler.framework.interface import MAX_NODE_SCORE, Handle, PreFilterResult, Status
from scheduler.framework.types import NodeInfo, Obj, Resource, pod_requests
from scheduler.plugins.noderesources.scoring import (
    DEFAULT_RESOURCES,
    NodeScorerPlugin,
    ScorePlan,
    least_requested,
    most_requested,
    plan_values,
    requested_to_capacity_ratio,
    score_plan,
)

_PRE_FILTER_KEY = "PreFilterNodeResourcesFit"
_PRE_SCORE_KEY = "PreScoreNodeResourcesFit"
LEAST_ALLOCATED = "LeastAllocated"
_CPU_MEM = [("milli_cpu", True), ("memory", True)]
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"


class _PodRequests:
    __slots__ = ("requests", "non_zero")

    def __init__(self, pod: Obj) -> None:
        self.requests = pod_requests(pod)
        self.non_zero = pod_requests(pod, non_missing=True)


def insufficient_resources(pod_request: Resource, node_info: NodeInfo, ignored: frozenset[str] = frozenset(),
                           ignored_groups: frozenset[str] = frozenset()) -> list[str]:
    """Upstream's failure reasons, in its order: pods, cpu, memory, ephemeral-storage, then scalars."""
    reasons: list[str] = []
    alloc = node_info.allocatable
    used = node_info.requested
    if len(node_info.pods) + 1 > alloc.allowed_pod_number:
        reasons.append("Too many pods")
    if not (pod_request.milli_cpu or pod_request.memory or pod_request.ephemeral_storage or pod_request.scalar):
        return reasons
    if pod_request.milli_cpu > 0 and pod_request.milli_cpu > alloc.milli_cpu - used.milli_cpu:
        reasons.append("Insufficient cpu")
    if pod_request.memory > 0 and pod_request.memory > alloc.memory - used.memory:
        reasons.append("Insufficient memory")
    if pod_request.ephemeral_storage > 0 and \
            pod_request.ephemeral_storage > alloc.ephemeral_storage - used.ephemeral_storage:
        reasons.append("Insufficient ephemeral-storage")
    for name, quant in pod_request.scalar.items():
        if quant == 0 or name in ignored or name.partition("/")[0] in ignored_groups:
            continue
        if quant > alloc.scalar.get(name, 0) - used.scalar.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


class Fit(NodeScorerPlugin):
    name = "NodeResourcesFit"

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self.ignored = frozenset(args.get("ignoredResources") or ())
        self.ignored_groups = frozenset(args.get("ignoredResourceGroups") or ())
        strategy = args.get("scoringStrategy") or {}
        self.strategy = strategy.get("type") or LEAST_ALLOCATED
        self.resources = [(r["name"], int(r.get("weight") or 1))
                          for r in strategy.get("resources") or DEFAULT_RESOURCES]
        if self.strategy == LEAST_ALLOCATED:
            self._scorer = least_requested
        elif self.strategy == MOST_ALLOCATED:
            self._scorer = most_requested
        elif self.strategy == REQUESTED_TO_CAPACITY_RATIO:
            shape = (strategy.get("requestedToCapacityRatio") or {}).get("shape") or [
                {"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]
            self._scorer = requested_to_capacity_ratio(shape)
        else:
            raise ValueError(f"scoring strategy {self.strategy} is not supported")

    def _requests(self, state: CycleState, pod: Obj) -> _PodRequests:
        r = state.get(_PRE_FILTER_KEY)
        if r is None:
            r = _PodRequests(pod)
            state.write(_PRE_FILTER_KEY, r)
        return r

    def pre_filter(self, state: CycleState, pod: Obj,
                   nodes: list[NodeInfo]) -> tuple[PreFilterResult | None, Status | None]:
        state.write(_PRE_FILTER_KEY, _PodRequests(pod))
        return None, None

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        reasons = insufficient_resources(self._requests(state, pod).requests, node_info, self.ignored,
                                         self.ignored_groups)
        if reasons:
            return Status.unschedulable(*reasons)
        return None

    def filter_nodes(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> list[Status | None] | None:
        req = self._requests(state, pod).requests
        if req.scalar:
            return super().filter_nodes(state, pod, nodes)
        # cpu, memory, ephemeral-storage and pod count only: the common case. Whether a node fits is
        # remembered per node generation; nodes that changed since are checked again.
        cpu, mem, eph = req.milli_cpu, req.memory, req.ephemeral_storage
        if self.handle is not None:
            # Every listed node has at least the snapshot's floor free: no per-node check needed.
            slots, free_cpu, free_mem, free_eph = self.handle.snapshot_shared_lister().free_floor
            if slots >= 1 and (not cpu or cpu <= free_cpu) and (not mem or mem <= free_mem) \
                    and (not eph or eph <= free_eph):
                return None
        memo = self._memo.table(("filter", cpu, mem, eph), len(nodes))
        fits = [memo.get(ni.generation) for ni in nodes]
        if None in fits:
            for i, f in enumerate(fits):
                if f is None:
                    ni = nodes[i]
                    alloc, used = ni.allocatable, ni.requested
                    f = fits[i] = memo[ni.generation] = (
                        len(ni.pods) < alloc.allowed_pod_number
                        and not (cpu and cpu > alloc.milli_cpu - used.milli_cpu)
                        and not (mem and mem > alloc.memory - used.memory)
                        and not (eph and eph > alloc.ephemeral_storage - used.ephemeral_storage))
        if all(fits):
            return None
        full = [i for i, f in enumerate(fits) if not f]
        if not full:
            return None
        out: list[Status | None] = [None] * len(nodes)
        shared: dict[tuple[str, ...], Status] = {}
        for i in full:
            reasons = tuple(insufficient_resources(req, nodes[i]))
            st = shared.get(reasons)
            if st is None:
                st = shared[reasons] = Status.unschedulable(*reasons)
            out[i] = st
        return out

    def pre_score(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> Status | None:
        r = self._requests(state, pod)
        state.write(_PRE_SCORE_KEY, score_plan(self.resources, r.requests, r.non_zero, False))
        return None

    def score(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> tuple[int, Status | None]:
        plan: ScorePlan | None = state.get(_PRE_SCORE_KEY)
        if plan is None:
            r = self._requests(state, pod)
            plan = score_plan(self.resources, r.requests, r.non_zero, False)
        total = 0
        weights = 0
        scorer = self._scorer
        if self.strategy == REQUESTED_TO_CAPACITY_RATIO:
            for alloc, req, weight in plan_values(plan, node_info):
                if alloc == 0:
                    continue
                s = scorer(req, alloc)
                if s > 0:
                    total += s * weight
                    weights += weight
            return (int(total / weights + 0.5) if weights else 0), None
        for alloc, req, weight in plan_values(plan, node_info):
            total += scorer(req, alloc) * weight
            weights += weight
        return (total // weights if weights else 0), None

    def node_scorer(self, state: CycleState, pod: Obj) -> tuple[Hashable, Callable[[NodeInfo], int]] | None:
        plan: ScorePlan | None = state.get(_PRE_SCORE_KEY)
        if plan is None or self.strategy != LEAST_ALLOCATED or [(a, nz) for a, _, _, _, nz in plan] != _CPU_MEM:
            return None
        # The default profile's case: LeastAllocated over cpu and memory.
        (_, _, pod_cpu, w_cpu, _), (_, _, pod_mem, w_mem, _) = plan
        weights = w_cpu + w_mem

        def score(ni: NodeInfo) -> int:
            alloc, used = ni.allocatable, ni.non_zero_requested
            cap, req = alloc.milli_cpu, used.milli_cpu + pod_cpu
            s_cpu = (cap - req) * MAX_NODE_SCORE // cap if cap and req <= cap else 0
            cap, req = alloc.memory, used.memory + pod_mem
            s_mem = (cap - req) * MAX_NODE_SCORE // cap if cap and req <= cap else 0
            return (s_cpu * w_cpu + s_mem * w_mem) // weights

        return ("score", pod_cpu, pod_mem, w_cpu, w_mem), score

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD,
                                              ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN), self._pod_hint),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
                                 self._node_hint),
        ]

    @staticmethod
    def _pod_hint(pod: Obj, old: Obj | None, new: Obj | None) -> QueueingHint:
        """A deleted or scaled-down assigned pod frees room (only if it requested something)."""
        if old is None:
            return QueueingHint.QUEUE_SKIP
        freed = pod_requests(old)
        if new is not None:
            freed.add(pod_requests(new), -1)
        if freed.milli_cpu > 0 or freed.memory > 0 or freed.ephemeral_storage > 0 \
                or any(v > 0 for v in freed.scalar.values()):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if new is None else QueueingHint.QUEUE_SKIP

    def _node_hint(self, pod: Obj, old: Obj | None, new: Obj | None) -> QueueingHint:
        """Queue when the (new or grown) node's allocatable could hold the pod at all."""
        if new is None:
            return QueueingHint.QUEUE_SKIP
        probe = NodeInfo(new)
        if insufficient_resources(pod_requests(pod), probe, self.ignored, self.ignored_groups):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE
