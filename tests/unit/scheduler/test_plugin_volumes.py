"""VolumeRestrictions, VolumeZone and VolumeBinding against in-memory PVs, PVCs and StorageClasses."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import Code
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import NodeInfo, PodInfo
from scheduler.plugins.volumebinding import (
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
    VolumeBinding,
)
from scheduler.plugins.volumerestrictions import (
    ERR_REASON_DISK_CONFLICT,
    ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT,
    VolumeRestrictions,
)
from scheduler.plugins.volumezone import ERR_REASON_CONFLICT, VolumeZone

ZONE = "topology.kubernetes.io/zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
_uid = iter(range(1, 10**6))


class FakeInformer:
    def __init__(self) -> None:
        self.objs: dict[tuple[str, str], dict] = {}

    def add(self, obj: dict) -> dict:
        obj["metadata"].setdefault("resourceVersion", "1")
        self.objs[(obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = obj
        return obj

    def get(self, name: str, namespace: str | None = None) -> dict | None:
        return self.objs.get((namespace or "", name))

    def list(self, namespace: str | None = None) -> list[dict]:
        return list(self.objs.values())


class Objects:
    def __init__(self) -> None:
        self.by_plural: dict[str, FakeInformer] = {}

    def informer_for(self, resource: Any) -> FakeInformer:
        return self.by_plural.setdefault(resource.plural, FakeInformer())

    def add(self, plural: str, obj: dict) -> dict:
        return self.informer_for(SimpleNamespace(plural=plural)).add(obj)


def node(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": {HOST: name, **labels}}, "status": {}}


def pod(name: str, volumes: list[dict], node_name: str = "") -> dict:
    spec: dict[str, Any] = {"containers": [{"name": "c"}], "volumes": volumes}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "default", "uid": f"u{next(_uid)}"}, "spec": spec}


def claim_vol(claim: str) -> dict:
    return {"name": claim, "persistentVolumeClaim": {"claimName": claim}}


def pvc(name: str, volume: str = "", sc: str = "", modes: tuple[str, ...] = ("ReadWriteOnce",),
        size: str = "1Gi", bound: bool = False) -> dict:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": f"pvc-{name}"},
        "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": size}}},
        "status": {"phase": "Bound" if bound else "Pending"},
    }
    if volume:
        obj["spec"]["volumeName"] = volume
    if sc:
        obj["spec"]["storageClassName"] = sc
    return obj


def pv(name: str, size: str = "1Gi", sc: str = "", labels: dict | None = None, hosts: list[str] | None = None,
       claim: str = "", phase: str = "Available") -> dict:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce", "ReadWriteOncePod"],
                 "storageClassName": sc},
        "status": {"phase": phase},
    }
    if hosts:
        obj["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOST, "operator": "In", "values": hosts}]}]}}
    if claim:
        obj["spec"]["claimRef"] = {"namespace": "default", "name": claim}
    return obj


def storage_class(name: str, mode: str = "WaitForFirstConsumer", provisioner: str = "kubernetes.io/no-provisioner",
                  **extra: Any) -> dict:
    return {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode, **extra}


def cluster(nodes: list[dict], pods: list[dict] = ()) -> Snapshot:  # type: ignore[assignment]
    infos = {n["metadata"]["name"]: NodeInfo(n) for n in nodes}
    for p in pods:
        infos[p["spec"]["nodeName"]].add_pod(p)
    return Snapshot(infos.values())


def handle(snap: Snapshot, objects: Objects, client: Any = None) -> Any:
    return SimpleNamespace(snapshot_shared_lister=lambda: snap, informer_factory=objects, client=client)


def filter_all(pl: Any, snap: Snapshot, p: dict) -> tuple[Any, dict[str, tuple[Code, list[str]]], CycleState]:
    state = CycleState()
    _, st = pl.pre_filter(state, p, snap.list())
    if st is not None:
        return st, {}, state
    out = {}
    for ni in snap.list():
        r = pl.filter(state, p, ni)
        out[ni.name] = (Code.SUCCESS, []) if r is None else (r.code, r.reasons)
    return None, out, state


# -- VolumeRestrictions ----------------------------------------------------------------------------


def test_disk_conflicts() -> None:
    gce = {"name": "d", "gcePersistentDisk": {"pdName": "disk1"}}
    gce_ro = {"name": "d", "gcePersistentDisk": {"pdName": "disk1", "readOnly": True}}
    ebs = {"name": "e", "awsElasticBlockStore": {"volumeID": "vol-1", "readOnly": True}}
    rbd = {"name": "r", "rbd": {"monitors": ["m1", "m2"], "image": "img"}}
    snap = cluster([node("n1"), node("n2")], [pod("x", [gce_ro, ebs, rbd], "n1")])
    pl = VolumeRestrictions({}, handle(snap, Objects()))
    _, res, _ = filter_all(pl, snap, pod("p", [gce]))
    assert res["n1"] == (Code.UNSCHEDULABLE, [ERR_REASON_DISK_CONFLICT]) and res["n2"][0] == Code.SUCCESS
    _, res, _ = filter_all(pl, snap, pod("p", [gce_ro]))
    assert res["n1"][0] == Code.SUCCESS, "read-only GCE PD mounts share"
    _, res, _ = filter_all(pl, snap, pod("p", [{"name": "e", "awsElasticBlockStore": {"volumeID": "vol-1",
                                                                                       "readOnly": True}}]))
    assert res["n1"][0] == Code.UNSCHEDULABLE, "EBS never shares"
    _, res, _ = filter_all(pl, snap, pod("p", [{"name": "r", "rbd": {"monitors": ["m2"], "image": "img"}}]))
    assert res["n1"][0] == Code.UNSCHEDULABLE
    _, res, _ = filter_all(pl, snap, pod("p", [{"name": "r", "rbd": {"monitors": ["m2"], "image": "other"}}]))
    assert res["n1"][0] == Code.SUCCESS


def test_read_write_once_pod_conflicts_cluster_wide_and_preemption_updates() -> None:
    objects = Objects()
    objects.add("persistentvolumeclaims", pvc("solo", modes=("ReadWriteOncePod",)))
    objects.add("persistentvolumeclaims", pvc("shared"))
    holder = pod("holder", [claim_vol("solo")], "n1")
    snap = cluster([node("n1"), node("n2")], [holder, pod("other", [claim_vol("shared")], "n1")])
    pl = VolumeRestrictions({}, handle(snap, objects))
    st, res, state = filter_all(pl, snap, pod("p", [claim_vol("solo")]))
    assert st is None
    assert res["n2"] == (Code.UNSCHEDULABLE, [ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT])
    copy = state.clone()
    pl.remove_pod(copy, pod("p", []), PodInfo(holder), snap.get("n1"))
    assert pl.filter(copy, pod("p", [claim_vol("solo")]), snap.get("n2")) is None
    st, _, _ = filter_all(pl, snap, pod("p", [claim_vol("shared")]))
    assert st is not None and st.code == Code.SKIP, "plain RWO claims need no check"
    st, _, _ = filter_all(pl, snap, pod("p", [claim_vol("missing")]))
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ['persistentvolumeclaim "missing" not found']


# -- VolumeZone ------------------------------------------------------------------------------------


def test_volume_zone_matches_pv_zone_labels() -> None:
    objects = Objects()
    objects.add("persistentvolumes", pv("pv-a", labels={ZONE: "a__c"}))
    objects.add("persistentvolumes", pv("pv-beta", labels={BETA_ZONE: "b"}))
    objects.add("persistentvolumeclaims", pvc("data", "pv-a", bound=True))
    objects.add("persistentvolumeclaims", pvc("old", "pv-beta", bound=True))
    nodes = [node("na", **{ZONE: "a"}), node("nb", **{ZONE: "b"}), node("nc", **{ZONE: "c"}), node("plain")]
    snap = cluster(nodes)
    pl = VolumeZone({}, handle(snap, objects))
    _, res, _ = filter_all(pl, snap, pod("p", [claim_vol("data")]))
    assert res["na"][0] == res["nc"][0] == res["plain"][0] == Code.SUCCESS
    assert res["nb"] == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_CONFLICT])
    # A beta-labelled PV matches the node's GA label.
    _, res, _ = filter_all(pl, snap, pod("p", [claim_vol("old")]))
    assert res["nb"][0] == Code.SUCCESS and res["na"][0] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_volume_zone_unbound_claims() -> None:
    objects = Objects()
    objects.add("storageclasses", storage_class("late"))
    objects.add("storageclasses", storage_class("now", mode="Immediate"))
    objects.add("persistentvolumeclaims", pvc("late", sc="late"))
    objects.add("persistentvolumeclaims", pvc("now", sc="now"))
    objects.add("persistentvolumeclaims", pvc("nothing"))
    snap = cluster([node("n1", **{ZONE: "a"})])
    pl = VolumeZone({}, handle(snap, objects))
    st, _, _ = filter_all(pl, snap, pod("p", [claim_vol("late")]))
    assert st.code == Code.SKIP
    st, _, _ = filter_all(pl, snap, pod("p", [claim_vol("now")]))
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ["PersistentVolume had no name"])
    st, _, _ = filter_all(pl, snap, pod("p", [claim_vol("nothing")]))
    assert st.reasons == ["PersistentVolumeClaim had no pv name and storageClass name"]


# -- VolumeBinding ---------------------------------------------------------------------------------


def binding_setup() -> tuple[Objects, Snapshot]:
    objects = Objects()
    objects.add("storageclasses", storage_class("local"))
    objects.add("storageclasses", storage_class("fast", mode="Immediate"))
    objects.add("storageclasses", storage_class("csi", provisioner="csi.example.com", allowedTopologies=[
        {"matchLabelExpressions": [{"key": ZONE, "values": ["a"]}]}]))
    objects.add("persistentvolumes", pv("small-n1", "1Gi", "local", hosts=["n1"]))
    objects.add("persistentvolumes", pv("big-n1", "10Gi", "local", hosts=["n1"]))
    objects.add("persistentvolumes", pv("pv-n2", "5Gi", "local", hosts=["n2"]))
    objects.add("persistentvolumes", pv("bound-n2", "1Gi", "local", hosts=["n2"], claim="ready", phase="Bound"))
    objects.add("persistentvolumeclaims", pvc("ready", "bound-n2", "local", bound=True))
    return objects, cluster([node("n1", **{ZONE: "a"}), node("n2", **{ZONE: "b"}), node("n3", **{ZONE: "b"})])


def test_volume_binding_skips_pods_without_claims_and_rejects_bad_claims() -> None:
    objects, snap = binding_setup()
    pl = VolumeBinding({}, handle(snap, objects))
    st, _, _ = filter_all(pl, snap, pod("p", [{"name": "e", "emptyDir": {}}]))
    assert st.code == Code.SKIP
    st, _, _ = filter_all(pl, snap, pod("p", [claim_vol("nope")]))
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ['persistentvolumeclaim "nope" not found'])
    objects.add("persistentvolumeclaims", pvc("imm", sc="fast"))
    st, _, _ = filter_all(pl, snap, pod("p", [claim_vol("imm")]))
    assert st.reasons == [UNBOUND_IMMEDIATE]
    gone = objects.add("persistentvolumeclaims", pvc("gone", "x", "local", bound=True))
    gone["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    st, _, _ = filter_all(pl, snap, pod("p", [claim_vol("gone")]))
    assert st.reasons == ['persistentvolumeclaim "gone" is being deleted']


def test_bound_claims_follow_pv_node_affinity() -> None:
    objects, snap = binding_setup()
    pl = VolumeBinding({}, handle(snap, objects))
    _, res, _ = filter_all(pl, snap, pod("p", [claim_vol("ready")]))
    assert res["n2"][0] == Code.SUCCESS
    assert res["n1"] == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_NODE_CONFLICT])
    objects.add("persistentvolumeclaims", pvc("dangling", "missing-pv", "local", bound=True))
    _, res, _ = filter_all(pl, snap, pod("p", [claim_vol("dangling")]))
    assert res["n1"] == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_PV_NOT_EXIST])


def test_wait_for_first_consumer_picks_smallest_fitting_pv_per_node_and_assumes_it() -> None:
    objects, snap = binding_setup()
    objects.add("persistentvolumeclaims", pvc("data", sc="local", size="2Gi"))
    objects.add("persistentvolumeclaims", pvc("data2", sc="local", size="2Gi"))
    pl = VolumeBinding({}, handle(snap, objects))
    p = pod("p", [claim_vol("data")])
    _, res, state = filter_all(pl, snap, p)
    assert res["n1"][0] == res["n2"][0] == Code.SUCCESS
    assert res["n3"] == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_BIND_CONFLICT])
    s = state.read("VolumeBinding")
    assert [b[0]["metadata"]["name"] for b in s.pod_volumes_by_node["n1"].static_bindings] == ["big-n1"]
    assert pl.reserve(state, p, "n1") is None
    assert pl.pv_cache.get("big-n1")["spec"]["claimRef"]["name"] == "data"
    # The next pod cannot take the assumed PV on n1.
    _, res, _ = filter_all(pl, snap, pod("q", [claim_vol("data2")]))
    assert res["n1"][0] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and res["n2"][0] == Code.SUCCESS
    pl.unreserve(state, p, "n1")
    assert "claimRef" not in pl.pv_cache.get("big-n1")["spec"]


def test_dynamic_provisioning_respects_allowed_topologies() -> None:
    objects, snap = binding_setup()
    objects.add("persistentvolumeclaims", pvc("dyn", sc="csi"))
    pl = VolumeBinding({}, handle(snap, objects))
    p = pod("p", [claim_vol("dyn")])
    _, res, state = filter_all(pl, snap, p)
    assert res["n1"][0] == Code.SUCCESS
    assert res["n2"] == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_BIND_CONFLICT])
    pl.reserve(state, p, "n1")
    ann = pl.pvc_cache.get("dyn", "default")["metadata"]["annotations"]
    assert ann["volume.kubernetes.io/selected-node"] == "n1"


def _merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


class RecordingClient:
    def __init__(self, objects: Objects) -> None:
        self.objects = objects
        self.calls: list[tuple[str, str, Any]] = []

    async def patch(self, resource: Any, name: str, body: Any, namespace: str | None = None, **kw: Any) -> dict:
        self.calls.append((resource.plural + ("/status" if kw.get("subresource") else ""), name, body))
        obj = self.objects.informer_for(resource).get(name, namespace)
        assert obj is not None
        _merge(obj, body)
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": "2"}}

    async def patch_status(self, resource: Any, name: str, body: Any, namespace: str | None = None,
                           **kw: Any) -> dict:
        return await self.patch(resource, name, body, namespace, subresource="status")

    async def replace(self, resource: Any, body: dict, name: str | None = None, namespace: str | None = None,
                      **kw: Any) -> dict:
        self.calls.append((resource.plural, body["metadata"]["name"], body))
        stored = {**body, "metadata": {**body["metadata"], "resourceVersion": "2"}}
        return self.objects.informer_for(resource).add(stored)

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> dict:
        obj = self.objects.informer_for(resource).get(name, namespace)
        assert obj is not None
        return obj


async def test_prebind_writes_only_the_pv_and_waits_for_the_pv_controller() -> None:
    objects, snap = binding_setup()
    claim = objects.add("persistentvolumeclaims", pvc("data", sc="local", size="2Gi"))
    client = RecordingClient(objects)
    pl = VolumeBinding({}, handle(snap, objects, client))
    p = pod("p", [claim_vol("data")])
    _, _, state = filter_all(pl, snap, p)
    pl.reserve(state, p, "n2")
    binding = asyncio.create_task(pl.pre_bind(state, p, "n2"))
    await asyncio.sleep(0.5)
    assert not binding.done(), "PreBind returned before the claim was bound"
    assert [(what, name) for what, name, _ in client.calls] == [("persistentvolumes", "pv-n2")]
    written = client.calls[0][2]
    assert written["spec"]["claimRef"]["uid"] == "pvc-data"
    assert written["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    # What the PersistentVolume controller does: complete the claim side.
    claim["spec"]["volumeName"] = "pv-n2"
    claim["metadata"]["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    assert await asyncio.wait_for(binding, 5) is None


async def test_prebind_fails_when_the_pv_controller_resets_the_claim_ref() -> None:
    objects, snap = binding_setup()
    objects.add("persistentvolumeclaims", pvc("data", sc="local", size="2Gi"))
    client = RecordingClient(objects)
    pl = VolumeBinding({}, handle(snap, objects, client))
    p = pod("p", [claim_vol("data")])
    _, _, state = filter_all(pl, snap, p)
    pl.reserve(state, p, "n2")
    binding = asyncio.create_task(pl.pre_bind(state, p, "n2"))
    await asyncio.sleep(0.3)
    del objects.by_plural["persistentvolumes"].get("pv-n2")["spec"]["claimRef"]
    st = await asyncio.wait_for(binding, 5)
    assert st is not None and st.code == Code.ERROR and 'ClaimRef got reset for pv "pv-n2"' in st.message()


async def test_prebind_times_out_waiting_for_provisioner() -> None:
    objects, snap = binding_setup()
    objects.add("persistentvolumeclaims", pvc("dyn", sc="csi"))
    pl = VolumeBinding({"bindTimeoutSeconds": 0}, handle(snap, objects, RecordingClient(objects)))
    p = pod("p", [claim_vol("dyn")])
    _, _, state = filter_all(pl, snap, p)
    pl.reserve(state, p, "n1")
    st = await pl.pre_bind(state, p, "n1")
    assert st is not None and st.code == Code.ERROR and "timed out" in st.message()
