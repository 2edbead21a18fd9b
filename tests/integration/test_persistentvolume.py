"""The PersistentVolume controller and the PVC/PV protection controllers in a real
controller-manager process against the session's etcd and apiserver, checked with real kubectl.

Pods that use claims are created already bound to a node (no scheduler or kubelet is needed to
hold a claim), and deleted with a zero grace period.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.client import Client, ClientConfig, NotFound, gvr
from tests.conftest import Kubectl
from tests.integration.cluster import Proc, eventually

PVS = gvr("v1", "persistentvolumes", namespaced=False)
PVCS = gvr("v1", "persistentvolumeclaims")
PODS = gvr("v1", "pods")
EVENTS = gvr("v1", "events")
CLASSES = gvr("storage.k8s.io/v1", "storageclasses", namespaced=False)

BINDING_SECONDS = 10


@pytest.fixture(scope="module")
def controller_manager(apiserver: str, workdir: Path) -> Iterator[Proc]:
    cm = Proc([sys.executable, "-m", "controller_manager", "--master", apiserver, "--secure-port", "0",
               "--leader-elect=false", "--log-format", "console",
               "--controllers", "persistentvolume-binder,pvc-protection,pv-protection"],
              workdir / "cm-persistentvolume.log")
    _wait_until_binding(apiserver)
    yield cm
    cm.stop()
    print(cm.log_tail(80))  # shown by pytest when a test of this module failed


def _wait_until_binding(apiserver: str, within: float = 90.0) -> None:
    """Hold the module until the new controller-manager binds a probe claim, so BINDING_SECONDS times
    binding alone (a claim bound within it was bound by an event, not the 15 s resync) and not the
    process's start, which on a loaded machine can take longer."""
    name = f"cm-probe-{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=apiserver, timeout=10.0) as api:
        api.post("/api/v1/namespaces", json={"metadata": {"name": name}}).raise_for_status()
        api.post("/api/v1/persistentvolumes", json={"metadata": {"name": name}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{name}"}}}).raise_for_status()
        api.post(f"/api/v1/namespaces/{name}/persistentvolumeclaims", json={"metadata": {"name": name}, "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}}}}).raise_for_status()
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            claim = api.get(f"/api/v1/namespaces/{name}/persistentvolumeclaims/{name}").json()
            if (claim.get("status") or {}).get("phase") == "Bound":
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the controller-manager bound no claim within {within} s")
        api.delete(f"/api/v1/namespaces/{name}/persistentvolumeclaims/{name}")
        api.delete(f"/api/v1/persistentvolumes/{name}")
        api.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
async def client(apiserver: str, controller_manager: Proc) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=apiserver)) as c:
        yield c
    assert controller_manager.proc.poll() is None, "the controller-manager died during the test"


@pytest.fixture(autouse=True)
async def claims_removed(client: Client, unique_ns: str) -> AsyncIterator[None]:
    """A test's claims go with it: a claim left unbound would be a fair match for the next test's volume."""
    yield
    for claim in (await client.list(PVCS, unique_ns))["items"]:
        try:
            await client.delete(PVCS, claim["metadata"]["name"], unique_ns)
        except NotFound:
            pass


@pytest.fixture
async def volumes(client: Client) -> AsyncIterator[list[str]]:
    """Names of the PVs a test creates (PVs are cluster-wide); removed afterwards, finalizer and all."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            await client.delete(PVS, name)
            await client.patch(PVS, name, {"metadata": {"finalizers": None}})
        except NotFound:
            pass


def tag() -> str:
    return uuid.uuid4().hex[:6]


async def make_pv(client: Client, volumes: list[str], name: str, size: str, *, modes: tuple[str, ...] = (
        "ReadWriteOnce",), sc: str = "", labels: dict[str, str] | None = None, policy: str = "Retain",
        claim_ref: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": list(modes),
                            "persistentVolumeReclaimPolicy": policy, "hostPath": {"path": f"/tmp/{name}"}}
    if sc:
        spec["storageClassName"] = sc
    if claim_ref:
        spec["claimRef"] = claim_ref
    volumes.append(name)
    return await client.create(PVS, {"apiVersion": "v1", "kind": "PersistentVolume",
                                      "metadata": {"name": name, "labels": labels or {}}, "spec": spec})


async def make_pvc(client: Client, ns: str, name: str, size: str, *, modes: tuple[str, ...] = ("ReadWriteOnce",),
                   **spec: Any) -> dict[str, Any]:
    return await client.create(PVCS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                      "metadata": {"name": name},
                                      "spec": {"accessModes": list(modes),
                                               "resources": {"requests": {"storage": size}}, **spec}}, ns)


async def wait_bound(client: Client, ns: str, claim: str) -> dict[str, Any]:
    async def bound() -> dict[str, Any] | None:
        pvc = await client.get(PVCS, claim, ns)
        return pvc if (pvc.get("status") or {}).get("phase") == "Bound" else None

    return await eventually(bound, within=BINDING_SECONDS, what=f"claim {claim} Bound")  # type: ignore[no-any-return]


async def events_for(client: Client, ns: str, name: str) -> list[dict[str, Any]]:
    items = (await client.list(EVENTS, ns))["items"]
    return [e for e in items if e["involvedObject"].get("name") == name]


def columns(kubectl: Kubectl, *args: str) -> list[dict[str, str]]:
    """`kubectl get` output as one dict per row, keyed by the header (cut where each header starts,
    as headers like ACCESS MODES hold a space)."""
    lines = kubectl.run("get", *args).stdout.splitlines()
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=\s\s))\S", lines[0])]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [lines[0][a:b].strip() for a, b in bounds]
    return [{n: line[a:b].strip() for n, (a, b) in zip(names, bounds, strict=True)} for line in lines[1:]]


async def test_claim_without_class_binds_to_a_host_path_volume(
        client: Client, kubectl: Kubectl, unique_ns: str, volumes: list[str]) -> None:
    pv_name = f"pv-plain-{tag()}"
    await make_pv(client, volumes, pv_name, "5Gi")
    await make_pvc(client, unique_ns, "data", "1Gi")
    pvc = await wait_bound(client, unique_ns, "data")

    assert pvc["spec"]["volumeName"] == pv_name
    ann = pvc["metadata"]["annotations"]
    assert ann["pv.kubernetes.io/bind-completed"] == "yes"
    assert ann["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert pvc["status"]["capacity"] == {"storage": "5Gi"}
    assert pvc["status"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    pv = await client.get(PVS, pv_name)
    assert pv["status"]["phase"] == "Bound"
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert pv["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]
    ref = pv["spec"]["claimRef"]
    assert (ref["kind"], ref["namespace"], ref["name"], ref["uid"]) == (
        "PersistentVolumeClaim", unique_ns, "data", pvc["metadata"]["uid"])
    assert ref["resourceVersion"]

    (row,) = columns(kubectl, "pv", pv_name)
    assert (row["STATUS"], row["CLAIM"], row["CAPACITY"], row["RECLAIM POLICY"]) == (
        "Bound", f"{unique_ns}/data", "5Gi", "Retain")
    (row,) = columns(kubectl, "pvc", "-n", unique_ns)
    assert (row["NAME"], row["STATUS"], row["VOLUME"], row["CAPACITY"], row["ACCESS MODES"]) == (
        "data", "Bound", pv_name, "5Gi", "RWO")


async def test_smallest_fitting_volume_of_the_class_is_chosen(
        client: Client, unique_ns: str, volumes: list[str]) -> None:
    t = tag()
    sc = f"manual-{t}"
    await client.create(CLASSES, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": sc}, "provisioner": "kubernetes.io/no-provisioner"})
    try:
        for name, size in (("big", "10Gi"), ("small", "1Gi"), ("medium", "3Gi"), ("fits", "2Gi")):
            await make_pv(client, volumes, f"{name}-{t}", size, sc=sc)
        await make_pv(client, volumes, f"other-class-{t}", "2Gi")
        await make_pvc(client, unique_ns, "a", "1500Mi", storageClassName=sc)
        assert (await wait_bound(client, unique_ns, "a"))["spec"]["volumeName"] == f"fits-{t}"
        await make_pvc(client, unique_ns, "b", "1500Mi", storageClassName=sc)
        assert (await wait_bound(client, unique_ns, "b"))["spec"]["volumeName"] == f"medium-{t}"
    finally:
        await client.delete(CLASSES, sc)


async def test_mismatches_stay_pending_with_an_event(client: Client, unique_ns: str, volumes: list[str]) -> None:
    t = tag()
    await make_pv(client, volumes, f"rwo-{t}", "1Gi", labels={"tier": f"gold-{t}"})
    await make_pvc(client, unique_ns, "rwx", "1Gi", modes=("ReadWriteMany",))
    await make_pvc(client, unique_ns, "silver", "1Gi", selector={"matchLabels": {"tier": f"silver-{t}"}})

    async def failed_binding(name: str) -> list[dict[str, Any]]:
        return [e for e in await events_for(client, unique_ns, name) if e["reason"] == "FailedBinding"]

    for name in ("rwx", "silver"):
        (event, *_) = await eventually(lambda n=name: failed_binding(n), within=BINDING_SECONDS,
                                       what=f"FailedBinding on {name}")
        assert event["message"] == "no persistent volumes available for this claim and no storage class is set"
        assert event["type"] == "Normal"
        assert event["source"]["component"] == "persistentvolume-controller"
        pvc = await client.get(PVCS, name, unique_ns)
        assert pvc["status"]["phase"] == "Pending" and not pvc["spec"].get("volumeName")
    assert (await client.get(PVS, f"rwo-{t}"))["status"]["phase"] == "Available"
    # A claim that fits arrives later and takes the volume.
    await make_pvc(client, unique_ns, "gold", "1Gi", selector={"matchLabels": {"tier": f"gold-{t}"}})
    assert (await wait_bound(client, unique_ns, "gold"))["spec"]["volumeName"] == f"rwo-{t}"


async def test_deleted_claim_releases_a_retained_volume(
        client: Client, kubectl: Kubectl, unique_ns: str, volumes: list[str]) -> None:
    t = tag()
    await make_pv(client, volumes, f"keep-{t}", "1Gi")
    await make_pv(client, volumes, f"drop-{t}", "1Gi", policy="Delete", sc=f"delete-{t}")
    await make_pvc(client, unique_ns, "keep", "1Gi")
    await make_pvc(client, unique_ns, "drop", "1Gi", storageClassName=f"delete-{t}")
    await wait_bound(client, unique_ns, "keep")
    await wait_bound(client, unique_ns, "drop")
    kubectl.run("delete", "pvc", "keep", "drop", "-n", unique_ns, "--timeout=20s")

    async def phase(name: str, wanted: str) -> bool:
        return (await client.get(PVS, name)).get("status", {}).get("phase") == wanted

    await eventually(lambda: phase(f"keep-{t}", "Released"), within=BINDING_SECONDS, what="Released")
    (row,) = columns(kubectl, "pv", f"keep-{t}")
    assert (row["STATUS"], row["CLAIM"]) == ("Released", f"{unique_ns}/keep")
    # Delete: pyk8s has no in-tree deleter for a hostPath volume, as upstream without one.
    await eventually(lambda: phase(f"drop-{t}", "Failed"), within=BINDING_SECONDS, what="Failed")
    pv = await client.get(PVS, f"drop-{t}")
    assert pv["status"]["message"] == (f'error getting deleter volume plugin for volume "drop-{t}": '
                                       "no deletable volume plugin matched")
    # A released volume is not offered again, not even to a new claim of the old one's name.
    await make_pvc(client, unique_ns, "keep", "1Gi")
    await make_pvc(client, unique_ns, "again", "1Gi")
    await asyncio.sleep(1)
    for name in ("keep", "again"):
        assert (await client.get(PVCS, name, unique_ns))["status"]["phase"] == "Pending"
    assert await phase(f"keep-{t}", "Released")
    # The protection finalizer goes once the volume is not Bound: deleting it now completes.
    kubectl.run("delete", "pv", f"keep-{t}", "--timeout=20s")


async def test_claim_in_use_by_a_pod_stays_until_the_pod_is_gone(
        client: Client, unique_ns: str, volumes: list[str]) -> None:
    t = tag()
    await make_pv(client, volumes, f"used-{t}", "1Gi")
    await make_pvc(client, unique_ns, "used", "1Gi")
    await wait_bound(client, unique_ns, "used")
    await client.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"}, "spec": {
        "nodeName": "nowhere", "containers": [{"name": "c", "image": "busybox"}],
        "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "used"}}]}}, unique_ns)
    await client.delete(PVCS, "used", unique_ns)
    await asyncio.sleep(2)
    pvc = await client.get(PVCS, "used", unique_ns)
    assert pvc["metadata"]["deletionTimestamp"]
    assert pvc["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    # The bound volume cannot go either while its claim holds it.
    await client.delete(PVS, f"used-{t}")
    pv = await client.get(PVS, f"used-{t}")
    assert pv["metadata"]["deletionTimestamp"] and pv["status"]["phase"] == "Bound"

    await client.delete(PODS, "user", unique_ns, grace_period_seconds=0)

    async def claim_gone() -> bool:
        try:
            await client.get(PVCS, "used", unique_ns)
        except NotFound:
            return True
        return False

    await eventually(claim_gone, within=BINDING_SECONDS, what="claim deleted")

    async def volume_gone() -> bool:
        try:
            await client.get(PVS, f"used-{t}")
        except NotFound:
            return True
        return False

    await eventually(volume_gone, within=BINDING_SECONDS, what="released volume deleted")


async def test_pre_bound_volume_and_claim(client: Client, unique_ns: str, volumes: list[str]) -> None:
    t = tag()
    # A volume reserved for a claim by name is taken by no other claim, and binds when the claim comes.
    await make_pv(client, volumes, f"reserved-{t}", "1Gi", claim_ref={"namespace": unique_ns, "name": "owner"})
    await make_pvc(client, unique_ns, "intruder", "1Gi")
    await make_pvc(client, unique_ns, "owner", "1Gi")
    pvc = await wait_bound(client, unique_ns, "owner")
    assert pvc["spec"]["volumeName"] == f"reserved-{t}"
    assert "pv.kubernetes.io/bound-by-controller" in pvc["metadata"]["annotations"]
    pv = await client.get(PVS, f"reserved-{t}")
    assert pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    assert "pv.kubernetes.io/bound-by-controller" not in (pv["metadata"].get("annotations") or {})
    assert (await client.get(PVCS, "intruder", unique_ns))["status"]["phase"] == "Pending"

    # A claim that names its volume gets it, bigger or not, and nobody else does.
    await make_pv(client, volumes, f"named-{t}", "4Gi")
    await make_pvc(client, unique_ns, "named", "1Gi", volumeName=f"named-{t}")
    pvc = await wait_bound(client, unique_ns, "named")
    assert pvc["status"]["capacity"] == {"storage": "4Gi"}
    assert "pv.kubernetes.io/bound-by-controller" not in pvc["metadata"]["annotations"]
    pv = await client.get(PVS, f"named-{t}")
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"

    # A named volume that does not fit is refused with upstream's event.
    await make_pv(client, volumes, f"tiny-{t}", "100Mi")
    await make_pvc(client, unique_ns, "too-big", "1Gi", volumeName=f"tiny-{t}")

    async def mismatch() -> list[dict[str, Any]]:
        return [e for e in await events_for(client, unique_ns, "too-big") if e["reason"] == "VolumeMismatch"]

    (event, *_) = await eventually(mismatch, within=BINDING_SECONDS, what="VolumeMismatch")
    assert event["message"] == f'Cannot bind to requested volume "tiny-{t}": requested PV is too small'
    assert (await client.get(PVS, f"tiny-{t}"))["status"]["phase"] == "Available"


async def test_claim_naming_a_volume_binds_when_the_volume_comes(
        client: Client, unique_ns: str, volumes: list[str]) -> None:
    # The claim is seen first and waits; the volume's arrival, not the periodic resync, brings it back.
    t = tag()
    await make_pvc(client, unique_ns, "early", "1Gi", volumeName=f"late-{t}")

    await asyncio.sleep(1)  # the claim is born Pending, so nothing shows the controller has seen it: give it time
    await make_pv(client, volumes, f"late-{t}", "1Gi")
    pvc = await wait_bound(client, unique_ns, "early")
    assert pvc["spec"]["volumeName"] == f"late-{t}"


async def test_claim_of_a_class_with_an_external_provisioner_waits_for_it(
        client: Client, unique_ns: str) -> None:
    sc = f"csi-{tag()}"
    await client.create(CLASSES, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": sc}, "provisioner": "csi.example.com"})
    try:
        await make_pvc(client, unique_ns, "dyn", "1Gi", storageClassName=sc)

        async def annotated() -> dict[str, Any] | None:
            pvc = await client.get(PVCS, "dyn", unique_ns)
            ann = pvc["metadata"].get("annotations") or {}
            return pvc if ann.get("volume.kubernetes.io/storage-provisioner") == "csi.example.com" else None

        pvc = await eventually(annotated, within=BINDING_SECONDS, what="provisioner annotation")
        assert pvc["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-provisioner"] == "csi.example.com"
        assert pvc["status"]["phase"] == "Pending"

        async def external() -> list[dict[str, Any]]:
            return [e for e in await events_for(client, unique_ns, "dyn") if e["reason"] == "ExternalProvisioning"]

        (event, *_) = await eventually(external, within=BINDING_SECONDS, what="ExternalProvisioning")
        assert event["message"] == ('waiting for a volume to be created, either by external provisioner '
                                    '"csi.example.com" or manually created by system administrator')
    finally:
        await client.delete(CLASSES, sc)


async def test_claim_whose_volume_disappears_is_lost(client: Client, unique_ns: str, volumes: list[str]) -> None:
    t = tag()
    await make_pv(client, volumes, f"lost-{t}", "1Gi")
    await make_pvc(client, unique_ns, "lost", "1Gi")
    await wait_bound(client, unique_ns, "lost")
    # Removed behind the protection's back: its finalizer is stripped.
    await client.delete(PVS, f"lost-{t}")
    await client.patch(PVS, f"lost-{t}", {"metadata": {"finalizers": None}})

    async def lost() -> bool:
        return (await client.get(PVCS, "lost", unique_ns))["status"]["phase"] == "Lost"

    await eventually(lost, within=BINDING_SECONDS, what="claim Lost")

    async def claim_lost_event() -> bool:
        return any(e["reason"] == "ClaimLost" for e in await events_for(client, unique_ns, "lost"))

    # Events are posted a moment after the status they explain.
    await eventually(claim_lost_event, within=BINDING_SECONDS, what="ClaimLost event")
