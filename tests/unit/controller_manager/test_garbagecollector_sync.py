"""The garbage collector's attempt-to-delete and attempt-to-orphan alone, on the in-memory apiserver
(upstream's garbagecollector_test.go drives attemptToDeleteItem the same way): its graph comes from
informers over everything discovery lists, then one item is processed and the writes asserted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from controller_manager.controllers import garbagecollector
from controller_manager.resources import PODS, REPLICA_SETS
from tests.unit.controller_manager.harness import Harness, harness

Obj = dict[str, Any]


def owner(name: str, finalizers: list[str] | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta,
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {}}}


def dependent(name: str, *owners: str, block: bool = True) -> Obj:
    refs = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": o, "uid": f"uid-{o}", "controller": True,
             "blockOwnerDeletion": block} for o in owners]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "ownerReferences": refs},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


@asynccontextmanager
async def collector(*seed: tuple[Any, Obj]) -> AsyncIterator[Harness]:
    """The collector with its monitors started and synced, before any item is processed."""
    async with harness(garbagecollector, list(seed)) as env:
        await env.controller.sync_monitors()
        env.ctx.requested.extend(env.controller.monitors.values())
        await env.caught_up()
        env.api.clear_actions()
        yield env


def deletes(env: Harness) -> list[tuple[str, str | None]]:
    return [(a.name, (a.body or {}).get("propagationPolicy")) for a in env.api.writes(verb="delete")]


async def test_dependents_of_a_deleted_owner_are_deleted_in_the_background() -> None:
    async with collector((REPLICA_SETS, owner("gone")), (REPLICA_SETS, owner("kept")),
                         (PODS, dependent("orphaned", "gone")), (PODS, dependent("held", "kept")),
                         (PODS, dependent("shared", "gone", "kept"))) as env:
        await env.client.delete(REPLICA_SETS, "gone", "ns")
        await env.caught_up()
        env.api.clear_actions()
        gc = env.controller
        for uid in ("uid-orphaned", "uid-held", "uid-shared"):
            await gc.attempt_to_delete(uid)
        assert deletes(env) == [("orphaned", "Background")]
        delete = env.api.writes(verb="delete")[0]
        assert delete.body["preconditions"] == {"uid": "uid-orphaned"}
        shared = env.api.get(PODS, "shared", "ns")  # one owner left: only the dangling reference goes
        assert shared is not None and [r["name"] for r in shared["metadata"]["ownerReferences"]] == ["kept"]
        assert env.api.get(PODS, "held", "ns") is not None


async def test_an_owner_deleted_in_the_foreground_waits_for_its_blocking_dependents() -> None:
    async with collector((REPLICA_SETS, owner("fg")), (PODS, dependent("blocker", "fg"))) as env:
        await env.client.delete(REPLICA_SETS, "fg", "ns", propagation_policy="Foreground")
        await env.caught_up()
        env.api.clear_actions()
        gc = env.controller
        await gc.attempt_to_delete("uid-fg")
        stored = env.api.get(REPLICA_SETS, "fg", "ns")
        assert stored is not None and stored["metadata"]["finalizers"] == ["foregroundDeletion"]
        assert env.api.writes("replicasets") == []

        await gc.attempt_to_delete("uid-blocker")
        assert deletes(env) == [("blocker", "Background")]
        await env.caught_up()
        await gc.attempt_to_delete("uid-fg")
        assert env.api.get(REPLICA_SETS, "fg", "ns") is None  # finalizer removed once nothing blocks


async def test_an_owner_deleted_with_orphan_leaves_its_dependents_without_the_reference() -> None:
    async with collector((REPLICA_SETS, owner("parent")), (PODS, dependent("child", "parent"))) as env:
        await env.client.delete(REPLICA_SETS, "parent", "ns", propagation_policy="Orphan")
        await env.caught_up()
        env.api.clear_actions()
        await env.controller.attempt_to_orphan("uid-parent")
        child = env.api.get(PODS, "child", "ns")
        assert child is not None and not child["metadata"].get("ownerReferences")
        assert env.api.get(REPLICA_SETS, "parent", "ns") is None
        assert env.api.writes(verb="delete") == []
