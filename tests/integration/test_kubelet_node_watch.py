"""The kubelet admits a pod against its Node as it is now: a label or taint change made just before the
pod was bound is already seen (the kubelet watches its Node), and one undone is seen as well."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.client import Client, gvr
from tests.conftest import eventually, hollow_kubelet_process

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
NODE = "hollow-nw-0"
AFFINITY_MESSAGE = "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"


@pytest.fixture(scope="module")
def hollow_kubelet(kubeconfig: Path, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    with hollow_kubelet_process(kubeconfig, workdir / "hollow-node-watch.log", "hollow-nw", 1) as proc:
        yield proc


@pytest.fixture
async def client(apiserver: str, hollow_kubelet: Any) -> AsyncIterator[Client]:
    c = Client(apiserver)
    await eventually(lambda: c.get(NODES, NODE), what="the hollow node")
    yield c
    await c.close()


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}],
                     "terminationGracePeriodSeconds": 0, **spec}}


async def settled(client: Client, ns: str, name: str) -> dict[str, Any]:
    """The pod's status once it is Running or Failed."""
    async def check() -> dict[str, Any] | None:
        status = (await client.get(PODS, name, ns)).get("status") or {}
        return status if status.get("phase") in ("Running", "Failed") else None

    return await eventually(check, what=f"pod {name} running or failed")


async def test_label_added_just_before_binding_is_seen(client: Client, unique_ns: str) -> None:
    await client.patch(NODES, NODE, {"metadata": {"labels": {"nw-fresh": "yes"}}})
    await client.create(PODS, pod("fresh", nodeSelector={"nw-fresh": "yes"}), unique_ns)
    status = await settled(client, unique_ns, "fresh")
    assert status["phase"] == "Running", status

    await client.patch(NODES, NODE, {"metadata": {"labels": {"nw-fresh": None}}})
    await client.create(PODS, pod("stale", nodeSelector={"nw-fresh": "yes"}), unique_ns)
    status = await settled(client, unique_ns, "stale")
    assert (status["phase"], status.get("reason"), status.get("message")) == (
        "Failed", "NodeAffinity", AFFINITY_MESSAGE)


async def test_no_execute_taint_removed_just_before_binding_is_seen(client: Client, unique_ns: str) -> None:
    taint = {"key": "nw-drain", "value": "x", "effect": "NoExecute"}
    await client.patch(NODES, NODE, {"spec": {"taints": [taint]}})
    try:
        await client.create(PODS, pod("untolerated"), unique_ns)
        status = await settled(client, unique_ns, "untolerated")
        assert (status["phase"], status.get("reason")) == ("Failed", "TaintToleration"), status
        tolerating = pod("tolerating", tolerations=[{"key": "nw-drain", "operator": "Exists",
                                                     "effect": "NoExecute"}])
        await client.create(PODS, tolerating, unique_ns)
        assert (await settled(client, unique_ns, "tolerating"))["phase"] == "Running"
    finally:
        await client.patch(NODES, NODE, {"spec": {"taints": None}})
    await client.create(PODS, pod("after"), unique_ns)
    status = await settled(client, unique_ns, "after")
    assert status["phase"] == "Running", status
