"""The hollow prober's readiness follows the pod's annotations, per container or for all of them."""

from __future__ import annotations

import asyncio

from kubelet_agent.cri.hollow import HollowRuntime, simulated_ready
from kubelet_agent.cri.types import ContainerSpec, SandboxSpec
from kubelet_agent.pods.probes import ProbeManager
from services.runtime.netns import Dialer


def test_annotation_per_container_overrides_pod_wide() -> None:
    assert simulated_ready({}, "a")
    assert not simulated_ready({"hollow.pyk8s.io/ready": "false"}, "a")
    assert simulated_ready({"hollow.pyk8s.io/ready": "false", "hollow.pyk8s.io/ready.a": "true"}, "a")
    assert not simulated_ready({"hollow.pyk8s.io/ready.b": "False"}, "b")
    assert simulated_ready({"hollow.pyk8s.io/ready.b": "false"}, "a")


async def test_probe_manager_flips_readiness_when_annotation_changes() -> None:
    annotations: dict[str, str] = {}
    events: list[tuple[str, str, str]] = []
    runtime = HollowRuntime()
    sandbox = SandboxSpec(name="p", namespace="ns", uid="u")
    cid = await runtime.create_container(await runtime.run_sandbox(sandbox), ContainerSpec("a", "busybox"), sandbox)
    await runtime.start_container(cid)
    manager = ProbeManager(runtime, Dialer(), lambda: None, lambda *a: None,
                           lambda *e: events.append(e), lambda: annotations)
    spec = {"name": "a", "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1,
                                            "failureThreshold": 1}}
    manager.sync({"a": (cid, spec)}, "10.0.0.1")
    await asyncio.sleep(0.1)
    assert manager.ready[cid] is True
    annotations["hollow.pyk8s.io/ready.a"] = "false"
    for _ in range(50):
        if not manager.ready[cid]:
            break
        await asyncio.sleep(0.1)
    assert manager.ready[cid] is False
    assert events[-1] == ("a", "Unhealthy", "Readiness probe failed: annotation hollow.pyk8s.io/ready says not ready")
    await manager.stop()
