"""VolumeBinding with upstream's semantics.

Bound claims must have their volume reachable from the node (PV node affinity). Unbound claims of
a WaitForFirstConsumer StorageClass are matched on each node to the smallest fitting available
PV (static provisioning) or, failing that, left to the class's provisioner when its allowed
topologies include the node. Reserve assumes the chosen PVs in memory so the next pods do not pick
them; PreBind writes the bindings as upstream does: for a static binding only the PV side (claimRef
and the bound-by-controller annotation), for dynamic provisioning the claim's selected-node
annotation. The PersistentVolume controller (or the provisioner) completes the claim, and PreBind
waits, up to bindTimeoutSeconds, until every claim of the pod is fully bound.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from scheduler.framework.interface import Code, Handle, Plugin, PreFilterResult, Status
from scheduler.framework.types import NodeInfo, Obj, quantity_value
from scheduler.plugins.helper import node_selector_matches
from services.api.selectors import LabelSelector
from services.api.storage import ANN_SELECTED_NODE, object_class
from services.client import GVR, ApiError
from services.informers import Informer

NAME = "VolumeBinding"
STATE_KEY = NAME

ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NODE_CONFLICT = "node(s) had volume node affinity conflict"
ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"

PERSISTENT_VOLUMES = GVR("", "v1", "persistentvolumes", namespaced=False)
PERSISTENT_VOLUME_CLAIMS = GVR("", "v1", "persistentvolumeclaims")
STORAGE_CLASSES = GVR("storage.k8s.io", "v1", "storageclasses", namespaced=False)

DEFAULT_BIND_TIMEOUT_SECONDS = 600
POLL_INTERVAL = 0.2


def _storage(resources: Mapping[str, Any] | None) -> int:
    value = (resources or {}).get("storage")
    return 0 if value is None else quantity_value("storage", value)


def claim_request(pvc: Obj) -> int:
    return _storage((((pvc.get("spec") or {}).get("resources")) or {}).get("requests"))


def is_volume_bound_to_claim(pv: Obj, pvc: Obj) -> bool:
    ref = (pv.get("spec") or {}).get("claimRef")
    if not ref:
        return False
    meta = pvc["metadata"]
    if ref.get("name") != meta.get("name") or ref.get("namespace") != meta.get("namespace"):
        return False
    return not ref.get("uid") or ref.get("uid") == meta.get("uid")


def check_node_affinity(pv: Obj, node: Obj) -> bool:
    required = (((pv.get("spec") or {}).get("nodeAffinity")) or {}).get("required")
    return required is None or node_selector_matches(required, node)


def find_matching_volume(pvc: Obj, pvs: list[Obj], node: Obj, excluded: set[str]) -> Obj | None:
    """The PV pre-bound to the claim, else the smallest available one that fits (upstream's rules)."""
    spec = pvc.get("spec") or {}
    requested = claim_request(pvc)
    requested_class = object_class(pvc)
    selector = None
    if spec.get("selector") is not None:
        selector = LabelSelector.from_dict(spec["selector"])
    claim_mode = spec.get("volumeMode") or "Filesystem"
    access_modes = spec.get("accessModes") or ()
    smallest: Obj | None = None
    smallest_qty = 0
    for pv in pvs:
        meta = pv["metadata"]
        pv_spec = pv.get("spec") or {}
        if meta["name"] in excluded:
            continue
        bound_here = is_volume_bound_to_claim(pv, pvc)
        if pv_spec.get("claimRef") and not bound_here:
            continue
        qty = _storage(pv_spec.get("capacity"))
        if qty < requested:
            continue
        if (pv_spec.get("volumeMode") or "Filesystem") != claim_mode:
            continue
        if meta.get("deletionTimestamp"):
            continue
        affinity_ok = check_node_affinity(pv, node)
        if bound_here:
            return pv if affinity_ok else None
        if (pv.get("status") or {}).get("phase") != "Available":
            continue
        if selector is not None and not selector.matches(meta.get("labels") or {}):
            continue
        if object_class(pv) != requested_class or not affinity_ok:
            continue
        if not all(m in (pv_spec.get("accessModes") or ()) for m in access_modes):
            continue
        if smallest is None or smallest_qty > qty:
            smallest, smallest_qty = pv, qty
    return smallest


class AssumeCache:
    """An informer's objects overlaid with in-memory versions the scheduler has assumed.

    An assumed version is dropped once the informer holds a newer object than the one it was
    derived from (the write landed, or someone else changed it).
    """

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self._assumed: dict[tuple[str, str], tuple[Obj, str]] = {}

    @staticmethod
    def _key(obj: Obj) -> tuple[str, str]:
        m = obj["metadata"]
        return m.get("namespace", "") or "", m["name"]

    def get(self, name: str, namespace: str = "") -> Obj | None:
        current = self.informer.get(name, namespace or None)
        entry = self._assumed.get((namespace, name))
        if entry is None:
            return current
        assumed, base_rv = entry
        if current is not None and current["metadata"].get("resourceVersion") != base_rv:
            del self._assumed[(namespace, name)]
            return current
        return assumed

    def list(self) -> list[Obj]:
        out = []
        for obj in self.informer.list():
            m = obj["metadata"]
            out.append(self.get(m["name"], m.get("namespace", "") or "") or obj)
        return out

    def assume(self, obj: Obj, base_rv: str) -> None:
        self._assumed[self._key(obj)] = (obj, base_rv)

    def restore(self, name: str, namespace: str = "") -> None:
        self._assumed.pop((namespace, name), None)


@dataclass(slots=True)
class PodVolumes:
    static_bindings: list[tuple[Obj, Obj]] = field(default_factory=list)  # (pv with claimRef, pvc)
    dynamic_provisions: list[Obj] = field(default_factory=list)  # pvc with the selected-node annotation


@dataclass(slots=True)
class StateData:
    bound_claims: list[Obj] = field(default_factory=list)
    claims_to_bind: list[Obj] = field(default_factory=list)
    pvs_by_class: dict[str, list[Obj]] = field(default_factory=dict)
    pod_volumes_by_node: dict[str, PodVolumes] = field(default_factory=dict)
    all_bound: bool = True

    def clone(self) -> StateData:
        return self


class VolumeBinding(Plugin):
    """Binds a pod's PersistentVolumeClaims to volumes reachable from the chosen node."""

    name = NAME

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        timeout = args.get("bindTimeoutSeconds")
        self.bind_timeout = float(DEFAULT_BIND_TIMEOUT_SECONDS if timeout is None else timeout)
        if self.bind_timeout < 0:
            raise ValueError("bindTimeoutSeconds: Invalid value: must be non-negative")
        factory = handle.informer_factory
        self.pv_cache = AssumeCache(factory.informer_for(PERSISTENT_VOLUMES))
        self.pvc_cache = AssumeCache(factory.informer_for(PERSISTENT_VOLUME_CLAIMS))
        self._classes = factory.informer_for(STORAGE_CLASSES)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD | ActionType.UPDATE)),
            ClusterEventWithHint(ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM,
                                              ActionType.ADD | ActionType.UPDATE)),
            ClusterEventWithHint(ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE)),
            ClusterEventWithHint(ClusterEvent(
                EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT)),
        ]

    # -- claims ----------------------------------------------------------------------------------------

    def _pod_claims(self, pod: Obj) -> tuple[list[Obj], str | None]:
        """The pod's claims, or upstream's message for the first one that cannot be used."""
        meta = pod["metadata"]
        ns = meta.get("namespace", "")
        claims = []
        for v in (pod.get("spec") or {}).get("volumes") or ():
            ephemeral = v.get("ephemeral") is not None
            if v.get("persistentVolumeClaim") is not None:
                name = v["persistentVolumeClaim"].get("claimName", "")
            elif ephemeral:
                name = f"{meta.get('name', '')}-{v.get('name', '')}"
            else:
                continue
            pvc = self.pvc_cache.get(name, ns)
            if pvc is None:
                if ephemeral:
                    return [], f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"'
                return [], f'persistentvolumeclaim "{name}" not found'
            if (pvc.get("status") or {}).get("phase") == "Lost":
                return [], (f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume '
                            f'"{(pvc.get("spec") or {}).get("volumeName", "")}"')
            if pvc["metadata"].get("deletionTimestamp"):
                return [], f'persistentvolumeclaim "{name}" is being deleted'
            if ephemeral and not any(r.get("controller") and r.get("uid") == meta.get("uid")
                                     for r in pvc["metadata"].get("ownerReferences") or ()):
                return [], f"PVC {ns}/{name} was not created for pod {ns}/{meta.get('name', '')} (pod is not owner)"
            claims.append(pvc)
        return claims, None

    def _is_delay_binding(self, pvc: Obj) -> bool:
        name = object_class(pvc)
        if not name:
            return False
        sc = self._classes.get(name)
        return sc is not None and sc.get("volumeBindingMode") == "WaitForFirstConsumer"

    @staticmethod
    def _is_bound(pvc: Obj) -> bool:
        spec = pvc.get("spec") or {}
        if not spec.get("volumeName"):
            return False
        ann = pvc["metadata"].get("annotations") or {}
        return ANN_BIND_COMPLETED in ann or (pvc.get("status") or {}).get("phase") == "Bound"

    # -- filtering -------------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Obj,
                   nodes: list[NodeInfo]) -> tuple[PreFilterResult | None, Status | None]:
        claims, problem = self._pod_claims(pod)
        if problem is not None:
            return None, Status.unresolvable(problem)
        if not claims:
            state.write(STATE_KEY, StateData())
            return None, Status(Code.SKIP)
        s = StateData()
        immediate_unbound = False
        for pvc in claims:
            if self._is_bound(pvc):
                s.bound_claims.append(pvc)
            elif self._is_delay_binding(pvc) and not (pvc.get("spec") or {}).get("volumeName"):
                s.claims_to_bind.append(pvc)
            else:
                immediate_unbound = True
        if immediate_unbound:
            return None, Status.unresolvable(UNBOUND_IMMEDIATE)
        if s.claims_to_bind:
            wanted = {object_class(c) for c in s.claims_to_bind}
            for pv in self.pv_cache.list():
                cls = object_class(pv)
                if cls in wanted:
                    s.pvs_by_class.setdefault(cls, []).append(pv)
        state.write(STATE_KEY, s)
        return None, None

    def filter(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> Status | None:
        node = node_info.node
        if node is None:
            return Status.error("node not found")
        s: StateData | None = state.get(STATE_KEY)
        if s is None:
            return Status.error(f'error reading "{STATE_KEY}" from cycleState: not found')
        reasons: list[str] = []
        bound_ok, pvs_found = True, True
        for pvc in s.bound_claims:
            pv = self.pv_cache.get((pvc.get("spec") or {}).get("volumeName", ""))
            if pv is None:
                pvs_found = False
                break
            if not check_node_affinity(pv, node):
                bound_ok = False
                break
        unbound_ok, enough_space = True, True
        volumes = PodVolumes()
        if s.claims_to_bind and bound_ok and pvs_found:
            unbound_ok, enough_space = self._find_unbound(s, node, volumes)
        if not bound_ok:
            reasons.append(ERR_REASON_NODE_CONFLICT)
        if not unbound_ok:
            reasons.append(ERR_REASON_BIND_CONFLICT)
        if not enough_space:
            reasons.append(ERR_REASON_NOT_ENOUGH_SPACE)
        if not pvs_found:
            reasons.append(ERR_REASON_PV_NOT_EXIST)
        if reasons:
            return Status.unresolvable(*reasons)
        s.pod_volumes_by_node[node_info.name] = volumes
        return None

    def _find_unbound(self, s: StateData, node: Obj, volumes: PodVolumes) -> tuple[bool, bool]:
        node_name = node["metadata"]["name"]
        to_match: list[Obj] = []
        to_provision: list[Obj] = []
        for pvc in s.claims_to_bind:
            selected = (pvc["metadata"].get("annotations") or {}).get(ANN_SELECTED_NODE)
            if selected is not None:
                if selected != node_name:
                    return False, True
                to_provision.append(pvc)
            else:
                to_match.append(pvc)
        chosen: set[str] = set()
        for pvc in sorted(to_match, key=claim_request):
            pv = find_matching_volume(pvc, s.pvs_by_class.get(object_class(pvc), []), node, chosen)
            if pv is None:
                to_provision.append(pvc)
                continue
            chosen.add(pv["metadata"]["name"])
            volumes.static_bindings.append((pv, pvc))
        for pvc in to_provision:
            sc = self._classes.get(object_class(pvc))
            if sc is None:
                return False, True
            provisioner = sc.get("provisioner") or ""
            if not provisioner or provisioner == NOT_SUPPORTED_PROVISIONER:
                return False, True
            allowed = sc.get("allowedTopologies")
            if allowed and not _match_topology_selector_terms(allowed, node):
                return False, True
            volumes.dynamic_provisions.append(pvc)
        return True, True

    # -- reserve / bind --------------------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: Obj, node_name: str) -> Status | None:
        s: StateData | None = state.get(STATE_KEY)
        if s is None:
            return None
        volumes = s.pod_volumes_by_node.get(node_name)
        if volumes is None or not (volumes.static_bindings or volumes.dynamic_provisions):
            s.all_bound = True
            return None
        s.all_bound = False
        assumed = PodVolumes()
        for pv, pvc in volumes.static_bindings:
            if is_volume_bound_to_claim(pv, pvc):
                continue
            new_pv = copy.deepcopy(pv)
            pvc_meta = pvc["metadata"]
            new_pv["spec"]["claimRef"] = {
                "kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": pvc_meta.get("namespace", ""),
                "name": pvc_meta["name"], "uid": pvc_meta.get("uid", ""),
                "resourceVersion": pvc_meta.get("resourceVersion", ""),
            }
            new_pv["metadata"].setdefault("annotations", {})[ANN_BOUND_BY_CONTROLLER] = "yes"
            self.pv_cache.assume(new_pv, pv["metadata"].get("resourceVersion", ""))
            assumed.static_bindings.append((new_pv, pvc))
        for pvc in volumes.dynamic_provisions:
            new_pvc = copy.deepcopy(pvc)
            new_pvc["metadata"].setdefault("annotations", {})[ANN_SELECTED_NODE] = node_name
            self.pvc_cache.assume(new_pvc, pvc["metadata"].get("resourceVersion", ""))
            assumed.dynamic_provisions.append(new_pvc)
        s.pod_volumes_by_node[node_name] = assumed
        return None

    def unreserve(self, state: CycleState, pod: Obj, node_name: str) -> None:
        s: StateData | None = state.get(STATE_KEY)
        volumes = s.pod_volumes_by_node.get(node_name) if s is not None else None
        if volumes is None:
            return
        for pv, _ in volumes.static_bindings:
            self.pv_cache.restore(pv["metadata"]["name"])
        for pvc in volumes.dynamic_provisions:
            self.pvc_cache.restore(pvc["metadata"]["name"], pvc["metadata"].get("namespace", ""))

    async def pre_bind(self, state: CycleState, pod: Obj, node_name: str) -> Status | None:
        s: StateData | None = state.get(STATE_KEY)
        if s is None or s.all_bound:
            return None
        volumes = s.pod_volumes_by_node.get(node_name)
        if volumes is None:
            return Status.error(f"no pod volumes found for node {node_name!r}")
        try:
            for pv, pvc in volumes.static_bindings:
                await self._bind_static(pv, pvc)
            for pvc in volumes.dynamic_provisions:
                meta = pvc["metadata"]
                await self.handle.client.patch(
                    PERSISTENT_VOLUME_CLAIMS, meta["name"],
                    {"metadata": {"annotations": {ANN_SELECTED_NODE: node_name}}}, meta.get("namespace", ""))
            await self._wait_bound(node_name, volumes)
        except (ApiError, RuntimeError, TimeoutError) as e:
            return Status.error(e)
        return None

    async def _bind_static(self, pv: Obj, pvc: Obj) -> None:
        """Write the assumed PV (claimRef and annotation) over the version it was derived from, so a
        PV taken meanwhile is a conflict; the assumed PV stays in the cache until the informer sees it."""
        body = copy.deepcopy(pv)
        body.pop("status", None)
        await self.handle.client.replace(PERSISTENT_VOLUMES, body)

    async def _wait_bound(self, node_name: str, volumes: PodVolumes) -> None:
        """Wait until every claim the pod needs is fully bound: by the PV controller for static
        bindings, by the provisioner and the PV controller for dynamic ones (upstream's checkBindings)."""
        static = [(pv["metadata"]["name"], p["metadata"].get("namespace", ""), p["metadata"]["name"])
                  for pv, p in volumes.static_bindings]
        pending = [(p["metadata"].get("namespace", ""), p["metadata"]["name"]) for p in volumes.dynamic_provisions]
        deadline = time.monotonic() + self.bind_timeout
        client = self.handle.client
        while static or pending:
            still_static = []
            for pv_name, ns, name in static:
                pv = await client.get(PERSISTENT_VOLUMES, pv_name)
                ref = (pv.get("spec") or {}).get("claimRef") or {}
                if not ref.get("uid"):
                    raise RuntimeError(f'ClaimRef got reset for pv "{pv_name}"')
                pvc = await client.get(PERSISTENT_VOLUME_CLAIMS, name, ns)
                if not self._is_fully_bound(pvc):
                    still_static.append((pv_name, ns, name))
            still = []
            for ns, name in pending:
                pvc = await client.get(PERSISTENT_VOLUME_CLAIMS, name, ns)
                selected = (pvc["metadata"].get("annotations") or {}).get(ANN_SELECTED_NODE)
                if selected != node_name:
                    raise RuntimeError(f'provisioning failed for PVC "{name}"')
                if not self._is_fully_bound(pvc):
                    still.append((ns, name))
            static, pending = still_static, still
            if not static and not pending:
                return
            if time.monotonic() >= deadline:
                names = ", ".join([f"{ns}/{n}" for _, ns, n in static] + [f"{ns}/{n}" for ns, n in pending])
                raise TimeoutError(f"binding volumes: timed out waiting for the condition: {names}")
            await asyncio.sleep(POLL_INTERVAL)

    @staticmethod
    def _is_fully_bound(pvc: Obj) -> bool:
        return bool((pvc.get("spec") or {}).get("volumeName")) and \
            ANN_BIND_COMPLETED in (pvc["metadata"].get("annotations") or {})


def _match_topology_selector_terms(terms: list[Mapping[str, Any]], node: Obj) -> bool:
    """A StorageClass's allowedTopologies: OR of terms, each the AND of key-in-values requirements."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    for term in terms:
        exprs = term.get("matchLabelExpressions") or ()
        if all(labels.get(e.get("key", "")) in (e.get("values") or ()) for e in exprs):
            return True
    return False
