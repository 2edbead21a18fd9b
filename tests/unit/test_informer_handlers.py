"""Informer handler delivery: each registration gets its events in order, only the kinds it has a
callback for, keeps going after a callback fails, and reports synced after the initial list."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.client import Client, ClientConfig, gvr
from services.informers import Informer

PODS = gvr("v1", "pods")


def rv_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    # never used to connect: the tests feed the informer as its reflector would
    c = Client(ClientConfig(server="http://127.0.0.1:9"))
    yield c
    await c.close()


async def test_events_arrive_in_order_and_only_for_registered_kinds(client: Client) -> None:
    informer = Informer(client, PODS)
    everything: list[tuple[str, str]] = []
    deletes: list[str] = []
    done = asyncio.Event()

    def on_delete(obj: dict[str, Any]) -> None:
        everything.append(("delete", obj["metadata"]["name"]))
        done.set()

    full = informer.add_event_handler(on_add=lambda o: everything.append(("add", o["metadata"]["resourceVersion"])),
                                      on_update=lambda _o, n: everything.append(("update", rv_of(n))),
                                      on_delete=on_delete)
    only_deletes = informer.add_event_handler(on_delete=lambda o: deletes.append(o["metadata"]["name"]))
    full.start()
    informer.on_replace([pod("a", "1")], "1")
    for rv in range(2, 50):
        informer.on_update(pod("a", str(rv)))
    informer.on_delete(pod("a", "50"))
    # a registration queues only what it has callbacks for
    assert [kind for kind, _, _ in only_deletes._events] == ["synced", "delete"]
    only_deletes.start()
    async with asyncio.timeout(5):
        await full.wait_for_sync()
        await only_deletes.wait_for_sync()
        await done.wait()
    await asyncio.sleep(0)
    assert everything == [("add", "1"), *(("update", str(rv)) for rv in range(2, 50)), ("delete", "a")]
    assert deletes == ["a"]
    await informer.stop()


async def test_a_failing_callback_does_not_stop_delivery(client: Client) -> None:
    informer = Informer(client, PODS)
    seen: list[str] = []
    arrived = asyncio.Event()

    def on_add(obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "bad":
            raise ValueError("boom")
        seen.append(obj["metadata"]["name"])
        arrived.set()

    reg = informer.add_event_handler(on_add=on_add)
    reg.start()
    informer.on_add(pod("bad", "1"))
    await asyncio.sleep(0.01)
    informer.on_add(pod("good", "2"))
    async with asyncio.timeout(5):
        await arrived.wait()
    assert seen == ["good"]
    await reg.stop()
    arrived.clear()
    informer.on_add(pod("later", "3"))
    reg.start()
    async with asyncio.timeout(5):
        await arrived.wait()
    assert seen == ["good", "later"]
    await informer.stop()
