"""Informer transforms (client-go's TransformFunc): every object the reflector delivers is rewritten
before the cache stores it and before any handler sees it, on lists, watch events and deletes alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.client import Client, ClientConfig, gvr
from services.informers import Informer, SharedInformerFactory, Store, strip_managed_fields

PODS = gvr("v1", "pods")


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                         "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {}}]},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    # never used to connect: the tests feed the informer as its reflector would
    c = Client(ClientConfig(server="http://127.0.0.1:9"))
    yield c
    await c.close()


async def test_strip_managed_fields_reaches_cache_and_handlers(client: Client) -> None:
    informer = Informer(client, PODS, transform=strip_managed_fields)
    seen: list[tuple[str, dict[str, Any]]] = []
    reg = informer.add_event_handler(on_add=lambda o: seen.append(("add", o)),
                                     on_update=lambda _old, new: seen.append(("update", new)),
                                     on_delete=lambda o: seen.append(("delete", o)))
    reg.start()
    informer.on_replace([pod("a", "1"), pod("b", "2")], "2")
    informer.on_add(pod("c", "3"))
    informer.on_update(pod("a", "4"))
    informer.on_delete(pod("b", "5"))
    await informer.wait_for_sync()
    for _ in range(10):
        await asyncio.sleep(0)
    assert [(k, o["metadata"]["name"]) for k, o in seen] == [
        ("add", "a"), ("add", "b"), ("add", "c"), ("update", "a"), ("delete", "b")]
    assert all("managedFields" not in o["metadata"] for _, o in seen)
    assert sorted(o["metadata"]["name"] for o in informer.list()) == ["a", "c"]
    assert all("managedFields" not in o["metadata"] and o["spec"] for o in informer.list())
    await informer.stop()


async def test_without_transform_objects_are_kept_whole(client: Client) -> None:
    informer = Informer(client, PODS)
    informer.on_add(pod("a", "1"))
    assert informer.get("a", "ns")["metadata"]["managedFields"]  # type: ignore[index]


async def test_factory_gives_its_transform_to_every_informer(client: Client) -> None:
    calls: list[str] = []

    def mark(obj: dict[str, Any]) -> dict[str, Any]:
        calls.append(obj["metadata"]["name"])
        return {**obj, "marked": True}

    factory = SharedInformerFactory(client, transform=mark)
    pods = factory.informer_for(PODS)
    nodes = factory.informer_for(gvr("v1", "nodes", namespaced=False))
    pods.on_add(pod("a", "1"))
    nodes.on_replace([{"metadata": {"name": "n1", "resourceVersion": "1"}}], "1")
    assert calls == ["a", "n1"]
    assert pods.get("a", "ns")["marked"] and nodes.get("n1")["marked"]  # type: ignore[index]


def test_unordered_index_lookup_has_the_same_objects() -> None:
    store = Store()
    for name in ("c", "a", "b"):
        store.add({"metadata": {"name": name, "namespace": "ns"}})
    ordered = store.by_index("namespace", "ns")
    assert [o["metadata"]["name"] for o in ordered] == ["a", "b", "c"]
    assert sorted(o["metadata"]["name"] for o in store.by_index("namespace", "ns", ordered=False)) == ["a", "b", "c"]
    assert store.by_index("namespace", "other", ordered=False) == []
    with pytest.raises(KeyError):
        store.by_index("nope", "ns", ordered=False)
