"""Dead nodes go NotReady and their pods move: the nodelifecycle and taint-eviction controllers in a
real controller-manager, with a scheduler, a ReplicaSet controller and two hollow kubelet processes
(one node each) on an etcd and apiserver of this module's own, so killing a kubelet here touches no
other test's nodes.

The hollow kubelet renews its Lease every 10 s, so the grace period here is 14 s rather than a few.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from services.api.meta import parse_time
from services.client import Client, ClientConfig, NotFound, gvr
from tests.conftest import Kubectl, start_apiserver, start_etcd_cluster
from tests.integration.cluster import Proc, eventually

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
EVENTS = gvr("v1", "events")
REPLICA_SETS = gvr("apps/v1", "replicasets")

NODE_A = "nla-0"
NODE_B = "nlb-0"
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
HOLD = "example.com/hold"


@dataclass
class Plane:
    url: str
    workdir: Path
    kubeconfig: Path
    kubectl: Kubectl
    procs: dict[str, Proc]

    def hollow(self, prefix: str) -> Proc:
        proc = Proc([sys.executable, "-m", "kubelet_agent", "--kubeconfig", str(self.kubeconfig), "--hollow-nodes",
                     "1", "--hostname-override", prefix, "--healthz-port", "0", "--log-format", "console"],
                    self.workdir / f"kubelet-{prefix}.log")
        self.procs[prefix] = proc
        return proc


@pytest.fixture(scope="module")
def plane() -> Iterator[Plane]:
    workdir = Path(tempfile.mkdtemp(prefix="pyk8s-nodelifecycle-"))
    members = start_etcd_cluster(1, workdir / "etcd")
    api = start_apiserver([members[0].client_url], workdir / "apiserver")
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": api.url}}],
        "users": [{"name": "test", "user": {"token": "test"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }))
    p = Plane(api.url, workdir, kubeconfig, Kubectl(kubeconfig), {})
    p.procs["scheduler"] = Proc([sys.executable, "-m", "scheduler", "--master", api.url, "--secure-port", "0",
                                 "--leader-elect=false", "--log-format", "console"], workdir / "scheduler.log")
    p.procs["cm"] = Proc([sys.executable, "-m", "controller_manager", "--master", api.url, "--secure-port", "0",
                          "--leader-elect=false", "--log-format", "console",
                          "--controllers", "nodelifecycle,taint-eviction-controller,replicaset",
                          "--node-monitor-grace-period=14s", "--node-monitor-period=1s"],
                         workdir / "controller-manager.log")
    p.hollow("nla")
    p.hollow("nlb")
    try:
        yield p
    finally:
        print(p.procs["cm"].log_tail(60))  # shown by pytest when a test of this module failed
        for proc in reversed(list(p.procs.values())):
            proc.stop()
        api.stop()
        for member in members:
            member.kill()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
async def client(plane: Plane) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=plane.url)) as c:
        await eventually(lambda: both_ready(c), within=60, what="both hollow nodes Ready")
        yield c
    assert plane.procs["cm"].proc.poll() is None, "the controller-manager died during the test"


@pytest.fixture
def ns(plane: Plane, request: pytest.FixtureRequest) -> str:
    name = "nl-" + request.node.name.lower().replace("_", "-")[5:40].strip("-")
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    httpx.post(f"{plane.url}/api/v1/namespaces", json=body, timeout=10).raise_for_status()
    return name


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


async def both_ready(c: Client) -> bool:
    try:
        nodes = [await c.get(NODES, n) for n in (NODE_A, NODE_B)]
    except NotFound:
        return False
    return all(condition(n, "Ready").get("status") == "True" for n in nodes)


def taint(node: dict[str, Any], key: str, effect: str) -> dict[str, Any] | None:
    return next((t for t in (node.get("spec") or {}).get("taints") or []
                 if t["key"] == key and t["effect"] == effect), None)


def pod(name: str, node: str | None = None, tolerations: list[dict[str, Any]] | None = None,
        **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": spec}


async def running_ready(c: Client, ns: str, name: str) -> dict[str, Any] | None:
    p = await c.get(PODS, name, ns)
    return p if condition(p, "Ready").get("status") == "True" else None


async def release(c: Client, ns: str, name: str) -> None:
    """Drop the test's finalizer so a pod held in Terminating can go."""
    try:
        await c.patch(PODS, name, {"metadata": {"finalizers": None}}, ns)
    except NotFound:
        pass


async def test_pods_get_default_toleration_seconds(plane: Plane, client: Client, ns: str) -> None:
    plane.kubectl.run("-n", ns, "run", "plain", "--image=busybox", "--restart=Never")
    out = yaml.safe_load(plane.kubectl.run("-n", ns, "get", "pod", "plain", "-o", "yaml").stdout)
    assert out["spec"]["tolerations"] == [
        {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
    own = [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 7}]
    created = await client.create(PODS, pod("own", tolerations=own), ns)
    assert [(t["key"], t.get("tolerationSeconds")) for t in created["spec"]["tolerations"]] == [
        (UNREACHABLE, 7), (NOT_READY, 300)]


async def test_untolerated_no_execute_taint_evicts_at_once(plane: Plane, client: Client, ns: str) -> None:
    forever = [{"key": "example.com/evict", "operator": "Exists", "effect": "NoExecute"}]
    await client.create(PODS, pod("victim", NODE_B, finalizers=[HOLD]), ns)
    await client.create(PODS, pod("stays", NODE_B, forever), ns)
    await client.create(PODS, pod("later", NODE_B, [{**forever[0], "tolerationSeconds": 3}]), ns)
    for name in ("victim", "stays", "later"):
        await eventually(lambda n=name: running_ready(client, ns, n), what=f"{name} running")
    node = await client.get(NODES, NODE_B)
    taints = [*(node["spec"].get("taints") or []), {"key": "example.com/evict", "effect": "NoExecute"}]
    await client.patch(NODES, NODE_B, {"spec": {"taints": taints}})
    tainted = time.monotonic()
    try:
        await eventually(lambda: deleting(client, ns, "victim"), within=10, what="victim marked")
        assert time.monotonic() - tainted < 5
        await eventually(lambda: gone_or_deleting(client, ns, "later"), within=15, what="later deleted")
        assert time.monotonic() - tainted >= 2.5
        events = (await client.list(EVENTS, ns))["items"]
        assert any(e["reason"] == "TaintManagerEviction" and e["message"] == f"Marking for deletion Pod {ns}/victim"
                   for e in events)
        assert not (await client.get(PODS, "stays", ns))["metadata"].get("deletionTimestamp")
    finally:
        await release(client, ns, "victim")
        node = await client.get(NODES, NODE_B)
        await client.patch(NODES, NODE_B, {"spec": {"taints": [
            t for t in node["spec"].get("taints") or [] if t["key"] != "example.com/evict"] or None}})


async def deleting(c: Client, ns: str, name: str) -> dict[str, Any] | None:
    p = await c.get(PODS, name, ns)
    return p if p["metadata"].get("deletionTimestamp") else None


async def gone_or_deleting(c: Client, ns: str, name: str) -> bool:
    try:
        return bool(await deleting(c, ns, name))
    except NotFound:
        return True


async def test_dead_node_goes_unknown_and_its_pods_move(plane: Plane, client: Client, ns: str) -> None:
    await client.patch(NODES, NODE_B, {"spec": {"unschedulable": True}})
    await eventually(lambda: has_taint(client, NODE_B, "node.kubernetes.io/unschedulable", "NoSchedule"),
                     within=15, what="cordon taint on B")
    short = [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}]
    template = pod("x", tolerations=short)
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
          "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                   "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]}}}
    await client.create(REPLICA_SETS, rs, ns)
    forever = [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]
    await client.create(PODS, pod("stays", NODE_A, forever), ns)

    async def web_pods(node: str) -> list[dict[str, Any]]:
        items = (await client.list(PODS, ns, label_selector="app=web"))["items"]
        return [p for p in items if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")
                and condition(p, "Ready").get("status") == "True"]

    async def two_on(node: str) -> list[dict[str, Any]] | None:
        found = await web_pods(node)
        return found if len(found) == 2 else None

    first = await eventually(lambda: two_on(NODE_A), within=40, what="two web pods Ready on A")
    await eventually(lambda: running_ready(client, ns, "stays"), what="stays running")
    await client.patch(NODES, NODE_B, {"spec": {"unschedulable": None}})
    await eventually(lambda: has_taint(client, NODE_B, "node.kubernetes.io/unschedulable", "NoSchedule", False),
                     within=15, what="cordon taint off B")

    plane.procs["nla"].stop(signal.SIGKILL)
    node = await eventually(lambda: unknown(client), within=60, what="A's Ready Unknown")
    ready = condition(node, "Ready")
    assert (ready["reason"], ready["message"]) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
    for ctype in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        assert condition(node, ctype)["status"] == "Unknown"
    node = await eventually(lambda: has_taint(client, NODE_A, UNREACHABLE, "NoExecute"), within=15,
                            what="unreachable NoExecute taint")
    added = parse_time(taint(node, UNREACHABLE, "NoExecute")["timeAdded"])
    assert added is not None
    await eventually(lambda: has_taint(client, NODE_A, UNREACHABLE, "NoSchedule"), within=15, what="NoSchedule")

    async def evicted() -> list[dict[str, Any]] | None:
        pods = [await client.get(PODS, p["metadata"]["name"], ns) for p in first]
        return pods if all(p["metadata"].get("deletionTimestamp") for p in pods) else None

    for p in await eventually(evicted, within=20, what="web pods on A marked for deletion"):
        deleted_at = parse_time(p["metadata"]["deletionTimestamp"])
        assert deleted_at is not None
        waited = (deleted_at - added).total_seconds() - p["metadata"]["deletionGracePeriodSeconds"]
        assert 1 <= waited <= 6, waited
        assert condition(p, "DisruptionTarget")["reason"] == "DeletionByTaintManager"
    await eventually(lambda: two_on(NODE_B), within=40, what="two replacement web pods Ready on B")

    stays = await client.get(PODS, "stays", ns)
    assert not stays["metadata"].get("deletionTimestamp")
    assert condition(stays, "Ready")["status"] == "False"
    events = (await client.list(EVENTS, "default"))["items"]
    assert any(e["reason"] == "NodeNotReady" and e["message"] == f"Node {NODE_A} status is now: NodeNotReady"
               and e["involvedObject"]["name"] == NODE_A for e in events)

    plane.hollow("nla")
    await eventually(lambda: both_ready(client), within=60, what="A Ready again")
    await eventually(lambda: has_taint(client, NODE_A, UNREACHABLE, "NoExecute", False), within=15,
                     what="unreachable taint removed")
    await eventually(lambda: has_taint(client, NODE_A, UNREACHABLE, "NoSchedule", False), within=15,
                     what="unreachable NoSchedule taint removed")
    assert not (await client.get(PODS, "stays", ns))["metadata"].get("deletionTimestamp")


async def unknown(c: Client) -> dict[str, Any] | None:
    node = await c.get(NODES, NODE_A)
    return node if condition(node, "Ready").get("status") == "Unknown" else None


async def has_taint(c: Client, name: str, key: str, effect: str, present: bool = True) -> dict[str, Any] | None:
    node = await c.get(NODES, name)
    return node if (taint(node, key, effect) is not None) == present else None
