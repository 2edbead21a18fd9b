"""PersistentVolume controller (upstream `persistentvolume-binder`): binds claims to volumes and
moves both through their phases.

One queue carries claim keys (`pvc:<ns>/<name>`) and volume keys (`pv:<name>`), worked by one
worker as upstream's two loops are, so claim and volume syncs never race each other. An unbound
claim of an Immediate class gets the smallest Available volume that fits (the volume is written
first, then the claim, so a crash in between is finished by the next sync); a WaitForFirstConsumer
claim is left to the scheduler, which writes the volume side and lets this controller complete the
claim. A claim created with no class at all gets the default class once one exists (upstream's
retroactive default StorageClass assignment). Claims of a class with a provisioner are annotated
for the external provisioner. Volumes whose claim is gone are Released and reclaimed by their
policy; pyk8s has no in-tree deleter or recycler.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from controller_manager.resources import PVCS, PVS, STORAGE_CLASSES
from services.api.quantity import parse_quantity
from services.api.selectors import LabelSelector
from services.api.storage import (
    ANN_BETA_STORAGE_PROVISIONER,
    ANN_PROVISIONED_BY,
    ANN_SELECTED_NODE,
    ANN_STORAGE_PROVISIONER,
    default_storage_class,
    names_class,
    object_class,
)
from services.runtime.durations import duration_flag

NAME = "persistentvolume-binder"
COMPONENT = "persistentvolume-controller"


ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"

MSG_NO_CLASS = "no persistent volumes available for this claim and no storage class is set"
MSG_WAIT_FIRST_CONSUMER = "waiting for first consumer to be created before binding"

Obj = dict[str, Any]

CLAIM_PREFIX = "pvc:"
VOLUME_PREFIX = "pv:"


def new(ctx: ControllerContext) -> PersistentVolumeController:
    return PersistentVolumeController(ctx)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pvclaimbinder-sync-period", type=duration_flag, default=15.0,
                        help="the period for syncing persistent volumes and persistent volume claims")


# -- matching (upstream's index.go and storage helpers) ------------------------------------------------


def storage(resources: dict[str, Any] | None) -> Decimal:
    value = (resources or {}).get("storage")
    return Decimal(0) if value is None else parse_quantity(value)


def claim_request(claim: Obj) -> Decimal:
    return storage(((claim.get("spec") or {}).get("resources") or {}).get("requests"))


def volume_capacity(volume: Obj) -> Decimal:
    return storage((volume.get("spec") or {}).get("capacity"))


def claim_ref(claim: Obj) -> Obj:
    """The ObjectReference a bound volume's spec.claimRef holds (upstream's GetReference)."""
    meta = claim["metadata"]
    return {"kind": "PersistentVolumeClaim", "namespace": meta.get("namespace", ""), "name": meta["name"],
            "uid": meta.get("uid", ""), "apiVersion": "v1", "resourceVersion": meta.get("resourceVersion", "")}


def is_volume_bound_to_claim(volume: Obj, claim: Obj) -> bool:
    """The volume's claimRef names the claim, with its UID or (pre-bound by a user) with none."""
    ref = (volume.get("spec") or {}).get("claimRef")
    if not ref:
        return False
    meta = claim["metadata"]
    if ref.get("name") != meta.get("name") or (ref.get("namespace") or "") != (meta.get("namespace") or ""):
        return False
    return not ref.get("uid") or ref.get("uid") == meta.get("uid")


def _mode(spec: Obj) -> str:
    return spec.get("volumeMode") or "Filesystem"


def access_modes_contain(volume_modes: Iterable[str], claim_modes: Iterable[str]) -> bool:
    have = set(volume_modes)
    return all(m in have for m in claim_modes)


def _find_matching_volume(claim: Obj, volumes: list[Obj], delay_binding: bool,
                          selector: LabelSelector | None) -> Obj | None:
    """Upstream's FindMatchingVolume without a node: the volume pre-bound to the claim, else the
    smallest Available one of the claim's class and selector that is big enough."""
    requested = claim_request(claim)
    wanted_class = object_class(claim)
    claim_spec = claim.get("spec") or {}
    smallest: Obj | None = None
    smallest_size = Decimal(0)
    for volume in volumes:
        spec = volume.get("spec") or {}
        bound_here = is_volume_bound_to_claim(volume, claim)
        if spec.get("claimRef") and not bound_here:
            continue
        size = volume_capacity(volume)
        if size < requested or _mode(spec) != _mode(claim_spec):
            continue
        if volume["metadata"].get("deletionTimestamp"):
            continue
        if bound_here:
            return volume
        if delay_binding:
            continue
        if ((volume.get("status") or {}).get("phase")) != "Available":
            continue
        if selector is not None and not selector.matches(volume["metadata"].get("labels") or {}):
            continue
        if object_class(volume) != wanted_class:
            continue
        if smallest is None or size < smallest_size:
            smallest, smallest_size = volume, size
    return smallest


def find_best_match(claim: Obj, volumes: list[Obj], delay_binding: bool = False) -> Obj | None:
    """Upstream's findBestMatchForClaim: volumes are grouped by their set of access modes; the
    groups whose modes include all the claim's are tried from the fewest modes up, so a claim for
    ReadWriteOnce takes a RWO volume before a RWO+RWX one, and the first group with a match wins."""
    claim_modes = (claim.get("spec") or {}).get("accessModes") or []
    groups: dict[frozenset[str], list[Obj]] = {}
    for volume in volumes:
        modes = frozenset((volume.get("spec") or {}).get("accessModes") or ())
        if access_modes_contain(modes, claim_modes):
            groups.setdefault(modes, []).append(volume)
    sel = (claim.get("spec") or {}).get("selector")
    selector = LabelSelector.from_dict(sel) if sel is not None else None
    for modes in sorted(groups, key=lambda m: (len(m), sorted(m))):
        found = _find_matching_volume(claim, groups[modes], delay_binding, selector)
        if found is not None:
            return found
    return None


def check_volume_satisfies_claim(volume: Obj, claim: Obj) -> str | None:
    """Why a volume the user named in spec.volumeName cannot serve the claim (None: it can)."""
    spec, claim_spec = volume.get("spec") or {}, claim.get("spec") or {}
    if volume["metadata"].get("deletionTimestamp"):
        return f'the volume is marked for deletion "{volume["metadata"]["name"]}"'
    if volume_capacity(volume) < claim_request(claim):
        return "requested PV is too small"
    if object_class(volume) != object_class(claim):
        return "storageClassName does not match"
    if _mode(spec) != _mode(claim_spec):
        return "incompatible volumeMode"
    if not access_modes_contain(spec.get("accessModes") or (), claim_spec.get("accessModes") or ()):
        return "incompatible accessMode"
    return None


def _annotations(obj: Obj) -> dict[str, str]:
    meta = obj["metadata"]
    if not isinstance(meta.get("annotations"), dict):
        meta["annotations"] = {}
    return meta["annotations"]  # type: ignore[no-any-return]


def _rv(obj: Obj | None) -> int:
    try:
        return int((obj or {}).get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class PersistentVolumeController(QueueController):
    #: a failed sync is retried with backoff until it succeeds; upstream's periodic resync retries forever too
    MAX_RETRIES = None

    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.recorder = ctx.recorder(COMPONENT)
        self.volumes = ctx.informer(PVS)
        self.claims = ctx.informer(PVCS)
        self.classes = ctx.informer(STORAGE_CLASSES)
        #: what this controller wrote last, newer than the informers until they catch up (upstream's
        #: storeVolumeUpdate/storeClaimUpdate), so a volume just taken is not offered again
        self._written_volumes: dict[str, Obj] = {}
        self._written_claims: dict[str, Obj] = {}
        super().__init__(NAME, [self.volumes, self.claims, self.classes], 1)
        self.resync_period = float(ctx.options.pvclaimbinder_sync_period)
        self.volumes.add_event_handler(self._volume_changed, lambda old, new: self._volume_changed(new),
                                       self._volume_deleted)
        self.claims.add_event_handler(self._claim_changed, lambda old, new: self._claim_changed(new),
                                      self._claim_deleted)
        self.classes.add_event_handler(self._class_changed, lambda old, new: self._class_changed(new), None)

    # -- event handlers ------------------------------------------------------------------------------

    def _enqueue_claim(self, namespace: str, name: str) -> None:
        self.queue.add(f"{CLAIM_PREFIX}{namespace}/{name}")

    def _claim_changed(self, claim: Obj) -> None:
        meta = claim["metadata"]
        self._enqueue_claim(meta.get("namespace", ""), meta["name"])

    def _claim_deleted(self, claim: Obj) -> None:
        meta = claim["metadata"]
        self._written_claims.pop(f"{meta.get('namespace', '')}/{meta['name']}", None)
        volume = (claim.get("spec") or {}).get("volumeName")
        if volume:
            self.queue.add(VOLUME_PREFIX + volume)
        for pv in self.volumes.list():
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if ref.get("uid") and ref.get("uid") == meta.get("uid"):
                self.queue.add(VOLUME_PREFIX + pv["metadata"]["name"])

    def _volume_changed(self, volume: Obj) -> None:
        name = volume["metadata"]["name"]
        self.queue.add(VOLUME_PREFIX + name)
        if (volume.get("spec") or {}).get("claimRef"):
            return
        # A volume appeared or became free: the claims it might serve need not wait for the periodic resync,
        # neither those that name it (possibly seen before the volume was) nor those that match it.
        free = (volume.get("status") or {}).get("phase") == "Available"
        for claim in self.claims.list():
            wanted = (claim.get("spec") or {}).get("volumeName")
            if wanted == name or (free and not wanted and object_class(claim) == object_class(volume)):
                self._claim_changed(claim)

    def _volume_deleted(self, volume: Obj) -> None:
        self._written_volumes.pop(volume["metadata"]["name"], None)
        ref = (volume.get("spec") or {}).get("claimRef")
        if ref and ref.get("name"):
            self._enqueue_claim(ref.get("namespace") or "", ref["name"])

    def _class_changed(self, storage_class: Obj) -> None:
        self._enqueue_unbound_claims(storage_class["metadata"]["name"])
        if default_storage_class([storage_class]) is not None:
            for claim in self.claims.list():
                if not (claim.get("spec") or {}).get("volumeName") and not names_class(claim):
                    self._claim_changed(claim)

    def _enqueue_unbound_claims(self, class_name: str) -> None:
        for claim in self.claims.list():
            if not (claim.get("spec") or {}).get("volumeName") and object_class(claim) == class_name:
                self._claim_changed(claim)

    # -- the loop ------------------------------------------------------------------------------------

    def resync(self) -> None:
        """Every --pvclaimbinder-sync-period, look at everything again, as upstream's resync does."""
        for claim in self.claims.list():
            self._claim_changed(claim)
        for volume in self.volumes.list():
            self.queue.add(VOLUME_PREFIX + volume["metadata"]["name"])

    async def sync(self, key: str) -> None:
        if key.startswith(CLAIM_PREFIX):
            namespace, _, name = key[len(CLAIM_PREFIX):].partition("/")
            claim = self._claim(namespace, name)
            if claim is not None:
                await self.sync_claim(claim)
        elif key.startswith(VOLUME_PREFIX):
            volume = self._volume(key[len(VOLUME_PREFIX):])
            if volume is not None:
                await self.sync_volume(volume)

    # -- cache with our own writes on top ------------------------------------------------------------

    def _volume(self, name: str) -> Obj | None:
        cached = self.volumes.get(name)
        written = self._written_volumes.get(name)
        if written is None:
            return cached
        if cached is None or _rv(cached) >= _rv(written):
            del self._written_volumes[name]
            return cached
        return written

    def _all_volumes(self) -> list[Obj]:
        out = []
        for pv in self.volumes.list():
            current = self._volume(pv["metadata"]["name"])
            if current is not None:
                out.append(current)
        return out

    def _claim(self, namespace: str, name: str) -> Obj | None:
        cached = self.claims.get(name, namespace)
        key = f"{namespace}/{name}"
        written = self._written_claims.get(key)
        if written is None:
            return cached
        if cached is None or _rv(cached) >= _rv(written):
            del self._written_claims[key]
            return cached
        return written

    def _remember_volume(self, volume: Obj) -> Obj:
        self._written_volumes[volume["metadata"]["name"]] = volume
        return volume

    def _remember_claim(self, claim: Obj) -> Obj:
        meta = claim["metadata"]
        self._written_claims[f"{meta.get('namespace', '')}/{meta['name']}"] = claim
        return claim

    # -- claims --------------------------------------------------------------------------------------

    async def sync_claim(self, claim: Obj) -> None:
        if ANN_BIND_COMPLETED not in (claim["metadata"].get("annotations") or {}):
            await self._sync_unbound_claim(claim)
        else:
            await self._sync_bound_claim(claim)

    def _is_delay_binding(self, claim: Obj) -> bool:
        name = object_class(claim)
        sc = self.classes.get(name) if name else None
        return sc is not None and sc.get("volumeBindingMode") == "WaitForFirstConsumer"

    async def _sync_unbound_claim(self, claim: Obj) -> None:
        spec = claim.get("spec") or {}
        requested = spec.get("volumeName") or ""
        if not requested:
            delay = self._is_delay_binding(claim)
            volume = find_best_match(claim, self._all_volumes(), delay)
            if volume is not None:
                await self._bind(volume, claim)
                return
            if await self._assign_default_class(claim):
                return
            selected = ANN_SELECTED_NODE in (claim["metadata"].get("annotations") or {})
            if delay and not selected:
                self.recorder.normal(claim, "WaitForFirstConsumer", MSG_WAIT_FIRST_CONSUMER)
            elif object_class(claim):
                claim = await self._provision(claim)
            else:
                self.recorder.normal(claim, "FailedBinding", MSG_NO_CLASS)
            await self._update_claim_status(claim, "Pending", None)
            return
        volume = self._volume(requested)
        if volume is None:
            await self._update_claim_status(claim, "Pending", None)
            return
        ref = (volume.get("spec") or {}).get("claimRef")
        if not ref:
            problem = check_volume_satisfies_claim(volume, claim)
            if problem is not None:
                self.recorder.warning(claim, "VolumeMismatch",
                                      f'Cannot bind to requested volume "{requested}": {problem}')
                await self._update_claim_status(claim, "Pending", None)
                return
            await self._bind(volume, claim)
        elif is_volume_bound_to_claim(volume, claim):
            await self._bind(volume, claim)
        else:
            self.recorder.warning(claim, "FailedBinding", f'volume "{requested}" already bound to a different claim.')
            if ANN_BOUND_BY_CONTROLLER in (claim["metadata"].get("annotations") or {}):
                raise RuntimeError(f"invalid binding of claim {claim['metadata'].get('namespace')}/"
                                   f"{claim['metadata']['name']} to volume {requested}: volume already claimed by "
                                   f"{ref.get('namespace')}/{ref.get('name')}")
            await self._update_claim_status(claim, "Pending", None)

    async def _assign_default_class(self, claim: Obj) -> bool:
        """Give a claim created with no class the default class; its update brings it back here."""
        if names_class(claim):
            return False
        default = default_storage_class(self.classes.list())
        if default is None:
            return False
        body = copy.deepcopy(claim)
        body.setdefault("spec", {})["storageClassName"] = default["metadata"]["name"]
        self._remember_claim(await self.client.replace(PVCS, body))
        self.log.info("assigned the default storage class", claim=f"{claim['metadata'].get('namespace')}/"
                      f"{claim['metadata']['name']}", storage_class=default["metadata"]["name"])
        return True

    async def _provision(self, claim: Obj) -> Obj:
        """Hand the claim to its class's provisioner: pyk8s runs no in-tree provisioner, so every
        class other than kubernetes.io/no-provisioner is served by an external one."""
        name = object_class(claim)
        sc = self.classes.get(name)
        if sc is None:
            self.recorder.warning(claim, "ProvisioningFailed", f'storageclass.storage.k8s.io "{name}" not found')
            return claim
        provisioner = sc.get("provisioner") or ""
        if provisioner == NOT_SUPPORTED_PROVISIONER:
            self.recorder.warning(claim, "ProvisioningFailed", f"no volume plugin matched name: {provisioner}")
            return claim
        ann = claim["metadata"].get("annotations") or {}
        if ann.get(ANN_STORAGE_PROVISIONER) != provisioner or ann.get(ANN_BETA_STORAGE_PROVISIONER) != provisioner:
            body = copy.deepcopy(claim)
            _annotations(body).update({ANN_STORAGE_PROVISIONER: provisioner, ANN_BETA_STORAGE_PROVISIONER: provisioner})
            claim = self._remember_claim(await self.client.replace(PVCS, body))
        self.recorder.normal(claim, "ExternalProvisioning",
                             f'waiting for a volume to be created, either by external provisioner "{provisioner}" '
                             "or manually created by system administrator")
        return claim

    async def _sync_bound_claim(self, claim: Obj) -> None:
        name = (claim.get("spec") or {}).get("volumeName") or ""
        if not name:
            await self._claim_lost(claim, "ClaimLost", "Bound claim has lost reference to PersistentVolume. "
                                                       "Data on the volume is lost!")
            return
        volume = self._volume(name)
        if volume is None:
            await self._claim_lost(claim, "ClaimLost", "Bound claim has lost its PersistentVolume. "
                                                       "Data on the volume is lost!")
            return
        ref = (volume.get("spec") or {}).get("claimRef")
        if not ref or ref.get("uid") == claim["metadata"].get("uid"):
            await self._bind(volume, claim)
        else:
            await self._claim_lost(claim, "ClaimMisbound", "Two claims are bound to the same volume, this one is "
                                                           "bound incorrectly")

    async def _claim_lost(self, claim: Obj, reason: str, message: str) -> None:
        if (claim.get("status") or {}).get("phase") == "Lost":
            return
        updated = await self._update_claim_status(claim, "Lost", None)
        self.recorder.warning(updated, reason, message)

    async def _update_claim_status(self, claim: Obj, phase: str, volume: Obj | None) -> Obj:
        status = dict(claim.get("status") or {})
        before = dict(status)
        status["phase"] = phase
        if volume is None:
            status.pop("accessModes", None)
            status.pop("capacity", None)
        else:
            spec = volume.get("spec") or {}
            status["accessModes"] = list(spec.get("accessModes") or [])
            if storage(status.get("capacity")) != volume_capacity(volume) or "capacity" not in status:
                status["capacity"] = dict(spec.get("capacity") or {})
        if status == before:
            return claim
        body = {**claim, "status": status}
        updated = self._remember_claim(await self.client.replace_status(PVCS, body))
        self.log.info("claim entered phase", claim=f"{claim['metadata'].get('namespace')}/{claim['metadata']['name']}",
                      phase=phase)
        return updated

    # -- binding -------------------------------------------------------------------------------------

    async def _bind(self, volume: Obj, claim: Obj) -> None:
        """Volume first (claimRef, then phase Bound), then the claim (volumeName and annotations, then
        status): each step is idempotent, so an interrupted bind is finished by the next sync."""
        volume = await self._bind_volume_to_claim(volume, claim)
        volume = await self._update_volume_phase(volume, "Bound", "")
        claim = await self._bind_claim_to_volume(claim, volume)
        await self._update_claim_status(claim, "Bound", volume)

    async def _bind_volume_to_claim(self, volume: Obj, claim: Obj) -> Obj:
        ref = (volume.get("spec") or {}).get("claimRef") or {}
        meta = claim["metadata"]
        ref_ok = (ref.get("name") == meta["name"] and (ref.get("namespace") or "") == meta.get("namespace", "")
                  and ref.get("uid") == meta.get("uid"))
        if ref_ok:
            return volume
        by_controller = not is_volume_bound_to_claim(volume, claim)
        body = copy.deepcopy(volume)
        body["spec"]["claimRef"] = claim_ref(claim)
        if by_controller:
            _annotations(body)[ANN_BOUND_BY_CONTROLLER] = "yes"
        return self._remember_volume(await self.client.replace(PVS, body))

    async def _bind_claim_to_volume(self, claim: Obj, volume: Obj) -> Obj:
        body = copy.deepcopy(claim)
        dirty = False
        name = volume["metadata"]["name"]
        if (body.get("spec") or {}).get("volumeName") != name:
            body.setdefault("spec", {})["volumeName"] = name
            _annotations(body)[ANN_BOUND_BY_CONTROLLER] = "yes"
            dirty = True
        if ANN_BIND_COMPLETED not in (body["metadata"].get("annotations") or {}):
            _annotations(body)[ANN_BIND_COMPLETED] = "yes"
            dirty = True
        if not dirty:
            return claim
        return self._remember_claim(await self.client.replace(PVCS, body))

    # -- volumes -------------------------------------------------------------------------------------

    async def _update_volume_phase(self, volume: Obj, phase: str, message: str) -> Obj:
        status = volume.get("status") or {}
        if status.get("phase") == phase and (status.get("message") or "") == message:
            return volume
        new_status = {k: v for k, v in status.items() if k != "message"}
        new_status["phase"] = phase
        if message:
            new_status["message"] = message
        updated = self._remember_volume(await self.client.replace_status(PVS, {**volume, "status": new_status}))
        self.log.info("volume entered phase", volume=volume["metadata"]["name"], phase=phase)
        return updated

    async def _update_volume_phase_with_event(self, volume: Obj, phase: str, reason: str, message: str) -> Obj:
        if (volume.get("status") or {}).get("phase") == phase:
            return volume
        updated = await self._update_volume_phase(volume, phase, message)
        self.recorder.warning(updated, reason, message)
        return updated

    async def sync_volume(self, volume: Obj) -> None:
        spec = volume.get("spec") or {}
        ref = spec.get("claimRef")
        if not ref or not ref.get("uid"):
            # Unused, or pre-bound by a user to a claim whose sync will bind it.
            await self._update_volume_phase(volume, "Available", "")
            return
        claim = self._claim(ref.get("namespace") or "", ref.get("name") or "")
        if claim is not None and claim["metadata"].get("uid") != ref.get("uid"):
            claim = None  # the claim it was bound to was deleted and another took its name
        if claim is None:
            if (volume.get("status") or {}).get("phase") not in ("Released", "Failed"):
                volume = await self._update_volume_phase(volume, "Released", "")
            await self._reclaim(volume)
            return
        claim_volume = (claim.get("spec") or {}).get("volumeName") or ""
        ann = volume["metadata"].get("annotations") or {}
        if not claim_volume:
            # Bound on the volume side only (by us or the scheduler): the claim's sync completes it.
            self._claim_changed(claim)
            return
        if claim_volume == volume["metadata"]["name"]:
            await self._update_volume_phase(volume, "Bound", "")
            return
        # The claim got bound to another volume.
        if ANN_PROVISIONED_BY in ann and spec.get("persistentVolumeReclaimPolicy") == "Delete":
            if (volume.get("status") or {}).get("phase") not in ("Released", "Failed"):
                volume = await self._update_volume_phase(volume, "Released", "")
            await self._reclaim(volume)
            return
        await self._unbind_volume(volume)

    async def _unbind_volume(self, volume: Obj) -> None:
        """Undo a binding the controller made; of a user's pre-binding keep the name, drop the UID."""
        body = copy.deepcopy(volume)
        ann = body["metadata"].get("annotations") or {}
        if ANN_BOUND_BY_CONTROLLER in ann:
            body["spec"].pop("claimRef", None)
            del ann[ANN_BOUND_BY_CONTROLLER]
        else:
            body["spec"]["claimRef"] = {k: v for k, v in body["spec"]["claimRef"].items() if k != "uid"}
        updated = self._remember_volume(await self.client.replace(PVS, body))
        await self._update_volume_phase(updated, "Available", "")

    async def _reclaim(self, volume: Obj) -> None:
        policy = (volume.get("spec") or {}).get("persistentVolumeReclaimPolicy") or "Retain"
        name = volume["metadata"]["name"]
        if policy == "Retain":
            return
        if policy == "Recycle":
            # Upstream recycles by running a scrubber pod through an in-tree recycler plugin; the
            # policy is deprecated and pyk8s has no recycler plugin, which upstream reports thus.
            await self._update_volume_phase_with_event(volume, "Failed", "VolumeFailedRecycle",
                                                       "No recycler plugin found for the volume!")
            return
        if policy == "Delete":
            provisioner = (volume["metadata"].get("annotations") or {}).get(ANN_PROVISIONED_BY) or ""
            if provisioner and not provisioner.startswith("kubernetes.io/"):
                return  # its external provisioner deletes it
            await self._update_volume_phase_with_event(
                volume, "Failed", "VolumeFailedDelete",
                f'error getting deleter volume plugin for volume "{name}": no deletable volume plugin matched')
            return
        self.recorder.warning(volume, "VolumeUnknownReclaimPolicy",
                              "Volume has unrecognized PersistentVolumeReclaimPolicy")

