"""One profile's framework: its plugins per extension point, and the code that runs them (the Handle)."""

from __future__ import annotations

import asyncio
import itertools
import operator
from array import array
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from scheduler.framework import registry
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ClusterEventWithHint
from scheduler.framework.interface import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    Code,
    EventRecorder,
    NodeToStatus,
    Plugin,
    PodNominator,
    PostFilterResult,
    PreFilterResult,
    Status,
)
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import NodeInfo, Obj, PodInfo, QueuedPodInfo, pod_priority

if TYPE_CHECKING:
    from services.client import Client
    from services.informers import SharedInformerFactory

log = structlog.get_logger(__name__)

MAX_PERMIT_TIMEOUT = 15 * 60.0


@dataclass
class ProfileConfig:
    """One profile as the framework runs it (scheduler.config builds it from KubeSchedulerConfiguration)."""

    scheduler_name: str
    # extension point -> [(plugin name, weight)] after merging with defaults and expanding multiPoint
    plugins: dict[str, list[tuple[str, int]]]
    plugin_args: dict[str, dict[str, Any]]
    percentage_of_nodes_to_score: int | None = None


class _Unusable(Exception):
    """A score out of range: left for the usual path to report."""


class PositionalMemo:
    """Per-node integer results for a few keys laid out in the snapshot's node order, each slot tagged
    with the `NodeInfo.generation` it was computed for.

    When a cycle scores a run of the snapshot's list (`CycleState.nodes_start`), the results are one
    slice of a table: a node is computed again only when the snapshot's `generations` differ from the
    slot's. Flat arrays compared and copied at C speed, rather than reading each node or a list of int
    objects spread over the heap, keep a cycle's memory traffic small.
    """

    __slots__ = ("_tables", "_max_keys")

    def __init__(self, max_keys: int = 4) -> None:
        self._tables: dict[Hashable, tuple[array[int], array[int]]] = {}
        self._max_keys = max_keys

    def values(self, key: Hashable, nodes: list[NodeInfo], start: int, generations: array[int],
               compute: Callable[[NodeInfo], int]) -> list[int] | None:
        """Results for `nodes`, the nodes at positions start, start+1, ... (mod its length) of a list
        whose generations are `generations`; None when they cannot lie there."""
        count = len(nodes)
        size = len(generations)
        if not 0 <= start < size or count > size:
            return None
        table = self._tables.get(key)
        if table is None or len(table[0]) != size:
            if table is None and len(self._tables) >= self._max_keys:
                self._tables.pop(next(iter(self._tables)))
            # Generations start at 1: a zero slot never matches.
            table = self._tables[key] = (array("q", bytes(8 * size)), array("q", bytes(8 * size)))
        gens, vals = table
        end = start + count
        if end <= size:
            seen, out, current = gens[start:end], vals[start:end], generations[start:end]
        else:
            seen, out = gens[start:] + gens[:end - size], vals[start:] + vals[:end - size]
            current = generations[start:] + generations[:end - size]
        if current == seen:
            return out.tolist()
        # Few slots are stale: compare in blocks (C speed), then look inside the blocks that differ.
        for lo in range(0, count, _BLOCK):
            hi = lo + _BLOCK
            if current[lo:hi] == seen[lo:hi]:
                continue
            for i in range(lo, min(hi, count)):
                if current[i] != seen[i]:
                    v = out[i] = compute(nodes[i])
                    pos = start + i
                    if pos >= size:
                        pos -= size
                    gens[pos] = current[i]
                    vals[pos] = v
        return out.tolist()


_BLOCK = 32


class WaitingPodImpl:
    """A pod held at Permit until every waiting plugin allows it, one rejects, or a timeout fires."""

    def __init__(self, pod: Obj, timeouts: dict[str, float]) -> None:
        self.pod = pod
        self._pending = set(timeouts)
        self._future: asyncio.Future[Status | None] = asyncio.get_running_loop().create_future()
        self._timers = [asyncio.get_running_loop().call_later(
            t, self.reject, plugin, f"rejected due to timeout after waiting {t:g}s at plugin {plugin}")
            for plugin, t in timeouts.items()]

    def get_pending_plugins(self) -> list[str]:
        return sorted(self._pending)

    def allow(self, plugin: str) -> None:
        self._pending.discard(plugin)
        if not self._pending:
            self._finish(None)

    def reject(self, plugin: str, message: str) -> None:
        self._finish(Status.unschedulable(message, plugin=plugin))

    def _finish(self, status: Status | None) -> None:
        for t in self._timers:
            t.cancel()
        if not self._future.done():
            self._future.set_result(status)

    async def wait(self) -> Status | None:
        return await self._future


class Framework:
    """The plugins of one profile and their runners; plugins see it as their Handle."""

    def __init__(
        self,
        profile: ProfileConfig,
        *,
        client: Client,
        informer_factory: SharedInformerFactory,
        event_recorder: EventRecorder,
        nominator: PodNominator,
        snapshot: Callable[[], Snapshot],
        namespace_labels: Callable[[str], Mapping[str, str] | None],
        waiting_pods: dict[str, WaitingPodImpl] | None = None,
    ) -> None:
        self.profile_name = profile.scheduler_name
        self.client = client
        self.informer_factory = informer_factory
        self.event_recorder = event_recorder
        self.nominator = nominator
        self.namespace_labels = namespace_labels
        self._snapshot = snapshot
        self.percentage_of_nodes_to_score = profile.percentage_of_nodes_to_score
        self.waiting_pods: dict[str, WaitingPodImpl] = waiting_pods if waiting_pods is not None else {}
        self.plugins: dict[str, Plugin] = {}
        needed = {name for entries in profile.plugins.values() for name, _ in entries}
        for name in sorted(needed):
            factory = registry.lookup(name)
            self.plugins[name] = factory(profile.plugin_args.get(name, {}), self)

        def at(point: str) -> list[Plugin]:
            return [self.plugins[n] for n, _ in profile.plugins.get(point, [])]

        self.pre_enqueue_plugins = at("preEnqueue")
        self.queue_sort = at("queueSort")[0]
        self.pre_filter_plugins = at("preFilter")
        self.filter_plugins = at("filter")
        self.post_filter_plugins = at("postFilter")
        self.pre_score_plugins = at("preScore")
        self.score_plugins = at("score")
        self.score_weights = {n: w for n, w in profile.plugins.get("score", [])}
        self.reserve_plugins = at("reserve")
        self.permit_plugins = at("permit")
        self.pre_bind_plugins = at("preBind")
        self.bind_plugins = at("bind")
        self.post_bind_plugins = at("postBind")
        self._pre_filter_ext = [p for p in self.pre_filter_plugins if p.pre_filter_extensions() is not None]
        self._normalizers = {p.name for p in self.score_plugins
                             if type(p).normalize_score is not Plugin.normalize_score}
        self._node_state_scorers = {p.name for p in self.score_plugins if p.name not in self._normalizers
                                    and type(p).node_scorer is not Plugin.node_scorer}
        self._node_state_memo = PositionalMemo()
        self.enqueue_events: dict[str, list[ClusterEventWithHint]] = {}
        for name, plugin in self.plugins.items():
            events = plugin.events_to_register()
            if events:
                self.enqueue_events[name] = events

    # -- Handle -------------------------------------------------------------------------------------

    def snapshot_shared_lister(self) -> Snapshot:
        return self._snapshot()

    def has_filter_plugins(self) -> bool:
        return bool(self.filter_plugins)

    def has_score_plugins(self) -> bool:
        return bool(self.score_plugins)

    def has_post_filter_plugins(self) -> bool:
        return bool(self.post_filter_plugins)

    def get_waiting_pod(self, uid: str) -> WaitingPodImpl | None:
        return self.waiting_pods.get(uid)

    def reject_waiting_pod(self, uid: str) -> bool:
        wp = self.waiting_pods.get(uid)
        if wp is None:
            return False
        wp.reject("", "removed")
        return True

    def iterate_over_waiting_pods(self) -> Iterable[WaitingPodImpl]:
        return list(self.waiting_pods.values())

    # -- queueing -----------------------------------------------------------------------------------

    def run_pre_enqueue_plugins(self, pod: Obj) -> tuple[Status | None, str]:
        for p in self.pre_enqueue_plugins:
            st = p.pre_enqueue(pod)
            if st is not None and not st.is_success():
                st.plugin = p.name
                return st, p.name
        return None, ""

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.queue_sort.less(a, b)

    # -- PreFilter / Filter -------------------------------------------------------------------------

    def run_pre_filter_plugins(self, state: CycleState, pod: Obj,
                               nodes: list[NodeInfo]) -> tuple[PreFilterResult | None, Status | None, set[str]]:
        """Merged PreFilterResult, the first failure, and which plugins rejected (or narrowed) the pod."""
        result: PreFilterResult | None = None
        narrowing: set[str] = set()
        for p in self.pre_filter_plugins:
            try:
                r, st = p.pre_filter(state, pod, nodes)
            except Exception as e:
                log.exception("prefilter plugin failed", plugin=p.name)
                return None, Status.error(e, plugin=p.name), set()
            if st is not None and st.code == Code.SKIP:
                state.skip_filter_plugins.add(p.name)
                continue
            if st is not None and not st.is_success():
                st.plugin = p.name
                if st.is_rejected():
                    return None, st, {p.name}
                return None, st, set()
            if r is not None and not r.all_nodes():
                narrowing.add(p.name)
                result = r if result is None else result.merge(r)
                if not result.node_names:
                    names = ", ".join(sorted(narrowing))
                    return None, Status.unresolvable(
                        f"node(s) didn't satisfy plugin(s) [{names}] simultaneously"), narrowing
        return result, None, narrowing

    def run_filter_plugins(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        skip = state.skip_filter_plugins
        for p in self.filter_plugins:
            if skip and p.name in skip:
                continue
            try:
                st = p.filter(state, pod, node_info)
            except Exception as e:
                log.exception("filter plugin failed", plugin=p.name, node=node_info.name)
                return Status.error(e, plugin=p.name)
            if st is not None and st.code != Code.SUCCESS:
                st.plugin = p.name
                return st
        return None

    def run_filter_plugins_on(self, state: CycleState, pod: Obj, nodes: list[NodeInfo],
                              statuses: NodeToStatus) -> tuple[list[NodeInfo], Status | None]:
        """Filter `nodes` plugin by plugin (survivors only go on), recording each rejected node's first
        failing status in `statuses`: the same verdicts as running all plugins node by node."""
        survivors = nodes
        skip = state.skip_filter_plugins
        for p in self.filter_plugins:
            if not survivors:
                break
            if skip and p.name in skip:
                continue
            try:
                results = p.filter_nodes(state, pod, survivors)
            except Exception as e:
                log.exception("filter plugin failed", plugin=p.name)
                return [], Status.error(e, plugin=p.name)
            if results is None or results.count(None) == len(results):
                continue
            passed = []
            for ni, st in zip(survivors, results, strict=True):
                if st is None or st.code == Code.SUCCESS:
                    passed.append(ni)
                    continue
                st.plugin = p.name
                if st.code == Code.ERROR:
                    return [], st
                statuses.set(ni.name, st)
            survivors = passed
        return survivors, None

    def run_pre_filter_extension_add_pod(self, state: CycleState, pod_to_schedule: Obj,
                                         pod_info_to_add: PodInfo, node_info: NodeInfo) -> Status | None:
        for p in self._pre_filter_ext:
            if p.name in state.skip_filter_plugins:
                continue
            st = p.add_pod(state, pod_to_schedule, pod_info_to_add, node_info)
            if st is not None and not st.is_success():
                st.plugin = p.name
                return st
        return None

    def run_pre_filter_extension_remove_pod(self, state: CycleState, pod_to_schedule: Obj,
                                            pod_info_to_remove: PodInfo, node_info: NodeInfo) -> Status | None:
        for p in self._pre_filter_ext:
            if p.name in state.skip_filter_plugins:
                continue
            st = p.remove_pod(state, pod_to_schedule, pod_info_to_remove, node_info)
            if st is not None and not st.is_success():
                st.plugin = p.name
                return st
        return None

    def _add_nominated_pods(self, state: CycleState, pod: Obj,
                            node_info: NodeInfo) -> tuple[bool, CycleState, NodeInfo, Status | None]:
        """Add pods nominated to this node with priority >= pod's onto copies of state and node."""
        nominated = self.nominator.nominated_pods_for_node(node_info.name) if self.nominator else []
        if not nominated:
            return False, state, node_info, None
        uid = pod["metadata"].get("uid")
        prio = pod_priority(pod)
        added = False
        state_out, ni_out = state, node_info
        for pi in nominated:
            if pod_priority(pi.pod) >= prio and pi.pod["metadata"].get("uid") != uid:
                if not added:
                    state_out = state.clone()
                    ni_out = node_info.clone()
                    added = True
                ni_out.add_pod(pi)
                st = self.run_pre_filter_extension_add_pod(state_out, pod, pi, ni_out)
                if st is not None and not st.is_success():
                    return added, state_out, ni_out, st
        return added, state_out, ni_out, None

    def run_filter_plugins_with_nominated_pods(self, state: CycleState, pod: Obj,
                                               node_info: NodeInfo) -> Status | None:
        """Filter twice when higher-priority pods are nominated here: with them, then without them."""
        if not self.nominator.nominated_pods_for_node(node_info.name):
            return self.run_filter_plugins(state, pod, node_info)
        added, state2, ni2, st = self._add_nominated_pods(state, pod, node_info)
        if st is not None:
            return st
        st = self.run_filter_plugins(state2, pod, ni2)
        if st is not None or not added:
            return st
        return self.run_filter_plugins(state, pod, node_info)

    async def run_post_filter_plugins(self, state: CycleState, pod: Obj,
                                      statuses: NodeToStatus) -> tuple[PostFilterResult | None, Status | None]:
        reasons: list[str] = []
        rejector = ""
        result: PostFilterResult | None = None
        for p in self.post_filter_plugins:
            try:
                r, st = await p.post_filter(state, pod, statuses)
            except Exception as e:
                log.exception("postfilter plugin failed", plugin=p.name)
                return None, Status.error(e, plugin=p.name)
            if st is None or st.is_success():
                return r, None
            if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                st.plugin = p.name
                return r, st
            if not st.is_rejected():
                st.plugin = p.name
                return None, st
            reasons.extend(st.reasons)
            rejector = rejector or p.name
            if r is not None and result is None:
                result = r
        return result, Status.unschedulable(*reasons, plugin=rejector)

    # -- Score --------------------------------------------------------------------------------------

    def run_pre_score_plugins(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> Status | None:
        for p in self.pre_score_plugins:
            try:
                st = p.pre_score(state, pod, nodes)
            except Exception as e:
                log.exception("prescore plugin failed", plugin=p.name)
                return Status.error(e, plugin=p.name)
            if st is None or st.is_success():
                continue
            if st.code == Code.SKIP:
                state.skip_score_plugins.add(p.name)
                continue
            st.plugin = p.name
            return st
        return None

    def run_score_plugins(self, state: CycleState, pod: Obj,
                          nodes: list[NodeInfo]) -> tuple[list[int], Status | None]:
        """Weighted totals per node (same order as `nodes`)."""
        totals, offset, st = self.score_totals(state, pod, nodes)
        if offset and st is None:
            totals = [t + offset for t in totals]
        return totals, st

    def score_totals(self, state: CycleState, pod: Obj,
                     nodes: list[NodeInfo]) -> tuple[list[int], int, Status | None]:
        """Weighted totals per node less `offset`, a part every node shares (it cannot change which wins)."""
        skip = state.skip_score_plugins
        plugins = [p for p in self.score_plugins if p.name not in skip]
        totals: list[int] | None = None
        if state.nodes_start >= 0 and self._node_state_scorers and len(nodes) > 1:
            totals, plugins = self._node_state_totals(state, pod, nodes, plugins)
        # A plugin that gives every node the same score (common: no node has the pod's images or a
        # PreferNoSchedule taint) adds one constant, summed into the offset.
        offset = 0
        for p in plugins:
            weight = self.score_weights.get(p.name, 1)
            try:
                values, st = p.score_nodes(state, pod, nodes)
                if st is not None and not st.is_success():
                    st.plugin = p.name
                    return totals or [0] * len(nodes), 0, st
                if p.name in self._normalizers:
                    values, st = p.normalize_values(state, pod, nodes, values)
                    if st is not None and not st.is_success():
                        st.plugin = p.name
                        return totals or [0] * len(nodes), 0, st
            except Exception as e:
                log.exception("score plugin failed", plugin=p.name)
                return totals or [0] * len(nodes), 0, Status.error(e, plugin=p.name)
            if not values:
                continue
            first = values[0]
            if values.count(first) == len(values):
                lo = hi = first
            else:
                lo, hi = min(values), max(values)
            if hi > MAX_NODE_SCORE or lo < MIN_NODE_SCORE:
                v = hi if hi > MAX_NODE_SCORE else lo
                return totals or [0] * len(nodes), 0, Status.error(
                    f"plugin {p.name!r} returns an invalid score {v}, it should in the range of "
                    f"[{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing", plugin=p.name)
            if lo == hi:
                offset += first * weight
                continue
            if weight != 1:
                values = list(map(operator.mul, values, itertools.repeat(weight)))
            totals = values if totals is None else list(map(operator.add, totals, values))
        return totals or [0] * len(nodes), offset, None

    def _node_state_totals(self, state: CycleState, pod: Obj, nodes: list[NodeInfo],
                           plugins: list[Plugin]) -> tuple[list[int] | None, list[Plugin]]:
        """The weighted sum of the plugins whose scores follow from node state alone, kept per snapshot
        position across cycles (`CycleState.nodes_start`); and the plugins left to score as usual."""
        parts: list[tuple[int, Callable[[NodeInfo], int]]] = []
        key: list[Hashable] = []
        rest: list[Plugin] = []

        def total(ni: NodeInfo) -> int:
            t = 0
            for weight, score in parts:
                v = score(ni)
                if v > MAX_NODE_SCORE or v < MIN_NODE_SCORE:
                    raise _Unusable
                t += v * weight
            return t

        try:
            for p in plugins:
                scorer = p.node_scorer(state, pod) if p.name in self._node_state_scorers else None
                if scorer is None:
                    rest.append(p)
                    continue
                weight = self.score_weights.get(p.name, 1)
                parts.append((weight, scorer[1]))
                key.append((p.name, weight, scorer[0]))
            if not parts:
                return None, plugins
            snapshot = self._snapshot()
            start = state.nodes_start
            listed = snapshot.node_info_list
            if len(listed) != len(snapshot.generations) or start >= len(listed) or nodes[0] is not listed[start] \
                    or nodes[-1] is not listed[(start + len(nodes) - 1) % len(listed)]:
                return None, plugins
            out = self._node_state_memo.values(tuple(key), nodes, start, snapshot.generations, total)
        except Exception:
            # Scored the usual way instead, which reports the plugin and its error or invalid score.
            return None, plugins
        if out is None:
            return None, plugins
        return out, rest

    # -- Reserve / Permit ---------------------------------------------------------------------------

    def run_reserve_plugins_reserve(self, state: CycleState, pod: Obj, node_name: str) -> Status | None:
        for p in self.reserve_plugins:
            try:
                st = p.reserve(state, pod, node_name)
            except Exception as e:
                log.exception("reserve plugin failed", plugin=p.name)
                return Status.error(e, plugin=p.name)
            if st is not None and not st.is_success():
                st.plugin = p.name
                return st
        return None

    def run_reserve_plugins_unreserve(self, state: CycleState, pod: Obj, node_name: str) -> None:
        for p in reversed(self.reserve_plugins):
            try:
                p.unreserve(state, pod, node_name)
            except Exception:
                log.exception("unreserve plugin failed", plugin=p.name)

    async def run_permit_plugins(self, state: CycleState, pod: Obj, node_name: str) -> Status | None:
        waits: dict[str, float] = {}
        for p in self.permit_plugins:
            try:
                st, timeout = await p.permit(state, pod, node_name)
            except Exception as e:
                log.exception("permit plugin failed", plugin=p.name)
                return Status.error(e, plugin=p.name)
            if st is None or st.is_success():
                continue
            if st.code == Code.WAIT:
                waits[p.name] = min(max(timeout, 0.0), MAX_PERMIT_TIMEOUT)
                continue
            st.plugin = p.name
            return st
        if waits:
            self.waiting_pods[pod["metadata"].get("uid", "")] = WaitingPodImpl(pod, waits)
            return Status(Code.WAIT)
        return None

    async def wait_on_permit(self, pod: Obj) -> Status | None:
        uid = pod["metadata"].get("uid", "")
        wp = self.waiting_pods.get(uid)
        if wp is None:
            return None
        try:
            return await wp.wait()
        finally:
            self.waiting_pods.pop(uid, None)

    # -- binding ------------------------------------------------------------------------------------

    async def run_pre_bind_plugins(self, state: CycleState, pod: Obj, node_name: str) -> Status | None:
        for p in self.pre_bind_plugins:
            if p.name in state.skip_pre_bind_plugins:
                continue
            try:
                st = await p.pre_bind(state, pod, node_name)
            except Exception as e:
                log.exception("prebind plugin failed", plugin=p.name)
                return Status.error(e, plugin=p.name)
            if st is not None and st.code == Code.SKIP:
                continue
            if st is not None and not st.is_success():
                st.plugin = p.name
                return st
        return None

    async def run_bind_plugins(self, state: CycleState, pod: Obj, node_name: str) -> Status | None:
        for p in self.bind_plugins:
            try:
                st = await p.bind(state, pod, node_name)
            except Exception as e:
                log.exception("bind plugin failed", plugin=p.name)
                return Status.error(e, plugin=p.name)
            if st is not None and st.code == Code.SKIP:
                continue
            if st is not None and not st.is_success():
                st.plugin = p.name
            return st
        return Status(Code.SKIP)

    def run_post_bind_plugins(self, state: CycleState, pod: Obj, node_name: str) -> None:
        for p in self.post_bind_plugins:
            try:
                p.post_bind(state, pod, node_name)
            except Exception:
                log.exception("postbind plugin failed", plugin=p.name)

