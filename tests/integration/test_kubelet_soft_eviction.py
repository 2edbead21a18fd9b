"""A hollow kubelet with a soft memory threshold and a minimum reclaim, against the real apiserver and etcd.

The hollow node's memory.available is its 16Gi less what its pods' `hollow.pyk8s.io/usage.<container>`
annotations say they use, so the pressure, the grace period, the victims and the reclaim are all
deterministic.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.client import Client, gvr
from tests.conftest import REPO, eventually, hollow_kubelet_args

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
NODE = "hollow-soft-0"
GRACE = 4.0


@pytest.fixture
async def client(apiserver: str) -> AsyncIterator[Client]:
    c = Client(apiserver)
    yield c
    await c.close()


def pod(name: str, usage: str, requests: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "busybox"}
    if requests:
        container["resources"] = {"requests": requests}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"hollow.pyk8s.io/usage.app": usage}},
            "spec": {"nodeName": NODE, "containers": [container], "tolerations": [
                {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}]}}


async def test_soft_threshold_waits_its_grace_period_then_reclaims_by_usage(
        kubeconfig: Path, workdir: Path, client: Client, unique_ns: str) -> None:
    """13Gi used of 16Gi crosses memory.available<4Gi: MemoryPressure turns on at once, the pods keep running
    for the grace period, then the pods furthest over their requests go (not the BestEffort one QoS alone
    would pick) until 4Gi + 7Gi of minimum reclaim are free, each stopped gracefully."""
    for p in (pod("quiet", "memory=0"), pod("greedy", "memory=7Gi", {"memory": "1Gi"}),
              pod("modest", "memory=6Gi", {"memory": "4Gi"})):
        await client.create(PODS, p, unique_ns)
    log = await asyncio.to_thread(open, workdir / "hollow-soft-eviction.log", "ab")
    proc = await asyncio.create_subprocess_exec(
        *hollow_kubelet_args(kubeconfig, "hollow-soft", 1),
        "--eviction-soft", "memory.available<4Gi", "--eviction-soft-grace-period", f"memory.available={GRACE:g}s",
        "--eviction-minimum-reclaim", "memory.available=7Gi", "--eviction-max-pod-grace-period", "5",
        "--housekeeping-interval", "1s",
        cwd=REPO, stdout=log, stderr=log,
    )
    loop = asyncio.get_running_loop()
    try:
        async def phases() -> dict[str, str]:
            return {n: (await client.get(PODS, n, unique_ns))["status"].get("phase", "")
                    for n in ("quiet", "greedy", "modest")}

        async def memory_pressure() -> bool:
            node = await client.get(NODES, NODE)
            return any(c["type"] == "MemoryPressure" and c["status"] == "True"
                       for c in (node.get("status") or {}).get("conditions") or [])

        await eventually(memory_pressure, 40.0, 0.1)
        pressure_seen = loop.time()
        assert "Failed" not in (await phases()).values(), "no pod goes before the grace period"

        async def greedy_failed() -> dict[str, Any] | None:
            p = await client.get(PODS, "greedy", unique_ns)
            return p if p["status"].get("phase") == "Failed" else None

        greedy = (await eventually(greedy_failed, 40.0, 0.1))["status"]
        assert loop.time() - pressure_seen >= GRACE / 2
        assert greedy["reason"] == "Evicted"
        assert greedy["message"] == (
            "The node was low on resource: memory. Threshold quantity: 4Gi, available: 3Gi. "
            "Container app was using 7Gi, request is 1Gi, has larger consumption of memory. ")
        target = next(c for c in greedy["conditions"] if c["type"] == "DisruptionTarget")
        assert (target["status"], target["reason"], target["message"]) == (
            "True", "TerminationByKubelet", greedy["message"])
        terminated = greedy["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == 0, "a soft eviction stops the pod gracefully, not with SIGKILL"

        async def modest_failed() -> dict[str, Any] | None:
            p = await client.get(PODS, "modest", unique_ns)
            return p if p["status"].get("phase") == "Failed" else None

        modest = (await eventually(modest_failed, 40.0, 0.1))["status"]
        assert modest["message"] == (
            "The node was low on resource: memory. Threshold quantity: 4Gi, available: 10Gi. "
            "Container app was using 6Gi, request is 4Gi, has larger consumption of memory. "), \
            "10Gi available is above 4Gi, but not by the 7Gi minimum reclaim"
        await asyncio.sleep(3)
        assert (await phases())["quiet"] == "Running", "16Gi available clears the threshold and its reclaim"
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 15)
        log.close()
