"""pods/eviction (upstream's EvictionREST, pkg/registry/core/pod/storage/eviction.go): delete the pod
unless its PodDisruptionBudget forbids it, taking the disruption out of the budget's status (a
compare-and-swap write) before the pod is deleted."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from apiserver.registry.store import DeleteOptions, ListOptions, RESTStore, WriteOptions
from apiserver.registry.strategy import Obj
from apiserver.registry.subresources.base import SubresourceREST, success
from services.api import errors
from services.api.meta import now_rfc3339
from services.api.selectors import LabelSelector

PDB = ("policy", "v1", "poddisruptionbudgets")

#: upstream's EvictionsRetry steps: attempts at a write that keeps conflicting
EVICTION_RETRIES = 20
#: upstream's MaxDisruptedPodSize: evictions a budget may hold unconfirmed by the disruption controller
MAX_DISRUPTED_PODS = 2000


class EvictionREST(SubresourceREST):
    name: ClassVar[str] = "eviction"
    verbs: ClassVar[tuple[str, ...]] = ("create",)
    kind: ClassVar[tuple[str, str] | None] = ("policy/v1", "Eviction")
    body_optional: ClassVar[bool] = True

    async def create(self, ns: str | None, name: str, eviction: Obj, wopts: WriteOptions) -> Obj:
        """A Success Status once the pod is evicted, or the Failure Status of a pod with several budgets."""
        store = self.store
        meta = eviction.get("metadata") or {}
        delete_options = eviction.get("deleteOptions") or {}
        pre = delete_options.get("preconditions") or {}
        grace = delete_options.get("gracePeriodSeconds")
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        await self.store.admit_subresource(ns, name, eviction, "eviction", wopts)
        opts = DeleteOptions(dry_run=wopts.dry_run or bool(delete_options.get("dryRun")), grace_period=grace)
        opts.precondition_uid = pre.get("uid")
        opts.precondition_rv = pre.get("resourceVersion")
        # A pod that is finished, not started or already going disrupts nothing more: delete it with no
        # budget check, pinned to the version seen so it cannot have become running meanwhile.
        pod: dict[str, Any] = {}
        for attempt in range(EVICTION_RETRIES):
            pod = await store.get(ns, name)
            if not _eviction_ignores_budget(pod):
                break
            pinned_rv = opts.precondition_rv or pod["metadata"]["resourceVersion"]
            pinned = dataclasses.replace(opts, precondition_rv=pinned_rv)
            try:
                await self._delete_evicted(store, ns, name, pinned)
                return success()
            except errors.StatusError as exc:
                if exc.code != 409 or opts.precondition_rv or attempt == EVICTION_RETRIES - 1:
                    raise
        budgets = await self._pod_budgets(pod)
        if len(budgets) > 1:
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "This pod has more than one PodDisruptionBudget, which the eviction "
                               "subresource does not support.", "code": 500}
        pin_unhealthy = False
        if budgets:
            pdb = budgets[0]
            status = pdb.get("status") or {}
            if not _pod_ready(pod):
                # An unready pod counts toward no budget, so deleting it takes nothing from it: allowed
                # always under AlwaysAllow, under IfHealthyBudget only while the budget is met.
                desired = int(status.get("desiredHealthy") or 0)
                pin_unhealthy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or (
                    int(status.get("currentHealthy") or 0) >= desired > 0)
            if not pin_unhealthy:
                await self._take_disruption(pdb["metadata"]["name"], ns, name, opts.dry_run)
        delete_opts = opts
        if pin_unhealthy and not opts.precondition_rv:
            delete_opts = dataclasses.replace(opts, precondition_rv=pod["metadata"]["resourceVersion"])
        try:
            await self._delete_evicted(store, ns, name, delete_opts)
        except errors.StatusError as exc:
            if exc.code == 409 and pin_unhealthy and not opts.precondition_rv:
                raise _budget_not_processed(budgets[0]["metadata"]["name"]) from exc
            raise
        return success()

    async def _pod_budgets(self, pod: Obj) -> list[Obj]:
        """The PodDisruptionBudgets of the pod's namespace whose selector matches it ({} matches all), read
        through the budgets' store as upstream's eviction lists them."""
        pdb_store = self.deps.stores.get(PDB)
        if pdb_store is None:
            return []
        labels = pod["metadata"].get("labels") or {}
        found = []
        for pdb in await pdb_store.list_objects(pod["metadata"].get("namespace"), ListOptions()):
            try:
                selector = LabelSelector.from_dict((pdb.get("spec") or {}).get("selector"))
            except ValueError:
                continue
            if selector.matches(labels):
                found.append(pdb)
        return found

    async def _take_disruption(self, pdb_name: str, ns: str | None, pod_name: str, dry_run: bool) -> None:
        """Check the budget allows a disruption and record this one in its status, compare-and-swap on the
        budget's resourceVersion and retried on conflict from a fresh read (upstream's checkAndDecrement)."""
        pdb_store = self.deps.stores[PDB]
        for _ in range(EVICTION_RETRIES):
            pdb = await pdb_store.get(ns, pdb_name)
            meta, status = pdb["metadata"], dict(pdb.get("status") or {})
            if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
                raise _budget_not_processed(pdb_name)
            allowed = int(status.get("disruptionsAllowed") or 0)
            if allowed < 0:
                raise errors.forbidden("poddisruptionbudget", "policy", pdb_name, "pdb disruptions allowed is negative")
            if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
                raise errors.forbidden("poddisruptionbudget", "policy", pdb_name, "DisruptedPods map too big - too "
                                       "many evictions not confirmed by PDB controller")
            if allowed == 0:
                raise errors.StatusError(
                    429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                    {"causes": [{"reason": "DisruptionBudget", "message": f"The disruption budget {pdb_name} needs "
                                 f"{int(status.get('desiredHealthy') or 0)} healthy pods and has "
                                 f"{int(status.get('currentHealthy') or 0)} currently"}]},
                )
            if dry_run:
                return
            status["disruptionsAllowed"] = allowed - 1
            if allowed == 1:
                status["conditions"] = _disruption_not_allowed(status)
            status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: now_rfc3339()}
            try:
                await pdb_store.update(ns, pdb_name, {**pdb, "status": status},
                                       WriteOptions(field_manager="kube-apiserver"), subresource="status")
                return
            except errors.StatusError as exc:
                if exc.code != 409:
                    raise
        raise errors.StatusError(504, "Timeout", f'couldn\'t update PodDisruptionBudget "{pdb_name}" due to conflicts',
                                 {"retryAfterSeconds": 10})

    async def _delete_evicted(self, store: RESTStore, ns: str | None, name: str, opts: DeleteOptions) -> None:
        """Mark the pod a DisruptionTarget of the eviction API, then delete it (upstream's addConditionAndDeletePod)."""
        if not opts.dry_run:
            for _ in range(EVICTION_RETRIES):
                pod = await store.get(ns, name)
                meta = pod["metadata"]
                if opts.precondition_uid and opts.precondition_uid != meta.get("uid"):
                    raise errors.conflict("pods", "", name, "Precondition failed: UID in precondition: "
                                          f"{opts.precondition_uid}, UID in object meta: {meta.get('uid', '')}")
                if opts.precondition_rv and opts.precondition_rv != meta.get("resourceVersion"):
                    raise errors.conflict("pods", "", name, "Precondition failed: ResourceVersion in precondition: "
                                          f"{opts.precondition_rv}, ResourceVersion in object meta: "
                                          f"{meta.get('resourceVersion', '')}")
                status = dict(pod.get("status") or {})
                status["conditions"] = _with_disruption_target(status.get("conditions") or [])
                try:
                    updated, _ = await store.update(ns, name, {**pod, "status": status},
                                                    WriteOptions(field_manager="kube-apiserver"), subresource="status")
                except errors.StatusError as exc:
                    if exc.code != 409 or opts.precondition_rv:
                        raise
                    continue
                if opts.precondition_rv:
                    opts = dataclasses.replace(opts, precondition_rv=updated["metadata"]["resourceVersion"])
                break
        await store.delete(ns, name, opts)


def _pod_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _eviction_ignores_budget(pod: dict[str, Any]) -> bool:
    """Finished, not yet running, or already being deleted: evicting it disrupts nothing more."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Pending") or bool(
        pod["metadata"].get("deletionTimestamp"))


def _budget_not_processed(pdb_name: str) -> errors.StatusError:
    return errors.StatusError(
        429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
        {"causes": [{"reason": "DisruptionBudget",
                     "message": f"The disruption budget {pdb_name} is still being processed by the server."}],
         "retryAfterSeconds": 10},
    )


def _set_condition(conditions: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    """The conditions with `new` in place of its type; lastTransitionTime moves only when the status does."""
    out = [dict(c) for c in conditions]
    for cond in out:
        if cond.get("type") == new["type"]:
            if cond.get("status") != new["status"]:
                cond["lastTransitionTime"] = now_rfc3339()
            cond.update(new)
            return out
    return [*out, {**new, "lastTransitionTime": now_rfc3339()}]


def _disruption_not_allowed(status: dict[str, Any]) -> list[dict[str, Any]]:
    return _set_condition(status.get("conditions") or [], {
        "type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "",
        "observedGeneration": int(status.get("observedGeneration") or 0)})


def _with_disruption_target(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _set_condition(conditions, {"type": "DisruptionTarget", "status": "True",
                                       "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"})
