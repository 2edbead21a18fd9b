"""DefaultPreemption with upstream's semantics.

When no node fits, look for nodes where evicting pods of lower priority would make the pod fit:
remove every lower-priority pod in a what-if copy of the node, then give back as many as still fit
(PDB-protected pods first, most important first). Pick the candidate that violates the fewest
PDBs, then whose most important victim matters least, then with the lowest priority sum, the
fewest victims and the latest start time. Evict its victims gracefully and nominate the node.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import (
    Code,
    Handle,
    NodeToStatus,
    NominatingInfo,
    Plugin,
    PostFilterResult,
    Status,
    is_success,
)
from scheduler.framework.types import NodeInfo, Obj, PodInfo, pod_priority
from services.api.selectors import LabelSelector
from services.client import GVR, ApiError, NotFound

NAME = "DefaultPreemption"

PODS = GVR("", "v1", "pods")
POD_DISRUPTION_BUDGETS = GVR("policy", "v1", "poddisruptionbudgets")

MSG_NOT_HELPFUL = "Preemption is not helpful for scheduling"
MSG_NO_VICTIMS = "No preemption victims found for incoming pod"
MSG_POLICY_NEVER = "not eligible due to preemptionPolicy=Never."
MSG_TERMINATING = "not eligible due to a terminating pod on the nominated node."

DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"

DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE = 10
DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE = 100
DEFAULT_TERMINATION_GRACE_PERIOD = 30


@dataclass(slots=True)
class Candidate:
    name: str
    victims: list[PodInfo]
    num_pdb_violations: int


def _start_time(pod: Obj) -> float:
    """status.startTime as a timestamp; pods not started yet count as starting now (upstream)."""
    value = (pod.get("status") or {}).get("startTime")
    if value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return datetime.now(UTC).timestamp()


def more_important_pod(a: Obj, b: Obj) -> bool:
    """Higher priority first; between equals, the one that started earlier."""
    pa, pb = pod_priority(a), pod_priority(b)
    if pa != pb:
        return pa > pb
    return _start_time(a) < _start_time(b)


def _importance_key(pi: PodInfo) -> tuple[int, float]:
    return -pod_priority(pi.pod), _start_time(pi.pod)


def filter_pods_with_pdb_violation(pods: list[PodInfo], pdbs: list[Obj]) -> tuple[list[PodInfo], list[PodInfo]]:
    """Split pods into those whose eviction would exceed a PDB's allowed disruptions and the rest."""
    allowed = [int((p.get("status") or {}).get("disruptionsAllowed") or 0) for p in pdbs]
    selectors = []
    for p in pdbs:
        try:
            selectors.append(LabelSelector.from_dict((p.get("spec") or {}).get("selector")))
        except ValueError:
            selectors.append(LabelSelector.nothing())
    violating, non_violating = [], []
    for pi in pods:
        meta = pi.pod["metadata"]
        labels = meta.get("labels") or {}
        violated = False
        if labels:
            for i, pdb in enumerate(pdbs):
                if pdb["metadata"].get("namespace") != meta.get("namespace"):
                    continue
                sel = selectors[i]
                # A PDB with an empty or missing selector matches nothing.
                if sel.empty or not sel.matches(labels):
                    continue
                if meta["name"] in ((pdb.get("status") or {}).get("disruptedPods") or {}):
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else non_violating).append(pi)
    return violating, non_violating


def fit_error_message(num_nodes: int, statuses: Mapping[str, Status]) -> str:
    """Upstream's FitError text: `0/N nodes are available: <count reason>, ... .`"""
    histogram: dict[str, int] = {}
    for st in statuses.values():
        for reason in st.reasons:
            histogram[reason] = histogram.get(reason, 0) + 1
    parts = sorted(f"{n} {reason}" for reason, n in histogram.items())
    return f"0/{num_nodes} nodes are available: {', '.join(parts)}."


def pick_one_node_for_preemption(candidates: list[Candidate]) -> Candidate | None:
    """Upstream's tie-breaking cascade over the candidates' victims."""
    if not candidates:
        return None
    for c in candidates:
        if not c.victims:
            return c

    def sum_priorities(c: Candidate) -> float:
        return -sum(pod_priority(v.pod) + 2**31 for v in c.victims)

    def earliest_top_start(c: Candidate) -> float:
        top = pod_priority(c.victims[0].pod)
        return min(_start_time(v.pod) for v in c.victims if pod_priority(v.pod) == top)

    score_funcs = (
        lambda c: -c.num_pdb_violations,
        lambda c: -pod_priority(c.victims[0].pod),
        sum_priorities,
        lambda c: -len(c.victims),
        earliest_top_start,
    )
    remaining = candidates
    for f in score_funcs:
        best = -math.inf
        selected: list[Candidate] = []
        for c in remaining:
            s = f(c)
            if s > best:
                best, selected = s, [c]
            elif s == best:
                selected.append(c)
        if len(selected) == 1:
            return selected[0]
        remaining = selected
    return remaining[0]


class DefaultPreemption(Plugin):
    """PostFilter: evict lower-priority pods so that a pending pod fits, nominating its node."""

    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        pct = args.get("minCandidateNodesPercentage")
        absolute = args.get("minCandidateNodesAbsolute")
        self.min_candidate_nodes_percentage = DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE if pct is None else int(pct)
        self.min_candidate_nodes_absolute = DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE if absolute is None else int(absolute)
        if not 0 <= self.min_candidate_nodes_percentage <= 100:
            raise ValueError("minCandidateNodesPercentage: Invalid value: not in valid range [0, 100]")
        if self.min_candidate_nodes_absolute < 0:
            raise ValueError("minCandidateNodesAbsolute: Invalid value: not in valid range [0, inf)")
        if self.min_candidate_nodes_percentage == 0 and self.min_candidate_nodes_absolute == 0:
            raise ValueError("minCandidateNodesPercentage and minCandidateNodesAbsolute: Invalid value: "
                             "both minCandidateNodesPercentage and minCandidateNodesAbsolute cannot be zero")
        self._pdbs = handle.informer_factory.informer_for(POD_DISRUPTION_BUDGETS)

    async def post_filter(self, state: CycleState, pod: Obj,
                          filtered_node_status_map: NodeToStatus) -> tuple[PostFilterResult | None, Status | None]:
        result, status = await self.preempt(state, pod, filtered_node_status_map)
        if status is not None and status.message():
            return result, Status(status.code, "preemption: " + status.message(), err=status.err)
        return result, status

    # -- steps -----------------------------------------------------------------------------------------

    def pod_eligible_to_preempt_others(self, pod: Obj, nominated_status: Status | None) -> tuple[bool, str]:
        if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
            return False, MSG_POLICY_NEVER
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated:
            # A nominated node the filters now reject outright is worth preempting for again.
            if nominated_status is not None and nominated_status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return True, ""
            try:
                ni = self.handle.snapshot_shared_lister().get(nominated)
            except KeyError:
                return True, ""
            prio = pod_priority(pod)
            if any(pod_priority(p.pod) < prio and _terminating_by_preemption(p.pod) for p in ni.pods):
                return False, MSG_TERMINATING
        return True, ""

    def calculate_num_candidates(self, num_nodes: int) -> int:
        n = num_nodes * self.min_candidate_nodes_percentage // 100
        n = max(n, self.min_candidate_nodes_absolute)
        return min(n, num_nodes)

    async def preempt(self, state: CycleState, pod: Obj,
                      m: NodeToStatus) -> tuple[PostFilterResult | None, Status | None]:
        nominated = (pod.get("status") or {}).get("nominatedNodeName") or ""
        ok, msg = self.pod_eligible_to_preempt_others(pod, m.get(nominated) if nominated else None)
        if not ok:
            return None, Status.unschedulable(msg)
        lister = self.handle.snapshot_shared_lister()
        all_nodes = lister.list()
        if not all_nodes:
            return None, Status.error("no nodes available")
        candidates, statuses = self.find_candidates(state, pod, m, all_nodes)
        if not candidates:
            message = fit_error_message(len(all_nodes), statuses)
            return PostFilterResult(NominatingInfo("", "override")), Status.unschedulable(message)
        best = pick_one_node_for_preemption(candidates)
        assert best is not None
        try:
            await self.prepare_candidate(best, pod)
        except ApiError as e:
            return None, Status.error(e)
        return PostFilterResult(NominatingInfo(best.name, "override")), None

    def find_candidates(self, state: CycleState, pod: Obj, m: NodeToStatus,
                        all_nodes: list[NodeInfo]) -> tuple[list[Candidate], dict[str, Status]]:
        statuses: dict[str, Status] = {}
        potential = []
        for ni in all_nodes:
            if m.get(ni.name).code == Code.UNSCHEDULABLE:
                potential.append(ni)
            else:
                statuses[ni.name] = Status.unresolvable(MSG_NOT_HELPFUL)
        if not potential:
            return [], statuses
        pdbs = self._pdbs.list()
        num = self.calculate_num_candidates(len(potential))
        offset = random.randrange(len(potential))
        non_violating: list[Candidate] = []
        violating: list[Candidate] = []
        for i in range(len(potential)):
            ni = potential[(offset + i) % len(potential)]
            victims, n_viol, status = self.select_victims_on_node(state.clone(), pod, ni.clone(), pdbs)
            if is_success(status) and victims:
                c = Candidate(ni.name, victims, n_viol)
                (non_violating if n_viol == 0 else violating).append(c)
                if non_violating and len(non_violating) + len(violating) >= num:
                    break
                continue
            if is_success(status):
                status = Status.error(f'expected at least one victim pod on node "{ni.name}"')
            assert status is not None
            statuses[ni.name] = status
        return non_violating + violating, statuses

    def select_victims_on_node(self, state: CycleState, pod: Obj, ni: NodeInfo,
                               pdbs: list[Obj]) -> tuple[list[PodInfo], int, Status | None]:
        """Victims (most important first) and how many of them a PDB protects, on a copy of the node."""
        handle = self.handle
        prio = pod_priority(pod)
        potential: list[PodInfo] = []
        for pi in list(ni.pods):
            if pod_priority(pi.pod) < prio:
                potential.append(pi)
                ni.remove_pod(pi.pod)
                status = handle.run_pre_filter_extension_remove_pod(state, pod, pi, ni)
                if not is_success(status):
                    return [], 0, status
        if not potential:
            return [], 0, Status.unresolvable(MSG_NO_VICTIMS)
        # Even without every lower-priority pod the pod does not fit: nothing to gain here.
        status = handle.run_filter_plugins_with_nominated_pods(state, pod, ni)
        if not is_success(status):
            return [], 0, status
        potential.sort(key=_importance_key)
        violating, non_violating = filter_pods_with_pdb_violation(potential, pdbs)
        victims: list[PodInfo] = []
        num_violating = 0

        def reprieve(pi: PodInfo) -> tuple[bool, Status | None]:
            ni.add_pod(pi)
            st = handle.run_pre_filter_extension_add_pod(state, pod, pi, ni)
            if not is_success(st):
                return False, st
            if is_success(handle.run_filter_plugins_with_nominated_pods(state, pod, ni)):
                return True, None
            ni.remove_pod(pi.pod)
            st = handle.run_pre_filter_extension_remove_pod(state, pod, pi, ni)
            if not is_success(st):
                return False, st
            victims.append(pi)
            return False, None

        for pi in violating:
            fits, st = reprieve(pi)
            if st is not None and not is_success(st):
                return [], 0, st
            if not fits:
                num_violating += 1
        for pi in non_violating:
            _, st = reprieve(pi)
            if st is not None and not is_success(st):
                return [], 0, st
        if violating and non_violating:
            victims.sort(key=_importance_key)
        return victims, num_violating, None

    async def prepare_candidate(self, c: Candidate, pod: Obj) -> None:
        """Evict the victims (DisruptionTarget condition, then graceful delete) and un-nominate losers."""
        client = self.handle.client
        scheduler_name = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
        preemptor_uid = pod["metadata"].get("uid", "")

        async def evict(victim: Obj) -> None:
            meta = victim["metadata"]
            ns, name = meta.get("namespace", ""), meta["name"]
            waiting = self.handle.get_waiting_pod(meta.get("uid", ""))
            if waiting is not None:
                waiting.reject(NAME, "preempted")
            else:
                condition = {
                    "type": DISRUPTION_TARGET, "status": "True", "reason": REASON_PREEMPTION_BY_SCHEDULER,
                    "message": f"{scheduler_name}: preempting to accommodate a higher priority pod",
                    "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
                try:
                    if not _has_condition(victim, condition):
                        await client.patch_status(PODS, name, {"status": {"conditions": [condition]}}, ns,
                                                  patch_type="strategic")
                    grace = (victim.get("spec") or {}).get("terminationGracePeriodSeconds")
                    await client.delete(PODS, name, ns, grace_period_seconds=int(
                        DEFAULT_TERMINATION_GRACE_PERIOD if grace is None else grace))
                except NotFound:
                    return
            self.handle.event_recorder.eventf(victim, pod, "Normal", "Preempted", "Preempting",
                                              f"Preempted by pod {preemptor_uid} on node {c.name}")

        await asyncio.gather(*(evict(v.pod) for v in c.victims))
        prio = pod_priority(pod)
        losers = [pi.pod for pi in self.handle.nominator.nominated_pods_for_node(c.name)
                  if pod_priority(pi.pod) < prio and pi.pod["metadata"].get("uid") != preemptor_uid]
        for p in losers:
            meta = p["metadata"]
            try:
                await client.patch_status(PODS, meta["name"], {"status": {"nominatedNodeName": None}},
                                          meta.get("namespace", ""))
            except NotFound:
                continue


def _has_condition(pod: Obj, condition: Mapping[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == condition["type"]:
            return all(c.get(k) == condition[k] for k in ("status", "reason", "message"))
    return False


def _terminating_by_preemption(pod: Obj) -> bool:
    if not pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c.get("type") == DISRUPTION_TARGET and c.get("status") == "True"
               and c.get("reason") == REASON_PREEMPTION_BY_SCHEDULER
               for c in (pod.get("status") or {}).get("conditions") or ())
