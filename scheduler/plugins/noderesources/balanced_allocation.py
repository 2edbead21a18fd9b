"""NodeResourcesBalancedAllocation: prefer nodes whose cpu and memory usage fractions stay close."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from scheduler.framework.interface import MAX_NODE_SCORE, Code, Handle, Status
from scheduler.framework.types import NodeInfo, Obj, pod_requests
from scheduler.plugins.noderesources.scoring import (
    DEFAULT_RESOURCES,
    NodeScorerPlugin,
    ScorePlan,
    plan_values,
    score_plan,
)

_PRE_SCORE_KEY = "PreScoreNodeResourcesBalancedAllocation"


class BalancedAllocation(NodeScorerPlugin):
    name = "NodeResourcesBalancedAllocation"

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self.resources = [(r["name"], 1) for r in args.get("resources") or DEFAULT_RESOURCES]

    def pre_score(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> Status | None:
        req = pod_requests(pod)
        if all(req.get(name) == 0 for name, _ in self.resources):
            return Status(Code.SKIP)
        state.write(_PRE_SCORE_KEY, score_plan(self.resources, req, req, True))
        return None

    def score(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> tuple[int, Status | None]:
        plan: ScorePlan | None = state.get(_PRE_SCORE_KEY)
        if plan is None:
            req = pod_requests(pod)
            plan = score_plan(self.resources, req, req, True)
        fractions = [min(used / alloc, 1.0) for alloc, used, _ in plan_values(plan, node_info) if alloc]
        if len(fractions) == 2:
            std = abs(fractions[0] - fractions[1]) / 2
        elif len(fractions) > 2:
            mean = sum(fractions) / len(fractions)
            std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
        else:
            std = 0.0
        return int((1 - std) * MAX_NODE_SCORE), None

    def node_scorer(self, state: CycleState, pod: Obj) -> tuple[Hashable, Callable[[NodeInfo], int]] | None:
        plan: ScorePlan | None = state.get(_PRE_SCORE_KEY)
        if plan is None or [a for a, *_ in plan] != ["milli_cpu", "memory"]:
            return None
        # Two resources (the default): the standard deviation is half the difference of the fractions.
        pod_cpu, pod_mem = plan[0][2], plan[1][2]

        def score(ni: NodeInfo) -> int:
            alloc, used = ni.allocatable, ni.requested
            if alloc.milli_cpu and alloc.memory:
                f_cpu = min((used.milli_cpu + pod_cpu) / alloc.milli_cpu, 1.0)
                f_mem = min((used.memory + pod_mem) / alloc.memory, 1.0)
                return int((1 - abs(f_cpu - f_mem) / 2) * MAX_NODE_SCORE)
            return self.score(state, pod, ni)[0]

        return (pod_cpu, pod_mem), score

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE)),
        ]
