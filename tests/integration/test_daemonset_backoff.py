"""A DaemonSet and a kubelet that disagree about a node do not fight in a hot loop: the kubelet admits
against its Node as it is now (a NoExecute taint just removed is gone for it too), and a node whose
kubelet keeps rejecting the daemon pod gets a new one only after upstream's per-node back-off
(1 s doubling), with a FailedDaemonPod event each time. Real controller-manager, scheduler and hollow
kubelets (tests/integration/cluster.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from services.client import Client, ClientConfig, NotFound, gvr
from tests.integration import cluster as plane
from tests.integration.cluster import Cluster, PodLog, Proc, eventually

cluster = plane.cluster
kubectl = plane.kubectl
unique_ns = plane.unique_ns

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
EVENTS = gvr("v1", "events")
DS = gvr("apps/v1", "daemonsets")
#: how long the creations of daemon pods for a rejecting node are counted
WINDOW = 8.0


@pytest.fixture(scope="module")
def ds_manager(cluster: Cluster) -> Iterator[Proc]:
    cm = cluster.controller_manager("cm-ds-backoff", "--leader-elect=false", "--controllers=daemonset")
    yield cm
    cm.stop()
    print(cm.log_tail(60))  # shown by pytest when a test of this module failed


@pytest.fixture
async def client(cluster: Cluster, ds_manager: Proc) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=cluster.url)) as c:
        yield c


@contextlib.asynccontextmanager
async def own_node(cluster: Cluster, client: Client, prefix: str, *flags: str) -> AsyncIterator[str]:
    """A hollow kubelet with one node `<prefix>-0`, labelled dsb=<prefix>, for the block."""
    proc = cluster.hollow_kubelet(prefix, 1, "--node-labels", f"dsb={prefix}", *flags)
    name = f"{prefix}-0"
    try:
        async def ready() -> bool:
            conditions = ((await client.get(NODES, name)).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        await eventually(ready, what=f"node {name} Ready")
        yield name
    finally:
        proc.stop()
        with contextlib.suppress(NotFound):
            await client.delete(NODES, name)


def daemonset(name: str, pool: str, **container: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox", **container}],
                                           "nodeSelector": {"dsb": pool}, "terminationGracePeriodSeconds": 0}}}}


async def running_pod(client: Client, ns: str, app: str) -> dict[str, Any] | None:
    items = (await client.list(PODS, ns, label_selector=f"app={app}"))["items"]
    return next((p for p in items if (p.get("status") or {}).get("phase") == "Running"
                 and not p["metadata"].get("deletionTimestamp")), None)


async def events(client: Client, ns: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in (await client.list(EVENTS, ns))["items"] if e["reason"] == reason]


async def test_daemon_pod_runs_once_a_no_execute_taint_is_gone(
        cluster: Cluster, client: Client, unique_ns: str) -> None:
    ns = unique_ns
    async with own_node(cluster, client, "dsb-taint") as node:
        await client.create(DS, daemonset("agent", "dsb-taint"), ns)
        await eventually(lambda: running_pod(client, ns, "agent"), what="the daemon pod running")
        taint = {"key": "dsb-drain", "effect": "NoExecute"}
        await client.patch(NODES, node, {"spec": {"taints": [taint]}})

        async def gone() -> bool:
            items = (await client.list(PODS, ns, label_selector="app=agent"))["items"]
            return not items
        await eventually(gone, what="the daemon pod removed from the tainted node")
        # The kubelet has seen the taint once it rejects a new pod that does not tolerate it.
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "probe-"},
                 "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}],
                          "terminationGracePeriodSeconds": 0}}

        async def rejects_a_probe() -> bool:
            name = (await client.create(PODS, probe, ns))["metadata"]["name"]

            async def settled() -> str | None:
                status = (await client.get(PODS, name, ns)).get("status") or {}
                return status.get("reason") or status.get("phase") if status.get("phase") in (
                    "Running", "Failed") else None
            return await eventually(settled, what=f"probe {name} settled") == "TaintToleration"
        await eventually(rejects_a_probe, what="the kubelet rejecting an untolerating pod")

        async with PodLog(client, ns) as log:
            await client.patch(NODES, node, {"spec": {"taints": None}})
            pod = await eventually(lambda: running_pod(client, ns, "agent"), what="the daemon pod back")
        assert pod["spec"]["nodeName"] == node
        assert log.created == [pod["metadata"]["name"]], log.created
        assert not await events(client, ns, "FailedDaemonPod")


async def test_a_node_that_rejects_the_daemon_pod_is_backed_off(
        cluster: Cluster, client: Client, unique_ns: str) -> None:
    ns = unique_ns
    async with own_node(cluster, client, "dsb-strict", "--allow-privileged=false") as node:
        async with PodLog(client, ns) as log:
            await client.create(DS, daemonset("priv", "dsb-strict", securityContext={"privileged": True}), ns)

            async def rejected() -> bool:
                return any((p.get("status") or {}).get("phase") == "Failed"
                           for p in (await client.list(PODS, ns))["items"])
            await eventually(rejected, what="a daemon pod rejected by the kubelet")
            before = len(log.created)
            await asyncio.sleep(WINDOW)  # the measurement window: how many pods the controller makes in it
            made = len(log.created) - before
        # Back-off 1, 2, 4 s: about three pods in the window; without it, one every few hundred ms.
        assert made <= 4, (made, log.created)
        (warning, *_) = await eventually(lambda: events(client, ns, "FailedDaemonPod"), what="FailedDaemonPod")
        assert warning["type"] == "Warning" and warning["involvedObject"]["kind"] == "DaemonSet"
        assert warning["message"].startswith(f"Found failed daemon pod {ns}/priv-")
        assert warning["message"].endswith(f" on node {node}, will try to kill it")
        failed = [p for p in (await client.list(PODS, ns))["items"]
                  if (p.get("status") or {}).get("phase") == "Failed"]
        for p in failed:
            assert p["status"]["reason"] == "Forbidden"
            assert p["status"]["message"] == (f'Pod was rejected: pod with UID "{p["metadata"]["uid"]}" '
                                              "specified privileged container, but is disallowed")

        # Once the template asks for nothing the node forbids, the next pod after the back-off runs.
        await client.patch(DS, "priv", {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "busybox", "securityContext": {"privileged": False}}]}}}}, ns,
            patch_type="strategic")
        pod = await eventually(lambda: running_pod(client, ns, "priv"), within=60, what="the fixed daemon pod")
        assert pod["spec"]["nodeName"] == node
