from __future__ import annotations

from scheduler.framework.events import QueueingHint
from scheduler.framework.interface import Code
from scheduler.plugins.schedulinggates import SchedulingGates
from tests.unit.scheduler.util import make_pod


def test_gated_pod_is_held_with_upstream_message() -> None:
    pl = SchedulingGates({}, None)  # type: ignore[arg-type]
    assert pl.pre_enqueue(make_pod("p")) is None
    st = pl.pre_enqueue(make_pod("p", schedulingGates=[{"name": "a"}, {"name": "b"}]))
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == "waiting for scheduling gates: [a b]"


def test_hint_only_when_own_gates_are_gone() -> None:
    pl = SchedulingGates({}, None)  # type: ignore[arg-type]
    pod = make_pod("p", schedulingGates=[{"name": "a"}])
    hint = pl.events_to_register()[0].hint
    assert hint is not None
    ungated = {**pod, "spec": {**pod["spec"], "schedulingGates": []}}
    assert hint(pod, pod, ungated) == QueueingHint.QUEUE
    assert hint(pod, pod, pod) == QueueingHint.QUEUE_SKIP
    assert hint(pod, None, make_pod("other")) == QueueingHint.QUEUE_SKIP
