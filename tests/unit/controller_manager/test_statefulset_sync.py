"""The StatefulSet controller's sync alone, on the in-memory apiserver: pods in ordinal order, each
after the one before is ready, with their claims from the templates; scale-down from the top."""

from __future__ import annotations

from typing import Any

from controller_manager.controllers import statefulset
from controller_manager.resources import PODS, PVCS, STATEFUL_SETS
from tests.unit.controller_manager.harness import harness

Obj = dict[str, Any]
UID = "sts-uid"


def sts(replicas: int, claims: bool = False, policy: str = "OrderedReady") -> Obj:
    spec: Obj = {"replicas": replicas, "serviceName": "web", "podManagementPolicy": policy,
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}},
                 "updateStrategy": {"type": "RollingUpdate"}}
    if claims:
        spec["volumeClaimTemplates"] = [{"metadata": {"name": "data"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": UID, "generation": 1}, "spec": spec}


def running(pod: Obj) -> Obj:
    return {**pod, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}}


def owned_pod(ordinal: int) -> Obj:
    return running({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"web-{ordinal}", "namespace": "ns", "labels": {"app": "web"},
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                                      "uid": UID, "controller": True, "blockOwnerDeletion": True}]},
                    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}})


def created(env: Any, resource: str) -> list[str]:
    return [a.result["metadata"]["name"] for a in env.api.writes(resource, "create")]


async def test_pods_are_created_in_order_each_after_the_previous_is_ready_with_their_claims() -> None:
    async with harness(statefulset, [(STATEFUL_SETS, sts(3, claims=True))]) as env:
        await env.sync("ns/web")
        assert created(env, "pods") == ["web-0"]
        assert created(env, "persistentvolumeclaims") == ["data-web-0"]
        pod = env.api.get(PODS, "web-0", "ns")
        assert pod is not None
        assert pod["spec"]["hostname"] == "web-0" and pod["spec"]["subdomain"] == "web"
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "data")
        assert volume["persistentVolumeClaim"]["claimName"] == "data-web-0"
        claim = env.api.get(PVCS, "data-web-0", "ns")
        assert claim is not None and claim["spec"]["resources"]["requests"]["storage"] == "1Gi"

        env.api.clear_actions()
        await env.sync("ns/web")
        assert created(env, "pods") == []  # web-0 is not ready yet

        env.update(PODS, running(pod))
        env.api.clear_actions()
        await env.sync("ns/web")
        assert created(env, "pods") == ["web-1"]
        assert created(env, "persistentvolumeclaims") == ["data-web-1"]


async def test_parallel_creates_every_missing_ordinal_at_once() -> None:
    async with harness(statefulset, [(STATEFUL_SETS, sts(3, policy="Parallel"))]) as env:
        await env.sync("ns/web")
        assert sorted(created(env, "pods")) == ["web-0", "web-1", "web-2"]


async def test_scale_down_removes_the_highest_ordinal_first_one_at_a_time() -> None:
    seed = [(STATEFUL_SETS, sts(1)), *((PODS, owned_pod(i)) for i in range(3))]
    async with harness(statefulset, seed) as env:
        await env.sync("ns/web")
        assert [a.name for a in env.api.writes("pods", "delete")] == ["web-2"]
        env.api.clear_actions()
        await env.sync("ns/web")
        assert [a.name for a in env.api.writes("pods", "delete")] == ["web-1"]
        assert [p["metadata"]["name"] for p in env.api.list(PODS, "ns")] == ["web-0"]


async def test_a_set_being_deleted_adopts_no_orphan_even_from_a_stale_cache() -> None:
    orphan = owned_pod(0)
    del orphan["metadata"]["ownerReferences"]
    async with harness(statefulset, [(STATEFUL_SETS, sts(1)), (PODS, orphan)]) as env:
        await env.caught_up()
        going = env.api.get(STATEFUL_SETS, "web", "ns")
        going["metadata"].update({"deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["orphan"]})
        env.update(STATEFUL_SETS, going)  # the controller's cache has not seen this yet
        await env.controller.sync("ns/web")
        assert not env.api.get(PODS, "web-0", "ns")["metadata"].get("ownerReferences")
