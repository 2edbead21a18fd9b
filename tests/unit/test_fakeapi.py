"""The in-memory apiserver answers the real client and informers with upstream's rules: the
controller sync tests rely on each of these."""

from __future__ import annotations

from typing import Any

import pytest

from services.client import AlreadyExists, Conflict, NotFound, gvr
from services.informers import SharedInformerFactory
from services.testing.fakeapi import FakeApiServer
from tests.conftest import eventually

PODS = gvr("v1", "pods")
RSS = gvr("apps/v1", "replicasets")


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"nodeName": "n1" if name.endswith("1") else "", "containers": [{"name": "c", "image": "i"}]}}


async def test_crud_with_resource_versions_conflicts_and_not_found() -> None:
    api = FakeApiServer()
    async with api.client() as client:
        made = await client.create(PODS, {"metadata": {"generateName": "web-"}, "spec": {}}, "ns")
        assert made["metadata"]["name"].startswith("web-") and len(made["metadata"]["name"]) == 9
        assert made["metadata"]["uid"] and made["metadata"]["namespace"] == "ns"
        with pytest.raises(AlreadyExists):
            await client.create(PODS, {"metadata": {"name": made["metadata"]["name"]}}, "ns")
        changed = await client.replace(PODS, {**made, "spec": {"nodeName": "n"}})
        assert int(changed["metadata"]["resourceVersion"]) > int(made["metadata"]["resourceVersion"])
        with pytest.raises(Conflict):
            await client.replace(PODS, {**made, "spec": {"nodeName": "m"}})
        with pytest.raises(NotFound):
            await client.get(PODS, "nope", "ns")
        assert [a.verb for a in api.writes()] == ["create", "update"]
        assert [a.code for a in api.actions if a.verb in ("create", "update", "get")] == [201, 409, 200, 409, 404]


async def test_list_selects_by_label_and_field() -> None:
    api = FakeApiServer()
    for p in (pod("a1", app="x"), pod("b2", app="x"), pod("c1", app="y")):
        api.seed(PODS, p)
    async with api.client() as client:
        by_label = await client.list(PODS, "ns", label_selector="app=x")
        assert [p["metadata"]["name"] for p in by_label["items"]] == ["a1", "b2"]
        by_field = await client.list(PODS, None, field_selector="spec.nodeName=n1")
        assert [p["metadata"]["name"] for p in by_field["items"]] == ["a1", "c1"]


async def test_status_subresource_and_patches() -> None:
    api = FakeApiServer()
    rs = api.seed(RSS, {"metadata": {"name": "r", "namespace": "ns"}, "spec": {"replicas": 1,
                        "template": {"spec": {"containers": [{"name": "a", "image": "1"}]}}}})
    async with api.client() as client:
        main = await client.patch(RSS, "r", {"spec": {"replicas": 2}, "status": {"replicas": 9}}, "ns")
        assert main["spec"]["replicas"] == 2 and "status" not in main and main["metadata"]["generation"] == 2
        status = await client.patch_status(RSS, "r", {"spec": {"replicas": 7}, "status": {"replicas": 2}}, "ns")
        assert status["status"] == {"replicas": 2} and status["spec"]["replicas"] == 2
        strategic = await client.patch(RSS, "r", {"spec": {"template": {"spec": {"containers": [
            {"name": "b", "image": "2"}]}}}}, "ns", patch_type="strategic")
        assert [c["name"] for c in strategic["spec"]["template"]["spec"]["containers"]] == ["b", "a"]
        json_patched = await client.patch(RSS, "r", [{"op": "replace", "path": "/spec/replicas", "value": 5}], "ns",
                                          patch_type="json")
        assert json_patched["spec"]["replicas"] == 5
        with pytest.raises(Conflict):
            await client.patch(RSS, "r", {"metadata": {"uid": "other"}}, "ns", patch_type="strategic")
        with pytest.raises(Conflict):
            await client.patch(RSS, "r", {"metadata": {"resourceVersion": rs["metadata"]["resourceVersion"]}}, "ns")


async def test_deletion_honours_finalizers_and_propagation() -> None:
    api = FakeApiServer()
    api.seed(PODS, {**pod("plain"), "metadata": {"name": "plain", "namespace": "ns"}})
    api.seed(PODS, {"metadata": {"name": "held", "namespace": "ns", "finalizers": ["x/y"]}})
    api.seed(PODS, {"metadata": {"name": "fg", "namespace": "ns"}})
    async with api.client() as client:
        await client.delete(PODS, "plain", "ns")
        assert api.get(PODS, "plain", "ns") is None
        held = await client.delete(PODS, "held", "ns")
        assert held["metadata"]["deletionTimestamp"]
        await client.patch(PODS, "held", {"metadata": {"finalizers": None}}, "ns")
        assert api.get(PODS, "held", "ns") is None
        fg = await client.delete(PODS, "fg", "ns", propagation_policy="Foreground")
        assert fg["metadata"]["finalizers"] == ["foregroundDeletion"]


async def test_informers_list_then_follow_watch_events() -> None:
    api = FakeApiServer()
    api.seed(PODS, pod("a1"))
    client = api.client()
    factory = SharedInformerFactory(client)
    informer = factory.informer_for(PODS)
    seen: list[str] = []
    informer.add_event_handler(on_add=lambda o: seen.append("add " + o["metadata"]["name"]),
                               on_update=lambda old, new: seen.append("update " + new["metadata"]["name"]),
                               on_delete=lambda o: seen.append("delete " + o["metadata"]["name"]))
    factory.start()
    try:
        await factory.wait_for_cache_sync()
        await client.create(PODS, pod("b2"), "ns")
        await client.patch(PODS, "a1", {"metadata": {"labels": {"k": "v"}}}, "ns")
        await client.delete(PODS, "b2", "ns")
        async def all_seen() -> bool:
            return len(seen) >= 4

        await eventually(all_seen, limit=5.0, interval=0.001, what="four informer events")
        assert seen == ["add a1", "add b2", "update a1", "delete b2"]
        assert [p["metadata"]["name"] for p in informer.list()] == ["a1"]
    finally:
        api.close_watches()
        await factory.shutdown()
        await client.close()


async def test_a_watch_from_nothing_starts_with_the_current_state_and_replays_from_a_version() -> None:
    api = FakeApiServer()
    first = api.seed(PODS, pod("a1", app="x"))
    api.seed(PODS, pod("b2", app="y"))
    async with api.client() as client:
        async with client.watch(PODS, "ns", label_selector="app=x", timeout_seconds=1) as stream:
            assert [(kind, obj["metadata"]["name"]) async for kind, obj in stream] == [("ADDED", "a1")]
        await client.patch(PODS, "a1", {"metadata": {"annotations": {"k": "v"}}}, "ns")
        async with client.watch(PODS, "ns", resource_version=first["metadata"]["resourceVersion"],
                                timeout_seconds=1) as stream:
            assert [(kind, obj["metadata"]["name"]) async for kind, obj in stream] == [
                ("ADDED", "b2"), ("MODIFIED", "a1")]


async def test_namespace_status_is_the_namespace_subresource_not_a_namespaced_path() -> None:
    namespaces = gvr("v1", "namespaces", namespaced=False)
    api = FakeApiServer()
    api.seed(namespaces, {"metadata": {"name": "ns"}})
    async with api.client() as client:
        updated = await client.patch_status(namespaces, "ns", {"status": {"phase": "Terminating"}})
        assert updated["status"] == {"phase": "Terminating"} and updated["metadata"]["name"] == "ns"
