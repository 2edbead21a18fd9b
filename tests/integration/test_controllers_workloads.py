"""StatefulSet, DaemonSet, Job, CronJob and TTL-after-finished controllers in a real
controller-manager process, with the real scheduler binding pods and a hollow kubelet running
them (tests/integration/cluster.py); Job pods are scripted to exit with a code.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from services.api.meta import parse_time
from services.client import AlreadyExists, Client, ClientConfig, NotFound, gvr
from tests.conftest import Kubectl
from tests.integration import cluster as plane
from tests.integration.cluster import NODE_NAMES, Cluster, PodLog, Proc, eventually, script

cluster = plane.cluster
kubectl = plane.kubectl
unique_ns = plane.unique_ns

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
PVCS = gvr("v1", "persistentvolumeclaims")
PVS = gvr("v1", "persistentvolumes", namespaced=False)
STORAGE_CLASSES = gvr("storage.k8s.io/v1", "storageclasses", namespaced=False)
EVENTS = gvr("v1", "events")
STS = gvr("apps/v1", "statefulsets")
DS = gvr("apps/v1", "daemonsets")
REVISIONS = gvr("apps/v1", "controllerrevisions")
JOBS = gvr("batch/v1", "jobs")
CRONJOBS = gvr("batch/v1", "cronjobs")

POOL = plane.POOL[1]
STORAGE_CLASS = "hollow-static"
#: the CronJob controller's clock runs this much faster, so "* * * * *" fires every two seconds
CLOCK_SPEED = 30


@pytest.fixture(scope="module")
def workload_manager(cluster: Cluster) -> Iterator[Proc]:
    cm = cluster.controller_manager(
        "cm-workloads",
        "--leader-elect=false",
        "--controllers=statefulset,daemonset,job,cronjob,ttl-after-finished,garbagecollector,persistentvolume-binder",
        "--cronjob-clock-speed",
        str(CLOCK_SPEED),
    )
    yield cm
    cm.stop()
    print(cm.log_tail(80))  # shown by pytest when a test of this module failed


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=cluster.url)) as c:
        yield c


@pytest.fixture
def kubelet(cluster: Cluster, workload_manager: Proc) -> Proc:
    """The hollow kubelet running the cluster's nodes, with this module's controller-manager up."""
    return cluster.kubelet


async def reasons(client: Client, ns: str, name: str) -> list[str]:
    items = (await client.list(EVENTS, ns))["items"]
    return [e["reason"] for e in items if e["involvedObject"].get("name") == name]


def container(image: str = "nginx:1.25", **extra: Any) -> dict[str, Any]:
    return {"name": "c", "image": image, **extra}


# -- StatefulSet -------------------------------------------------------------------------------------


def statefulset(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": f"{name}-svc",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container()], "terminationGracePeriodSeconds": 0},
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": STORAGE_CLASS,
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
            **spec,
        },
    }


async def static_volumes(client: Client, prefix: str, count: int) -> None:
    """Available PersistentVolumes of a WaitForFirstConsumer class with no provisioner: the scheduler
    binds a claim to one when it places the claim's pod, as for upstream's local volumes."""
    with contextlib.suppress(AlreadyExists):
        await client.create(STORAGE_CLASSES, {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": STORAGE_CLASS},
            "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"})
    for i in range(count):
        await client.create(PVS, {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{prefix}-{i}"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": STORAGE_CLASS, "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": f"/srv/{prefix}-{i}"}}})


async def sts_status(client: Client, ns: str, name: str) -> dict[str, Any]:
    return (await client.get(STS, name, ns)).get("status") or {}


async def test_statefulset_scales_in_order_and_keeps_claims(
    client: Client, kubelet: Proc, kubectl: Kubectl, unique_ns: str
) -> None:
    ns = unique_ns
    await static_volumes(client, ns, 5)
    async with PodLog(client, ns) as log:
        await client.create(STS, statefulset("web", 3), ns)

        async def ready(n: int) -> bool:
            st = await sts_status(client, ns, "web")
            return st.get("readyReplicas") == n and st.get("replicas") == n

        await eventually(lambda: ready(3), what="3 ready replicas")
        assert log.created == ["web-0", "web-1", "web-2"]
        # OrderedReady: each pod was created only after its predecessor was Running and Ready.
        assert log.max_active <= 3

        pod = await client.get(PODS, "web-1", ns)
        labels = pod["metadata"]["labels"]
        assert labels["statefulset.kubernetes.io/pod-name"] == "web-1"
        assert labels["apps.kubernetes.io/pod-index"] == "1"
        assert pod["spec"]["hostname"] == "web-1" and pod["spec"]["subdomain"] == "web-svc"
        assert {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}} in pod["spec"][
            "volumes"
        ]
        st = await sts_status(client, ns, "web")
        assert labels["controller-revision-hash"] == st["updateRevision"] == st["currentRevision"]
        assert (st["currentReplicas"], st["updatedReplicas"], st["availableReplicas"]) == (3, 3, 3)
        assert st["observedGeneration"] == 1
        revisions = (await client.list(REVISIONS, ns))["items"]
        assert [r["metadata"]["name"] for r in revisions] == [st["updateRevision"]]
        assert revisions[0]["revision"] == 1

        await client.patch_scale(STS, "web", {"spec": {"replicas": 5}}, ns)
        await eventually(lambda: ready(5), what="5 ready replicas")
        assert log.created == ["web-0", "web-1", "web-2", "web-3", "web-4"]

        await client.patch_scale(STS, "web", {"spec": {"replicas": 2}}, ns)
        await eventually(lambda: ready(2), what="scaled down to 2")
        assert log.deleted == ["web-4", "web-3", "web-2"]

    claims = sorted(c["metadata"]["name"] for c in (await client.list(PVCS, ns))["items"])
    assert claims == [f"data-web-{i}" for i in range(5)]
    assert "SuccessfulCreate" in await reasons(client, ns, "web")

    # A rolling update replaces pods from the highest ordinal down, and kubectl sees it finish.
    kubectl.run("set", "image", "statefulset/web", "c=nginx:1.26", "-n", ns)
    out = await asyncio.to_thread(
        kubectl.run, "rollout", "status", "statefulset/web", "-n", ns, "--timeout=60s", timeout=90
    )
    assert "roll out complete" in out.stdout, out.stdout
    st = await sts_status(client, ns, "web")
    assert st["currentRevision"] == st["updateRevision"] and st["updatedReplicas"] == 2
    for i in range(2):
        pod = await client.get(PODS, f"web-{i}", ns)
        assert pod["spec"]["containers"][0]["image"] == "nginx:1.26"
    assert len((await client.list(REVISIONS, ns))["items"]) == 2


async def test_statefulset_partition_and_parallel(
    client: Client, kubelet: Proc, unique_ns: str
) -> None:
    ns = unique_ns
    body = statefulset(
        "par",
        4,
        podManagementPolicy="Parallel",
        updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
    )
    del body["spec"]["volumeClaimTemplates"]
    await client.create(STS, body, ns)

    async def all_ready() -> bool:
        st = await sts_status(client, ns, "par")
        return st.get("readyReplicas") == 4

    await eventually(all_ready, what="parallel statefulset ready")
    await client.patch(
        STS, "par", {"spec": {"template": {"spec": {"containers": [container("nginx:2")]}}}}, ns
    )

    async def partitioned() -> Any:
        st = await sts_status(client, ns, "par")
        if st.get("updatedReplicas") == 2 and st.get("readyReplicas") == 4:
            return st
        return None

    st = await eventually(partitioned, what="pods at or above the partition updated")
    images = {i: (await client.get(PODS, f"par-{i}", ns))["spec"]["containers"][0]["image"] for i in range(4)}
    assert images == {0: "nginx:1.25", 1: "nginx:1.25", 2: "nginx:2", 3: "nginx:2"}
    assert st["currentRevision"] != st["updateRevision"]


async def test_statefulset_waits_for_ready_and_deletes_claims_when_scaled(
    client: Client, kubelet: Proc, unique_ns: str
) -> None:
    ns = unique_ns
    await static_volumes(client, ns, 3)
    body = statefulset("db", 3, persistentVolumeClaimRetentionPolicy={"whenDeleted": "Retain", "whenScaled": "Delete"})
    # Each pod runs for three seconds before its readiness probe first passes.
    body["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {
        "exec": {"command": ["true"]}, "initialDelaySeconds": 3, "periodSeconds": 1}
    await client.create(STS, body, ns)
    waits = 0

    async def ready() -> bool:
        nonlocal waits
        items = (await client.list(PODS, ns, label_selector="app=db"))["items"]
        pods = {p["metadata"]["name"]: p for p in items}
        for i in range(1, 3):
            if f"db-{i}" in pods:
                assert _is_ready(pods.get(f"db-{i - 1}")), f"OrderedReady created db-{i} before db-{i - 1} was Ready"
        last = pods.get(f"db-{len(pods) - 1}")
        waits += bool(last and last["status"].get("phase") == "Running" and not _is_ready(last))
        return (await sts_status(client, ns, "db")).get("readyReplicas") == 3

    await eventually(ready, within=60, what="3 ready replicas")
    assert waits, "never saw the controller wait on a Running pod that was not Ready yet"
    await client.patch_scale(STS, "db", {"spec": {"replicas": 1}}, ns)

    async def claims() -> list[str]:
        items = (await client.list(PVCS, ns))["items"]
        return sorted(c["metadata"]["name"] for c in items if not c["metadata"].get("deletionTimestamp"))

    async def scaled_claims_gone() -> bool:
        return await claims() == ["data-db-0"]

    await eventually(scaled_claims_gone, what="claims of removed ordinals deleted with their pods")


def _is_ready(pod: dict[str, Any] | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


# -- DaemonSet -------------------------------------------------------------------------------------------


def daemonset(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [container()],
                    "nodeSelector": {"pool": POOL},
                    "terminationGracePeriodSeconds": 0,
                },
            },
            **spec,
        },
    }


async def ds_pods(client: Client, ns: str, name: str) -> list[dict[str, Any]]:
    items = (await client.list(PODS, ns, label_selector=f"app={name}"))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


async def test_daemonset_one_pod_per_node_and_new_nodes(
    client: Client, cluster: Cluster, kubelet: Proc, kubectl: Kubectl, unique_ns: str
) -> None:
    ns = unique_ns
    await client.create(DS, daemonset("agent"), ns)
    out = await asyncio.to_thread(
        kubectl.run, "rollout", "status", "daemonset/agent", "-n", ns, "--timeout=60s", timeout=90
    )
    assert "successfully rolled out" in out.stdout, out.stdout
    pods = await ds_pods(client, ns, "agent")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(NODE_NAMES)
    pod = pods[0]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pod["spec"]["nodeName"]]}]}
        ]
    }
    tolerated = {(t["key"], t["effect"]) for t in pod["spec"]["tolerations"]}
    assert ("node.kubernetes.io/unschedulable", "NoSchedule") in tolerated
    assert ("node.kubernetes.io/not-ready", "NoExecute") in tolerated
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") not in tolerated

    # A kubelet joins with three matching nodes: a new one gets a pod; a tainted one does not; a cordoned
    # one does (tolerated). The last two exist, with their spec, before their kubelet adopts them.
    joined = [f"joined-{i}" for i in range(3)]
    specs = {
        joined[1]: {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]},
        joined[2]: {"taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
                    "unschedulable": True},
    }
    for name, spec in specs.items():
        await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "spec": spec,
                                    "metadata": {"name": name, "labels": {"pool": POOL}}})
    extra = cluster.hollow_kubelet("joined", 3, "--node-labels", f"pool={POOL}")
    try:
        await _daemonset_follows_nodes(client, kubectl, ns, joined)
    finally:
        extra.stop()
        for name in joined:
            try:
                await client.delete(NODES, name)
            except NotFound:
                pass


async def _daemonset_follows_nodes(client: Client, kubectl: Kubectl, ns: str, joined: list[str]) -> None:
    async def spread() -> Any:
        ds = await client.get(DS, "agent", ns)
        st = ds.get("status") or {}
        nodes = sorted(p["spec"].get("nodeName") or "" for p in await ds_pods(client, ns, "agent"))
        want = sorted([*NODE_NAMES, joined[0], joined[2]])
        if nodes == want and st.get("numberReady") == 5:
            return st
        spread.last = (nodes, st)  # type: ignore[attr-defined]
        return None

    try:
        st = await eventually(spread, within=40, what="daemon pods on the new nodes")
    except AssertionError:
        raise AssertionError(spread.last) from None  # type: ignore[attr-defined]
    assert (
        st["desiredNumberScheduled"],
        st["currentNumberScheduled"],
        st["numberMisscheduled"],
        st["numberAvailable"],
        st["updatedNumberScheduled"],
    ) == (5, 5, 0, 5, 5)

    kubectl.run("set", "image", "daemonset/agent", "c=nginx:1.26", "-n", ns)
    out = await asyncio.to_thread(
        kubectl.run, "rollout", "status", "daemonset/agent", "-n", ns, "--timeout=60s", timeout=90
    )
    assert "successfully rolled out" in out.stdout
    pods = await ds_pods(client, ns, "agent")
    assert len(pods) == 5 and {p["spec"]["containers"][0]["image"] for p in pods} == {"nginx:1.26"}
    assert len((await client.list(REVISIONS, ns))["items"]) == 2

    # A node that stops matching the selector loses its pod.
    await client.patch(NODES, joined[0], {"metadata": {"labels": {"pool": "elsewhere"}}})
    await eventually(lambda: _count_is(client, ns, "agent", 4), what="pod removed from the relabelled node")


async def _count_is(client: Client, ns: str, name: str, n: int) -> bool:
    return len(await ds_pods(client, ns, name)) == n


# -- Job ----------------------------------------------------------------------------------------------


def job(name: str, *, exit_code: int = 0, **spec: Any) -> dict[str, Any]:
    """A Job whose container runs for half a second on the hollow node, then exits with `exit_code`."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"annotations": script("c", f"exit={exit_code},after=0.5")},
                "spec": {
                    "containers": [container("busybox")],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                },
            },
            **spec,
        },
    }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind and cond["status"] == "True":
            return cond
    return None


async def finished(client: Client, ns: str, name: str, kind: str = "Complete") -> dict[str, Any] | None:
    obj = await client.get(JOBS, name, ns)
    return obj if condition(obj, kind) else None


async def test_job_runs_to_completion_with_parallelism(
    client: Client, kubelet: Proc, kubectl: Kubectl, unique_ns: str
) -> None:
    ns = unique_ns
    async with PodLog(client, ns) as log:
        await client.create(JOBS, job("batch", completions=6, parallelism=3), ns)
        done = await eventually(lambda: finished(client, ns, "batch"), what="job complete")
    st = done["status"]
    assert st["succeeded"] == 6 and st.get("failed", 0) == 0 and st.get("active", 0) == 0
    assert st["startTime"] and st["completionTime"]
    assert condition(done, "SuccessCriteriaMet")["reason"] == "CompletionsReached"
    assert condition(done, "Complete")["reason"] == "CompletionsReached"
    assert len(log.created) == 6
    assert log.max_active <= 3
    pods = (await client.list(PODS, ns))["items"]
    assert all(
        "batch.kubernetes.io/job-tracking" not in (p["metadata"].get("finalizers") or []) for p in pods
    )
    out = kubectl.run("wait", "--for=condition=complete", "job/batch", "-n", ns, "--timeout=10s")
    assert "condition met" in out.stdout
    assert "Completed" in await reasons(client, ns, "batch")


async def test_indexed_job(client: Client, kubelet: Proc, unique_ns: str) -> None:
    ns = unique_ns
    await client.create(JOBS, job("idx", completions=3, parallelism=3, completionMode="Indexed"), ns)
    done = await eventually(lambda: finished(client, ns, "idx"), what="indexed job complete")
    assert done["status"]["completedIndexes"] == "0-2"
    assert done["status"]["succeeded"] == 3
    pods = (await client.list(PODS, ns))["items"]
    by_index = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in pods}
    assert sorted(by_index) == ["0", "1", "2"]
    pod = by_index["2"]
    assert pod["spec"]["hostname"] == "idx-2"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "2"
    assert pod["metadata"]["generateName"] == "idx-2-"
    env = pod["spec"]["containers"][0]["env"]
    assert {
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {
            "fieldRef": {
                "apiVersion": "v1",
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
            }
        },
    } in env


async def test_failing_job_backs_off_then_hits_backoff_limit(
    client: Client, kubelet: Proc, unique_ns: str
) -> None:
    ns = unique_ns
    async with PodLog(client, ns) as log:
        await client.create(JOBS, job("boom", exit_code=1, backoffLimit=1), ns)
        done = await eventually(lambda: finished(client, ns, "boom", "Failed"), within=60, what="job failed")
    assert condition(done, "Failed")["reason"] == "BackoffLimitExceeded"
    assert condition(done, "FailureTarget")["message"] == "Job has reached the specified backoff limit"
    assert done["status"]["failed"] == 2 and done["status"].get("succeeded", 0) == 0
    assert len(log.created) == 2
    pods = sorted((await client.list(PODS, ns))["items"], key=lambda p: p["metadata"]["creationTimestamp"])
    first_end = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    gap = (parse_time(pods[1]["metadata"]["creationTimestamp"]) - parse_time(first_end)).total_seconds()
    assert gap >= 9, f"second pod started {gap}s after the first failure; backoff is 10s"
    assert "BackoffLimitExceeded" in await reasons(client, ns, "boom")


async def test_pod_failure_policy_fails_job_at_once(
    client: Client, kubelet: Proc, unique_ns: str
) -> None:
    ns = unique_ns
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    await client.create(JOBS, job("pfp", exit_code=42, backoffLimit=6, podFailurePolicy=policy), ns)
    done = await eventually(lambda: finished(client, ns, "pfp", "Failed"), what="job failed by policy")
    cond = condition(done, "Failed")
    assert cond["reason"] == "PodFailurePolicy"
    assert "failed with exit code 42 matching FailJob rule at index 0" in cond["message"]
    assert done["status"]["failed"] == 1


async def test_suspended_job_and_ttl(client: Client, kubelet: Proc, unique_ns: str) -> None:
    ns = unique_ns
    await client.create(JOBS, job("later", suspend=True, ttlSecondsAfterFinished=3), ns)

    async def suspended() -> Any:
        obj = await client.get(JOBS, "later", ns)
        return condition(obj, "Suspended")

    cond = await eventually(suspended, what="Suspended condition")
    assert cond["reason"] == "JobSuspended"
    assert not (await client.list(PODS, ns))["items"]
    assert "startTime" not in (await client.get(JOBS, "later", ns))["status"]
    await client.patch(JOBS, "later", {"spec": {"suspend": False}}, ns)
    done = await eventually(lambda: finished(client, ns, "later"), what="resumed job complete")
    resumed = next(c for c in done["status"]["conditions"] if c["type"] == "Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "JobResumed")
    assert (await client.list(PODS, ns))["items"]

    async def gone() -> bool:
        return not (await client.list(JOBS, ns))["items"] and not (await client.list(PODS, ns))["items"]

    await eventually(gone, within=30, what="job and its pods deleted after the TTL")


def endless_job(name: str, parallelism: int) -> dict[str, Any]:
    """A Job whose pods run until they are deleted."""
    obj = job(name, parallelism=parallelism, completions=parallelism)
    del obj["spec"]["template"]["metadata"]["annotations"]
    return obj


async def running_job_pods(client: Client, ns: str, name: str, count: int) -> list[dict[str, Any]] | None:
    pods = [p for p in (await client.list(PODS, ns, label_selector={"job-name": name}))["items"]
            if (p.get("status") or {}).get("phase") == "Running"]
    return pods if len(pods) == count else None


async def test_deleting_a_job_in_the_background_deletes_its_pods(
    client: Client, cluster: Cluster, kubelet: Proc, kubectl: Kubectl, unique_ns: str
) -> None:
    ns = unique_ns
    for name in ("by-kubectl", "by-api", "kept"):
        await client.create(JOBS, endless_job(name, 2), ns)
    for name in ("by-kubectl", "by-api", "kept"):
        pods = await eventually(lambda n=name: running_job_pods(client, ns, n, 2), what=f"{name} pods running")
        for pod in pods:
            ref = pod["metadata"]["ownerReferences"][0]
            assert (ref["kind"], ref["name"], ref["controller"], ref["blockOwnerDeletion"]) == ("Job", name, True, True)
    kubectl.run("delete", "job", "by-kubectl", "-n", ns)  # kubectl's default cascade is background
    await client.delete(JOBS, "by-api", ns, propagation_policy="Background")
    for name in ("by-kubectl", "by-api"):
        async def pods_gone(n: str = name) -> bool:
            return not (await client.list(PODS, ns, label_selector={"job-name": n}))["items"]

        await eventually(pods_gone, within=30, what=f"the pods of {name} deleted with it")
    # batch/v1 without a policy orphans, as upstream, and says so in a warning
    async with httpx.AsyncClient(base_url=cluster.url) as raw:
        answer = await raw.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/kept")
    assert answer.status_code == 200
    assert "child pods are preserved by default when jobs are deleted" in answer.headers["warning"]

    async def released() -> list[dict[str, Any]] | None:
        with contextlib.suppress(NotFound):
            await client.get(JOBS, "kept", ns)
            return None
        pods = await running_job_pods(client, ns, "kept", 2)
        if pods and all(not p["metadata"].get("ownerReferences") and "batch.kubernetes.io/job-tracking"
                        not in (p["metadata"].get("finalizers") or []) for p in pods):
            return pods
        return None

    await eventually(released, within=30, what="the kept job's pods orphaned, running, without its finalizer")


async def test_job_adopts_matching_orphans_and_releases_pods_that_stop_matching(
    client: Client, kubelet: Proc, unique_ns: str
) -> None:
    ns = unique_ns
    await client.create(JOBS, endless_job("adopter", 2), ns)
    pods = await eventually(lambda: running_job_pods(client, ns, "adopter", 2), what="job pods running")
    uid = (await client.get(JOBS, "adopter", ns))["metadata"]["uid"]
    orphan = pods[0]["metadata"]["name"]
    await client.patch(PODS, orphan, [{"op": "remove", "path": "/metadata/ownerReferences"}], ns, patch_type="json")

    async def adopted() -> bool:
        pod = await client.get(PODS, orphan, ns)
        refs = pod["metadata"].get("ownerReferences") or []
        return [(r["uid"], r.get("controller"), r.get("blockOwnerDeletion")) for r in refs] == [(uid, True, True)]

    await eventually(adopted, within=30, what="the orphaned pod adopted again")
    stray = pods[1]["metadata"]["name"]
    await client.patch(PODS, stray, [{"op": "replace", "path": "/metadata/labels", "value": {}}], ns,
                       patch_type="json")

    async def released() -> bool:
        meta = (await client.get(PODS, stray, ns))["metadata"]
        tracked = "batch.kubernetes.io/job-tracking" in (meta.get("finalizers") or [])
        return not meta.get("ownerReferences") and not tracked

    await eventually(released, within=30, what="the pod that stopped matching released")
    # the job replaces the released pod to keep two running
    await eventually(lambda: running_job_pods(client, ns, "adopter", 2), within=30, what="a replacement pod")


# -- CronJob ------------------------------------------------------------------------------------------


async def test_cronjob_fires_and_keeps_history(
    client: Client, kubelet: Proc, unique_ns: str
) -> None:
    ns = unique_ns
    body = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "tick"},
        "spec": {
            "schedule": "* * * * *",
            "successfulJobsHistoryLimit": 2,
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": job("x")["spec"]},
        },
    }
    await client.create(CRONJOBS, body, ns)
    seen: set[str] = set()

    async def fired_enough() -> bool:
        for j in (await client.list(JOBS, ns))["items"]:
            seen.add(j["metadata"]["name"])
        return len(seen) >= 4

    await eventually(fired_enough, within=60, what="four scheduled jobs")
    assert all(name.startswith("tick-") and name[5:].isdigit() for name in seen)

    async def pruned() -> Any:
        jobs = (await client.list(JOBS, ns))["items"]
        succeeded = [
            j for j in jobs if condition(j, "Complete") and not j["metadata"].get("deletionTimestamp")
        ]
        cj = await client.get(CRONJOBS, "tick", ns)
        if len(succeeded) <= 2 and (cj.get("status") or {}).get("lastSuccessfulTime"):
            return cj
        return None

    cj = await eventually(pruned, what="history limited to two successful jobs")
    assert cj["status"]["lastScheduleTime"]
    got = await reasons(client, ns, "tick")
    assert "SuccessfulCreate" in got and "SawCompletedJob" in got and "SuccessfulDelete" in got
    job_obj = (await client.list(JOBS, ns))["items"][0]
    assert job_obj["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    assert "batch.kubernetes.io/cronjob-scheduled-timestamp" in job_obj["metadata"]["annotations"]

    await client.patch(CRONJOBS, "tick", {"spec": {"suspend": True}}, ns)
    await asyncio.sleep(1)
    before = {j["metadata"]["name"] for j in (await client.list(JOBS, ns))["items"]}
    await asyncio.sleep(5)
    after = {j["metadata"]["name"] for j in (await client.list(JOBS, ns))["items"]}
    assert after <= before, "a suspended cronjob started jobs"
