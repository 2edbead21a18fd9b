from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import QueueingHint
from scheduler.framework.interface import Code
from scheduler.framework.types import NodeInfo
from scheduler.plugins.nodeports import NodePorts
from tests.unit.scheduler.util import make_node, make_pod


def with_port(name: str, port: int, ip: str | None = None, proto: str = "TCP") -> dict:
    pod = make_pod(name)
    entry = {"containerPort": 80, "hostPort": port, "protocol": proto}
    if ip:
        entry["hostIP"] = ip
    pod["spec"]["containers"][0]["ports"] = [entry]
    return pod


def test_skip_without_host_ports() -> None:
    _, st = NodePorts({}, None).pre_filter(CycleState(), make_pod("p"), [])  # type: ignore[arg-type]
    assert st is not None and st.code == Code.SKIP


def test_conflicts() -> None:
    pl = NodePorts({}, None)  # type: ignore[arg-type]
    ni = NodeInfo(make_node("n"))
    ni.add_pod(with_port("existing", 8080, "10.0.0.1"))
    cases = [
        (with_port("same", 8080, "10.0.0.1"), False),
        (with_port("any-ip", 8080), False),
        (with_port("other-ip", 8080, "10.0.0.2"), True),
        (with_port("udp", 8080, "10.0.0.1", "UDP"), True),
        (with_port("other-port", 8081), True),
    ]
    for pod, fits in cases:
        state = CycleState()
        pl.pre_filter(state, pod, [ni])
        st = pl.filter(state, pod, ni)
        assert (st is None) == fits, pod["metadata"]["name"]
        if st is not None:
            assert st.code == Code.UNSCHEDULABLE
            assert st.message() == "node(s) didn't have free ports for the requested pod ports"


def test_hint_on_deleted_pod_with_same_port() -> None:
    hint = NodePorts({}, None).events_to_register()[0].hint  # type: ignore[arg-type]
    assert hint is not None
    assert hint(with_port("p", 80), with_port("gone", 80), None) == QueueingHint.QUEUE
    assert hint(with_port("p", 80), with_port("gone", 81), None) == QueueingHint.QUEUE_SKIP
