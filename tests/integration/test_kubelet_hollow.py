"""A hollow kubelet process against the real apiserver and etcd: pods run, finish, crash-loop and
terminate gracefully with the status upstream's kubelet would write."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.client import Client, NotFound, gvr
from tests.conftest import REPO, eventually, hollow_kubelet_args, hollow_kubelet_process

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
LEASES = gvr("coordination.k8s.io/v1", "leases")
EVENTS = gvr("v1", "events")
NODE = "hollow-it-0"


@pytest.fixture(scope="module")
def hollow_kubelet(kubeconfig: Path, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    with hollow_kubelet_process(kubeconfig, workdir / "hollow-kubelet.log", "hollow-it", 2) as proc:
        yield proc


@pytest.fixture
async def client(apiserver: str) -> AsyncIterator[Client]:
    c = Client(apiserver)
    yield c
    await c.close()


def pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"nodeName": NODE, "containers": containers, **spec}}


async def test_node_registers_with_lease(hollow_kubelet: Any, client: Client) -> None:
    node = await eventually(lambda: client.get(NODES, NODE))
    await eventually(lambda: client.get(LEASES, NODE, "kube-node-lease"))
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == NODE and labels["kubernetes.io/os"] == "linux"
    status = node["status"]
    assert status["nodeInfo"]["kubeletVersion"] == "v1.32.0-pyk8s"
    assert status["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6")
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False", "Ready": "True"}
    assert status["capacity"]["pods"] == "110"
    assert [a["type"] for a in status["addresses"]] == ["InternalIP", "Hostname"]
    await client.get(NODES, "hollow-it-1")


async def test_a_condition_changed_by_someone_else_is_put_right(hollow_kubelet: Any, client: Client) -> None:
    """As after the node lifecycle controller marked a node Unknown: the kubelet reads its Node before each
    status update (every 10 s) and posts Ready again, without waiting for the 5-minute report."""
    await eventually(lambda: client.get(NODES, "hollow-it-1"))
    unknown = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
               "message": "Kubelet stopped posting node status."}
    await client.patch_status(NODES, "hollow-it-1", {"status": {"conditions": [unknown]}}, patch_type="strategic")

    async def ready_again() -> bool:
        conditions = (await client.get(NODES, "hollow-it-1"))["status"]["conditions"]
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    await eventually(ready_again, limit=25)


async def test_pod_runs_with_upstream_status(hollow_kubelet: Any, client: Client, unique_ns: str) -> None:
    body = pod("web", [{"name": "a", "image": "nginx:1.25"}, {"name": "b", "image": "busybox"}],
               initContainers=[{"name": "init", "image": "busybox"}])
    await client.create(PODS, body, unique_ns)

    async def running() -> dict[str, Any] | None:
        p = await client.get(PODS, "web", unique_ns)
        return p if p["status"].get("phase") == "Running" and all(
            c["ready"] for c in p["status"].get("containerStatuses") or [{"ready": False}]) else None

    p = await eventually(running)
    status = p["status"]
    conds = {c["type"]: c["status"] for c in status["conditions"]}
    assert conds == {"PodReadyToStartContainers": "True", "Initialized": "True", "Ready": "True",
                     "ContainersReady": "True", "PodScheduled": "True"}
    assert [c["type"] for c in status["conditions"]] == [
        "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
    assert status["podIP"] and status["podIPs"] == [{"ip": status["podIP"]}]
    assert status["hostIP"] and status["startTime"] and status["qosClass"] == "BestEffort"
    init = status["initContainerStatuses"][0]
    assert init["state"]["terminated"]["reason"] == "Completed" and init["ready"] is True
    a, b = status["containerStatuses"]
    assert a["name"] == "a" and a["image"] == "docker.io/library/nginx:1.25"
    assert b["image"] == "docker.io/library/busybox:latest"
    assert a["containerID"].startswith("containerd://") and a["started"] is True
    assert a["restartCount"] == 0 and "running" in a["state"] and a["lastState"] == {}


async def test_job_style_pod_succeeds(hollow_kubelet: Any, client: Client, unique_ns: str) -> None:
    body = pod("job", [{"name": "work", "image": "busybox"}], restartPolicy="Never",
               annotations={"hollow.pyk8s.io/container.work": "exit=0,after=0.5"})
    await client.create(PODS, body, unique_ns)

    async def done() -> dict[str, Any] | None:
        p = await client.get(PODS, "job", unique_ns)
        return p if p["status"].get("phase") == "Succeeded" else None

    p = await eventually(done)
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    conds = {c["type"]: c for c in p["status"]["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "PodCompleted"


async def test_failing_pod_never_restarted_is_failed(hollow_kubelet: Any, client: Client, unique_ns: str) -> None:
    body = pod("fail", [{"name": "work", "image": "busybox"}], restartPolicy="Never",
               annotations={"hollow.pyk8s.io/container.work": "exit=3"})
    await client.create(PODS, body, unique_ns)

    async def failed() -> dict[str, Any] | None:
        p = await client.get(PODS, "fail", unique_ns)
        return p if p["status"].get("phase") == "Failed" else None

    p = await eventually(failed)
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"


async def test_crash_shows_crash_loop_back_off(hollow_kubelet: Any, client: Client, unique_ns: str) -> None:
    body = pod("crash", [{"name": "c", "image": "busybox"}],
               annotations={"hollow.pyk8s.io/container.c": "exit=1"})
    await client.create(PODS, body, unique_ns)

    async def crashing() -> dict[str, Any] | None:
        p = await client.get(PODS, "crash", unique_ns)
        cs = (p["status"].get("containerStatuses") or [{}])[0]
        return cs if (cs.get("state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff" else None

    cs = await eventually(crashing)
    assert cs["restartCount"] >= 1
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert "back-off 10s restarting failed container=c pod=crash_" in cs["state"]["waiting"]["message"]
    p = await client.get(PODS, "crash", unique_ns)
    assert p["status"]["phase"] == "Running"
    conds = {c["type"]: c for c in p["status"]["conditions"]}
    assert conds["Ready"]["reason"] == "ContainersNotReady"


async def test_graceful_deletion_completes(hollow_kubelet: Any, client: Client, unique_ns: str) -> None:
    await client.create(PODS, pod("gone", [{"name": "c", "image": "busybox"}]), unique_ns)

    async def running() -> bool:
        p = await client.get(PODS, "gone", unique_ns)
        return p["status"].get("phase") == "Running"

    await eventually(running)
    deleted = await client.delete(PODS, "gone", unique_ns, grace_period_seconds=30)
    assert deleted["metadata"].get("deletionTimestamp")

    async def removed() -> bool:
        try:
            await client.get(PODS, "gone", unique_ns)
        except NotFound:
            return True
        return False

    await eventually(removed, limit=15)


async def test_pod_over_allocatable_is_rejected(hollow_kubelet: Any, client: Client, unique_ns: str) -> None:
    """A pod bound straight to the node (no scheduler) that does not fit ends Failed/OutOfcpu, as upstream."""
    node = "hollow-it-1"
    small = pod("small", [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}])
    small["spec"]["nodeName"] = node
    await client.create(PODS, small, unique_ns)

    async def running() -> bool:
        return (await client.get(PODS, "small", unique_ns))["status"].get("phase") == "Running"

    await eventually(running)
    big = pod("big", [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "3500m"}}}])
    big["spec"]["nodeName"] = node
    await client.create(PODS, big, unique_ns)

    async def failed() -> dict[str, Any] | None:
        p = await client.get(PODS, "big", unique_ns)
        return p if p["status"].get("phase") == "Failed" else None

    status = (await eventually(failed))["status"]
    assert status["reason"] == "OutOfcpu"
    assert re.fullmatch(r"Pod was rejected: Node didn't have enough resource: cpu, requested: 3500, "
                        r"used: \d+, capacity: 4000", status["message"]), status["message"]
    assert "containerStatuses" not in status

    async def event() -> list[dict[str, Any]]:
        items = (await client.list(EVENTS, unique_ns))["items"]
        return [e for e in items if e["involvedObject"]["name"] == "big" and e["reason"] == "OutOfcpu"]

    (ev,) = await eventually(event)
    assert ev["type"] == "Warning" and ev["message"].startswith("Node didn't have enough resource: cpu")
    assert (await client.get(PODS, "small", unique_ns))["status"]["phase"] == "Running"

    wrong = pod("elsewhere", [{"name": "c", "image": "busybox"}], nodeSelector={"zone": "nowhere"})
    wrong["spec"]["nodeName"] = node
    await client.create(PODS, wrong, unique_ns)

    async def affinity() -> dict[str, Any] | None:
        p = await client.get(PODS, "elsewhere", unique_ns)
        return p if p["status"].get("phase") == "Failed" else None

    assert (await eventually(affinity))["status"]["reason"] == "NodeAffinity"
    await client.delete(PODS, "big", unique_ns)

    async def removed() -> bool:
        try:
            await client.get(PODS, "big", unique_ns)
        except NotFound:
            return True
        return False

    await eventually(removed, limit=15)


async def test_hollow_readiness_follows_annotation(hollow_kubelet: Any, client: Client, unique_ns: str) -> None:
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 1, "failureThreshold": 1}
    body = pod("flip", [{"name": "a", "image": "busybox", "readinessProbe": probe},
                        {"name": "b", "image": "busybox"}])
    await client.create(PODS, body, unique_ns)

    async def ready_is(want: str) -> Any:
        async def check() -> dict[str, Any] | None:
            p = await client.get(PODS, "flip", unique_ns)
            conds = {c["type"]: c["status"] for c in p["status"].get("conditions") or []}
            return p if conds.get("Ready") == want and conds.get("ContainersReady") == want else None
        return await eventually(check, limit=15)

    await ready_is("True")
    await client.patch(PODS, "flip", {"metadata": {"annotations": {"hollow.pyk8s.io/ready.a": "false"}}}, unique_ns)
    p = await ready_is("False")
    ready = {c["name"]: c["ready"] for c in p["status"]["containerStatuses"]}
    assert ready == {"a": False, "b": True} and p["status"]["phase"] == "Running"
    await client.patch(PODS, "flip", {"metadata": {"annotations": {"hollow.pyk8s.io/ready.a": "true"}}}, unique_ns)
    await ready_is("True")


async def test_hard_threshold_evicts_best_effort_first_and_refuses_new_ones(
        kubeconfig: Path, workdir: Path, client: Client, unique_ns: str) -> None:
    """A node always under memory pressure: one pod per pass goes, BestEffort before Guaranteed, with
    upstream's message; a new BestEffort pod is refused at admission."""
    node = "hollow-ev-0"
    guaranteed = pod("guaranteed", [{"name": "c", "image": "busybox", "resources": {
        "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}}])
    best_effort = pod("best-effort", [{"name": "c", "image": "busybox"}], tolerations=[
        {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}])
    for p in (guaranteed, best_effort):
        p["spec"]["nodeName"] = node
        await client.create(PODS, p, unique_ns)
    log = await asyncio.to_thread(open, workdir / "hollow-eviction.log", "ab")
    proc = await asyncio.create_subprocess_exec(
        *hollow_kubelet_args(kubeconfig, "hollow-ev", 1, "--eviction-hard", "memory.available<1000Ti",
                             "--housekeeping-interval", "3s"),
        cwd=REPO, stdout=log, stderr=log,
    )
    try:
        async def phases() -> dict[str, str] | None:
            got = {n: (await client.get(PODS, n, unique_ns))["status"].get("phase", "")
                   for n in ("guaranteed", "best-effort")}
            return got if "Failed" in got.values() else None

        assert await eventually(phases, interval=0.1) == {"guaranteed": "Running", "best-effort": "Failed"}
        status = (await client.get(PODS, "best-effort", unique_ns))["status"]
        assert status["reason"] == "Evicted"
        assert re.fullmatch(r"The node was low on resource: memory\. Threshold quantity: 1000Ti, "
                            r"available: \d+(Ki|Mi|Gi)?\. ", status["message"]), status["message"]
        target = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
        assert target["status"] == "True" and target["reason"] == "TerminationByKubelet"
        conditions = {c["type"]: c["status"] for c in (await client.get(NODES, node))["status"]["conditions"]}
        assert conditions["MemoryPressure"] == "True"

        async def guaranteed_evicted() -> bool:
            p = await client.get(PODS, "guaranteed", unique_ns)
            return p["status"].get("phase") == "Failed" and p["status"].get("reason") == "Evicted"

        await eventually(guaranteed_evicted)

        late = pod("late", [{"name": "c", "image": "busybox"}])
        late["spec"]["nodeName"] = node
        await client.create(PODS, late, unique_ns)

        async def rejected() -> dict[str, Any] | None:
            p = await client.get(PODS, "late", unique_ns)
            return p if p["status"].get("phase") == "Failed" else None

        status = (await eventually(rejected))["status"]
        assert status["reason"] == "Evicted"
        assert status["message"] == "Pod was rejected: The node had condition: [MemoryPressure]. "
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 15)
        log.close()
