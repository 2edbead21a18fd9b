"""The Deployment controller's sync alone, on the in-memory apiserver (upstream's
deployment_controller_test.go pattern): objects stored, informers synced, sync(key), then the
writes asserted."""

from __future__ import annotations

import copy
from typing import Any

from controller_manager import rollout as ro
from controller_manager.controllers import deployment
from controller_manager.controllers.deployment import template_hash
from controller_manager.resources import DEPLOYMENTS, REPLICA_SETS
from tests.unit.controller_manager.harness import harness

Obj = dict[str, Any]
UID = "deployment-uid"


def template(image: str) -> Obj:
    return {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": image}]}}


def dep(replicas: int = 3, image: str = "v1", surge: Any = "25%", unavailable: Any = "25%", **spec: Any) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "uid": UID, "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template(image),
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                     "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600, **spec}}


def rs(image: str, replicas: int, revision: int, created: str, available: int | None = None,
       desired: int | None = None) -> Obj:
    pod_hash = template_hash(template(image), None)
    tmpl = copy.deepcopy(template(image))
    tmpl["metadata"]["labels"][ro.HASH_LABEL] = pod_hash
    annotations = {ro.REVISION: str(revision)}
    if desired is not None:
        annotations[ro.DESIRED_REPLICAS] = str(desired)
    ready = replicas if available is None else available
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"web-{pod_hash}", "namespace": "ns", "creationTimestamp": created,
                         "labels": dict(tmpl["metadata"]["labels"]), "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                              "uid": UID, "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web", ro.HASH_LABEL: pod_hash}},
                     "template": tmpl},
            "status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready,
                       "observedGeneration": 1}}


def name_of(image: str) -> str:
    return f"web-{template_hash(template(image), None)}"


async def test_a_new_deployment_creates_its_replicaset_named_by_the_template_hash() -> None:
    async with harness(deployment, [(DEPLOYMENTS, dep(replicas=3))]) as env:
        await env.sync("ns/web")
        (created,) = env.api.writes("replicasets", "create")
        made = created.result
        assert made is not None
        pod_hash = template_hash(template("v1"), None)
        assert made["metadata"]["name"] == f"web-{pod_hash}"
        assert made["spec"]["selector"]["matchLabels"] == {"app": "web", ro.HASH_LABEL: pod_hash}
        assert made["spec"]["template"]["metadata"]["labels"][ro.HASH_LABEL] == pod_hash
        assert made["spec"]["replicas"] == 3
        assert made["metadata"]["ownerReferences"][0]["uid"] == UID
        annotations = made["metadata"]["annotations"]
        assert (annotations[ro.REVISION], annotations[ro.DESIRED_REPLICAS], annotations[ro.MAX_REPLICAS]) == (
            "1", "3", "4")
        stored = env.api.get(DEPLOYMENTS, "web", "ns")
        assert stored is not None and stored["metadata"]["annotations"][ro.REVISION] == "1"


async def test_a_rolling_update_surges_and_scales_old_down_within_max_unavailable() -> None:
    old = rs("v1", 10, 1, "2024-01-01T00:00:00Z", desired=10)
    seed = [(DEPLOYMENTS, dep(replicas=10, image="v2", surge=3, unavailable="25%")), (REPLICA_SETS, old)]
    async with harness(deployment, seed) as env:
        await env.sync("ns/web")
        (created,) = env.api.writes("replicasets", "create")
        new = created.result
        assert new is not None and new["spec"]["replicas"] == 3  # maxSurge: at most 10 + 3 pods in all
        # 13 pods, the 3 new ones not available: the old may lose 13 - (10 - 2) - 3 = 2
        (scaled,) = env.api.writes("replicasets", "patch")
        assert scaled.name == old["metadata"]["name"] and scaled.body["spec"]["replicas"] == 8

        env.api.clear_actions()
        await env.sync("ns/web")
        (grown,) = env.api.writes("replicasets", "patch")  # 8 + 3 pods: room for 2 more new ones
        assert grown.name == new["metadata"]["name"] and grown.body["spec"]["replicas"] == 5

        env.api.clear_actions()
        await env.sync("ns/web")
        assert env.api.writes("replicasets") == []  # 13 pods, 5 new ones unavailable: nothing may move

        grown_rs = env.api.get(REPLICA_SETS, new["metadata"]["name"], "ns")
        old_rs = env.api.get(REPLICA_SETS, old["metadata"]["name"], "ns")
        assert grown_rs is not None and old_rs is not None
        env.update(REPLICA_SETS, {**grown_rs, "status": {"replicas": 5, "readyReplicas": 5, "availableReplicas": 5}})
        env.update(REPLICA_SETS, {**old_rs, "status": {"replicas": 8, "readyReplicas": 8, "availableReplicas": 8}})
        env.api.clear_actions()
        await env.sync("ns/web")
        (shrunk,) = env.api.writes("replicasets", "patch")  # all 13 available: 13 - 8 may go
        assert shrunk.name == old["metadata"]["name"] and shrunk.body["spec"]["replicas"] == 3


async def test_scaling_a_deployment_resizes_its_only_active_replicaset() -> None:
    current = rs("v1", 10, 1, "2024-01-01T00:00:00Z", desired=10)
    async with harness(deployment, [(DEPLOYMENTS, dep(replicas=4)), (REPLICA_SETS, current)]) as env:
        await env.sync("ns/web")
        (scaled,) = env.api.writes("replicasets", "patch")
        assert scaled.body["spec"]["replicas"] == 4
        assert scaled.body["metadata"]["annotations"][ro.DESIRED_REPLICAS] == "4"
        assert env.api.writes("replicasets", "create") == []


async def test_a_rollback_makes_the_old_replicaset_the_newest_revision() -> None:
    first = rs("v1", 0, 1, "2024-01-01T00:00:00Z", desired=3)
    second = rs("v2", 3, 2, "2024-01-02T00:00:00Z", desired=3)
    seed = [(DEPLOYMENTS, dep(replicas=3, image="v1")), (REPLICA_SETS, first), (REPLICA_SETS, second)]
    async with harness(deployment, seed) as env:
        await env.sync("ns/web")
        assert env.api.writes("replicasets", "create") == []
        revived = env.api.get(REPLICA_SETS, name_of("v1"), "ns")
        assert revived is not None
        annotations = revived["metadata"]["annotations"]
        assert annotations[ro.REVISION] == "3" and annotations[ro.REVISION_HISTORY] == "1"
        stored = env.api.get(DEPLOYMENTS, "web", "ns")
        assert stored is not None and stored["metadata"]["annotations"][ro.REVISION] == "3"
        assert revived["spec"]["replicas"] == 1  # maxSurge 25% of 3 rounds up to 1


async def test_a_paused_deployment_does_not_roll_out_and_says_so() -> None:
    current = rs("v1", 3, 1, "2024-01-01T00:00:00Z", desired=3)
    async with harness(deployment, [(DEPLOYMENTS, dep(replicas=3, image="v2", paused=True)),
                                    (REPLICA_SETS, current)]) as env:
        await env.sync("ns/web")
        assert env.api.writes("replicasets") == []
        stored = env.api.get(DEPLOYMENTS, "web", "ns")
        assert stored is not None
        progressing = next(c for c in stored["status"]["conditions"] if c["type"] == "Progressing")
        assert (progressing["status"], progressing["reason"]) == ("Unknown", "DeploymentPaused")
        assert stored["status"]["replicas"] == 3 and stored["status"]["updatedReplicas"] == 0
