"""VolumeZone with upstream's semantics.

A PersistentVolume labelled with a zone or region (several zones joined by `__`) can only be
used from nodes in one of those zones; nodes without any zone or region label are not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from scheduler.framework.interface import Code, Handle, Plugin, PreFilterResult, Status
from scheduler.framework.types import NodeInfo, Obj
from services.api.storage import object_class
from services.client import GVR

NAME = "VolumeZone"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME

ERR_REASON_CONFLICT = "node(s) had no available volume zone"

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
GA_ZONE = "topology.kubernetes.io/zone"
GA_REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, GA_ZONE, GA_REGION)
_TO_GA = {BETA_ZONE: GA_ZONE, BETA_REGION: GA_REGION}


PERSISTENT_VOLUMES = GVR("", "v1", "persistentvolumes", namespaced=False)
PERSISTENT_VOLUME_CLAIMS = GVR("", "v1", "persistentvolumeclaims")
STORAGE_CLASSES = GVR("storage.k8s.io", "v1", "storageclasses", namespaced=False)


def pod_claim_names(pod: Obj) -> list[str]:
    """Claims the pod uses, including the generated ones of generic ephemeral volumes."""
    name = pod["metadata"].get("name", "")
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or ():
        if v.get("persistentVolumeClaim") is not None:
            out.append(v["persistentVolumeClaim"].get("claimName", ""))
        elif v.get("ephemeral") is not None:
            out.append(f"{name}-{v.get('name', '')}")
    return out


class PreFilterState:
    __slots__ = ("pv_topologies",)

    def __init__(self, pv_topologies: list[tuple[str, frozenset[str]]]) -> None:
        self.pv_topologies = pv_topologies

    def clone(self) -> PreFilterState:
        return self


class VolumeZone(Plugin):
    """Keeps pods on nodes in the zones of their bound volumes."""

    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        factory = handle.informer_factory
        self._pvs = factory.informer_for(PERSISTENT_VOLUMES)
        self._pvcs = factory.informer_for(PERSISTENT_VOLUME_CLAIMS)
        self._classes = factory.informer_for(STORAGE_CLASSES)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD)),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
            ClusterEventWithHint(ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM,
                                              ActionType.ADD | ActionType.UPDATE)),
            ClusterEventWithHint(ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE)),
        ]

    def _pv_topologies(self, pod: Obj) -> tuple[list[tuple[str, frozenset[str]]], Status | None]:
        ns = pod["metadata"].get("namespace", "")
        out: list[tuple[str, frozenset[str]]] = []
        for claim_name in pod_claim_names(pod):
            if not claim_name:
                return [], Status.unresolvable("PersistentVolumeClaim had no name")
            pvc = self._pvcs.get(claim_name, ns)
            if pvc is None:
                return [], Status.unresolvable(f'persistentvolumeclaim "{claim_name}" not found')
            pv_name = (pvc.get("spec") or {}).get("volumeName") or ""
            if not pv_name:
                class_name = object_class(pvc)
                if not class_name:
                    return [], Status.unresolvable("PersistentVolumeClaim had no pv name and storageClass name")
                sc = self._classes.get(class_name)
                if sc is None:
                    return [], Status.unresolvable(f'storageclass.storage.k8s.io "{class_name}" not found')
                mode = sc.get("volumeBindingMode")
                if mode is None:
                    return [], Status.unresolvable(f'VolumeBindingMode not set for StorageClass "{class_name}"')
                if mode == "WaitForFirstConsumer":
                    continue
                return [], Status.unresolvable("PersistentVolume had no name")
            pv = self._pvs.get(pv_name)
            if pv is None:
                return [], Status.unresolvable(f'persistentvolume "{pv_name}" not found')
            labels = (pv.get("metadata") or {}).get("labels") or {}
            for key in TOPOLOGY_LABELS:
                if key in labels:
                    out.append((key, frozenset(z.strip() for z in labels[key].split("__"))))
        return out, None

    def pre_filter(self, state: CycleState, pod: Obj,
                   nodes: list[NodeInfo]) -> tuple[PreFilterResult | None, Status | None]:
        topologies, status = self._pv_topologies(pod)
        if status is not None:
            return None, status
        if not topologies:
            return None, Status(Code.SKIP)
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(topologies))
        return None, None

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        labels = node_info.labels
        if not any(k in labels for k in TOPOLOGY_LABELS):
            return None
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            topologies, status = self._pv_topologies(pod)
            if status is not None:
                return status
        else:
            topologies = s.pv_topologies
        for key, values in topologies:
            value = labels.get(key)
            if value is None:
                value = labels.get(_TO_GA.get(key, key))
            if value is None or value not in values:
                return Status.unresolvable(ERR_REASON_CONFLICT)
        return None
