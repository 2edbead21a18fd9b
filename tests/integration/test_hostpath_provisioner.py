"""Claims that "just work", as on kind: DefaultStorageClass admission, the PersistentVolume
controller's retroactive default class, and pyk8s-hostpath-provisioner serving a WaitForFirstConsumer
class, on the test control plane (real etcd, apiserver, scheduler and hollow kubelet;
tests/integration/cluster.py) with a controller-manager running only the storage controllers.

The hollow kubelet mounts nothing, so volumes are checked as API objects; the helper pod that deletes
a volume's directory runs (and exits 0) on the hollow node the volume lives on.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from services.client import Client, ClientConfig, NotFound, gvr
from tests.integration import cluster as plane
from tests.integration.cluster import Cluster, Proc, eventually

cluster = plane.cluster
unique_ns = plane.unique_ns

PVS = gvr("v1", "persistentvolumes", namespaced=False)
PVCS = gvr("v1", "persistentvolumeclaims")
PODS = gvr("v1", "pods")
EVENTS = gvr("v1", "events")
CLASSES = gvr("storage.k8s.io/v1", "storageclasses", namespaced=False)
DEFAULT = "storageclass.kubernetes.io/is-default-class"


@pytest.fixture(scope="module")
def controller_manager(cluster: Cluster) -> Iterator[Proc]:
    cm = cluster.controller_manager(
        "cm-hostpath", "--leader-elect=false", "--pvclaimbinder-sync-period", "2",
        "--controllers", "persistentvolume-binder,pvc-protection,pv-protection,pyk8s-hostpath-provisioner")
    yield cm
    cm.stop()
    print(cm.log_tail(80))  # shown by pytest when a test of this module failed


@pytest.fixture
async def client(cluster: Cluster, controller_manager: Proc) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=cluster.url)) as c:
        yield c
    assert controller_manager.proc.poll() is None, "the controller-manager died during the test"


@pytest.fixture
async def classes(client: Client) -> AsyncIterator[list[str]]:
    """Names of the StorageClasses a test creates: a default class left behind would change the
    claims of every later test on this control plane."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            await client.delete(CLASSES, name)
        except NotFound:
            pass
        await eventually(lambda name=name: in_watch_cache(client, name, False), what=f"{name} gone from the cache")


async def in_watch_cache(client: Client, name: str, present: bool = True) -> bool:
    """Whether the apiserver's watch cache, which DefaultStorageClass admission reads, shows the class as
    `present` (a GET at resourceVersion 0 is answered from it)."""
    try:
        await client.get(CLASSES, name, resource_version="0")
    except NotFound:
        return not present
    return present


async def make_class(client: Client, classes: list[str], default: bool = True) -> str:
    name = f"hostpath-{uuid.uuid4().hex[:6]}"
    classes.append(name)
    await client.create(CLASSES, {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name, "annotations": {DEFAULT: "true"} if default else {}},
        "provisioner": "pyk8s.io/hostpath", "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete",
        "parameters": {"path": "/tmp/pyk8s-it-hostpath"}})
    # admission defaults a claim from the watch cache, as upstream's from its informer: wait until it has it
    await eventually(lambda: in_watch_cache(client, name), what=f"{name} in the cache")
    return name


async def make_claim(client: Client, ns: str, name: str = "data") -> dict[str, Any]:
    return await client.create(PVCS, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}, ns)


async def test_claim_without_class_is_provisioned_for_its_pod_and_deleted_with_it(
        client: Client, classes: list[str], unique_ns: str) -> None:
    sc = await make_class(client, classes)
    pvc = await make_claim(client, unique_ns)
    assert pvc["spec"]["storageClassName"] == sc
    await client.create(PODS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"},
        "spec": {"terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}, unique_ns)

    async def running() -> dict[str, Any] | None:
        pod = await client.get(PODS, "user", unique_ns)
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None

    pod = await eventually(running, what="pod Running")
    node = pod["spec"]["nodeName"]
    pvc = await client.get(PVCS, "data", unique_ns)
    pv_name = f"pvc-{pvc['metadata']['uid']}"
    assert pvc["status"]["phase"] == "Bound" and pvc["spec"]["volumeName"] == pv_name
    assert pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == node
    pv = await client.get(PVS, pv_name)
    assert pv["status"]["phase"] == "Bound"
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "pyk8s.io/hostpath"
    assert pv["spec"]["hostPath"] == {"path": f"/tmp/pyk8s-it-hostpath/{pv_name}", "type": "DirectoryOrCreate"}
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [node]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete" and pv["spec"]["storageClassName"] == sc
    reasons = {e["reason"] for e in (await client.list(EVENTS, unique_ns))["items"]
               if e["involvedObject"]["name"] == "data"}
    assert {"Provisioning", "ProvisioningSucceeded"} <= reasons, reasons

    await client.delete(PODS, "user", unique_ns, grace_period_seconds=0)
    await client.delete(PVCS, "data", unique_ns)
    helper = f"helper-pod-delete-{pv_name}"
    seen: list[dict[str, Any]] = []

    async def volume_gone() -> bool:
        try:
            seen.append(await client.get(PODS, helper, "kube-system"))
        except NotFound:
            pass
        try:
            await client.get(PVS, pv_name)
        except NotFound:
            return True
        return False

    await eventually(volume_gone, within=60, what=f"volume {pv_name} deleted")
    assert seen, "the helper pod was never seen"
    assert {p["spec"]["nodeName"] for p in seen} == {node}
    assert seen[0]["spec"]["containers"][0]["command"] == ["rm", "-rf", f"/pyk8s-storage/{pv_name}"]
    with pytest.raises(NotFound):
        await client.get(PODS, helper, "kube-system")


async def test_default_class_is_assigned_retroactively(client: Client, classes: list[str], unique_ns: str) -> None:
    for existing in (await client.list(CLASSES))["items"]:
        assert (existing["metadata"].get("annotations") or {}).get(DEFAULT) != "true", "a default class is left"
    await make_claim(client, unique_ns, "early")
    empty = await client.create(PVCS, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "none"},
        "spec": {"storageClassName": "", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}}, unique_ns)
    assert "storageClassName" not in (await client.get(PVCS, "early", unique_ns))["spec"]
    sc = await make_class(client, classes)

    async def assigned() -> bool:
        return bool((await client.get(PVCS, "early", unique_ns))["spec"].get("storageClassName") == sc)

    await eventually(assigned, within=20, what="default class assigned")
    assert (await client.get(PVCS, "none", unique_ns))["spec"]["storageClassName"] == ""
    assert empty["spec"]["storageClassName"] == ""
