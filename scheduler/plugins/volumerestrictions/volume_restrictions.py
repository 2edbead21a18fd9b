"""VolumeRestrictions with upstream's semantics.

Some volume types cannot be mounted by two pods on one node unless every mount is read-only
(GCE PD, iSCSI, RBD) or at all (AWS EBS). A claim with the ReadWriteOncePod access mode may be
used by one pod in the whole cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from scheduler.framework.interface import Code, Handle, Plugin, PreFilterResult, Status
from scheduler.framework.types import NodeInfo, Obj, PodInfo
from services.client import GVR

NAME = "VolumeRestrictions"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME

ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode")

PERSISTENT_VOLUME_CLAIMS = GVR("", "v1", "persistentvolumeclaims")


def _needs_restrictions_check(volume: Mapping[str, Any]) -> bool:
    return any(k in volume for k in ("gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi"))


def _is_volume_conflict(volume: Mapping[str, Any], existing_pod: Obj) -> bool:
    for ev in (existing_pod.get("spec") or {}).get("volumes") or ():
        gce, egce = volume.get("gcePersistentDisk"), ev.get("gcePersistentDisk")
        if gce and egce and gce.get("pdName") == egce.get("pdName") \
                and not (gce.get("readOnly") and egce.get("readOnly")):
            return True
        ebs, eebs = volume.get("awsElasticBlockStore"), ev.get("awsElasticBlockStore")
        if ebs and eebs and ebs.get("volumeID") == eebs.get("volumeID"):
            return True
        iscsi, eiscsi = volume.get("iscsi"), ev.get("iscsi")
        if iscsi and eiscsi and iscsi.get("iqn") == eiscsi.get("iqn") \
                and not (iscsi.get("readOnly") and eiscsi.get("readOnly")):
            return True
        rbd, erbd = volume.get("rbd"), ev.get("rbd")
        if rbd and erbd and set(rbd.get("monitors") or ()) & set(erbd.get("monitors") or ()) \
                and (rbd.get("pool") or "rbd") == (erbd.get("pool") or "rbd") \
                and rbd.get("image") == erbd.get("image") \
                and not (rbd.get("readOnly") and erbd.get("readOnly")):
            return True
    return False


def _claim_keys(pod: Obj) -> list[str]:
    ns = pod["metadata"].get("namespace", "")
    return [f"{ns}/{v['persistentVolumeClaim'].get('claimName', '')}"
            for v in (pod.get("spec") or {}).get("volumes") or () if v.get("persistentVolumeClaim")]


class PreFilterState:
    __slots__ = ("read_write_once_pod_pvcs", "conflicting_pvc_ref_count")

    def __init__(self, pvcs: set[str], count: int) -> None:
        self.read_write_once_pod_pvcs = pvcs
        self.conflicting_pvc_ref_count = count

    def clone(self) -> PreFilterState:
        return PreFilterState(self.read_write_once_pod_pvcs, self.conflicting_pvc_ref_count)

    def update_with_pod(self, pod: Obj, delta: int) -> None:
        self.conflicting_pvc_ref_count += delta * sum(
            1 for k in _claim_keys(pod) if k in self.read_write_once_pod_pvcs)


class VolumeRestrictions(Plugin):
    """Rejects nodes where the pod's volumes would conflict with volumes already in use."""

    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self._pvcs = handle.informer_factory.informer_for(PERSISTENT_VOLUME_CLAIMS)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            # Volumes are released when the pods using them go away (spec.volumes is immutable).
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE)),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
            # The claim must exist to read its access modes.
            ClusterEventWithHint(ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD)),
        ]

    def pre_filter(self, state: CycleState, pod: Obj,
                   nodes: list[NodeInfo]) -> tuple[PreFilterResult | None, Status | None]:
        volumes = (pod.get("spec") or {}).get("volumes") or ()
        needs_check = any(_needs_restrictions_check(v) for v in volumes)
        ns = pod["metadata"].get("namespace", "")
        rwop: set[str] = set()
        for v in volumes:
            claim = v.get("persistentVolumeClaim")
            if not claim:
                continue
            name = claim.get("claimName", "")
            pvc = self._pvcs.get(name, ns)
            if pvc is None:
                return None, Status.unresolvable(f'persistentvolumeclaim "{name}" not found')
            if "ReadWriteOncePod" in ((pvc.get("spec") or {}).get("accessModes") or ()):
                rwop.add(f"{ns}/{name}")
        storage = self.handle.snapshot_shared_lister().storage_infos()
        count = sum(1 for key in rwop if storage.is_pvc_used_by_pods(key))
        if not needs_check and count == 0:
            return None, Status(Code.SKIP)
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(rwop, count))
        return None, None

    def pre_filter_extensions(self) -> Plugin | None:
        return self

    def add_pod(self, state: CycleState, pod_to_schedule: Obj, pod_info_to_add: PodInfo,
                node_info: NodeInfo) -> Status | None:
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is not None:
            s.update_with_pod(pod_info_to_add.pod, 1)
        return None

    def remove_pod(self, state: CycleState, pod_to_schedule: Obj, pod_info_to_remove: PodInfo,
                   node_info: NodeInfo) -> Status | None:
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is not None:
            s.update_with_pod(pod_info_to_remove.pod, -1)
        return None

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        for v in (pod.get("spec") or {}).get("volumes") or ():
            if _needs_restrictions_check(v) and any(_is_volume_conflict(v, pi.pod) for pi in node_info.pods):
                return Status.unschedulable(ERR_REASON_DISK_CONFLICT)
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return Status.error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        if s.conflicting_pvc_ref_count > 0:
            return Status.unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT)
        return None
