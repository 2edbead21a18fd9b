from __future__ import annotations

from scheduler.framework.interface import PodInfo, QueuedPodInfo
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
