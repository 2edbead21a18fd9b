"""The scheduling queue: ordering, backoff, the unschedulable pool, event-driven moves, gating, flushes."""

from __future__ import annotations

from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from scheduler.framework.interface import NominatingInfo, Status
from scheduler.framework.queue import SchedulingQueue
from scheduler.framework.types import PodInfo, QueuedPodInfo
from scheduler.plugins.queuesort import PrioritySort
from scheduler.plugins.schedulinggates import SchedulingGates
from tests.unit.scheduler.util import make_pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
NODE_TAINT = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)


def make_queue(clock: Clock, events: dict | None = None, gates: bool = False) -> SchedulingQueue:
    sort = PrioritySort({}, None)  # type: ignore[arg-type]
    gate_plugin = SchedulingGates({}, None)  # type: ignore[arg-type]
    registered = dict(events or {})
    if gates:
        registered["SchedulingGates"] = gate_plugin.events_to_register()

    def pre_enqueue(pod: dict) -> tuple[Status | None, str]:
        return (gate_plugin.pre_enqueue(pod), "SchedulingGates") if gates else (None, "")

    return SchedulingQueue(sort.less, pre_enqueue, lambda pod: registered, clock=clock)


async def pop(q: SchedulingQueue) -> QueuedPodInfo:
    qp = await q.pop()
    assert qp is not None
    return qp


async def test_active_queue_orders_by_priority_then_arrival() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(make_pod("low1", priority=1))
    clock.now += 1
    q.add(make_pod("high", priority=100))
    clock.now += 1
    q.add(make_pod("low2", priority=1))
    names = [(await pop(q)).pod["metadata"]["name"] for _ in range(3)]
    assert names == ["high", "low1", "low2"]


async def test_unschedulable_pod_moves_back_only_on_registered_event() -> None:
    clock = Clock()
    q = make_queue(clock, {"NodeResourcesFit": [ClusterEventWithHint(NODE_ADD)]})
    q.add(make_pod("p"))
    qp = await pop(q)
    cycle = q.scheduling_cycle
    qp.unschedulable_plugins = {"NodeResourcesFit"}
    q.add_unschedulable_if_not_present(qp, cycle)
    assert q.pending_pods()["unschedulable"] == [qp.pod]
    assert q.move_all_to_active_or_backoff(NODE_TAINT) == 0
    clock.now += 20  # backoff (1s after 1 attempt) is over
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 1
    assert q.pending_pods()["active"] == [qp.pod]


async def test_queueing_hint_can_skip() -> None:
    clock = Clock()
    q = make_queue(clock, {"X": [ClusterEventWithHint(NODE_ADD, lambda pod, old, new: QueueingHint.QUEUE_SKIP)]})
    q.add(make_pod("p"))
    qp = await pop(q)
    qp.unschedulable_plugins = {"X"}
    q.add_unschedulable_if_not_present(qp, q.scheduling_cycle)
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 0


async def test_event_during_cycle_sends_pod_to_backoff_and_backoff_doubles() -> None:
    clock = Clock()
    q = make_queue(clock, {"X": [ClusterEventWithHint(NODE_ADD)]})
    q.add(make_pod("p"))
    qp = await pop(q)
    cycle = q.scheduling_cycle
    q.move_all_to_active_or_backoff(NODE_ADD)  # arrives while p is being scheduled
    qp.unschedulable_plugins = {"X"}
    q.add_unschedulable_if_not_present(qp, cycle)
    assert q.pending_pods()["backoff"] == [qp.pod]
    assert q.backoff_expiry(qp) - qp.timestamp == 1.0
    clock.now += 0.5
    q.flush_backoff_completed()
    assert q.pending_pods()["backoff"] == [qp.pod]
    clock.now += 0.6
    q.flush_backoff_completed()
    assert q.pending_pods()["active"] == [qp.pod]
    qp = await pop(q)
    assert qp.attempts == 2 and q.backoff_expiry(qp) - qp.timestamp == 2.0
    qp.attempts = 10
    assert q.backoff_expiry(qp) - qp.timestamp == 10.0


async def test_error_goes_to_backoff_not_the_pool() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(make_pod("p"))
    qp = await pop(q)
    q.add_unschedulable_if_not_present(qp, q.scheduling_cycle)
    assert q.pending_pods()["backoff"] == [qp.pod]


async def test_unschedulable_leftover_flushed_after_five_minutes() -> None:
    clock = Clock()
    q = make_queue(clock, {"X": [ClusterEventWithHint(NODE_ADD)]})
    q.add(make_pod("p"))
    qp = await pop(q)
    qp.unschedulable_plugins = {"X"}
    q.add_unschedulable_if_not_present(qp, q.scheduling_cycle)
    clock.now += 299
    q.flush_unschedulable_leftover()
    assert q.pending_pods()["unschedulable"]
    clock.now += 2
    q.flush_unschedulable_leftover()
    assert q.pending_pods()["active"] == [qp.pod]


async def test_gated_pod_waits_until_gates_removed() -> None:
    clock = Clock()
    q = make_queue(clock, gates=True)
    pod = make_pod("g", schedulingGates=[{"name": "wait"}])
    q.add(pod)
    assert q.pending_pods()["active"] == [] and q.pending_pods()["unschedulable"] == [pod]
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 0
    ungated = {**pod, "spec": {**pod["spec"], "schedulingGates": []}}
    q.update(pod, ungated)
    assert [p["metadata"]["name"] for p in q.pending_pods()["active"]] == ["g"]


async def test_delete_and_update_in_active() -> None:
    clock = Clock()
    q = make_queue(clock)
    a, b = make_pod("a"), make_pod("b")
    q.add(a)
    q.add(b)
    q.delete(a)
    updated = {**b, "metadata": {**b["metadata"], "labels": {"x": "y"}}}
    q.update(b, updated)
    qp = await pop(q)
    assert qp.pod["metadata"]["labels"] == {"x": "y"}
    assert len(q) == 0


async def test_nominator() -> None:
    clock = Clock()
    q = make_queue(clock)
    pi = PodInfo(make_pod("p"))
    q.nominator.add_nominated_pod(pi, NominatingInfo("n1", "override"))
    assert q.nominator.nominated_pods_for_node("n1") == [pi]
    q.nominator.delete_nominated_pod_if_exists(pi.pod)
    assert q.nominator.nominated_pods_for_node("n1") == []
