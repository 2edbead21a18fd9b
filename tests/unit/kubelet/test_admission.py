"""Kubelet pod admission as upstream's predicate admit handler, and a rejected pod's worker."""

from __future__ import annotations

import asyncio
from typing import Any

from kubelet_agent.cri.hollow import HollowRuntime
from kubelet_agent.kubelet import Kubelet, KubeletOptions
from kubelet_agent.node import HostInfo, NodeConfig
from kubelet_agent.pods.admission import admit, matches_node_affinity, pod_requests
from kubelet_agent.pods.status import StatusManager
from kubelet_agent.pods.worker import NodeContext, PodWorker

ALLOC = {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi", "pods": "3", "example.com/gpu": "1"}
NODE = {"metadata": {"name": "n1", "labels": {"zone": "a", "kubernetes.io/os": "linux", "size": "4"}},
        "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoExecute"},
                            {"key": "soft", "effect": "NoSchedule"}]}}
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoExecute"}]


def pod(requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox", "resources": {"requests": requests or {}}}
    if "ports" in spec:
        container["ports"] = spec.pop("ports")
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"nodeName": "n1", "containers": [container], "tolerations": TOLERATE, **spec}}


def test_cpu_over_allocatable_is_out_of_cpu_with_upstream_message() -> None:
    running = pod({"cpu": "500m"})
    assert admit(pod({"cpu": "1500m"}), NODE, [running], ALLOC) is None
    assert admit(pod({"cpu": "2"}), NODE, [running], ALLOC) == (
        "OutOfcpu", "Node didn't have enough resource: cpu, requested: 2000, used: 500, capacity: 2000")


def test_memory_storage_extended_and_pod_count() -> None:
    assert admit(pod({"memory": "5Gi"}), NODE, [], ALLOC)[0] == "OutOfmemory"  # type: ignore[index]
    assert admit(pod({"ephemeral-storage": "11Gi"}), NODE, [], ALLOC)[0] == "OutOfephemeral-storage"  # type: ignore[index]
    assert admit(pod({"example.com/gpu": "2"}), NODE, [], ALLOC) == (
        "OutOfexample.com/gpu", "Node didn't have enough resource: example.com/gpu, requested: 2, used: 0, capacity: 1")
    assert admit(pod({"other.io/thing": "5"}), NODE, [], ALLOC) is None, "unknown extended resources are not checked"
    assert admit(pod(), NODE, [pod(), pod(), pod()], ALLOC) == (
        "OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3")


def test_requests_count_init_containers_sidecars_and_overhead() -> None:
    p = pod({"cpu": "100m", "memory": "64Mi"})
    p["spec"]["initContainers"] = [
        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
        {"name": "init", "resources": {"requests": {"cpu": "1", "memory": "32Mi"}}},
    ]
    p["spec"]["overhead"] = {"cpu": "10m"}
    assert pod_requests(p) == {"cpu": 1210, "memory": 64 * 2**20}


def test_node_selector_and_required_affinity() -> None:
    assert matches_node_affinity(pod(nodeSelector={"zone": "a"}), NODE)
    assert not matches_node_affinity(pod(nodeSelector={"zone": "b"}), NODE)
    term = {"matchExpressions": [{"key": "size", "operator": "Gt", "values": ["3"]},
                                 {"key": "gpu", "operator": "DoesNotExist"}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    assert matches_node_affinity(pod(affinity=affinity), NODE)
    term["matchExpressions"][0]["values"] = ["4"]
    assert not matches_node_affinity(pod(affinity=affinity), NODE)
    term["matchExpressions"] = []
    term["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
    assert matches_node_affinity(pod(affinity=affinity), NODE)
    assert admit(pod(nodeSelector={"zone": "b"}), NODE, [], ALLOC) == (
        "NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")


def test_host_ports_and_no_execute_taints() -> None:
    web = pod(ports=[{"containerPort": 80, "hostPort": 8080}])
    assert admit(pod(ports=[{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}]), NODE, [web], ALLOC) == (
        "NodePorts", "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
    assert admit(pod(ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}]), NODE, [web], ALLOC) is None
    untolerated = pod(tolerations=[])
    assert admit(untolerated, NODE, [], ALLOC) == (
        "TaintToleration", "Predicate TaintToleration failed: node(s) had untolerated taint")
    assert admit(untolerated, NODE, [], ALLOC, static=True) is None
    assert admit(pod(tolerations=[{"operator": "Exists"}]), NODE, [], ALLOC) is None, "NoSchedule is the scheduler's"


async def test_rejected_worker_reports_failed_and_starts_nothing() -> None:
    runtime = HollowRuntime()
    status = StatusManager(None)  # type: ignore[arg-type]
    ctx = NodeContext("n1", None, runtime, status, ["1.2.3.4"], ALLOC, "/tmp", resync=None)  # type: ignore[arg-type]
    p = pod({"cpu": "3"})
    worker = PodWorker(ctx, p)
    worker.reject("OutOfcpu", "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000")
    worker.start()
    await asyncio.sleep(0.05)
    ns, name, sent, _ = status._pending["u1"]
    assert (ns, name, sent["phase"], sent["reason"]) == ("ns", "p", "Failed", "OutOfcpu")
    assert sent["message"] == ("Pod was rejected: Node didn't have enough resource: cpu, requested: 3000, "
                               "used: 0, capacity: 2000")
    assert worker.terminal and await runtime.list_sandboxes() == []
    await worker.stop()


def test_kubelet_admits_only_pods_it_has_not_accepted_before() -> None:
    """After a restart, pods the kubelet already started (they have a startTime) are not checked again."""
    config = NodeConfig(name="n1", node_ips=["1.2.3.4"], host=HostInfo.hollow(), runtime_version="", max_pods=5)
    kubelet = Kubelet(None, HollowRuntime(), config, KubeletOptions(), StatusManager(None))  # type: ignore[arg-type]
    kubelet.agent.node = {"metadata": {"name": "n1", "labels": {}}, "spec": {}}
    over = pod({"cpu": "5"})
    assert kubelet._admit(over) == (
        "OutOfcpu", "Node didn't have enough resource: cpu, requested: 5000, used: 0, capacity: 4000")
    over["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
    assert kubelet._admit(over) is None
    over["status"] = {"phase": "Failed"}
    assert kubelet._admit(over) is None


def test_privileged_containers_only_when_allowed() -> None:
    """--allow-privileged=false rejects a privileged app or init container as upstream's privilege handler."""
    privileged = pod()
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert admit(privileged, NODE, [], ALLOC) is None
    assert admit(privileged, NODE, [], ALLOC, allow_privileged=False) == (
        "Forbidden", 'pod with UID "u1" specified privileged container, but is disallowed')
    init = pod(initContainers=[{"name": "i", "image": "busybox", "securityContext": {"privileged": True}}])
    assert admit(init, NODE, [], ALLOC, allow_privileged=False) == (
        "Forbidden", 'pod with UID "u1" specified privileged init container, but is disallowed')
    assert admit(pod(), NODE, [], ALLOC, allow_privileged=False) is None


def test_a_privileged_container_makes_the_sandbox_privileged() -> None:
    ctx = NodeContext(node_name="n1", client=None, runtime=HollowRuntime(), status=StatusManager(None),  # type: ignore[arg-type]
                      host_ips=["1.2.3.4"], allocatable=ALLOC, root_dir="/tmp")
    assert not PodWorker(ctx, pod()).sandbox_spec(0).privileged
    for key in ("containers", "initContainers", "ephemeralContainers"):
        p = pod()
        p["spec"].setdefault(key, []).append({"name": "x", "image": "busybox",
                                               "securityContext": {"privileged": True}})
        assert PodWorker(ctx, p).sandbox_spec(0).privileged, key


def test_kubelet_admits_against_the_watched_node() -> None:
    """The Node the watch delivered decides, not the copy from registration or the last status update."""
    config = NodeConfig(name="n1", node_ips=["1.2.3.4"], host=HostInfo.hollow(), runtime_version="", max_pods=5)
    kubelet = Kubelet(None, HollowRuntime(), config, KubeletOptions(), StatusManager(None))  # type: ignore[arg-type]
    kubelet.agent.node = {"metadata": {"name": "n1", "labels": {}}, "spec": {}}
    wanted = pod(nodeSelector={"disk": "ssd"})
    assert kubelet._admit(wanted)[0] == "NodeAffinity"  # type: ignore[index]

    class Watched:
        def get(self, name: str) -> dict[str, Any] | None:
            return {"metadata": {"name": name, "labels": {"disk": "ssd"}}, "spec": {}}

    kubelet.node_informer = Watched()  # type: ignore[assignment]
    assert kubelet._admit(wanted) is None


async def test_node_dependent_rejection_is_checked_against_a_fresh_read() -> None:
    """A pod that arrives before the watch delivers the label it needs is admitted after a quorum read."""
    fresh = {"metadata": {"name": "n1", "labels": {"disk": "ssd"}}, "spec": {}}
    reads: list[str] = []

    class Api:
        async def get(self, resource: Any, name: str) -> dict[str, Any]:
            reads.append(name)
            return fresh

    config = NodeConfig(name="n1", node_ips=["1.2.3.4"], host=HostInfo.hollow(), runtime_version="", max_pods=5)
    runtime = HollowRuntime()
    kubelet = Kubelet(Api(), runtime, config, KubeletOptions(), StatusManager(None))  # type: ignore[arg-type]
    kubelet.agent.node = {"metadata": {"name": "n1", "labels": {}}, "spec": {}}
    kubelet.ctx = NodeContext(node_name="n1", client=None, runtime=runtime, status=kubelet.status,  # type: ignore[arg-type]
                              host_ips=["1.2.3.4"], allocatable=ALLOC, root_dir="/tmp")
    kubelet.on_pod(pod(nodeSelector={"disk": "ssd"}))
    assert "u1" not in kubelet.workers
    for _ in range(50):
        if "u1" in kubelet.workers:
            break
        await asyncio.sleep(0.01)
    assert reads == ["n1"] and kubelet.workers["u1"].rejected is None
    fresh["metadata"]["labels"] = {}
    other = pod(nodeSelector={"disk": "ssd"})
    other["metadata"]["uid"] = "u2"
    kubelet.on_pod(other)
    for _ in range(50):
        if "u2" in kubelet.workers:
            break
        await asyncio.sleep(0.01)
    assert kubelet.workers["u2"].rejected == (
        "NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node "
        "affinity/selector")
    await asyncio.gather(*(w.stop() for w in kubelet.workers.values()))
