"""The kr8s client (PyPI) against pyk8s: create, patch, server-side apply, watch, scale, delete."""

from __future__ import annotations

import asyncio
import json

import kr8s.asyncio
from kr8s.asyncio.objects import ConfigMap, Deployment

from tests.conftest import Kubectl

DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "kd"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "kd"}},
             "template": {"metadata": {"labels": {"app": "kd"}},
                          "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
}


async def test_kr8s_create_patch_apply_watch(kubectl: Kubectl, unique_ns: str) -> None:
    api = await kr8s.asyncio.api(kubeconfig=str(kubectl.kubeconfig))
    assert (await api.version())["minor"] == "32"
    seen: list[tuple[str, str]] = []
    started = asyncio.Event()

    async def watch() -> None:
        started.set()
        async for event, obj in api.watch("configmaps", namespace=unique_ns):
            seen.append((event, obj.name))
            if event == "DELETED":
                return

    watcher = asyncio.create_task(watch())
    await started.wait()
    await asyncio.sleep(0.5)

    cm = await ConfigMap({"metadata": {"name": "k1", "namespace": unique_ns}, "data": {"a": "1"}}, api=api)
    await cm.create()
    await cm.patch({"data": {"b": "2"}})
    await cm.refresh()
    assert cm.raw["data"] == {"a": "1", "b": "2"}

    for replicas in (2, 4):
        body = json.dumps({**DEPLOYMENT, "spec": {**DEPLOYMENT["spec"], "replicas": replicas}})
        async with api.call_api(
            "PATCH", version="apps/v1", url="deployments/kd", namespace=unique_ns, content=body,
            headers={"Content-Type": "application/apply-patch+yaml"}, params={"fieldManager": "kr8s-test"},
        ) as resp:
            assert resp.status_code in (200, 201)
    deploy = await Deployment.get("kd", namespace=unique_ns, api=api)
    assert deploy.replicas == 4
    assert [m["manager"] for m in deploy.raw["metadata"]["managedFields"]] == ["kr8s-test"]
    await deploy.scale(3)
    await deploy.refresh()
    assert deploy.replicas == 3

    await cm.delete()
    await asyncio.wait_for(watcher, 15)
    assert seen[:3] == [("ADDED", "k1"), ("MODIFIED", "k1"), ("DELETED", "k1")]
    assert [d.name async for d in api.get("deployments", namespace=unique_ns)] == ["kd"]
