from __future__ import annotations

import random

from scheduler.framework.queue import SchedulingQueue
from scheduler.framework.types import PodInfo, QueuedPodInfo
from scheduler.plugins.queuesort import PrioritySort
from tests.unit.scheduler.util import make_pod


def qp(name: str, priority: int | None, ts: float) -> QueuedPodInfo:
    return QueuedPodInfo(PodInfo(make_pod(name, priority=priority)), timestamp=ts)


def test_higher_priority_first_then_earlier() -> None:
    s = PrioritySort({}, None)  # type: ignore[arg-type]
    assert s.less(qp("a", 10, 5.0), qp("b", 1, 1.0))
    assert not s.less(qp("a", 1, 1.0), qp("b", 10, 5.0))
    assert s.less(qp("a", 5, 1.0), qp("b", 5, 2.0))
    assert not s.less(qp("a", 5, 2.0), qp("b", 5, 1.0))
    # no priority means 0
    assert s.less(qp("a", 1, 9.0), qp("b", None, 1.0))


def test_sort_key_orders_exactly_as_less() -> None:
    s = PrioritySort({}, None)  # type: ignore[arg-type]
    rng = random.Random(7)
    pods = [qp(f"p{i}", rng.choice([None, -5, 0, 1, 10, 2_000_000_000]), float(rng.randint(0, 5)))
            for i in range(200)]
    for a in pods[:60]:
        for b in pods:
            assert (s.sort_key(a) < s.sort_key(b)) == s.less(a, b)


async def test_queue_pops_in_less_order_with_and_without_sort_key() -> None:
    s = PrioritySort({}, None)  # type: ignore[arg-type]
    rng = random.Random(11)
    specs = [(f"p{i}", rng.choice([None, 0, 3, 50])) for i in range(120)]
    orders = []
    for use_key in (False, True):
        q = SchedulingQueue(s.less)
        if use_key:
            q.sort_key = s.sort_key
        for name, prio in specs:
            q.add(make_pod(name, priority=prio))
        orders.append([(await q.pop()).pod["metadata"]["name"] for _ in specs])  # type: ignore[union-attr]
    assert orders[0] == orders[1]
    expected = sorted(specs, key=lambda t: (-(t[1] or 0), specs.index(t)))
    assert orders[1] == [name for name, _ in expected]
