"""The scheduler: informers feed the cache and the queue; one loop runs scheduling cycles and hands each
placed pod to its own binding task, so the next cycle starts while the previous pod binds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from scheduler.config import SchedulerConfig
from scheduler.events import EventSink, Recorder
from scheduler.framework import metrics
from scheduler.framework.cache import Cache
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from scheduler.framework.interface import Code, NodeToStatus, NominatingInfo, Plugin, Status
from scheduler.framework.queue import SchedulingQueue
from scheduler.framework.runtime import Framework, WaitingPodImpl
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import NodeInfo, Obj, QueuedPodInfo, pod_requests
from services.api.catalog import Catalog
from services.client import ApiError, Client, NotFound, gvr
from services.informers import SharedInformerFactory

log = structlog.get_logger(__name__)

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
NAMESPACES = gvr("v1", "namespaces", namespaced=False)

# Informers for the other resources plugins may register events on.
EVENT_RESOURCES = {
    EventResource.PERSISTENT_VOLUME: gvr("v1", "persistentvolumes", namespaced=False),
    EventResource.PERSISTENT_VOLUME_CLAIM: gvr("v1", "persistentvolumeclaims"),
    EventResource.STORAGE_CLASS: gvr("storage.k8s.io/v1", "storageclasses", namespaced=False),
    EventResource.CSI_NODE: gvr("storage.k8s.io/v1", "csinodes", namespaced=False),
    EventResource.CSI_DRIVER: gvr("storage.k8s.io/v1", "csidrivers", namespaced=False),
    EventResource.CSI_STORAGE_CAPACITY: gvr("storage.k8s.io/v1", "csistoragecapacities"),
    EventResource.VOLUME_ATTACHMENT: gvr("storage.k8s.io/v1", "volumeattachments", namespaced=False),
}

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
BASE_PERCENTAGE = 50
NO_NODE_AVAILABLE_MSG = "0/{} nodes are available"
ERR_NO_NODES_AVAILABLE = "no nodes available to schedule pods"
BIND_CONCURRENCY = 8
# Placed pods whose binding has not finished (not counting pods held at Permit): past this many the
# loop waits. Running further ahead cannot bind faster, and each one keeps its CycleState alive.
MAX_BINDINGS_IN_FLIGHT = 256


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """How many feasible nodes to look for before scoring (upstream's numFeasibleNodesToFind)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    adaptive = percentage
    if adaptive <= 0:
        adaptive = BASE_PERCENTAGE - num_all_nodes // 125
        if adaptive < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
            adaptive = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
    num = num_all_nodes * adaptive // 100
    return max(num, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass
class Diagnosis:
    node_to_status: NodeToStatus = field(default_factory=NodeToStatus)
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    pre_filter_msg: str = ""
    post_filter_msg: str = ""


class FitError(Exception):
    """No node fits: carries the per-node reasons for the aggregated message."""

    def __init__(self, pod: Obj, num_all_nodes: int, diagnosis: Diagnosis) -> None:
        super().__init__()
        self.pod = pod
        self.num_all_nodes = num_all_nodes
        self.diagnosis = diagnosis

    def __str__(self) -> str:
        d = self.diagnosis
        msg = NO_NODE_AVAILABLE_MSG.format(self.num_all_nodes) + ":"
        if d.pre_filter_msg:
            msg += f" {d.pre_filter_msg}."
        else:
            counts: dict[str, int] = {}
            for st in d.node_to_status.statuses.values():
                for r in st.reasons:
                    counts[r] = counts.get(r, 0) + 1
            absent = self.num_all_nodes - len(d.node_to_status)
            if absent > 0:
                for r in d.node_to_status.absent_nodes_status.reasons:
                    counts[r] = counts.get(r, 0) + absent
            reasons = sorted(f"{n} {r}" for r, n in counts.items())
            msg += f" {', '.join(reasons)}."
        if d.post_filter_msg:
            msg += f" {d.post_filter_msg}"
        return msg


@dataclass
class ScheduleResult:
    suggested_host: str
    evaluated_nodes: int
    feasible_nodes: int


def _rotated_slice(nodes: list[NodeInfo], start: int, lo: int, hi: int) -> list[NodeInfo]:
    """Items lo..hi of `nodes` rotated to begin at `start`, without copying the whole rotation."""
    n = len(nodes)
    a, b = start + lo, start + hi
    if b <= n:
        return nodes[a:b]
    if a >= n:
        return nodes[a - n:b - n]
    return nodes[a:] + nodes[:b - n]


def _assigned(pod: Obj) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_update_action(old: Obj, new: Obj) -> ActionType:
    """Which scheduling-relevant properties of a node changed (upstream's nodeSchedulingPropertiesChange)."""
    action = ActionType(0)
    os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
    if bool(os_.get("unschedulable")) != bool(ns_.get("unschedulable")) or os_.get("taints") != ns_.get("taints"):
        action |= ActionType.UPDATE_NODE_TAINT
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    if om.get("labels") != nm.get("labels"):
        action |= ActionType.UPDATE_NODE_LABEL
    if om.get("annotations") != nm.get("annotations"):
        action |= ActionType.UPDATE_NODE_ANNOTATION
    ost, nst = old.get("status") or {}, new.get("status") or {}
    if ost.get("allocatable") != nst.get("allocatable"):
        action |= ActionType.UPDATE_NODE_ALLOCATABLE

    def conds(st: Mapping[str, Any]) -> dict[str, str]:
        return {c.get("type", ""): c.get("status", "") for c in st.get("conditions") or ()}

    if conds(ost) != conds(nst):
        action |= ActionType.UPDATE_NODE_CONDITION
    return action


def assigned_pod_update_action(old: Obj, new: Obj) -> ActionType:
    action = ActionType(0)
    if (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels"):
        action |= ActionType.UPDATE_POD_LABEL
    before, after = pod_requests(old), pod_requests(new)
    if after.milli_cpu < before.milli_cpu or after.memory < before.memory:
        action |= ActionType.UPDATE_POD_SCALE_DOWN
    return action


class Scheduler:
    def __init__(self, client: Client, config: SchedulerConfig, instance: str = "") -> None:
        self.client = client
        self.config = config
        self.instance = instance
        self.informer_factory = SharedInformerFactory(client)
        self.cache = Cache()
        self.snapshot = Snapshot()
        self.next_start_node_index = 0
        # Separate connection pools for informers, plugin writes (bindings) and events: httpx's pool
        # work grows with connections x queued requests, so one shared pool gets slow under load.
        self.write_client = Client(client.config)
        self.sink = EventSink(Client(client.config))
        self.waiting_pods: dict[str, WaitingPodImpl] = {}
        self._bind_slots = asyncio.Semaphore(BIND_CONCURRENCY)
        self._binding: set[asyncio.Task[None]] = set()
        self._binding_done = asyncio.Event()
        self._attempt_children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._synced = False
        self.pod_informer = self.informer_factory.informer_for(
            PODS, field_selector="status.phase!=Succeeded,status.phase!=Failed")
        self.node_informer = self.informer_factory.informer_for(NODES)
        self.namespace_informer = self.informer_factory.informer_for(NAMESPACES)
        self.profiles: dict[str, Framework] = {}
        self.queue = SchedulingQueue(
            less=self._less, pre_enqueue=self._pre_enqueue, plugin_events=self._plugin_events,
            initial_backoff=config.pod_initial_backoff_seconds, max_backoff=config.pod_max_backoff_seconds)
        for prof in config.profiles:
            self.profiles[prof.scheduler_name] = Framework(
                prof, client=self.write_client, informer_factory=self.informer_factory,
                event_recorder=Recorder(self.sink, prof.scheduler_name, instance or prof.scheduler_name),
                nominator=self.queue.nominator, snapshot=lambda: self.snapshot,
                namespace_labels=self._namespace_labels, waiting_pods=self.waiting_pods)
        self._first = next(iter(self.profiles.values()))
        if type(self._first.queue_sort).sort_key is not Plugin.sort_key:
            self.queue.sort_key = self._first.queue_sort.sort_key
        self._register_handlers()

    # -- queue callbacks --------------------------------------------------------------------------

    def _framework_for(self, pod: Obj) -> Framework | None:
        return self.profiles.get((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")

    def _less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self._first.less(a, b)

    def _pre_enqueue(self, pod: Obj) -> tuple[Status | None, str]:
        fwk = self._framework_for(pod)
        return fwk.run_pre_enqueue_plugins(pod) if fwk else (None, "")

    def _plugin_events(self, pod: Obj) -> dict[str, list[ClusterEventWithHint]]:
        fwk = self._framework_for(pod)
        return fwk.enqueue_events if fwk else {}

    def _namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        ns = self.namespace_informer.get(namespace)
        return ((ns or {}).get("metadata") or {}).get("labels") if ns else None

    def responsible_for(self, pod: Obj) -> bool:
        return self._framework_for(pod) is not None

    # -- informer handlers ------------------------------------------------------------------------

    def _register_handlers(self) -> None:
        self._registrations = [
            self.pod_informer.add_event_handler(self._on_pod_add, self._on_pod_update, self._on_pod_delete),
            self.node_informer.add_event_handler(self._on_node_add, self._on_node_update, self._on_node_delete),
        ]
        wanted: set[EventResource] = set()
        for fwk in self.profiles.values():
            for events in fwk.enqueue_events.values():
                for e in events:
                    wanted.add(e.event.resource)
        wildcard = EventResource.WILDCARD in wanted
        catalog = Catalog()
        for res, rtype in EVENT_RESOURCES.items():
            # Only resources this apiserver serves: an informer on a missing one would never sync.
            if not (wildcard or res in wanted) or catalog.get(rtype.group, rtype.version, rtype.plural) is None:
                continue
            self._registrations.append(
                self.informer_factory.informer_for(rtype).add_event_handler(*self._generic_handlers(res)))

    def _generic_handlers(self, res: EventResource) -> tuple[Any, Any, Any]:
        def on_add(obj: Obj) -> None:
            self._move(ClusterEvent(res, ActionType.ADD), None, obj)

        def on_update(old: Obj, new: Obj) -> None:
            if old.get("metadata", {}).get("resourceVersion") != new.get("metadata", {}).get("resourceVersion"):
                self._move(ClusterEvent(res, ActionType.UPDATE), old, new)

        def on_delete(obj: Obj) -> None:
            self._move(ClusterEvent(res, ActionType.DELETE), obj, None)

        return on_add, on_update, on_delete

    def _move(self, event: ClusterEvent, old: Obj | None, new: Obj | None) -> None:
        self.queue.move_all_to_active_or_backoff(event, old, new)

    def _on_pod_add(self, pod: Obj) -> None:
        if _assigned(pod):
            self.cache.add_pod(pod)
            self._move(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD), None, pod)
        elif self.responsible_for(pod):
            self.queue.add(pod)

    def _on_pod_update(self, old: Obj, new: Obj) -> None:
        if _assigned(new):
            if not _assigned(old):
                self.queue.delete(new)
                self.cache.add_pod(new)
                self._move(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD), None, new)
                return
            self.cache.update_pod(old, new)
            action = assigned_pod_update_action(old, new)
            if action:
                self._move(ClusterEvent(EventResource.ASSIGNED_POD, action), old, new)
        elif self.responsible_for(new):
            self.queue.update(old, new)

    def _on_pod_delete(self, pod: Obj) -> None:
        if _assigned(pod):
            self.cache.remove_pod(pod)
            self._move(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), pod, None)
            return
        self.queue.delete(pod)
        wp = self.waiting_pods.get(pod["metadata"].get("uid", ""))
        if wp is not None:
            wp.reject("", "removed")

    def _on_node_add(self, node: Obj) -> None:
        self.cache.add_node(node)
        self._move(ClusterEvent(EventResource.NODE, ActionType.ADD), None, node)

    def _on_node_update(self, old: Obj, new: Obj) -> None:
        self.cache.update_node(old, new)
        action = node_update_action(old, new)
        if action:
            self._move(ClusterEvent(EventResource.NODE, action), old, new)

    def _on_node_delete(self, node: Obj) -> None:
        self.cache.remove_node(node)

    # -- lifecycle --------------------------------------------------------------------------------

    def has_synced(self) -> bool:
        return self._synced

    async def run(self) -> None:
        """Start informers, wait for them, then schedule until cancelled."""
        self.sink.start()
        self.informer_factory.start()
        try:
            await self.informer_factory.wait_for_cache_sync()
            # Handlers run from their own queues: the cache must hold the initial lists before a cycle.
            await asyncio.gather(*(reg.wait_for_sync() for reg in self._registrations))
            self._synced = True
            log.info("scheduler caches synced", nodes=self.cache.node_count(), pending=len(self.queue))
            self.queue.run()
            self._tasks.append(asyncio.create_task(self._cleanup_assumed()))
            while True:
                qp = await self.queue.pop()
                if qp is None:
                    return
                await self.schedule_one(qp)
                while len(self._binding) - len(self.waiting_pods) >= MAX_BINDINGS_IN_FLIGHT:
                    self._binding_done.clear()
                    await self._binding_done.wait()
                # Let informer handlers and binding tasks progress between cycles.
                await asyncio.sleep(0)
        finally:
            await self.stop()

    async def stop(self) -> None:
        if self.queue is not None:
            await self.queue.close()
        for t in [*self._tasks, *self._binding]:
            t.cancel()
        for t in [*self._tasks, *self._binding]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await self.sink.flush()
        await self.sink.stop()
        await self.informer_factory.shutdown()
        await self.write_client.close()
        await self.sink.client.close()

    async def _cleanup_assumed(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.cache.cleanup_expired_assumed_pods()

    # -- scheduling cycle -------------------------------------------------------------------------

    def _skip(self, pod: Obj) -> bool:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return True
        return self.cache.is_assumed(pod)

    async def schedule_one(self, qp: QueuedPodInfo) -> None:
        pod = qp.pod
        fwk = self._framework_for(pod)
        if fwk is None or self._skip(pod):
            self.queue.done(pod)
            return
        start = time.perf_counter()
        pod_cycle = self.queue.scheduling_cycle
        state = CycleState()
        self.cache.update_snapshot(self.snapshot)
        result, status, diagnosis = self.schedule_pod(fwk, state, pod)
        metrics.SCHEDULING_ALGORITHM_DURATION.observe(time.perf_counter() - start)
        if result is None:
            assert status is not None
            nominating: NominatingInfo | None = None
            if diagnosis is not None and status.is_rejected():
                qp.unschedulable_plugins = set(diagnosis.unschedulable_plugins)
                qp.pending_plugins = set(diagnosis.pending_plugins)
                if fwk.has_post_filter_plugins():
                    pf_result, pf_status = await fwk.run_post_filter_plugins(state, pod, diagnosis.node_to_status)
                    if pf_status is not None and pf_status.is_rejected() and pf_status.message():
                        diagnosis.post_filter_msg = pf_status.message()
                    if pf_result is not None and pf_result.nominating_info is not None:
                        nominating = pf_result.nominating_info
                    if pf_status is not None and pf_status.code == Code.ERROR:
                        log.warning("postfilter failed", pod=qp.pod_info.key, error=pf_status.message())
                message = str(FitError(pod, self.snapshot.num_nodes(), diagnosis))
            else:
                message = status.message()
            await self.handle_failure(fwk, qp, status, message, nominating, start, pod_cycle)
            return
        host = result.suggested_host
        assumed = {**pod, "spec": {**pod["spec"], "nodeName": host}}
        try:
            self.cache.assume_pod(assumed, host)
        except ValueError as e:
            await self.handle_failure(fwk, qp, Status.error(e), str(e), None, start, pod_cycle)
            return
        st = fwk.run_reserve_plugins_reserve(state, assumed, host)
        if st is not None and not st.is_success():
            fwk.run_reserve_plugins_unreserve(state, assumed, host)
            self.cache.forget_pod(assumed)
            msg = f"running Reserve plugin {st.plugin!r}: {st.message()}" if st.code == Code.ERROR else st.message()
            await self.handle_failure(fwk, qp, st, msg, None, start, pod_cycle)
            return
        st = await fwk.run_permit_plugins(state, assumed, host)
        if st is not None and not st.is_success() and not st.is_wait():
            fwk.run_reserve_plugins_unreserve(state, assumed, host)
            self.cache.forget_pod(assumed)
            if st.is_rejected():
                qp.unschedulable_plugins = {st.plugin}
            msg = f"running Permit plugin {st.plugin!r}: {st.message()}" if st.code == Code.ERROR else st.message()
            await self.handle_failure(fwk, qp, st, msg, None, start, pod_cycle)
            return
        self.queue.nominator.delete_nominated_pod_if_exists(pod)
        task = asyncio.create_task(self.binding_cycle(fwk, state, qp, assumed, host, start, pod_cycle))
        self._binding.add(task)
        task.add_done_callback(self._binding_finished)

    def _attempt_metrics(self, result: str, profile: str) -> tuple[Any, Any]:
        """The attempts counter and duration histogram of (result, profile), looked up once."""
        key = (result, profile)
        children = self._attempt_children.get(key)
        if children is None:
            children = self._attempt_children[key] = (metrics.SCHEDULE_ATTEMPTS.labels(result, profile),
                                                      metrics.SCHEDULING_ATTEMPT_DURATION.labels(result, profile))
        return children

    def _binding_finished(self, task: asyncio.Task[None]) -> None:
        self._binding.discard(task)
        self._binding_done.set()

    def schedule_pod(self, fwk: Framework, state: CycleState,
                     pod: Obj) -> tuple[ScheduleResult | None, Status | None, Diagnosis | None]:
        if self.snapshot.num_nodes() == 0:
            return None, Status.unresolvable(ERR_NO_NODES_AVAILABLE), None
        feasible, diagnosis, err = self.find_nodes_that_fit(fwk, state, pod)
        if err is not None:
            return None, err, None
        if not feasible:
            return None, Status.unschedulable(), diagnosis
        if len(feasible) == 1:
            return ScheduleResult(feasible[0].name, 1 + len(diagnosis.node_to_status), 1), None, None
        scores, st = self.prioritize(fwk, state, pod, feasible)
        if st is not None:
            return None, st, None
        host = self.select_host(feasible, scores)
        return ScheduleResult(host, len(feasible) + len(diagnosis.node_to_status), len(feasible)), None, None

    def find_nodes_that_fit(self, fwk: Framework, state: CycleState,
                            pod: Obj) -> tuple[list[NodeInfo], Diagnosis, Status | None]:
        diagnosis = Diagnosis()
        all_nodes = self.snapshot.list()
        pre_res, st, plugins = fwk.run_pre_filter_plugins(state, pod, all_nodes)
        if st is not None:
            if not st.is_rejected():
                return [], diagnosis, st
            diagnosis.node_to_status.absent_nodes_status = st
            diagnosis.pre_filter_msg = st.message()
            diagnosis.unschedulable_plugins = plugins or {st.plugin}
            return [], diagnosis, None
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated and nominated in self.snapshot.node_info_map:
            ni = self.snapshot.node_info_map[nominated]
            fst = fwk.run_filter_plugins_with_nominated_pods(state, pod, ni)
            if fst is None:
                return [ni], diagnosis, None
            if fst.code == Code.ERROR:
                return [], diagnosis, fst
        nodes = all_nodes
        if pre_res is not None and not pre_res.all_nodes():
            names = pre_res.node_names or set()
            nodes = [self.snapshot.node_info_map[n] for n in names if n in self.snapshot.node_info_map]
            diagnosis.node_to_status.absent_nodes_status = Status.unresolvable(
                f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(plugins))}]")
            diagnosis.unschedulable_plugins |= plugins
        feasible, err = self.find_nodes_that_pass_filters(fwk, state, pod, diagnosis, nodes)
        return feasible, diagnosis, err

    def find_nodes_that_pass_filters(self, fwk: Framework, state: CycleState, pod: Obj, diagnosis: Diagnosis,
                                     nodes: list[NodeInfo]) -> tuple[list[NodeInfo], Status | None]:
        num_all = len(nodes)
        if num_all == 0:
            return [], None
        pct = fwk.percentage_of_nodes_to_score
        if pct is None:
            pct = self.config.percentage_of_nodes_to_score
        to_find = num_feasible_nodes_to_find(pct, num_all)
        start = self.next_start_node_index % num_all
        whole = nodes is self.snapshot.node_info_list
        if not fwk.has_filter_plugins():
            feasible = [nodes[(start + i) % num_all] for i in range(to_find)]
            self.next_start_node_index = (start + to_find) % num_all
            if whole:
                state.nodes_start = start
            return feasible, None
        feasible: list[NodeInfo] = []
        statuses = diagnosis.node_to_status
        processed = 0
        if self.queue.nominator.has_nominated_pods():
            for i in range(num_all):
                ni = nodes[(start + i) % num_all]
                processed += 1
                st = fwk.run_filter_plugins_with_nominated_pods(state, pod, ni)
                if st is None:
                    feasible.append(ni)
                    if len(feasible) >= to_find:
                        break
                    continue
                if st.code == Code.ERROR:
                    return [], st
                statuses.set(ni.name, st)
        else:
            # In chunks sized by the pass rate seen so far; nodes past the one where a node-by-node
            # search would have stopped are then dropped, so the outcome is the same.
            while processed < num_all and len(feasible) < to_find:
                needed = to_find - len(feasible)
                size = needed if not processed or len(feasible) == processed else (
                    needed * processed // max(len(feasible), 1) + 16)
                chunk = _rotated_slice(nodes, start, processed, min(processed + size, num_all))
                passed, err = fwk.run_filter_plugins_on(state, pod, chunk, statuses)
                if err is not None:
                    return [], err
                if len(passed) > needed:
                    last = passed[needed - 1]
                    cut = next(i for i, ni in enumerate(chunk) if ni is last) + 1
                    for ni in chunk[cut:]:
                        statuses.statuses.pop(ni.name, None)
                    chunk = chunk[:cut]
                    passed = passed[:needed]
                processed += len(chunk)
                feasible.extend(passed)
        for st in statuses.statuses.values():
            if st.code == Code.PENDING:
                diagnosis.pending_plugins.add(st.plugin)
            else:
                diagnosis.unschedulable_plugins.add(st.plugin)
        self.next_start_node_index = (start + processed) % num_all
        if whole and not statuses.statuses:
            state.nodes_start = start
        return feasible, None

    def prioritize(self, fwk: Framework, state: CycleState, pod: Obj,
                   nodes: list[NodeInfo]) -> tuple[list[int], Status | None]:
        if not fwk.has_score_plugins():
            return [1] * len(nodes), None
        st = fwk.run_pre_score_plugins(state, pod, nodes)
        if st is not None:
            return [], st
        # Less a constant every node shares: that cannot change which node wins.
        totals, _, st = fwk.score_totals(state, pod, nodes)
        return totals, st

    @staticmethod
    def select_host(nodes: list[NodeInfo], scores: list[int]) -> str:
        """The best-scoring node; ties broken uniformly at random."""
        best = max(scores)
        ties = scores.count(best)
        if ties == 1:
            return nodes[scores.index(best)].name
        # The same draw as random.choice over the winners, without building their list (or touching
        # the nodes that lose).
        pick = random.randrange(ties)
        winners = itertools.compress(itertools.count(), map(operator.eq, scores, itertools.repeat(best)))
        return nodes[next(itertools.islice(winners, pick, None))].name

    # -- binding cycle ----------------------------------------------------------------------------

    async def binding_cycle(self, fwk: Framework, state: CycleState, qp: QueuedPodInfo, assumed: Obj, host: str,
                            start: float, pod_cycle: int) -> None:
        try:
            st = await fwk.wait_on_permit(assumed)
            if st is not None and not st.is_success():
                if st.is_rejected():
                    qp.unschedulable_plugins = {st.plugin} if st.plugin else set()
                await self._binding_failed(fwk, state, qp, assumed, host, st, st.message(), start, pod_cycle)
                return
            st = await fwk.run_pre_bind_plugins(state, assumed, host)
            if st is not None and not st.is_success():
                msg = f"running PreBind plugin {st.plugin!r}: {st.message()}"
                await self._binding_failed(fwk, state, qp, assumed, host, st, msg, start, pod_cycle)
                return
            async with self._bind_slots:
                st = await fwk.run_bind_plugins(state, assumed, host)
            if st is not None and not st.is_success():
                if st.code == Code.SKIP:
                    msg = "no bind plugin bound the pod"
                    st = Status.error(msg)
                else:
                    msg = f"running Bind plugin {st.plugin!r}: {st.message()}"
                await self._binding_failed(fwk, state, qp, assumed, host, st, msg, start, pod_cycle)
                return
            self.cache.finish_binding(assumed)
            meta = assumed["metadata"]
            fwk.event_recorder.eventf(assumed, None, "Normal", "Scheduled", "Binding",
                                      f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {host}")
            attempts, duration = self._attempt_metrics("scheduled", fwk.profile_name)
            attempts.inc()
            duration.observe(time.perf_counter() - start)
            if qp.initial_attempt_timestamp is not None:
                metrics.POD_SCHEDULING_SLI_DURATION.labels(str(qp.attempts)).observe(
                    self.queue.clock() - qp.initial_attempt_timestamp)
            metrics.POD_SCHEDULING_ATTEMPTS.observe(qp.attempts)
            fwk.run_post_bind_plugins(state, assumed, host)
        finally:
            self.queue.done(assumed)

    async def _binding_failed(self, fwk: Framework, state: CycleState, qp: QueuedPodInfo, assumed: Obj, host: str,
                              st: Status, message: str, start: float, pod_cycle: int) -> None:
        fwk.run_reserve_plugins_unreserve(state, assumed, host)
        self.cache.forget_pod(assumed)
        # Resources the failed pod held are free again: let waiting pods retry.
        self._move(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE, "AssignedPodDelete"), assumed, None)
        await self.handle_failure(fwk, qp, st, message, None, start, pod_cycle)

    # -- failures ---------------------------------------------------------------------------------

    async def handle_failure(self, fwk: Framework, qp: QueuedPodInfo, status: Status, message: str,
                             nominating: NominatingInfo | None, start: float, pod_cycle: int) -> None:
        pod = qp.pod
        rejected = status.is_rejected()
        result = "unschedulable" if rejected else "error"
        attempts, duration = self._attempt_metrics(result, fwk.profile_name)
        attempts.inc()
        duration.observe(time.perf_counter() - start)
        reason = "Unschedulable" if status.code != Code.ERROR else "SchedulerError"
        if not rejected:
            qp.unschedulable_plugins = set()
            qp.pending_plugins = set()
            log.warning("error scheduling pod; retrying", pod=qp.pod_info.key, error=message)
        meta = pod["metadata"]
        current = self.pod_informer.get(meta["name"], meta.get("namespace"))
        if current is None or current["metadata"].get("uid") != meta.get("uid") or _assigned(current):
            self.queue.done(pod)
        else:
            qp.pod_info.update(current)
            self.queue.add_unschedulable_if_not_present(qp, pod_cycle)
            if nominating is not None:
                self.queue.nominator.add_nominated_pod(qp.pod_info, nominating)
            pod = current
        fwk.event_recorder.eventf(pod, None, "Warning", "FailedScheduling", "Scheduling", message)
        await self._update_pod_status(pod, reason, message, nominating)

    async def _update_pod_status(self, pod: Obj, reason: str, message: str,
                                 nominating: NominatingInfo | None) -> None:
        status = pod.get("status") or {}
        conditions = list(status.get("conditions") or [])
        new_cond = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message,
                    "lastProbeTime": None, "lastTransitionTime": _now_rfc3339()}
        changed = True
        for i, c in enumerate(conditions):
            if c.get("type") == "PodScheduled":
                if c.get("status") == "False" and c.get("reason") == reason and c.get("message") == message:
                    changed = False
                if c.get("status") == "False":
                    new_cond["lastTransitionTime"] = c.get("lastTransitionTime") or new_cond["lastTransitionTime"]
                conditions[i] = new_cond
                break
        else:
            conditions.append(new_cond)
        patch: dict[str, Any] = {"status": {}}
        if changed:
            patch["status"]["conditions"] = conditions
        if nominating is not None and nominating.mode == "override" and \
                status.get("nominatedNodeName") != nominating.nominated_node_name:
            patch["status"]["nominatedNodeName"] = nominating.nominated_node_name or None
        if not patch["status"]:
            return
        meta = pod["metadata"]
        try:
            await self.write_client.patch_status(PODS, meta["name"], patch, meta.get("namespace"))
        except NotFound:
            return
        except ApiError as e:
            log.warning("could not update pod status", pod=f"{meta.get('namespace')}/{meta['name']}", error=str(e))
