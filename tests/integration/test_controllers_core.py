"""The core controllers (ReplicaSet, ReplicationController, Deployment, garbage collector,
namespace, service account, pod GC) in a real controller-manager process, with the real scheduler
binding pods and a hollow kubelet running them (tests/integration/cluster.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from services.client import Client, ClientConfig, NotFound, gvr
from tests.conftest import Kubectl
from tests.integration import cluster as plane
from tests.integration.cluster import Cluster, PodLog, Proc, eventually, script

cluster = plane.cluster
kubectl = plane.kubectl
unique_ns = plane.unique_ns

PODS = gvr("v1", "pods")
NAMESPACES = gvr("v1", "namespaces", namespaced=False)
EVENTS = gvr("v1", "events")
SAS = gvr("v1", "serviceaccounts")
CONFIGMAPS = gvr("v1", "configmaps")
RCS = gvr("v1", "replicationcontrollers")
RSS = gvr("apps/v1", "replicasets")
DEPLOYMENTS = gvr("apps/v1", "deployments")
LEASES = gvr("coordination.k8s.io/v1", "leases")
QUOTAS = gvr("v1", "resourcequotas")
REVISION = "deployment.kubernetes.io/revision"


@pytest.fixture(scope="module")
def controller_manager(cluster: Cluster) -> Iterator[Proc]:
    cm = cluster.controller_manager("cm-core", "--leader-elect=false", "--terminated-pod-gc-threshold", "5")
    yield cm
    cm.stop()


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=cluster.url)) as c:
        yield c


@pytest.fixture
def kubelet(cluster: Cluster, controller_manager: Proc) -> Proc:
    """The hollow kubelet running the cluster's nodes, with this module's controller-manager up."""
    return cluster.kubelet


def labels(name: str) -> dict[str, str]:
    return {"app": name}


def template(name: str, image: str = "nginx:1.25") -> dict[str, Any]:
    return {"metadata": {"labels": labels(name)},
            "spec": {"containers": [{"name": "c", "image": image}], "terminationGracePeriodSeconds": 0}}


def replicaset(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels(name)}, "template": template(name),
                     **spec}}


def deployment(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels(name)}, "template": template(name),
                     **spec}}


async def pods_of(client: Client, ns: str, name: str, active: bool = True) -> list[dict[str, Any]]:
    items = (await client.list(PODS, ns, label_selector=f"app={name}"))["items"]
    if active:
        items = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    return items


async def events_for(client: Client, ns: str, name: str) -> list[dict[str, Any]]:
    items = (await client.list(EVENTS, ns))["items"]
    return [e for e in items if e["involvedObject"].get("name") == name]


# -- ReplicaSet ------------------------------------------------------------------------------------


async def test_replicaset_creates_pods_and_reports_status(client: Client, kubelet: Proc, unique_ns: str) -> None:
    await client.create(RSS, replicaset("web", 4), unique_ns)

    async def ready() -> bool:
        rs = await client.get(RSS, "web", unique_ns)
        st = rs.get("status") or {}
        return (st.get("replicas"), st.get("readyReplicas"), st.get("availableReplicas"),
                st.get("fullyLabeledReplicas"), st.get("observedGeneration")) == (4, 4, 4, 4, 1)

    await eventually(ready, what="replicaset status")
    pods = await pods_of(client, unique_ns, "web")
    assert len(pods) == 4
    rs = await client.get(RSS, "web", unique_ns)
    for pod in pods:
        (ref,) = pod["metadata"]["ownerReferences"]
        assert ref == {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                       "uid": rs["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        assert pod["metadata"]["generateName"] == "web-"

    async def created_events() -> bool:
        reasons = [e["reason"] for e in await events_for(client, unique_ns, "web")]
        return reasons.count("SuccessfulCreate") == 4

    await eventually(created_events, what="SuccessfulCreate events")
    event = next(e for e in await events_for(client, unique_ns, "web") if e["reason"] == "SuccessfulCreate")
    assert event["source"]["component"] == "replicaset-controller"
    assert event["message"].startswith("Created pod: web-")
    assert event["type"] == "Normal"

    await client.patch(RSS, "web", {"spec": {"replicas": 1}}, unique_ns)

    async def scaled_down() -> bool:
        rs = await client.get(RSS, "web", unique_ns)
        return len(await pods_of(client, unique_ns, "web")) == 1 and rs["status"].get("replicas") == 1

    await eventually(scaled_down, what="scale down")
    reasons = [e["reason"] for e in await eventually(
        lambda: _with_reason(client, unique_ns, "web", "SuccessfulDelete"))]
    assert reasons.count("SuccessfulDelete") == 3


async def _with_reason(client: Client, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    found = [e for e in await events_for(client, ns, name) if e["reason"] == reason]
    return found


async def test_replicaset_burst_does_not_overcreate(client: Client, kubelet: Proc, unique_ns: str) -> None:
    await client.create(RSS, replicaset("burst", 60), unique_ns)
    for replicas in (10, 80, 60):
        await client.patch(RSS, "burst", {"spec": {"replicas": replicas}}, unique_ns)
    seen_max = 0
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        all_pods = await pods_of(client, unique_ns, "burst", active=False)
        seen_max = max(seen_max, len(all_pods))
        rs = await client.get(RSS, "burst", unique_ns)
        if len(await pods_of(client, unique_ns, "burst")) == 60 and rs["status"].get("readyReplicas") == 60:
            break
        await asyncio.sleep(0.2)
    assert len(await pods_of(client, unique_ns, "burst")) == 60
    assert seen_max <= 80


async def test_replicaset_adopts_and_releases(client: Client, kubelet: Proc, unique_ns: str) -> None:
    orphan = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orphan", "labels": labels("adopt")},
              "spec": template("adopt")["spec"]}
    await client.create(PODS, orphan, unique_ns)
    await client.create(RSS, replicaset("adopt", 2), unique_ns)
    rs = await client.get(RSS, "adopt", unique_ns)

    async def adopted() -> bool:
        pod = await client.get(PODS, "orphan", unique_ns)
        refs = pod["metadata"].get("ownerReferences") or []
        return bool(refs) and refs[0]["uid"] == rs["metadata"]["uid"] and refs[0]["controller"] is True

    await eventually(adopted, what="adoption")
    await eventually(lambda: _count(client, unique_ns, "adopt", 2), what="two pods")
    await client.patch(PODS, "orphan", {"metadata": {"labels": {"app": "elsewhere"}}}, unique_ns)

    async def released() -> bool:
        pod = await client.get(PODS, "orphan", unique_ns)
        return not pod["metadata"].get("ownerReferences")

    await eventually(released, what="release")
    await eventually(lambda: _count(client, unique_ns, "adopt", 2), what="replacement pod")


async def _count(client: Client, ns: str, name: str, n: int) -> bool:
    return len(await pods_of(client, ns, name)) == n


async def test_replicaset_deletes_unready_pods_first(client: Client, kubelet: Proc, unique_ns: str) -> None:
    await client.create(RSS, replicaset("rank", 3), unique_ns)

    async def ready() -> bool:
        return ((await client.get(RSS, "rank", unique_ns)).get("status") or {}).get("readyReplicas") == 3

    await eventually(ready, what="3 ready")
    # With the kubelet frozen, the two new pods are scheduled but never start.
    with kubelet.frozen():
        await client.patch(RSS, "rank", {"spec": {"replicas": 5}}, unique_ns)
        await eventually(lambda: _count(client, unique_ns, "rank", 5), what="5 pods")
        pods = await pods_of(client, unique_ns, "rank")
        unready = {p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") != "Running"}
        assert len(unready) == 2
        await client.patch(RSS, "rank", {"spec": {"replicas": 3}}, unique_ns)
        await eventually(lambda: _count(client, unique_ns, "rank", 3), what="back to 3")
        left = {p["metadata"]["name"] for p in await pods_of(client, unique_ns, "rank")}
        assert not (left & unready)


async def test_replicaset_min_ready_seconds_and_failure_condition(
    client: Client, kubelet: Proc, unique_ns: str
) -> None:
    await client.create(RSS, replicaset("slow", 2, minReadySeconds=3), unique_ns)

    async def status() -> dict[str, Any]:
        return (await client.get(RSS, "slow", unique_ns)).get("status") or {}

    await eventually(lambda: _ready_but_unavailable(status), what="ready but not yet available")
    await eventually(lambda: _available(status, 2), within=20, what="available after minReadySeconds")
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}, "spec": {"hard": {"pods": "2"}}}
    await client.create(QUOTAS, quota, unique_ns)

    async def counted() -> bool:
        return ((await client.get(QUOTAS, "q", unique_ns)).get("status") or {}).get("used") == {"pods": "2"}

    # As upstream, a quota limits creates once the quota controller has filled in its status.
    await eventually(counted, what="quota usage")
    await client.patch(RSS, "slow", {"spec": {"replicas": 3}}, unique_ns)

    async def failure() -> Any:
        conds = (await status()).get("conditions") or []
        return [c for c in conds if c["type"] == "ReplicaFailure" and c["reason"] == "FailedCreate"]

    (cond,) = await eventually(failure, what="ReplicaFailure condition")
    assert cond["status"] == "True"
    assert "exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2" in cond["message"]
    assert len(await pods_of(client, unique_ns, "slow")) == 2
    st = await status()
    assert (st["replicas"], st["availableReplicas"]) == (2, 2)


async def _ready_but_unavailable(status: Callable[[], Awaitable[dict[str, Any]]]) -> bool:
    st = await status()
    return st.get("readyReplicas") == 2 and (st.get("availableReplicas") or 0) == 0


async def _available(status: Callable[[], Awaitable[dict[str, Any]]], n: int) -> bool:
    return (await status()).get("availableReplicas") == n


async def test_replication_controller(client: Client, kubelet: Proc, unique_ns: str) -> None:
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
          "spec": {"replicas": 3, "selector": labels("rc"), "template": template("rc")}}
    await client.create(RCS, rc, unique_ns)

    async def ready() -> bool:
        st = (await client.get(RCS, "rc", unique_ns)).get("status") or {}
        return st.get("readyReplicas") == 3 and st.get("availableReplicas") == 3

    await eventually(ready, what="rc ready")
    pods = await pods_of(client, unique_ns, "rc")
    assert len(pods) == 3
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicationController" for p in pods)
    events = await eventually(lambda: _with_reason(client, unique_ns, "rc", "SuccessfulCreate"))
    assert events[0]["source"]["component"] == "replication-controller"


# -- Deployment with kubectl -----------------------------------------------------------------------


def rollout_status(kubectl: Kubectl, ns: str, name: str, timeout: str = "60s") -> str:
    out = kubectl.run("rollout", "status", f"deployment/{name}", "-n", ns, f"--timeout={timeout}", timeout=90)
    return out.stdout


async def rs_list(client: Client, ns: str) -> list[dict[str, Any]]:
    return (await client.list(RSS, ns))["items"]


async def test_deployment_rollout_with_kubectl(
    client: Client, kubelet: Proc, kubectl: Kubectl, unique_ns: str
) -> None:
    ns = unique_ns
    kubectl.run("create", "deployment", "web", "--image=nginx:1.25", "--replicas=4", "-n", ns)
    out = await asyncio.to_thread(rollout_status, kubectl, ns, "web")
    assert 'deployment "web" successfully rolled out' in out
    d = await client.get(DEPLOYMENTS, "web", ns)
    st = d["status"]
    assert (st["replicas"], st["updatedReplicas"], st["readyReplicas"], st["availableReplicas"]) == (4, 4, 4, 4)
    assert st["observedGeneration"] == d["metadata"]["generation"]
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Available"]["status"] == "True" and conds["Available"]["reason"] == "MinimumReplicasAvailable"
    assert conds["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    (rs1,) = await rs_list(client, ns)
    pod_hash = rs1["metadata"]["labels"]["pod-template-hash"]
    assert rs1["metadata"]["name"] == f"web-{pod_hash}"
    assert rs1["spec"]["selector"]["matchLabels"]["pod-template-hash"] == pod_hash
    assert rs1["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] == "4"
    assert rs1["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"] == "5"

    kubectl.run("set", "image", "deployment/web", "nginx=nginx:1.26", "-n", ns)
    out = await asyncio.to_thread(rollout_status, kubectl, ns, "web")
    assert "successfully rolled out" in out
    rss = {r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: r for r in await rs_list(client, ns)}
    assert set(rss) == {"1", "2"}
    assert rss["1"]["spec"]["replicas"] == 0 and rss["2"]["spec"]["replicas"] == 4
    pods = await pods_of(client, ns, "web")
    assert len(pods) == 4 and all(p["spec"]["containers"][0]["image"] == "nginx:1.26" for p in pods)
    events = [e["message"] for e in await events_for(client, ns, "web") if e["reason"] == "ScalingReplicaSet"]
    assert any(m.startswith(f"Scaled up replica set web-{pod_hash} from 0 to 4") for m in events)

    history = kubectl.run("rollout", "history", "deployment/web", "-n", ns).stdout
    assert "1 " in history and "2 " in history
    kubectl.run("rollout", "undo", "deployment/web", "-n", ns)
    await asyncio.to_thread(rollout_status, kubectl, ns, "web")

    async def undone() -> bool:
        d = await client.get(DEPLOYMENTS, "web", ns)
        return d["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.25" and (
            d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3")

    await eventually(undone, what="undo to revision 1 as revision 3")
    rs_now = await client.get(RSS, rs1["metadata"]["name"], ns)
    assert rs_now["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert rs_now["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"] == "1"
    assert rs_now["spec"]["replicas"] == 4
    kubectl.run("rollout", "undo", "deployment/web", "--to-revision=2", "-n", ns)
    await asyncio.to_thread(rollout_status, kubectl, ns, "web")
    d = await client.get(DEPLOYMENTS, "web", ns)
    assert d["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.26"
    assert len(await rs_list(client, ns)) == 2

    kubectl.run("scale", "deployment/web", "--replicas=6", "-n", ns)
    await asyncio.to_thread(rollout_status, kubectl, ns, "web")
    assert len(await pods_of(client, ns, "web")) == 6


async def test_rollout_undo_reuses_the_old_replicaset(
    client: Client, kubelet: Proc, kubectl: Kubectl, unique_ns: str
) -> None:
    """`kubectl rollout undo` sends the old ReplicaSet's template as kubectl's Go types write it, with
    `creationTimestamp: null`; a Deployment applied from a file has no such null. Upstream decodes the
    null away, so the template equals the old one and undo scales that ReplicaSet back up (revisions 2
    and 3 in the history) instead of making a third one."""
    ns = unique_ns
    manifest = json.dumps(deployment("undo", 2))
    kubectl.run("apply", "-n", ns, "-f", "-", stdin=manifest)
    await eventually(lambda: _rs_with_revision(client, ns, "1"), what="the first ReplicaSet")
    kubectl.run("set", "image", "deployment/undo", "c=nginx:1.26", "-n", ns)
    await eventually(lambda: _rs_with_revision(client, ns, "2"), what="the second ReplicaSet")
    (first,) = [r for r in await rs_list(client, ns) if r["metadata"]["annotations"][REVISION] == "1"]

    kubectl.run("rollout", "undo", "deployment/undo", "-n", ns)

    async def undone() -> bool:
        d = await client.get(DEPLOYMENTS, "undo", ns)
        rs = await client.get(RSS, first["metadata"]["name"], ns)
        return d["metadata"]["annotations"][REVISION] == "3" and rs["metadata"]["annotations"][REVISION] == "3"

    await eventually(undone, what="the first ReplicaSet re-used as revision 3")
    d = await client.get(DEPLOYMENTS, "undo", ns)
    assert "creationTimestamp" not in d["spec"]["template"]["metadata"]
    assert len(await rs_list(client, ns)) == 2
    history = kubectl.run("rollout", "history", "deployment/undo", "-n", ns).stdout.split()
    assert history[history.index("CHANGE-CAUSE") + 1::2] == ["2", "3"], history


async def _rs_with_revision(client: Client, ns: str, revision: str) -> bool:
    return any((r["metadata"].get("annotations") or {}).get(REVISION) == revision for r in await rs_list(client, ns))


async def test_deployment_pause_resume(client: Client, kubelet: Proc, kubectl: Kubectl, unique_ns: str) -> None:
    ns = unique_ns
    await client.create(DEPLOYMENTS, deployment("pz", 2), ns)
    await asyncio.to_thread(rollout_status, kubectl, ns, "pz")
    kubectl.run("rollout", "pause", "deployment/pz", "-n", ns)

    async def paused_condition() -> bool:
        d = await client.get(DEPLOYMENTS, "pz", ns)
        return any(c["type"] == "Progressing" and c["reason"] == "DeploymentPaused" for c in d["status"]["conditions"])

    await eventually(paused_condition, what="DeploymentPaused")
    kubectl.run("set", "image", "deployment/pz", "c=nginx:2", "-n", ns)
    await asyncio.sleep(2)
    assert len(await rs_list(client, ns)) == 1
    kubectl.run("rollout", "resume", "deployment/pz", "-n", ns)
    await asyncio.to_thread(rollout_status, kubectl, ns, "pz")
    assert len(await rs_list(client, ns)) == 2
    assert all(p["spec"]["containers"][0]["image"] == "nginx:2" for p in await pods_of(client, ns, "pz"))


async def test_deployment_rolling_update_respects_surge_and_unavailable(
    client: Client, kubelet: Proc, unique_ns: str
) -> None:
    ns = unique_ns
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "20%", "maxUnavailable": 1}}
    await client.create(DEPLOYMENTS, deployment("ru", 10, strategy=strategy), ns)
    await eventually(lambda: _deployment_done(client, ns, "ru", 10), within=60, what="first rollout")
    await client.patch(DEPLOYMENTS, "ru", {"spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "nginx:new"}]}}}}, ns, patch_type="strategic")
    max_total = 0
    min_available = 10
    while not await _deployment_done(client, ns, "ru", 10, image="nginx:new"):
        rss = await rs_list(client, ns)
        max_total = max(max_total, sum(r["spec"]["replicas"] for r in rss))
        min_available = min(min_available, sum((r.get("status") or {}).get("availableReplicas") or 0 for r in rss))
        await asyncio.sleep(0.05)
    assert max_total <= 12
    assert min_available >= 9


async def _deployment_done(client: Client, ns: str, name: str, n: int, image: str | None = None) -> bool:
    d = await client.get(DEPLOYMENTS, name, ns)
    st = d.get("status") or {}
    done = (st.get("observedGeneration") == d["metadata"]["generation"] and st.get("updatedReplicas") == n
            and st.get("replicas") == n and st.get("availableReplicas") == n)
    if done and image:
        done = d["spec"]["template"]["spec"]["containers"][0]["image"] == image
    return done


async def test_deployment_recreate_and_history_limit(client: Client, kubelet: Proc, unique_ns: str) -> None:
    ns = unique_ns
    await client.create(DEPLOYMENTS, deployment("rc8", 3, strategy={"type": "Recreate"}, revisionHistoryLimit=1), ns)
    await eventually(lambda: _deployment_done(client, ns, "rc8", 3), what="first rollout")
    for image in ("nginx:a", "nginx:b"):
        await client.patch(DEPLOYMENTS, "rc8", {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": image}]}}}}, ns, patch_type="strategic")
        mixed = False
        while not await _deployment_done(client, ns, "rc8", 3, image=image):
            images = {p["spec"]["containers"][0]["image"] for p in await pods_of(client, ns, "rc8", active=False)}
            mixed |= len(images) > 1
            await asyncio.sleep(0.05)
        assert not mixed, "Recreate ran old and new pods together"

    async def trimmed() -> bool:
        return len(await rs_list(client, ns)) == 2

    await eventually(trimmed, what="revisionHistoryLimit cleanup")


async def test_deployment_proportional_scaling(client: Client, kubelet: Proc, unique_ns: str) -> None:
    ns = unique_ns
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 2}}
    await client.create(DEPLOYMENTS, deployment("prop", 10, strategy=strategy), ns)
    await eventually(lambda: _deployment_done(client, ns, "prop", 10), what="first rollout")
    # The frozen kubelet starts no new pod, so the rollout cannot progress past its first step.
    with kubelet.frozen():
        await client.patch(DEPLOYMENTS, "prop", {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "nginx:stuck"}]}}}}, ns, patch_type="strategic")

        async def stuck() -> bool:
            rss = await rs_list(client, ns)
            return len(rss) == 2 and sorted(r["spec"]["replicas"] for r in rss) == [5, 8]

        await eventually(stuck, what="rollout stuck at 8 old + 5 new")
        await client.patch(DEPLOYMENTS, "prop", {"spec": {"replicas": 20}}, ns)

        async def scaled() -> list[int]:
            rss = await rs_list(client, ns)
            sizes = sorted(r["spec"]["replicas"] for r in rss)
            return sizes if sum(sizes) == 23 else []

        sizes = await eventually(scaled, what="proportional scale")
        assert sizes == [9, 14]
    await eventually(lambda: _deployment_done(client, ns, "prop", 20, image="nginx:stuck"), within=60,
                     what="rollout done")


async def test_deployment_progress_deadline(client: Client, kubelet: Proc, unique_ns: str) -> None:
    ns = unique_ns
    with kubelet.frozen():
        await client.create(DEPLOYMENTS, deployment("dl", 2, progressDeadlineSeconds=3), ns)

        async def exceeded() -> Any:
            d = await client.get(DEPLOYMENTS, "dl", ns)
            return [c for c in (d.get("status") or {}).get("conditions") or []
                    if c["type"] == "Progressing" and c["reason"] == "ProgressDeadlineExceeded"
                    and c["status"] == "False"]

        (cond,) = await eventually(exceeded, within=20, what="ProgressDeadlineExceeded")
        assert "has timed out progressing" in cond["message"]
    await eventually(lambda: _deployment_done(client, ns, "dl", 2), what="recovered")


# -- garbage collector -----------------------------------------------------------------------------


async def test_cascading_deletion_modes(client: Client, kubelet: Proc, kubectl: Kubectl, unique_ns: str) -> None:
    ns = unique_ns
    for name in ("bg", "fg", "or"):
        await client.create(DEPLOYMENTS, deployment(name, 2), ns)
    for name in ("bg", "fg", "or"):
        await eventually(lambda n=name: _deployment_done(client, ns, n, 2), what=f"{name} ready")

    kubectl.run("delete", "deployment/bg", "--cascade=background", "-n", ns)
    await eventually(lambda: _gone(client, ns, "bg"), what="background cascade")

    kubectl.run("delete", "deployment/fg", "--cascade=foreground", "-n", ns, "--wait=false")
    d = await client.get(DEPLOYMENTS, "fg", ns)
    assert "foregroundDeletion" in d["metadata"]["finalizers"]
    await eventually(lambda: _gone(client, ns, "fg"), what="foreground cascade")

    async def owner_gone() -> bool:
        """The collector drops the owner's finalizer only after it has seen the last dependent go."""
        try:
            await client.get(DEPLOYMENTS, "fg", ns)
        except NotFound:
            return True
        return False

    await eventually(owner_gone, what="the foreground owner deleted after its dependents")

    pods_before = {p["metadata"]["name"] for p in await pods_of(client, ns, "or")}
    kubectl.run("delete", "deployment/or", "--cascade=orphan", "-n", ns)

    async def orphaned() -> bool:
        try:
            await client.get(DEPLOYMENTS, "or", ns)
            return False
        except NotFound:
            pass
        rss = [r for r in await rs_list(client, ns) if r["metadata"]["labels"].get("app") == "or"]
        return len(rss) == 1 and not rss[0]["metadata"].get("ownerReferences")

    await eventually(orphaned, what="orphan cascade")
    assert {p["metadata"]["name"] for p in await pods_of(client, ns, "or")} == pods_before


async def _gone(client: Client, ns: str, name: str) -> bool:
    rss = [r for r in await rs_list(client, ns) if r["metadata"]["labels"].get("app") == name]
    return not rss and not await pods_of(client, ns, name, active=False)


async def test_gc_deletes_dependents_of_custom_and_missing_owners(client: Client, controller_manager: Any,
                                                                   unique_ns: str) -> None:
    ns = unique_ns
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "gadgets.gc.example.com"},
           "spec": {"group": "gc.example.com", "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {"type": "object",
                                                                 "x-kubernetes-preserve-unknown-fields": True}}}]}}
    crds = gvr("apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False)
    try:
        await client.create(crds, crd)
    except Exception:
        pass
    gadgets = gvr("gc.example.com/v1", "gadgets")

    async def served() -> bool:
        try:
            await client.list(gadgets, ns)
            return True
        except NotFound:
            return False

    await eventually(served, what="CRD served")
    owner = await client.create(gadgets, {"apiVersion": "gc.example.com/v1", "kind": "Gadget",
                                          "metadata": {"name": "g1"}}, ns)
    ref = {"apiVersion": "gc.example.com/v1", "kind": "Gadget", "name": "g1", "uid": owner["metadata"]["uid"]}
    await client.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": "child", "ownerReferences": [ref]}}, ns)
    missing = {"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "00000000-0000-0000-0000-00000000dead"}
    await client.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": "stray", "ownerReferences": [missing]}}, ns)
    await client.create(gadgets, {"apiVersion": "gc.example.com/v1", "kind": "Gadget",
                                  "metadata": {"name": "g2", "ownerReferences": [
                                      {"apiVersion": "v1", "kind": "ConfigMap", "name": "child",
                                       "uid": (await client.get(CONFIGMAPS, "child", ns))["metadata"]["uid"]}]}}, ns)

    async def cm_gone(name: str) -> bool:
        try:
            await client.get(CONFIGMAPS, name, ns)
            return False
        except NotFound:
            return True

    await eventually(lambda: cm_gone("stray"), what="dependent of a missing owner deleted")
    await asyncio.sleep(1)
    assert not await cm_gone("child")
    await client.delete(gadgets, "g1", ns)
    await eventually(lambda: cm_gone("child"), what="dependent of a deleted custom owner")

    async def g2_gone() -> bool:
        try:
            await client.get(gadgets, "g2", ns)
            return False
        except NotFound:
            return True

    await eventually(g2_gone, what="custom dependent of a deleted built-in owner")


# -- namespace, service accounts, pod GC -----------------------------------------------------------


async def test_namespace_deletion_and_default_service_account(
    client: Client, kubelet: Proc, kubectl: Kubectl
) -> None:
    name = f"cm-ns-{os.getpid()}"
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    async def sa() -> Any:
        try:
            return await client.get(SAS, "default", name)
        except NotFound:
            return None

    first = await eventually(sa, what="default service account")
    await client.delete(SAS, "default", name)

    async def recreated() -> bool:
        again = await sa()
        return again is not None and again["metadata"]["uid"] != first["metadata"]["uid"]

    await eventually(recreated, what="default service account recreated")
    await client.create(DEPLOYMENTS, deployment("inns", 2), name)
    await eventually(lambda: _deployment_done(client, name, "inns", 2), what="deployment in namespace")
    await client.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": "held", "finalizers": ["example.com/hold"]}}, name)
    await client.delete(NAMESPACES, name)

    async def waiting_on_finalizer() -> Any:
        ns = await client.get(NAMESPACES, name)
        conds = {c["type"]: c for c in (ns.get("status") or {}).get("conditions") or []}
        fin = conds.get("NamespaceFinalizersRemaining")
        return conds if fin and fin["status"] == "True" else None

    conds = await eventually(waiting_on_finalizer, what="NamespaceFinalizersRemaining")
    assert conds["NamespaceFinalizersRemaining"]["message"] == (
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
    assert conds["NamespaceContentRemaining"]["reason"] == "SomeResourcesRemain"
    assert conds["NamespaceDeletionDiscoveryFailure"]["status"] == "False"
    assert conds["NamespaceDeletionDiscoveryFailure"]["reason"] == "ResourcesDiscovered"
    ns = await client.get(NAMESPACES, name)
    assert ns["status"]["phase"] == "Terminating" and ns["spec"]["finalizers"] == ["kubernetes"]
    assert not (await client.list(PODS, name))["items"]
    assert not (await client.list(DEPLOYMENTS, name))["items"]
    await client.patch(CONFIGMAPS, "held", {"metadata": {"finalizers": None}}, name)

    async def ns_gone() -> bool:
        try:
            await client.get(NAMESPACES, name)
            return False
        except NotFound:
            return True

    await eventually(ns_gone, what="namespace removed")


async def test_pod_gc(client: Client, kubelet: Proc, unique_ns: str) -> None:
    ns = unique_ns
    spec = {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}
    for i in range(8):
        await client.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": f"done-{i}", "annotations": script("c", "exit=0")},
                                   "spec": spec}, ns)
        await asyncio.sleep(1.05 if i == 2 else 0)

    async def trimmed() -> Any:
        names = sorted(p["metadata"]["name"] for p in (await client.list(PODS, ns))["items"]
                       if p["metadata"]["name"].startswith("done-"))
        return names if len(names) <= 5 else None

    names = await eventually(trimmed, what="terminated pods above threshold collected")
    assert {"done-0", "done-1", "done-2"}.isdisjoint(names)
    for name in names:
        assert (await client.get(PODS, name, ns))["status"]["phase"] == "Succeeded"

    await client.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lost"},
                               "spec": {**spec, "nodeName": "no-such-node"}}, ns)
    # A scheduler nobody runs keeps the pod unscheduled; the apiserver deletes an unscheduled pod at
    # once, so only a finalizer keeps it terminating for pod GC to find, which marks it Failed as
    # upstream's markFailedAndDeletePod does before force-deleting it.
    await client.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "unsched", "finalizers": ["test.pyk8s.io/hold"]},
                               "spec": {**spec, "schedulerName": "no-such-scheduler"}}, ns)
    await client.delete(PODS, "unsched", ns, grace_period_seconds=30)

    async def gone(name: str) -> bool:
        try:
            await client.get(PODS, name, ns)
            return False
        except NotFound:
            return True

    async def failed() -> bool:
        return (await client.get(PODS, "unsched", ns))["status"].get("phase") == "Failed"

    try:
        await eventually(failed, within=10, what="unscheduled terminating pod marked Failed by pod GC")
    finally:
        await client.patch(PODS, "unsched", {"metadata": {"finalizers": None}}, ns)
    await eventually(lambda: gone("unsched"), what="unscheduled terminating pod gone")
    await eventually(lambda: gone("lost"), within=20, what="pod on a missing node collected")


# -- restarts and leader election ------------------------------------------------------------------


async def test_restart_mid_rollout_finishes_without_extra_pods(
    client: Client, cluster: Cluster, controller_manager: Proc, unique_ns: str
) -> None:
    with controller_manager.frozen():
        await _restart_mid_rollout(client, cluster, unique_ns)


async def _restart_mid_rollout(client: Client, cluster: Cluster, ns: str) -> None:
    flags = ("--leader-elect=false", "--controllers=replicaset,deployment,garbagecollector")
    cm = cluster.controller_manager("cm-restart-1", *flags)
    try:
        async with PodLog(client, ns) as log:
            strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0}}
            await client.create(DEPLOYMENTS, deployment("mid", 8, strategy=strategy), ns)
            await eventually(lambda: _deployment_done(client, ns, "mid", 8), within=60, what="first rollout")
            # The frozen kubelet holds the rollout at its first step while the process is killed.
            with cluster.kubelet.frozen():
                await client.patch(DEPLOYMENTS, "mid", {"spec": {"template": {"spec": {"containers": [
                    {"name": "c", "image": "nginx:mid"}]}}}}, ns, patch_type="strategic")
                await eventually(lambda: _some_new(client, ns), what="rollout started")
                cm.stop(signal.SIGKILL)
                cm = cluster.controller_manager("cm-restart-2", *flags)
            await eventually(lambda: _deployment_done(client, ns, "mid", 8, image="nginx:mid"), within=60,
                             what="rollout finished by the restarted process")
            await asyncio.sleep(1)
            created: dict[str, int] = {}
            for image in log.created_uids.values():
                created[image] = created.get(image, 0) + 1
            # maxUnavailable 0 never deletes a new pod, so each template had exactly 8 pods created, ever.
            assert created == {"nginx:1.25": 8, "nginx:mid": 8}
    finally:
        cm.stop()
    assert len(await pods_of(client, ns, "mid")) == 8
    assert len(await rs_list(client, ns)) == 2


async def _some_new(client: Client, ns: str) -> bool:
    d = await client.get(DEPLOYMENTS, "mid", ns)
    return 0 < ((d.get("status") or {}).get("updatedReplicas") or 0) < 8


async def test_leader_election_only_leader_acts(
    cluster: Cluster, client: Client, controller_manager: Proc
) -> None:
    with controller_manager.frozen():
        await _leader_election(cluster, client)


async def _leader_election(cluster: Cluster, client: Client) -> None:
    lease_ns = f"cm-le-{os.getpid()}"
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": lease_ns}})
    common = ("--controllers=serviceaccount", "--leader-elect-resource-namespace", lease_ns,
              "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s",
              "--leader-elect-retry-period=1s")
    first = cluster.controller_manager("cm-le-1", *common)
    second = cluster.controller_manager("cm-le-2", *common)
    try:
        async def holder() -> str:
            try:
                lease = await client.get(LEASES, "kube-controller-manager", lease_ns)
            except NotFound:
                return ""
            return lease["spec"].get("holderIdentity") or ""

        leader = await eventually(holder, what="a leader")
        await asyncio.sleep(2)
        logs = [first.log_path.read_text(), second.log_path.read_text()]
        leaders = [i for i, text in enumerate(logs) if "became leader" in text]
        assert len(leaders) == 1, logs
        assert sum("caches synced, starting workers" in text for text in logs) == 1
        (chosen,) = leaders
        (first, second)[chosen].stop()
        other = (first, second)[1 - chosen]

        async def taken_over() -> bool:
            return (await holder()) not in ("", leader) and "became leader" in other.log_path.read_text()

        await eventually(taken_over, within=30, what="failover")
        probe = f"cm-le-probe-{os.getpid()}"
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": probe}})

        async def sa() -> bool:
            try:
                await client.get(SAS, "default", probe)
                return True
            except NotFound:
                return False

        await eventually(sa, what="new leader acts")
    finally:
        first.stop()
        second.stop()
