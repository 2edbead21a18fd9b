"""The ReplicaSet controller's sync alone, on the in-memory apiserver (upstream's replica_set_test.go
pattern): it creates and deletes the difference, adopts orphans, releases pods that stopped
matching, and waits for its own creates before acting again."""

from __future__ import annotations

from typing import Any

import pytest

from controller_manager.controllers import replicaset
from controller_manager.resources import PODS, REPLICA_SETS
from services.api import errors
from tests.unit.controller_manager.harness import harness

Obj = dict[str, Any]
UID = "rs-uid"
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": UID, "controller": True,
         "blockOwnerDeletion": True}


def rs(replicas: int) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": UID, "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}}


def pod(name: str, owned: bool = True, node: str = "n1", ready: bool = True, app: str = "web",
        phase: str = "") -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "labels": {"app": app},
                 "creationTimestamp": "2024-01-01T00:00:00Z"}
    if owned:
        meta["ownerReferences"] = [OWNER]
    phase = phase or ("Running" if node else "Pending")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


async def test_missing_pods_are_created_from_the_template_and_expected() -> None:
    async with harness(replicaset, [(REPLICA_SETS, rs(3))]) as env:
        await env.sync("ns/web")
        created = env.api.writes("pods", "create")
        assert len(created) == 3
        for action in created:
            made = action.result
            assert made is not None
            assert made["metadata"]["name"].startswith("web-")
            assert made["metadata"]["labels"] == {"app": "web"}
            assert made["metadata"]["ownerReferences"][0]["uid"] == UID
        await env.caught_up()
        assert env.controller.expectations.satisfied("ns/web")  # the informer saw all three
        stored = env.api.get(REPLICA_SETS, "web", "ns")
        assert stored is not None and stored["status"]["replicas"] == 0  # counted before the pods existed
        env.api.clear_actions()
        await env.sync("ns/web")
        assert env.api.writes("pods") == []
        stored = env.api.get(REPLICA_SETS, "web", "ns")
        assert stored is not None and stored["status"]["replicas"] == 3


async def test_nothing_is_created_while_earlier_creates_are_unobserved() -> None:
    async with harness(replicaset, [(REPLICA_SETS, rs(2))]) as env:
        env.controller.expectations.expect_creations("ns/web", 1)
        await env.sync("ns/web")
        assert env.api.writes("pods") == []


@pytest.mark.parametrize(("replicas", "pods", "deleted"), [
    (2, [pod("ready"), pod("unready", ready=False), pod("a-ready")], ["unready"]),
    (2, [pod("ready"), pod("a-pending", ready=False, phase="Pending"), pod("unscheduled", node="")],
     ["unscheduled"]),
])
async def test_surplus_pods_are_deleted_unscheduled_and_unready_first(replicas: int, pods: list[Obj],
                                                                      deleted: list[str]) -> None:
    async with harness(replicaset, [(REPLICA_SETS, rs(replicas)), *((PODS, p) for p in pods)]) as env:
        await env.sync("ns/web")
        assert sorted(a.name for a in env.api.writes("pods", "delete")) == sorted(deleted)
        assert len(env.api.list(PODS, "ns")) == replicas
        assert env.api.writes("pods", "create") == []


async def test_matching_orphans_are_adopted_and_owned_pods_that_stopped_matching_released() -> None:
    seed = [(REPLICA_SETS, rs(2)), (PODS, pod("orphan", owned=False)), (PODS, pod("mine")),
            (PODS, pod("relabelled", app="other")), (PODS, pod("stranger", owned=False, app="other"))]
    async with harness(replicaset, seed) as env:
        await env.sync("ns/web")
        patched = {a.name: a for a in env.api.writes("pods", "patch")}
        assert set(patched) == {"orphan", "relabelled"}
        adopted = env.api.get(PODS, "orphan", "ns")
        assert adopted is not None and adopted["metadata"]["ownerReferences"][0]["uid"] == UID
        released = env.api.get(PODS, "relabelled", "ns")
        assert released is not None and not released["metadata"].get("ownerReferences")
        stranger = env.api.get(PODS, "stranger", "ns")
        assert stranger is not None and not stranger["metadata"].get("ownerReferences")
        assert env.api.writes("pods", "create") == []  # mine + the adopted orphan make two


async def test_a_refused_create_stops_the_slow_start_and_reports_replica_failure() -> None:
    async with harness(replicaset, [(REPLICA_SETS, rs(5))]) as env:
        env.api.fail_next("create", "pods", errors.forbidden("pods", "", "", "exceeded quota: q"))
        with pytest.raises(RuntimeError, match="exceeded quota"):
            await env.sync("ns/web")
        attempts = [a for a in env.api.actions if a.verb == "create" and a.resource == "pods"]
        assert [a.code for a in attempts] == [403]  # the first batch of one failed: no second batch
        stored = env.api.get(REPLICA_SETS, "web", "ns")
        assert stored is not None
        failure = next(c for c in stored["status"]["conditions"] if c["type"] == "ReplicaFailure")
        assert (failure["status"], failure["reason"]) == ("True", "FailedCreate")
        assert env.controller.expectations.satisfied("ns/web")  # nothing left in flight to wait for
        env.api.clear_actions()
        await env.sync("ns/web")
        assert len(env.api.writes("pods", "create")) == 5
