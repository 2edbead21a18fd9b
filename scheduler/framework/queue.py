"""The scheduling queue: activeQ, backoffQ and the unschedulable pool, like upstream's PriorityQueue.

activeQ is ordered by the profile's QueueSort plugin (priority, then arrival). A pod that failed
with a plugin's rejection waits in the unschedulable pool until a cluster event that one of those
plugins registered (and whose queueing hint agrees) arrives; a pod that failed for another reason,
or whose event arrived while it was being scheduled, goes through backoffQ (1 s doubling to 10 s).
Pods that sat unschedulable for 5 minutes are flushed back every 30 seconds, as upstream does.
"""

from __future__ import annotations

import asyncio
import heapq
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from scheduler.framework import metrics
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from scheduler.framework.interface import NominatingInfo, Status, is_success
from scheduler.framework.types import Obj, PodInfo, QueuedPodInfo

log = structlog.get_logger(__name__)

DEFAULT_INITIAL_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 10.0
UNSCHEDULABLE_FLUSH_INTERVAL = 30.0
MAX_IN_UNSCHEDULABLE = 300.0
BACKOFF_FLUSH_INTERVAL = 1.0

# Events the queue itself raises for situations upstream names the same way.
UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"
FORCE_ACTIVATE = "ForceActivate"

LessFn = Callable[[QueuedPodInfo, QueuedPodInfo], bool]
PreEnqueueFn = Callable[[Obj], Status | None]


class _Entry:
    """Heap entry ordering by the QueueSort plugin: by its sort key when it offers one (a plain tuple
    comparison instead of several calls per heap step), else by its `less`."""

    __slots__ = ("qp", "less", "key")

    def __init__(self, qp: QueuedPodInfo, less: LessFn, key: Any = None) -> None:
        self.qp = qp
        self.less = less
        self.key = key

    def __lt__(self, other: _Entry) -> bool:
        key = self.key
        if key is not None:
            return key < other.key
        return self.less(self.qp, other.qp)


def _uid(pod: Obj) -> str:
    return pod["metadata"].get("uid") or f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


class Nominator:
    """Pods nominated to nodes by preemption, so later cycles keep room for them."""

    def __init__(self) -> None:
        self._by_node: dict[str, list[PodInfo]] = {}
        self._node_of: dict[str, str] = {}

    def add_nominated_pod(self, pod_info: PodInfo, nominating_info: NominatingInfo | None) -> None:
        self.delete_nominated_pod_if_exists(pod_info.pod)
        if nominating_info is not None and nominating_info.mode == "override":
            node = nominating_info.nominated_node_name
        else:
            node = (pod_info.pod.get("status") or {}).get("nominatedNodeName") or ""
        if not node or (pod_info.pod.get("spec") or {}).get("nodeName"):
            return
        uid = _uid(pod_info.pod)
        self._node_of[uid] = node
        self._by_node.setdefault(node, []).append(pod_info)

    def delete_nominated_pod_if_exists(self, pod: Obj) -> None:
        uid = _uid(pod)
        node = self._node_of.pop(uid, None)
        if node is None:
            return
        pods = [p for p in self._by_node.get(node, ()) if _uid(p.pod) != uid]
        if pods:
            self._by_node[node] = pods
        else:
            self._by_node.pop(node, None)

    def update_nominated_pod(self, old_pod: Obj, new_pod_info: PodInfo) -> None:
        """Keep a nomination across updates unless the new pod carries its own (or got bound)."""
        uid = _uid(old_pod)
        node = self._node_of.get(uid)
        new_nnn = (new_pod_info.pod.get("status") or {}).get("nominatedNodeName") or ""
        self.delete_nominated_pod_if_exists(old_pod)
        info = None
        if node and not new_nnn:
            info = NominatingInfo(node, "override")
        self.add_nominated_pod(new_pod_info, info)

    def has_nominated_pods(self) -> bool:
        return bool(self._node_of)

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        return list(self._by_node.get(node_name, ()))

    def nominated_node(self, pod: Obj) -> str:
        return self._node_of.get(_uid(pod), "")


class SchedulingQueue:
    """activeQ + backoffQ + unschedulable pool, with event-driven moves between them."""

    def __init__(
        self,
        less: LessFn,
        pre_enqueue: Callable[[Obj], tuple[Status | None, str]] | None = None,
        plugin_events: Callable[[Obj], dict[str, list[ClusterEventWithHint]]] | None = None,
        initial_backoff: float = DEFAULT_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        max_in_unschedulable: float = MAX_IN_UNSCHEDULABLE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._less = less
        # The QueueSort plugin's `sort_key`, when it has one whose order is `less`'s.
        self.sort_key: Callable[[QueuedPodInfo], Any] | None = None
        self._pre_enqueue = pre_enqueue
        self._plugin_events = plugin_events or (lambda pod: {})
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_in_unschedulable = max_in_unschedulable
        self.clock = clock
        self._active: list[_Entry] = []
        self._active_uids: dict[str, QueuedPodInfo] = {}
        self._backoff: list[tuple[float, int, QueuedPodInfo]] = []
        self._backoff_uids: dict[str, QueuedPodInfo] = {}
        self._unschedulable: dict[str, QueuedPodInfo] = {}
        self._in_flight: set[str] = set()
        self.nominator = Nominator()
        self.scheduling_cycle = 0
        self.move_request_cycle = -1
        self._wakeup = asyncio.Event()
        self._closed = False
        self._tasks: list[asyncio.Task[None]] = []
        self._expose_metrics()

    # -- bookkeeping ---------------------------------------------------------------------------------

    def _expose_metrics(self) -> None:
        """Pending-pod gauges read the queue when scraped, so queue operations pay nothing for them."""
        ref = weakref.ref(self)

        def reader(count: Callable[[SchedulingQueue], int]) -> Callable[[], float]:
            def read() -> float:
                q = ref()
                return float(count(q)) if q is not None else 0.0
            return read

        def gated(q: SchedulingQueue) -> int:
            return sum(1 for qp in q._unschedulable.values() if qp.gated)

        metrics.PENDING_PODS.labels("active").set_function(reader(lambda q: len(q._active_uids)))
        metrics.PENDING_PODS.labels("backoff").set_function(reader(lambda q: len(q._backoff_uids)))
        metrics.PENDING_PODS.labels("unschedulable").set_function(
            reader(lambda q: len(q._unschedulable) - gated(q)))
        metrics.PENDING_PODS.labels("gated").set_function(reader(gated))

    def _backoff_duration(self, qp: QueuedPodInfo) -> float:
        d = self.initial_backoff
        for _ in range(1, max(qp.attempts, 1)):
            d *= 2
            if d >= self.max_backoff:
                return self.max_backoff
        return min(d, self.max_backoff)

    def backoff_expiry(self, qp: QueuedPodInfo) -> float:
        return qp.timestamp + self._backoff_duration(qp)

    def _is_backing_off(self, qp: QueuedPodInfo) -> bool:
        return qp.attempts > 0 and self.backoff_expiry(qp) > self.clock()

    def _push_active(self, qp: QueuedPodInfo) -> None:
        uid = _uid(qp.pod)
        self._active_uids[uid] = qp
        key = self.sort_key
        heapq.heappush(self._active, _Entry(qp, self._less, key(qp) if key is not None else None))
        self._wakeup.set()

    def _push_backoff(self, qp: QueuedPodInfo) -> None:
        uid = _uid(qp.pod)
        self._backoff_uids[uid] = qp
        heapq.heappush(self._backoff, (self.backoff_expiry(qp), qp.seq, qp))

    def _gate(self, qp: QueuedPodInfo) -> bool:
        """Run PreEnqueue; True when the pod may enter activeQ, else it waits (gated) in the pool."""
        if self._pre_enqueue is None:
            qp.gated = False
            return True
        status, plugin = self._pre_enqueue(qp.pod)
        if is_success(status):
            qp.gated = False
            qp.gating_plugin = ""
            return True
        qp.gated = True
        qp.gating_plugin = plugin
        return False

    def _place(self, qp: QueuedPodInfo, event: str) -> str:
        """Put a pod that may run again into activeQ or backoffQ (or gated); the queue name."""
        uid = _uid(qp.pod)
        self._unschedulable.pop(uid, None)
        if not self._gate(qp):
            self._unschedulable[uid] = qp
            where = "gated"
        elif self._is_backing_off(qp):
            self._push_backoff(qp)
            where = "backoff"
        else:
            self._push_active(qp)
            where = "active"
        metrics.QUEUE_INCOMING_PODS.labels(where, event).inc()
        return where

    def _remove_everywhere(self, uid: str) -> QueuedPodInfo | None:
        qp = self._active_uids.pop(uid, None)
        if qp is not None:
            return qp
        qp = self._backoff_uids.pop(uid, None)
        if qp is not None:
            return qp
        return self._unschedulable.pop(uid, None)

    # -- public API ----------------------------------------------------------------------------------

    def add(self, pod: Obj) -> None:
        """A new pending pod (from the informer)."""
        uid = _uid(pod)
        if uid in self._active_uids or uid in self._backoff_uids or uid in self._unschedulable \
                or uid in self._in_flight:
            self.update(None, pod)
            return
        now = self.clock()
        qp = QueuedPodInfo(PodInfo(pod), timestamp=now, initial_attempt_timestamp=None)
        self.nominator.add_nominated_pod(qp.pod_info, None)
        self._place(qp, "PodAdd")

    def update(self, old: Obj | None, new: Obj) -> None:
        uid = _uid(new)
        for table in (self._active_uids, self._backoff_uids):
            qp = table.get(uid)
            if qp is not None:
                qp.pod_info.update(new)
                self.nominator.update_nominated_pod(old or new, qp.pod_info)
                return
        qp = self._unschedulable.get(uid)
        if qp is None:
            if uid not in self._in_flight:
                self.add(new)
            return
        qp.pod_info.update(new)
        self.nominator.update_nominated_pod(old or new, qp.pod_info)
        if old is None or _spec_or_labels_changed(old, new):
            if qp.gated:
                self._place(qp, "PodUpdate")
            else:
                event = _pod_update_event(old, new)
                if event is None or self._should_requeue(qp, event, old, new):
                    self._place(qp, "PodUpdate")

    def delete(self, pod: Obj) -> None:
        uid = _uid(pod)
        self.nominator.delete_nominated_pod_if_exists(pod)
        self._remove_everywhere(uid)

    def activate(self, pods: Iterable[Obj]) -> None:
        """Move the given pods to activeQ right away (ForceActivate)."""
        for pod in pods:
            uid = _uid(pod)
            qp = self._unschedulable.pop(uid, None) or self._backoff_uids.pop(uid, None)
            if qp is not None:
                if self._gate(qp):
                    self._push_active(qp)
                else:
                    self._unschedulable[uid] = qp

    def has(self, pod: Obj) -> bool:
        uid = _uid(pod)
        return uid in self._active_uids or uid in self._backoff_uids or uid in self._unschedulable

    async def pop(self) -> QueuedPodInfo | None:
        """The next pod to schedule; waits while activeQ is empty; None once closed."""
        while True:
            while self._active:
                entry = heapq.heappop(self._active)
                qp = entry.qp
                uid = _uid(qp.pod)
                if self._active_uids.get(uid) is not qp:
                    continue
                del self._active_uids[uid]
                qp.attempts += 1
                if qp.initial_attempt_timestamp is None:
                    qp.initial_attempt_timestamp = self.clock()
                self.scheduling_cycle += 1
                self._in_flight.add(uid)
                return qp
            if self._closed:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()

    def done(self, pod: Obj) -> None:
        """The pod's scheduling attempt (including binding) finished."""
        self._in_flight.discard(_uid(pod))

    def add_unschedulable_if_not_present(self, qp: QueuedPodInfo, pod_scheduling_cycle: int) -> None:
        """Return a pod after a failed attempt: backoffQ if a move request raced it, else the pool."""
        uid = _uid(qp.pod)
        self._in_flight.discard(uid)
        if uid in self._active_uids or uid in self._backoff_uids or uid in self._unschedulable:
            return
        qp.timestamp = self.clock()
        if not self._gate(qp):
            self._unschedulable[uid] = qp
        elif not qp.unschedulable_plugins and not qp.pending_plugins:
            # An error rather than a rejection: retry after backoff.
            self._push_backoff(qp)
        elif self.move_request_cycle >= pod_scheduling_cycle:
            self._push_backoff(qp)
        else:
            self._unschedulable[uid] = qp
        self.nominator.add_nominated_pod(qp.pod_info, None)

    # -- events --------------------------------------------------------------------------------------

    def _should_requeue(self, qp: QueuedPodInfo, event: ClusterEvent, old: Obj | None, new: Obj | None) -> bool:
        if event.label in (UNSCHEDULABLE_TIMEOUT, FORCE_ACTIVATE):
            return True
        rejectors = qp.unschedulable_plugins | qp.pending_plugins
        if not rejectors:
            return True
        by_plugin = self._plugin_events(qp.pod)
        for plugin in rejectors:
            for reg in by_plugin.get(plugin, ()):
                if not reg.event.matches(event):
                    continue
                if reg.hint is None:
                    return True
                try:
                    if reg.hint(qp.pod, old, new) == QueueingHint.QUEUE:
                        return True
                except Exception:
                    log.exception("queueing hint failed", plugin=plugin)
                    return True
        return False

    def _gate_lifted(self, qp: QueuedPodInfo, event: ClusterEvent) -> bool:
        by_plugin = self._plugin_events(qp.pod)
        for reg in by_plugin.get(qp.gating_plugin, ()):
            if reg.event.matches(event):
                return True
        return False

    def move_all_to_active_or_backoff(self, event: ClusterEvent, old: Obj | None = None,
                                      new: Obj | None = None) -> int:
        """A cluster event happened: requeue every waiting pod it may help. Returns how many moved."""
        moved = 0
        for qp in list(self._unschedulable.values()):
            if qp.gated:
                if self._gate_lifted(qp, event) and self._place(qp, str(event)) != "gated":
                    moved += 1
                continue
            if self._should_requeue(qp, event, old, new):
                self._place(qp, str(event))
                moved += 1
        self.move_request_cycle = self.scheduling_cycle
        return moved

    def flush_backoff_completed(self) -> None:
        now = self.clock()
        while self._backoff and self._backoff[0][0] <= now:
            _, _, qp = heapq.heappop(self._backoff)
            uid = _uid(qp.pod)
            if self._backoff_uids.get(uid) is not qp:
                continue
            del self._backoff_uids[uid]
            self._push_active(qp)

    def flush_unschedulable_leftover(self) -> None:
        now = self.clock()
        stale = [qp for qp in self._unschedulable.values()
                 if not qp.gated and now - qp.timestamp > self.max_in_unschedulable]
        if stale:
            event = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, UNSCHEDULABLE_TIMEOUT)
            for qp in stale:
                if self._should_requeue(qp, event, None, None):
                    self._place(qp, UNSCHEDULABLE_TIMEOUT)

    def pending_pods(self) -> dict[str, list[Obj]]:
        return {
            "active": [q.pod for q in self._active_uids.values()],
            "backoff": [q.pod for q in self._backoff_uids.values()],
            "unschedulable": [q.pod for q in self._unschedulable.values()],
        }

    def __len__(self) -> int:
        return len(self._active_uids) + len(self._backoff_uids) + len(self._unschedulable)

    # -- lifecycle -----------------------------------------------------------------------------------

    def run(self) -> None:
        self._tasks = [asyncio.create_task(self._loop(self.flush_backoff_completed, BACKOFF_FLUSH_INTERVAL)),
                       asyncio.create_task(self._loop(self.flush_unschedulable_leftover,
                                                      UNSCHEDULABLE_FLUSH_INTERVAL))]

    async def _loop(self, fn: Callable[[], None], interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            fn()

    async def close(self) -> None:
        self._closed = True
        self._wakeup.set()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        self._tasks = []


def _spec_or_labels_changed(old: Obj, new: Obj) -> bool:
    """Ignore status-only and resourceVersion-only updates, as upstream's isPodUpdated does."""
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    return (old.get("spec") != new.get("spec") or om.get("labels") != nm.get("labels")
            or om.get("annotations") != nm.get("annotations"))


def _pod_update_event(old: Obj | None, new: Obj) -> ClusterEvent | None:
    """The unscheduled pod's own update as a cluster event (labels, tolerations, gates, requests)."""
    if old is None:
        return None
    action = ActionType(0)
    os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
    if (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels"):
        action |= ActionType.UPDATE_POD_LABEL
    if os_.get("tolerations") != ns_.get("tolerations"):
        action |= ActionType.UPDATE_POD_TOLERATIONS
    if os_.get("schedulingGates") and not ns_.get("schedulingGates"):
        action |= ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED
    if os_.get("containers") != ns_.get("containers"):
        action |= ActionType.UPDATE_POD_SCALE_DOWN
    if not action:
        action = ActionType.UPDATE_OTHER
    return ClusterEvent(EventResource.UNSCHEDULED_POD, action)


__all__ = ["FORCE_ACTIVATE", "UNSCHEDULABLE_TIMEOUT", "Nominator", "SchedulingQueue"]
