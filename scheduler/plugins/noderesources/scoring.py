"""Resource scoring shared by Fit's strategies and BalancedAllocation (upstream's resourceAllocationScorer)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import MAX_NODE_SCORE, Handle, Plugin, Status
from scheduler.framework.types import NodeInfo, Obj, Resource, is_scalar_resource

# Shape scores run 0..10 in the API; the scheduler scores 0..100.
MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILIZATION = 100

DEFAULT_RESOURCES: list[dict[str, Any]] = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]


# (Resource attribute or None for a scalar, scalar name, amount the pod adds, weight, counts non-zero requests)
ScorePlan = list[tuple[str | None, str, int, int, bool]]

_ATTRS = {"cpu": "milli_cpu", "memory": "memory", "ephemeral-storage": "ephemeral_storage",
          "pods": "allowed_pod_number"}


def score_plan(resources: Sequence[tuple[str, int]], pod_request: Resource, pod_non_zero: Resource,
               use_requested: bool) -> ScorePlan:
    """Resolve, once per cycle, which node fields each scored resource reads and what the pod adds."""
    plan: ScorePlan = []
    for name, weight in resources:
        non_zero = name in ("cpu", "memory") and not use_requested
        amount = (pod_non_zero if non_zero else pod_request).get(name)
        if is_scalar_resource(name) and amount == 0:
            continue
        plan.append((_ATTRS.get(name), name, amount, weight, non_zero))
    return plan


def plan_values(plan: ScorePlan, node_info: NodeInfo) -> list[tuple[int, int, int]]:
    """(allocatable, requested including the pod, weight) per planned resource."""
    out = []
    alloc = node_info.allocatable
    for attr, name, amount, weight, non_zero in plan:
        used = node_info.non_zero_requested if non_zero else node_info.requested
        if attr is None:
            out.append((alloc.scalar.get(name, 0), used.scalar.get(name, 0) + amount, weight))
        else:
            out.append((getattr(alloc, attr), getattr(used, attr) + amount, weight))
    return out


def least_requested(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def most_requested(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    return min(requested, capacity) * MAX_NODE_SCORE // capacity


def broken_linear(shape: Sequence[tuple[int, int]]) -> Callable[[int], int]:
    """Piecewise-linear function through (utilization, score) points sorted by utilization."""

    def f(p: int) -> int:
        i = 0
        while i < len(shape) and p > shape[i][0]:
            i += 1
        if i == 0:
            return shape[0][1]
        if i == len(shape):
            return shape[-1][1]
        (u0, s0), (u1, s1) = shape[i - 1], shape[i]
        return s0 + (s1 - s0) * (p - u0) // (u1 - u0)

    return f


def requested_to_capacity_ratio(shape_spec: Sequence[Mapping[str, Any]]) -> Callable[[int, int], int]:
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    shape = [(int(p["utilization"]), int(p["score"]) * scale) for p in shape_spec]
    raw = broken_linear(shape)

    def score(requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return raw(MAX_UTILIZATION)
        return raw(requested * MAX_UTILIZATION // capacity)

    return score


class GenerationMemo:
    """Per-node results for a few pod shapes, keyed by `NodeInfo.generation`.

    A node's generation changes whenever its pods or allocatable do, so a result computed for an
    unchanged node in an earlier cycle still holds: identical pods (a ReplicaSet's) then cost a dict
    lookup per node instead of the arithmetic. A table starts over once it holds `max_entries`
    results (stale generations pile up slowly: about one per cycle once warm).
    """

    __slots__ = ("_tables", "_max_shapes", "_max_entries")

    def __init__(self, max_shapes: int = 4, max_entries: int = 32768) -> None:
        self._tables: dict[Hashable, dict[int, Any]] = {}
        self._max_shapes = max_shapes
        self._max_entries = max_entries

    def table(self, shape: Hashable, batch: int) -> dict[int, Any]:
        """The results for pods of `shape`, about to be read for `batch` nodes."""
        t = self._tables.get(shape)
        if t is None or len(t) > max(self._max_entries, 4 * batch):
            if t is None and len(self._tables) >= self._max_shapes:
                self._tables.pop(next(iter(self._tables)))
            t = self._tables[shape] = {}
        return t

    def values(self, shape: Hashable, score: Callable[[NodeInfo], Any], nodes: list[NodeInfo]) -> list[Any]:
        """`score` of each node, computed only for nodes whose generation has no result for `shape` yet."""
        memo = self.table(shape, len(nodes))
        out = [memo.get(ni.generation) for ni in nodes]
        if None in out:
            for i, v in enumerate(out):
                if v is None:
                    ni = nodes[i]
                    out[i] = memo[ni.generation] = score(ni)
        return out


class NodeScorerPlugin(Plugin):
    """A score plugin whose `node_scorer` also serves `score_nodes`, through a memo per pod shape (used when
    the framework's per-position memo does not apply, e.g. some nodes were filtered out)."""

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self._memo = GenerationMemo()

    def score_nodes(self, state: CycleState, pod: Obj,
                    nodes: list[NodeInfo]) -> tuple[list[int], Status | None]:
        scorer = self.node_scorer(state, pod)
        if scorer is None:
            return super().score_nodes(state, pod, nodes)
        return self._memo.values(*scorer, nodes), None
