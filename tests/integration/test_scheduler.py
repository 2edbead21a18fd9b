"""kube-scheduler against a real apiserver and etcd: placement, messages, profiles, restarts, leader election."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from services.client import Client, gvr
from tests.conftest import REPO, APIServerProcess, free_port, start_apiserver, start_etcd_cluster

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
NAMESPACES = gvr("v1", "namespaces", namespaced=False)
EVENTS = gvr("events.k8s.io/v1", "events")
PRIORITY_CLASSES = gvr("scheduling.k8s.io/v1", "priorityclasses", namespaced=False)
LEASES = gvr("coordination.k8s.io/v1", "leases")
NS = "sched"
CP_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


@dataclass
class SchedulerProcess:
    proc: subprocess.Popen[bytes]
    log: Path
    health_port: int

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    """An etcd and apiserver of our own: Node objects are cluster-wide, so no other test sees ours."""
    work = tmp_path_factory.mktemp("sched-cluster")
    members = start_etcd_cluster(1, work / "etcd")
    server = start_apiserver([members[0].client_url], work / "apiserver")
    yield server
    server.stop()
    for m in members:
        m.kill()


@pytest.fixture(scope="module")
def spawn(cluster: APIServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    work = tmp_path_factory.mktemp("sched-procs")
    started: list[SchedulerProcess] = []

    def start(profiles: list[dict[str, Any]], *flags: str, name: str = "s") -> SchedulerProcess:
        config = work / f"{name}.yaml"
        config.write_text(yaml.safe_dump({"apiVersion": "kubescheduler.config.k8s.io/v1",
                                          "kind": "KubeSchedulerConfiguration", "profiles": profiles}))
        port = free_port()
        log = work / f"{name}-{len(started)}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "--master", cluster.url, "--config", str(config),
             "--secure-port", str(port), "--bind-address", "127.0.0.1", *flags],
            cwd=REPO, stdout=log.open("ab"), stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        sp = SchedulerProcess(proc, log, port)
        started.append(sp)
        return sp

    yield start
    for sp in started:
        sp.stop()


@pytest.fixture(scope="module")
async def client(cluster: APIServerProcess) -> AsyncIterator[Client]:
    c = Client(cluster.url)
    await c.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    yield c
    await c.close()


def node(name: str, cpu: str = "4", memory: str = "8Gi", labels: dict | None = None, taints: list | None = None,
         unschedulable: bool = False, **extra: str) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", **{k.replace("__", "/"): v for k, v in extra.items()}}
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": spec, "status": {"capacity": alloc, "allocatable": alloc}}


def pod(name: str, cpu: str | None = None, scheduler: str = "default-scheduler", **spec: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "registry.k8s.io/pause:3.9"}
    if cpu:
        c["resources"] = {"requests": {"cpu": cpu}}
    ports = spec.pop("host_port", None)
    if ports:
        c["ports"] = [{"containerPort": 80, "hostPort": ports}]
    labels = spec.pop("labels", {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"containers": [c], "schedulerName": scheduler, **spec}}


async def wait_for(fn: Callable[[], Any], within: float = 20.0, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await fn()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {within}s (last: {last!r})")


async def node_of(client: Client, name: str) -> str:
    async def bound() -> str:
        return (await client.get(PODS, name, NS))["spec"].get("nodeName", "")

    return await wait_for(bound)


async def unschedulable_message(client: Client, name: str) -> str:
    async def cond() -> str:
        p = await client.get(PODS, name, NS)
        for c in (p.get("status") or {}).get("conditions") or ():
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                return c["message"]
        return ""

    return await wait_for(cond)


async def events_for(client: Client, name: str, reason: str) -> list[dict[str, Any]]:
    items = (await client.list(EVENTS, NS))["items"]
    return [e for e in items if e["regarding"]["name"] == name and e["reason"] == reason]


BASE_NODES = [
    node("cp", cpu="8", labels={"topology.kubernetes.io/zone": "a"}, taints=[CP_TAINT]),
    node("small-a", cpu="1", memory="2Gi", labels={"topology.kubernetes.io/zone": "a", "disk": "hdd"}),
    node("big-b", cpu="4", labels={"topology.kubernetes.io/zone": "b", "disk": "ssd"}),
    node("gpu-c", cpu="4", labels={"topology.kubernetes.io/zone": "c"},
         taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}], **{"example.com__gpu": "2"}),
    node("cordoned-c", cpu="16", labels={"topology.kubernetes.io/zone": "c"}, unschedulable=True),
]
GPU_TOLERATION = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
BINPACK = {"schedulerName": "binpack", "pluginConfig": [{"name": "NodeResourcesFit", "args": {
    "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}]}}}]}


@pytest.fixture(scope="module")
async def main_scheduler(client: Client, spawn: Callable[..., SchedulerProcess]) -> SchedulerProcess:
    for n in BASE_NODES:
        await client.create(NODES, n)
    sp = spawn([{"schedulerName": "default-scheduler"}, BINPACK], "--leader-elect=false", name="main")
    async with httpx.AsyncClient() as h:
        async def ready() -> bool:
            try:
                return (await h.get(f"http://127.0.0.1:{sp.health_port}/readyz")).status_code == 200
            except httpx.HTTPError:
                return False

        await wait_for(ready)
    return sp


async def test_resources_taints_cordon_pick_the_only_fitting_node(client: Client, main_scheduler: Any) -> None:
    await client.create(PODS, pod("needs-2cpu", cpu="2"), NS)
    assert await node_of(client, "needs-2cpu") == "big-b"
    ev = await wait_for(lambda: events_for(client, "needs-2cpu", "Scheduled"))
    assert ev[0]["note"] == f"Successfully assigned {NS}/needs-2cpu to big-b"
    assert ev[0]["type"] == "Normal" and ev[0]["reportingController"] == "default-scheduler"


async def test_node_selector(client: Client, main_scheduler: Any) -> None:
    await client.create(PODS, pod("hdd", cpu="500m", nodeSelector={"disk": "hdd"}), NS)
    assert await node_of(client, "hdd") == "small-a"


async def test_required_affinity_with_toleration_and_extended_resource(client: Client, main_scheduler: Any) -> None:
    p = pod("zone-c", tolerations=GPU_TOLERATION, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["c"]}]}]}}})
    p["spec"]["containers"][0]["resources"] = {"requests": {"example.com/gpu": "1"}}
    await client.create(PODS, p, NS)
    assert await node_of(client, "zone-c") == "gpu-c"


async def test_toleration_for_control_plane(client: Client, main_scheduler: Any) -> None:
    await client.create(PODS, pod("on-cp", cpu="6", tolerations=[
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]), NS)
    assert await node_of(client, "on-cp") == "cp"


async def test_unschedulable_message_event_then_scheduled_when_node_arrives(
        client: Client, main_scheduler: Any) -> None:
    await client.create(PODS, pod("huge", cpu="100"), NS)
    msg = await unschedulable_message(client, "huge")
    assert msg.startswith(
        "0/5 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
        "1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
        "1 node(s) were unschedulable, 2 Insufficient cpu."), msg
    ev = await wait_for(lambda: events_for(client, "huge", "FailedScheduling"))
    assert ev[0]["type"] == "Warning" and ev[0]["note"] == msg
    assert (await client.get(PODS, "huge", NS))["status"].get("phase") == "Pending"
    await client.create(NODES, node("roomy", cpu="128", labels={"pool": "roomy"}))
    assert await node_of(client, "huge") == "roomy"


async def test_host_port_conflict(client: Client, main_scheduler: Any) -> None:
    sel = {"kubernetes.io/hostname": "big-b"}
    await client.create(PODS, pod("port-1", host_port=8080, nodeSelector=sel), NS)
    assert await node_of(client, "port-1") == "big-b"
    await client.create(PODS, pod("port-2", host_port=8080, nodeSelector=sel), NS)
    msg = await unschedulable_message(client, "port-2")
    # Filters run in upstream's order, so tainted and cordoned nodes report that first.
    assert msg.startswith(
        "0/6 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, "
        "1 node(s) had untolerated taint {dedicated: gpu}, "
        "1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
        "1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."), msg
    await client.delete(PODS, "port-1", NS, grace_period_seconds=0)
    assert await node_of(client, "port-2") == "big-b"


async def test_higher_priority_goes_first(client: Client, main_scheduler: Any) -> None:
    sel = {"pool": "prio"}
    for name, value in (("t-low", 1), ("t-high", 1000)):
        await client.create(PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                               "metadata": {"name": name}, "value": value})
    await client.create(PODS, pod("low", cpu="1", nodeSelector=sel, priorityClassName="t-low"), NS)
    await client.create(PODS, pod("high", cpu="1", nodeSelector=sel, priorityClassName="t-high"), NS)
    await unschedulable_message(client, "low")
    await unschedulable_message(client, "high")
    await client.create(NODES, node("prio", cpu="1", labels=sel))
    assert await node_of(client, "high") == "prio"
    msg = await unschedulable_message(client, "low")
    assert "Insufficient cpu" in msg
    assert not (await client.get(PODS, "low", NS))["spec"].get("nodeName")


async def test_two_profiles_score_differently(client: Client, main_scheduler: Any) -> None:
    sel = {"pool": "bp"}
    await client.create(NODES, node("bp-busy", cpu="4", labels=sel))
    await client.create(NODES, node("bp-idle", cpu="4", labels=sel))
    await client.create(PODS, {**pod("filler", cpu="3"), "spec": {**pod("filler", cpu="3")["spec"],
                                                                  "nodeName": "bp-busy"}}, NS)
    await client.create(PODS, pod("spread", cpu="500m", nodeSelector=sel), NS)
    await client.create(PODS, pod("packed", cpu="500m", scheduler="binpack", nodeSelector=sel), NS)
    assert await node_of(client, "spread") == "bp-idle"
    assert await node_of(client, "packed") == "bp-busy"
    ev = await wait_for(lambda: events_for(client, "packed", "Scheduled"))
    assert ev[0]["reportingController"] == "binpack"


async def test_pod_for_unknown_scheduler_is_left_alone(client: Client, main_scheduler: Any) -> None:
    await client.create(PODS, pod("other", scheduler="someone-else"), NS)
    await asyncio.sleep(2)
    p = await client.get(PODS, "other", NS)
    assert not p["spec"].get("nodeName") and not (p.get("status") or {}).get("conditions")


async def test_metrics_and_health(main_scheduler: SchedulerProcess) -> None:
    async with httpx.AsyncClient() as h:
        body = (await h.get(f"http://127.0.0.1:{main_scheduler.health_port}/metrics")).text
        assert 'scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"}' in body
        assert 'scheduler_schedule_attempts_total{profile="default-scheduler",result="unschedulable"}' in body
        assert 'scheduler_pending_pods{queue="unschedulable"}' in body
        assert "scheduler_pod_scheduling_sli_duration_seconds_bucket" in body
        assert (await h.get(f"http://127.0.0.1:{main_scheduler.health_port}/healthz")).status_code == 200


async def _bound_pods(client: Client, prefix: str) -> list[dict[str, Any]]:
    items = (await client.list(PODS, NS))["items"]
    return [p for p in items if p["metadata"]["name"].startswith(prefix)]


async def _create_many(client: Client, prefix: str, n: int, scheduler: str, sel: dict[str, str]) -> None:
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with sem:
            await client.create(PODS, pod(f"{prefix}-{i:04d}", cpu="1", scheduler=scheduler, nodeSelector=sel), NS)

    await asyncio.gather(*(one(i) for i in range(n)))


def _assert_no_overcommit(pods: list[dict[str, Any]], capacity_per_node: int) -> None:
    per_node: dict[str, int] = {}
    for p in pods:
        per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
    assert all(v <= capacity_per_node for v in per_node.values()), per_node


async def test_restart_mid_burst_loses_and_double_binds_nothing(
        client: Client, main_scheduler: Any, spawn: Callable[..., SchedulerProcess]) -> None:
    sel = {"pool": "burst"}
    for i in range(4):
        await client.create(NODES, node(f"burst-{i}", cpu="100", labels=sel))
    total = 400  # exactly the pool's capacity: a lost or double-counted pod would leave one pending
    # The burst is queued before the scheduler starts, and the first scheduler's client is throttled, so the kill
    # lands mid-burst however fast the scheduler binds.
    await _create_many(client, "b", total, "burst", sel)
    sp = spawn([{"schedulerName": "burst"}], "--leader-elect=false", "--kube-api-qps=40", "--kube-api-burst=1",
               name="burst")

    async def some_bound() -> bool:
        return sum(1 for p in await _bound_pods(client, "b-") if p["spec"].get("nodeName")) >= 20

    await wait_for(some_bound, 60, 0.05)
    sp.kill()
    done_before = sum(1 for p in await _bound_pods(client, "b-") if p["spec"].get("nodeName"))
    assert done_before < total, "burst finished before the kill; the test would prove nothing"
    spawn([{"schedulerName": "burst"}], "--leader-elect=false", name="burst")

    async def all_bound() -> bool:
        return all(p["spec"].get("nodeName") for p in await _bound_pods(client, "b-"))

    await wait_for(all_bound, 90, 0.5)
    pods = await _bound_pods(client, "b-")
    assert len(pods) == total
    _assert_no_overcommit(pods, 100)
    events = (await client.list(EVENTS, NS))["items"]
    scheduled: dict[str, int] = {}
    for e in events:
        if e["reason"] == "Scheduled" and e["regarding"]["name"].startswith("b-"):
            scheduled[e["regarding"]["name"]] = scheduled.get(e["regarding"]["name"], 0) + 1
    assert all(v == 1 for v in scheduled.values())


async def _lease_holder(client: Client, name: str) -> str:
    try:
        return (await client.get(LEASES, name, "kube-system"))["spec"].get("holderIdentity") or ""
    except Exception:
        return ""


async def test_leader_election_failover(client: Client, main_scheduler: Any,
                                        spawn: Callable[..., SchedulerProcess]) -> None:
    sel = {"pool": "ha"}
    for i in range(2):
        await client.create(NODES, node(f"ha-{i}", cpu="40", labels=sel))
    flags = ("--leader-elect=true", "--leader-elect-resource-name=ha-scheduler",
             "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s",
             "--leader-elect-retry-period=500ms")
    procs = {ident: spawn([{"schedulerName": "ha"}], *flags, f"--identity={ident}", name=ident)
             for ident in ("ha-a", "ha-b")}
    leader = await wait_for(lambda: _lease_holder(client, "ha-scheduler"), 30)
    assert leader in procs
    await _create_many(client, "ha1", 20, "ha", sel)

    async def bound(prefix: str, n: int) -> bool:
        pods = await _bound_pods(client, prefix)
        return len(pods) == n and all(p["spec"].get("nodeName") for p in pods)

    await wait_for(lambda: bound("ha1-", 20), 60)
    procs[leader].kill()
    killed_at = time.monotonic()
    other = next(i for i in procs if i != leader)

    async def taken_over() -> bool:
        return await _lease_holder(client, "ha-scheduler") == other

    await wait_for(taken_over, 15, 0.1)
    # The standby must take over within the lease duration (plus one retry period and request latency).
    assert time.monotonic() - killed_at < 4 + 0.5 + 2.0
    await _create_many(client, "ha2", 20, "ha", sel)
    await wait_for(lambda: bound("ha2-", 20), 60)
    pods = await _bound_pods(client, "ha")
    _assert_no_overcommit(pods, 40)

    async def scheduled_events() -> dict[str, int]:
        counts: dict[str, int] = {}
        for e in (await client.list(EVENTS, NS))["items"]:
            if e["reason"] == "Scheduled" and e["regarding"]["name"].startswith("ha"):
                counts[e["regarding"]["name"]] = counts.get(e["regarding"]["name"], 0) + 1
        # Events are written in the background: the new leader's 20 must all arrive (the killed
        # leader may have died before writing some of its own).
        return counts if sum(1 for n in counts if n.startswith("ha2-")) == 20 else {}

    scheduled = await wait_for(scheduled_events, 20)
    assert all(v == 1 for v in scheduled.values()), scheduled
