"""The ReplicaSet controller's pod counts kept between full syncs, and which pod and owner changes
sync at once and which wait to be merged with the changes that follow them."""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller_manager.app import build_parser
from controller_manager.context import ControllerContext
from controller_manager.controllers.replicaset import new
from controller_manager.events import EventBroadcaster
from controller_manager.replica_manager import (
    STATUS_SYNC_DELAY,
    ReplicaSetController,
    Tally,
    calculate_status,
)
from services.client import Client
from services.informers import SharedInformerFactory

Obj = dict[str, Any]
KEY = "ns/web"


def owner(uid: str = "rs-uid", *, template: dict[str, str] | None = None, replicas: int = 3) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": uid, "generation": 1, "resourceVersion": "1"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": template or {"app": "web", "tier": "f"}}}}}


def pod(name: str, *, uid: str | None = "rs-uid", labels: dict[str, str] | None = None, ready: bool = False,
        phase: str = "Pending", deleting: bool = False, rv: str = "1") -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv,
                 "labels": {"app": "web", "tier": "f"} if labels is None else labels}
    if uid is not None:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": uid,
                                    "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                                       "lastTransitionTime": "2024-01-01T00:00:00Z"}]}}


def counted(rs: Obj, pods: list[Obj]) -> tuple[int, int, int]:
    """What a full sync reports for these pods: the active ones the owner controls and selects."""
    mine = [p for p in pods if p["metadata"].get("ownerReferences", [{}])[0].get("uid") == rs["metadata"]["uid"]
            and not p["metadata"].get("deletionTimestamp") and p["status"]["phase"] not in ("Succeeded", "Failed")
            and p["metadata"]["labels"].get("app") == "web"]
    st = calculate_status(rs, mine, None)
    return st["replicas"], st["fullyLabeledReplicas"], st["readyReplicas"]


def test_tally_follows_pod_changes_like_a_full_count() -> None:
    rs = owner()
    rng = random.Random(7)
    pods = {f"p{i}": pod(f"p{i}") for i in range(40)}
    tally = Tally(rs)
    for name, p in pods.items():
        tally.put(f"ns/{name}", p)
    for _ in range(2000):
        name = f"p{rng.randrange(50)}"
        key = f"ns/{name}"
        if rng.random() < 0.1:
            pods.pop(name, None)
            tally.discard(key)
            continue
        labels = rng.choice([{"app": "web", "tier": "f"}, {"app": "web"}, {"app": "web", "tier": "f", "x": "y"}])
        changed = pod(name, labels=labels, ready=rng.random() < 0.6,
                      phase=rng.choice(["Pending", "Running", "Running", "Succeeded"]), deleting=rng.random() < 0.1)
        pods[name] = changed
        tally.put(key, changed)
        assert (len(tally.members), tally.fully, tally.ready) == counted(rs, list(pods.values()))
    assert tally.trusted and 0 < len(tally.members) < len(pods)


def test_tally_stops_fitting_when_the_owner_changes_or_a_pod_must_be_released() -> None:
    rs = owner()
    tally = Tally(rs)
    tally.put("ns/a", pod("a", ready=True))
    assert tally.fits(rs)
    assert not tally.fits(owner(template={"app": "web", "tier": "g"}))
    other_selector = copy.deepcopy(rs)
    other_selector["spec"]["selector"] = {"matchLabels": {"app": "api"}}
    assert not tally.fits(other_selector)
    tally.put("ns/a", pod("a", labels={"app": "api"}))
    assert (len(tally.members), tally.fully, tally.ready) == (0, 0, 0)
    assert not tally.fits(rs)


@pytest.fixture
async def controller() -> AsyncIterator[ReplicaSetController]:
    async with Client("http://127.0.0.1:9") as client:
        options = build_parser().parse_args(["--leader-elect=false"])
        ctx = ControllerContext(client=client, informers=SharedInformerFactory(client), options=options,
                                broadcaster=EventBroadcaster(client))
        ctrl = new(ctx)
        yield ctrl
        ctrl.queue.shut_down()


def seed(ctrl: ReplicaSetController, rs: Obj, pods: list[Obj]) -> None:
    """Cache an owner and pods, and give the owner the tally a full sync would build."""
    ctrl.owners.store.add(rs)
    for p in pods:
        ctrl.pods.store.add(p)
    ctrl._build_tally(rs, pods)


async def test_status_only_pod_updates_wait_and_merge(controller: ReplicaSetController) -> None:
    rs = owner()
    a = pod("a")
    seed(controller, rs, [a])
    bound = pod("a", rv="2")
    bound["spec"]["nodeName"] = "n1"
    controller._update_pod(a, bound)
    running = pod("a", ready=True, phase="Running", rv="3")
    controller._update_pod(bound, running)
    assert len(controller.queue) == 0 and controller.queue.waiting() == 1
    assert controller._counts(rs, True) == (1, 1, 1)
    async with asyncio.timeout(5 * STATUS_SYNC_DELAY):
        assert await controller.queue.get() == KEY
    controller.queue.done(KEY)
    assert controller.queue.waiting() == 0
    # a label change can mean a release: that syncs now
    relabeled = pod("a", labels={"app": "api"}, ready=True, phase="Running", rv="4")
    controller._update_pod(running, relabeled)
    assert len(controller.queue) == 1
    assert controller._counts(rs, True) is None


async def test_pod_finishing_or_being_deleted_syncs_at_once(controller: ReplicaSetController) -> None:
    rs = owner()
    a, b = pod("a", phase="Running"), pod("b", phase="Running")
    seed(controller, rs, [a, b])
    controller._update_pod(a, pod("a", phase="Succeeded", rv="2"))
    assert len(controller.queue) == 1
    assert controller._counts(rs, True) == (1, 1, 0)
    await controller.queue.get()
    controller.queue.done(KEY)
    controller._update_pod(b, pod("b", phase="Running", deleting=True, rv="2"))
    assert len(controller.queue) == 1
    assert controller._counts(rs, True) == (0, 0, 0)


async def test_creates_observed_before_the_last_one_wait(controller: ReplicaSetController) -> None:
    rs = owner()
    seed(controller, rs, [])
    controller.expectations.expect_creations(KEY, 2)
    controller._add_pod(pod("a"))
    assert len(controller.queue) == 0 and controller.queue.waiting() == 1
    controller._add_pod(pod("b"))
    assert len(controller.queue) == 1
    assert controller._counts(rs, True) == (2, 2, 0)


async def test_owner_status_writes_wait_but_spec_changes_do_not(controller: ReplicaSetController) -> None:
    rs = owner()
    seed(controller, rs, [])
    written = copy.deepcopy(rs)
    written["metadata"]["resourceVersion"] = "2"
    written["status"] = {"replicas": 0}
    controller._update_owner(rs, written)
    assert len(controller.queue) == 0 and controller.queue.waiting() == 1
    scaled = copy.deepcopy(written)
    scaled["spec"]["replicas"] = 5
    controller._update_owner(written, scaled)
    assert len(controller.queue) == 1


async def test_counts_need_a_full_sync_for_orphans_deletes_and_min_ready(controller: ReplicaSetController) -> None:
    rs = owner(replicas=1)
    pods = [pod("a", ready=True), pod("b", ready=True)]
    seed(controller, rs, pods)
    assert controller._counts(rs, False) == (2, 2, 2)
    assert controller._counts(rs, True) is None  # one too many: the full sync picks which to delete
    rs = owner(replicas=3)
    controller.owners.store.add(rs)
    assert controller._counts(rs, True) == (2, 2, 2)
    controller.pods.store.add(pod("orphan", uid=None))
    assert controller._counts(rs, True) is None
    slow = owner(uid="slow")
    slow["spec"]["minReadySeconds"] = 10
    controller._build_tally(slow, [])
    assert "slow" not in controller.tallies
