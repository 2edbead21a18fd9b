"""Disruption controller: fills in every PodDisruptionBudget's status (expected, desired and
currently healthy pods, how many disruptions are allowed now, the DisruptionAllowed condition) so
the eviction API can decide. Pods the eviction API reported in status.disruptedPods stop counting as
healthy until they are seen deleting, or for DELETION_TIMEOUT if they never are. Pods whose
DisruptionTarget condition went stale (set, yet the pod was never deleted) get it reset, as upstream.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

import httpx

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from controller_manager.discovery import discover
from controller_manager.podutil import controller_ref, is_ready, now
from controller_manager.resources import DEPLOYMENTS, PODS, REPLICA_SETS, REPLICATION_CONTROLLERS, STATEFUL_SETS
from services.api.conditions import get_condition, set_status_condition
from services.api.intstr import scaled_value
from services.api.meta import parse_time
from services.api.selectors import LabelSelector
from services.client import ApiError, Conflict, NotFound, gvr
from services.client.rest import GVR
from services.informers import split_key

NAME = "disruption"

Obj = dict[str, Any]

PDBS = gvr("policy/v1", "poddisruptionbudgets")
#: upstream's DeletionTimeout: how long a pod the eviction API reported stays out of currentHealthy
#: while it is not seen deleting
DELETION_TIMEOUT = timedelta(minutes=2)
#: upstream's stalePodDisruptionTimeout: a DisruptionTarget condition on a pod not deleted this long is reset
STALE_POD_DISRUPTION_TIMEOUT = timedelta(minutes=2)
DISRUPTION_ALLOWED = "DisruptionAllowed"
DISRUPTION_TARGET = "DisruptionTarget"
SUFFICIENT_PODS = "SufficientPods"
INSUFFICIENT_PODS = "InsufficientPods"
SYNC_FAILED = "SyncFailed"
#: work-queue keys of pods with a stale DisruptionTarget condition carry this prefix (":" never
#: occurs in a namespace name, so it cannot clash with a PodDisruptionBudget key)
STALE_POD_PREFIX = "pod:"
UNMANAGED_MESSAGE = (
    "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. As a result, the status "
    "of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods "
    'please set ".spec.minAvailable" field of the PDB to an integer value.'
)


class SyncError(Exception):
    """The budget's status cannot be computed; the PDB is marked SyncFailed with this message."""


def new(ctx: ControllerContext) -> DisruptionController:
    return DisruptionController(ctx)


# -- the arithmetic ----------------------------------------------------------------------------------


def _scaled(value: int | str, total: int) -> int:
    """A budget's IntOrString against `total`, percentages rounding up as upstream's do; a bad value
    fails the sync."""
    try:
        return scaled_value(value, total, round_up=True)
    except ValueError as exc:
        raise SyncError(str(exc)) from exc


def needs_scale(spec: Obj) -> bool:
    """Whether the budget is relative to its pods' controllers' scale rather than a plain pod count."""
    min_available = spec.get("minAvailable")
    return spec.get("maxUnavailable") is not None or (min_available is not None and isinstance(min_available, str))


def expected_and_desired(spec: Obj, matched: int, scale: int) -> tuple[int, int]:
    """(expectedPods, desiredHealthy): `matched` pods are selected, their controllers want `scale`."""
    max_unavailable = spec.get("maxUnavailable")
    if max_unavailable is not None:
        return scale, max(0, scale - _scaled(max_unavailable, scale))
    min_available = spec.get("minAvailable")
    if min_available is None:
        return 0, 0
    if isinstance(min_available, str):
        return scale, _scaled(min_available, scale)
    return matched, _scaled(min_available, matched)


def disruptions_allowed(current_healthy: int, desired_healthy: int, expected: int) -> int:
    """0 while no pod is expected, so a budget whose first pods appear before its sync stays safe."""
    if expected <= 0:
        return 0
    return max(0, current_healthy - desired_healthy)


def _expired(disrupted_at: str, at: datetime) -> bool:
    when = parse_time(disrupted_at)
    return when is None or when + DELETION_TIMEOUT < at


def disrupted_pod_map(
    pods: list[Obj], reported: dict[str, str] | None, at: datetime
) -> tuple[dict[str, str], datetime | None, list[Obj]]:
    """Entries of status.disruptedPods still pending: the pod exists, is not deleting yet, and its entry
    is younger than DELETION_TIMEOUT. Also when the next entry expires, and the pods whose entry expired."""
    kept: dict[str, str] = {}
    recheck: datetime | None = None
    not_deleted: list[Obj] = []
    if not reported:
        return kept, recheck, not_deleted
    for pod in pods:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        disrupted_at = reported.get(meta["name"])
        if disrupted_at is None:
            continue
        if _expired(disrupted_at, at):
            not_deleted.append(pod)
            continue
        when = parse_time(disrupted_at)
        assert when is not None
        expires = when + DELETION_TIMEOUT
        if recheck is None or expires < recheck:
            recheck = expires
        kept[meta["name"]] = disrupted_at
    return kept, recheck, not_deleted


def count_healthy(pods: list[Obj], disrupted: dict[str, str], at: datetime) -> int:
    """Ready pods, not deleting and not about to be deleted by an eviction."""
    healthy = 0
    for pod in pods:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        disrupted_at = disrupted.get(meta["name"])
        if disrupted_at is not None and not _expired(disrupted_at, at):
            continue
        if is_ready(pod):
            healthy += 1
    return healthy


def allowed_condition(status: Obj) -> Obj:
    """DisruptionAllowed as the budget's numbers say (upstream's UpdateDisruptionAllowedCondition)."""
    allowed = int(status.get("disruptionsAllowed") or 0) > 0
    return {
        "type": DISRUPTION_ALLOWED,
        "status": "True" if allowed else "False",
        "reason": SUFFICIENT_PODS if allowed else INSUFFICIENT_PODS,
        "message": "",
        "observedGeneration": int(status.get("observedGeneration") or 0),
    }


def conditions_up_to_date(pdb: Obj) -> bool:
    status = pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) != int(pdb["metadata"].get("generation") or 0):
        return False
    cond = get_condition(pdb, DISRUPTION_ALLOWED)
    if cond is None:
        return False
    want = allowed_condition(status)
    return cond.get("status") == want["status"] and cond.get("reason") == want["reason"]


def pdb_selector(pdb: Obj) -> LabelSelector | None:
    """The budget's selector; None for an invalid one, which selects nothing."""
    try:
        return LabelSelector.from_dict((pdb.get("spec") or {}).get("selector"))
    except ValueError:
        return None


def pdbs_for_pod(pod: Obj, pdbs: list[Obj]) -> list[Obj]:
    """Budgets covering the pod, in name order; a pod without labels has none (upstream's lister)."""
    labels = pod["metadata"].get("labels")
    if not labels:
        return []
    out = []
    for pdb in pdbs:
        selector = pdb_selector(pdb)
        if selector is not None and selector.matches(labels):
            out.append(pdb)
    return sorted(out, key=lambda p: p["metadata"]["name"])


def stale_disruption_wait(pod: Obj, at: datetime) -> float | None:
    """Seconds until the pod's DisruptionTarget condition counts as stale (0: it is), None if it cannot."""
    if pod["metadata"].get("deletionTimestamp"):
        return None
    cond = get_condition(pod, DISRUPTION_TARGET)
    if cond is None or cond.get("status") != "True":
        return None
    since = parse_time(cond.get("lastTransitionTime")) or at
    return max(0.0, (since + STALE_POD_DISRUPTION_TIMEOUT - at).total_seconds())


def _time(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _typed(pdb: Obj) -> Obj:
    return {**pdb, "kind": "PodDisruptionBudget", "apiVersion": "policy/v1"}


# -- controller --------------------------------------------------------------------------------------


class DisruptionController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.pods = ctx.informer(PODS)
        self.pdbs = ctx.informer(PDBS)
        self.rcs = ctx.informer(REPLICATION_CONTROLLERS)
        self.rss = ctx.informer(REPLICA_SETS)
        self.deployments = ctx.informer(DEPLOYMENTS)
        self.statefulsets = ctx.informer(STATEFUL_SETS)
        self.recorder = ctx.recorder("controllermanager")
        #: (group, kind) -> plural, from discovery, for controllers known only by their /scale subresource
        self.plurals: dict[tuple[str, str], str] = {}
        super().__init__(NAME, [self.pods, self.pdbs, self.rcs, self.rss, self.deployments, self.statefulsets])
        self.pdbs.add_event_handler(self.enqueue, lambda old, new: self.enqueue(new), self.enqueue)
        self.pods.add_event_handler(self._pod_added, self._pod_updated, self._pod_deleted)

    # -- events ----------------------------------------------------------------------------------

    def _pdb_for_pod(self, pod: Obj) -> Obj | None:
        pdbs = pdbs_for_pod(pod, self.pdbs.list(pod["metadata"].get("namespace")))
        if not pdbs:
            return None
        if len(pdbs) > 1:
            meta = pod["metadata"]
            msg = (f'Pod "{meta.get("namespace", "")}"/"{meta["name"]}" matches multiple PodDisruptionBudgets.  '
                   f'Chose "{pdbs[0]["metadata"]["name"]}" arbitrarily.')
            self.log.info(msg)
            self.recorder.warning({**pod, "kind": "Pod", "apiVersion": "v1"}, "MultiplePodDisruptionBudgets", msg)
        return pdbs[0]

    def _pod_added(self, pod: Obj) -> None:
        pdb = self._pdb_for_pod(pod)
        if pdb is not None:
            self.enqueue(pdb)
        self._check_stale_disruption(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if old["metadata"].get("resourceVersion") == new["metadata"].get("resourceVersion"):
            return
        pdb = self._pdb_for_pod(new)
        if pdb is not None:
            self.enqueue(pdb)
        if old["metadata"].get("labels") != new["metadata"].get("labels"):
            # A pod that left its budget must stop counting there now, not at the budget's next event.
            previous = self._pdb_for_pod(old)
            if previous is not None:
                self.enqueue(previous)
        self._check_stale_disruption(new)

    def _pod_deleted(self, pod: Obj) -> None:
        pdb = self._pdb_for_pod(pod)
        if pdb is not None:
            self.enqueue(pdb)

    def _check_stale_disruption(self, pod: Obj) -> None:
        wait = stale_disruption_wait(pod, now())
        if wait is not None:
            meta = pod["metadata"]
            self.queue.add_after(f"{STALE_POD_PREFIX}{meta.get('namespace', '')}/{meta['name']}", wait)

    # -- sync ------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        if key.startswith(STALE_POD_PREFIX):
            await self._sync_stale_pod(key[len(STALE_POD_PREFIX):])
            return
        namespace, name = split_key(key)
        pdb = self.pdbs.get(name, namespace)
        if pdb is None:
            return
        try:
            await self._try_sync(pdb)
        except Conflict:
            raise
        except (ApiError, SyncError) as exc:
            self.log.warning("failed to sync PDB", pdb=key, error=str(exc))
            await self._fail_safe(pdb, str(exc))

    async def _try_sync(self, pdb: Obj) -> None:
        namespace = pdb["metadata"].get("namespace", "")
        selector = pdb_selector(pdb)
        if selector is None:
            self.recorder.warning(_typed(pdb), "NoPods", "Failed to get pods: invalid label selector")
            raise SyncError("invalid label selector")
        pods = [p for p in self.pods.list(namespace) if selector.matches(p["metadata"].get("labels"))]
        if not pods:
            self.recorder.normal(_typed(pdb), "NoPods", "No matching pods found")
        spec = pdb.get("spec") or {}
        scale = 0
        if needs_scale(spec):
            try:
                scale, unmanaged = await self.expected_scale(pods)
            except SyncError as exc:
                self.recorder.warning(_typed(pdb), "CalculateExpectedPodCountFailed",
                                      f"Failed to calculate the number of expected pods: {exc}")
                raise
            if unmanaged:
                self.log.debug("found unmanaged pods associated with this PDB", pods=unmanaged)
                self.recorder.warning(_typed(pdb), "UnmanagedPods",
                                      UNMANAGED_MESSAGE.format(spec.get("selector")))
        expected, desired = expected_and_desired(spec, len(pods), scale)
        at = now()
        disrupted, recheck, not_deleted = disrupted_pod_map(pods, (pdb.get("status") or {}).get("disruptedPods"), at)
        for pod in not_deleted:
            self.recorder.warning({**pod, "kind": "Pod", "apiVersion": "v1"}, "NotDeleted",
                                  f"Pod was expected by PDB {namespace}/{pdb['metadata']['name']} to be deleted "
                                  "but it wasn't")
        healthy = count_healthy(pods, disrupted, at)
        await self._update_status(pdb, healthy, desired, expected, disrupted)
        if recheck is not None:
            self.enqueue_after(pdb, max(0.0, (recheck - at).total_seconds()) + 1.0)

    async def _update_status(
        self, pdb: Obj, healthy: int, desired: int, expected: int, disrupted: dict[str, str]
    ) -> None:
        """Write the status when it differs from what is stored, compare-and-swap on the cached resourceVersion."""
        allowed = disruptions_allowed(healthy, desired, expected)
        generation = int(pdb["metadata"].get("generation") or 0)
        old = pdb.get("status") or {}
        if (
            int(old.get("currentHealthy") or 0) == healthy
            and int(old.get("desiredHealthy") or 0) == desired
            and int(old.get("expectedPods") or 0) == expected
            and int(old.get("disruptionsAllowed") or 0) == allowed
            and (old.get("disruptedPods") or {}) == disrupted
            and int(old.get("observedGeneration") or 0) == generation
            and conditions_up_to_date(pdb)
        ):
            return
        status: Obj = {
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptionsAllowed": allowed,
            "observedGeneration": generation,
        }
        if disrupted:
            status["disruptedPods"] = disrupted
        if old.get("conditions"):
            status["conditions"] = old["conditions"]
        set_status_condition(status, allowed_condition(status), _time(now()))
        await self._write(pdb, status)

    async def _fail_safe(self, pdb: Obj, message: str) -> None:
        """Allow no disruption while the budget cannot be computed (upstream's failSafe)."""
        status = copy.deepcopy(pdb.get("status") or {})
        status["disruptionsAllowed"] = 0
        set_status_condition(status, {"type": DISRUPTION_ALLOWED, "status": "False", "reason": SYNC_FAILED,
                               "message": message, "observedGeneration": int(status.get("observedGeneration") or 0)},
                      _time(now()))
        await self._write(pdb, status)

    async def _write(self, pdb: Obj, status: Obj) -> None:
        body = {**pdb, "kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "status": status}
        await self.client.replace_status(PDBS, body, pdb["metadata"].get("namespace"))

    # -- expected scale --------------------------------------------------------------------------

    async def expected_scale(self, pods: list[Obj]) -> tuple[int, list[str]]:
        """The sum of the scales of the pods' controllers, and the pods without a controller."""
        scales: dict[str, int] = {}
        unmanaged: list[str] = []
        for pod in pods:
            ref = controller_ref(pod)
            if ref is None:
                unmanaged.append(pod["metadata"]["name"])
                continue
            if ref.get("uid") in scales:
                continue
            namespace = pod["metadata"].get("namespace", "")
            found: tuple[str, int] | None = None
            for finder in (self._replication_controller, self._deployment, self._replica_set, self._stateful_set):
                found = finder(ref, namespace)
                if found is not None:
                    break
            if found is None:
                found = await self._scale_controller(ref, namespace)
            if found is None:
                raise SyncError(f'found no controllers for pod "{pod["metadata"]["name"]}"')
            scales[found[0]] = found[1]
        return sum(scales.values()), unmanaged

    @staticmethod
    def _group_kind_is(ref: Obj, kind: str, groups: tuple[str, ...]) -> bool:
        group = str(ref.get("apiVersion") or "").rpartition("/")[0]
        return ref.get("kind") == kind and group in groups

    @staticmethod
    def _owned(obj: Obj | None, ref: Obj) -> Obj | None:
        if obj is None or obj["metadata"].get("uid") != ref.get("uid"):
            return None
        return obj

    @staticmethod
    def _replicas(obj: Obj) -> int:
        value = (obj.get("spec") or {}).get("replicas")
        return 1 if value is None else int(value)

    def _replication_controller(self, ref: Obj, namespace: str) -> tuple[str, int] | None:
        if not self._group_kind_is(ref, "ReplicationController", ("",)):
            return None
        rc = self._owned(self.rcs.get(ref.get("name", ""), namespace), ref)
        return None if rc is None else (rc["metadata"]["uid"], self._replicas(rc))

    def _deployment(self, ref: Obj, namespace: str) -> tuple[str, int] | None:
        if not self._group_kind_is(ref, "ReplicaSet", ("apps", "extensions")):
            return None
        rs = self._owned(self.rss.get(ref.get("name", ""), namespace), ref)
        owner = controller_ref(rs) if rs is not None else None
        if owner is None or not self._group_kind_is(owner, "Deployment", ("apps", "extensions")):
            return None
        deployment = self._owned(self.deployments.get(owner.get("name", ""), namespace), owner)
        return None if deployment is None else (deployment["metadata"]["uid"], self._replicas(deployment))

    def _replica_set(self, ref: Obj, namespace: str) -> tuple[str, int] | None:
        if not self._group_kind_is(ref, "ReplicaSet", ("apps", "extensions")):
            return None
        rs = self._owned(self.rss.get(ref.get("name", ""), namespace), ref)
        if rs is None:
            return None
        owner = controller_ref(rs)
        if owner is not None and owner.get("kind") == "Deployment":
            return None
        return rs["metadata"]["uid"], self._replicas(rs)

    def _stateful_set(self, ref: Obj, namespace: str) -> tuple[str, int] | None:
        if not self._group_kind_is(ref, "StatefulSet", ("apps",)):
            return None
        sts = self._owned(self.statefulsets.get(ref.get("name", ""), namespace), ref)
        return None if sts is None else (sts["metadata"]["uid"], self._replicas(sts))

    async def _scale_controller(self, ref: Obj, namespace: str) -> tuple[str, int] | None:
        """Any other controller through its /scale subresource, found by discovery."""
        group, _, version = str(ref.get("apiVersion") or "").rpartition("/")
        kind = str(ref.get("kind") or "")
        plural = self.plurals.get((group, kind))
        if plural is None:
            try:
                found = await discover(self.client)
            except httpx.HTTPError as exc:
                raise SyncError(f"discovery failed: {exc}") from exc
            self.plurals = {(r.gvr.group, r.kind): r.gvr.plural for r in found.resources}
            plural = self.plurals.get((group, kind))
            if plural is None:
                raise SyncError(f'no matches for kind "{kind}" in version "{ref.get("apiVersion", "")}"')
        resource = GVR(group, version, plural)
        try:
            scale = await self.client.get_scale(resource, ref.get("name", ""), namespace)
        except NotFound:
            if not await self._implements_scale(resource):
                raise SyncError(f"{plural}{'.' + group if group else ''} does not implement the scale "
                                "subresource") from None
            return None
        if (scale.get("metadata") or {}).get("uid") != ref.get("uid"):
            return None
        return ref["uid"], int((scale.get("spec") or {}).get("replicas") or 0)

    async def _implements_scale(self, resource: GVR) -> bool:
        path = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
        doc = await self.client.request("GET", path)
        return any(r.get("name") == f"{resource.plural}/scale" and r.get("kind") == "Scale"
                   for r in doc.get("resources") or [])

    # -- stale DisruptionTarget conditions -------------------------------------------------------

    async def _sync_stale_pod(self, key: str) -> None:
        namespace, name = split_key(key)
        pod = self.pods.get(name, namespace)
        if pod is None:
            return
        wait = stale_disruption_wait(pod, now())
        if wait is None:
            return
        if wait > 0:
            self.queue.add_after(STALE_POD_PREFIX + key, wait)
            return
        body = copy.deepcopy(pod)
        status = body.setdefault("status", {})
        at = _time(now())
        for cond in status.get("conditions") or []:
            if cond.get("type") == DISRUPTION_TARGET:
                cond.update({"status": "False", "lastTransitionTime": at})
                cond.pop("reason", None)
                cond.pop("message", None)
        await self.client.replace_status(PODS, {**body, "kind": "Pod", "apiVersion": "v1"}, namespace)
        self.log.info("reset stale DisruptionTarget condition to False", pod=key)
