"""Eviction thresholds on this host's real signals, node pressure conditions, and emptyDir sizeLimit."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

from kubelet_agent.config import parser, settings
from kubelet_agent.eviction import (
    DEFAULT_EVICTION_HARD,
    EvictionManager,
    Threshold,
    disk_usage,
    empty_dir_violations,
    observe,
    parse_eviction_flag,
    parse_thresholds,
)
from kubelet_agent.node import HostInfo, NodeAgent, NodeConfig
from services.client import Client


def test_parse_thresholds_and_flag() -> None:
    assert parse_eviction_flag("memory.available<100Mi, nodefs.available<10%") == {
        "memory.available": "100Mi", "nodefs.available": "10%"}
    t = {x.signal: x for x in parse_thresholds(DEFAULT_EVICTION_HARD)}
    assert t["memory.available"].limit(Decimal(10 * 2**30)) == 100 * 2**20
    assert t["nodefs.available"].limit(Decimal(1000)) == 100
    assert parse_thresholds({"memory.available": "0%"}) == []
    with pytest.raises(ValueError):
        parse_thresholds({"cpu.available": "1"})
    with pytest.raises(ValueError):
        parse_eviction_flag("memory.available=1Gi")


def test_config_file_eviction_hard(tmp_path: Path) -> None:
    cfg = tmp_path / "kubelet.yaml"
    cfg.write_text("kind: KubeletConfiguration\nevictionHard:\n  memory.available: 1Gi\n"
                   "evictionPressureTransitionPeriod: 30s\n")
    s = settings(parser().parse_args(["--config", str(cfg)]))
    assert s.eviction_hard == {"memory.available": "1Gi"}
    assert s.eviction_pressure_transition == 30
    s = settings(parser().parse_args(["--config", str(cfg), "--eviction-hard", "pid.available<10"]))
    assert s.eviction_hard == {"pid.available": "10"}


def test_observe_reads_the_host(tmp_path: Path) -> None:
    seen = observe(str(tmp_path), None)
    for signal in ("memory.available", "nodefs.available", "nodefs.inodesFree", "pid.available"):
        available, capacity = seen[signal]
        assert 0 <= available <= capacity
    assert "imagefs.available" not in seen


async def test_pressure_follows_thresholds_with_transition_period(tmp_path: Path) -> None:
    changes = []

    async def changed() -> None:
        changes.append(dict(m.pressure))

    # More free memory than any host has, and a disk that must be 100% free: both are under pressure.
    m = EvictionManager([Threshold("memory.available", quantity=Decimal(2**60)),
                         Threshold("nodefs.available", percentage=1.0)], str(tmp_path), transition=3600,
                        on_change=changed)
    met = await m.synchronize()
    assert {t.signal for t in met} == {"memory.available", "nodefs.available"}
    assert m.pressure == {"memory": True, "disk": True, "pid": False}
    m.thresholds = parse_thresholds({"memory.available": "1Ki"})
    assert await m.synchronize() == []
    assert m.pressure["memory"] and m.pressure["disk"], "pressure holds for the transition period"
    m.transition = 0
    await m.synchronize()
    assert m.pressure == {"memory": False, "disk": False, "pid": False}
    assert len(changes) == 2


def test_node_conditions_report_pressure() -> None:
    host = HostInfo("2", "1Gi", "10Gi", "k", "os")
    agent = NodeAgent(Client("http://127.0.0.1:1"), NodeConfig("n", ["10.0.0.1"], host, "containerd://1"),
                      pressure={"memory": True, "disk": False, "pid": True})
    conds = {c["type"]: c for c in agent._conditions([])}
    assert (conds["MemoryPressure"]["status"], conds["MemoryPressure"]["reason"], conds["MemoryPressure"]["message"]) \
        == ("True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
    assert (conds["DiskPressure"]["status"], conds["DiskPressure"]["reason"], conds["DiskPressure"]["message"]) \
        == ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
    assert (conds["PIDPressure"]["status"], conds["PIDPressure"]["reason"], conds["PIDPressure"]["message"]) \
        == ("True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available")
    agent.runtime_errors = ["container runtime network not ready"]
    ready = {c["type"]: c for c in agent._conditions([])}["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")


def test_empty_dir_over_size_limit(tmp_path: Path) -> None:
    pod = {"spec": {"volumes": [{"name": "small", "emptyDir": {"sizeLimit": "1Mi"}},
                                {"name": "free", "emptyDir": {}}]}}
    (tmp_path / "small").mkdir()
    (tmp_path / "free").mkdir()
    (tmp_path / "free" / "big").write_bytes(b"x" * (3 << 20))
    (tmp_path / "small" / "half").write_bytes(b"x" * (512 << 10))
    assert empty_dir_violations(pod, tmp_path) is None
    (tmp_path / "small" / "sub").mkdir()
    (tmp_path / "small" / "sub" / "more").write_bytes(b"x" * (1 << 20))
    assert disk_usage(str(tmp_path / "small")) > 1 << 20
    assert empty_dir_violations(pod, tmp_path) == 'Usage of EmptyDir volume "small" exceeds the limit "1Mi". '


@pytest.mark.parametrize("flag, message", [
    ("--eviction-hard=memory.available<lots", "invalid eviction threshold memory.available<lots"),
    ("--eviction-hard=nodefs.available<150%", "a percentage must be within 0%..100%"),
    ("--eviction-hard=memory.available<-1Mi", "must not be negative"),
    ("--eviction-hard=foo<1", "unsupported eviction signal 'foo'"),
    ("--housekeeping-interval=soon", 'time: invalid duration "soon"'),
    ("--authentication-token-webhook-cache-ttl=2 minutes", "invalid duration"),
    ("--max-parallel-pod-starts=-1", "--max-parallel-pod-starts must be 0"),
])
def test_bad_flags_are_refused_with_what_is_wrong(flag: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        settings(parser().parse_args(["--hollow", flag]))
