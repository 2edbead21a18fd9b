"""Taint eviction controller: pods on a node with NoExecute taints they do not tolerate are deleted
at once; pods tolerating them for `tolerationSeconds` are deleted when the shortest such time has
passed since the taint was added; pods tolerating them without a limit stay. Removing the taint
cancels a pending deletion. Each deleted pod first gets the DisruptionTarget condition saying why.

The countdown starts at the taint's timeAdded (when it has one), so a restarted controller-manager
keeps the original deadline rather than granting the whole toleration again.
"""

from __future__ import annotations

import time
from typing import Any

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.events import EventRecorder
from controller_manager.resources import NODES, PODS
from services.api.meta import now_rfc3339, parse_time
from services.api.nodeaffinity import tolerates
from services.client import NotFound
from services.informers import NODE_NAME_INDEX, Informer, meta_namespace_key, split_key

NAME = "taint-eviction-controller"

Obj = dict[str, Any]

NO_EXECUTE = "NoExecute"
WORKERS = 8


def new(ctx: ControllerContext) -> TaintEvictionController:
    return TaintEvictionController(ctx)


def no_execute_taints(node: Obj | None) -> list[Obj]:
    return [t for t in ((node or {}).get("spec") or {}).get("taints") or [] if t.get("effect") == NO_EXECUTE]


def matching_tolerations(taints: list[Obj], tolerations: list[Obj]) -> tuple[bool, list[Obj]]:
    """(every taint tolerated, the tolerations used), as upstream's GetMatchingTolerations."""
    used: list[Obj] = []
    for taint in taints:
        match = next((t for t in tolerations if tolerates(t, taint)), None)
        if match is None:
            return False, []
        used.append(match)
    return True, used


def min_toleration_seconds(tolerations: list[Obj]) -> float | None:
    """The shortest tolerationSeconds among `tolerations` (negative counts as 0); None: forever."""
    seconds = [t["tolerationSeconds"] for t in tolerations if t.get("tolerationSeconds") is not None]
    if not seconds:
        return None
    return float(max(0, min(int(s) for s in seconds)))


def eviction_deadline(taints: list[Obj], tolerations: list[Obj], observed: float) -> float | None:
    """Wall-clock time at which the pod is to be deleted: now-ish for an untolerated taint, the
    earliest timeAdded (or `observed` when a taint has none) plus the shortest toleration, or None
    when the pod may stay."""
    if not taints:
        return None
    tolerated, used = matching_tolerations(taints, tolerations)
    if not tolerated:
        return 0.0
    seconds = min_toleration_seconds(used)
    if seconds is None:
        return None
    added = [parse_time(t.get("timeAdded")) for t in taints]
    start = min([a.timestamp() for a in added if a is not None] + [observed]) if all(added) else observed
    return start + seconds


class TaintEvictionController(QueueController):
    """Keys are pods; a pod's deadline is recomputed from the caches on every look, so a changed
    taint or toleration reschedules it and a removed taint cancels it."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.pods: Informer = ctx.informer(PODS)
        self.nodes: Informer = ctx.informer(NODES)
        self.recorder: EventRecorder = ctx.recorder("taint-eviction-controller")
        #: pod key -> wall time its deletion is due
        self.scheduled: dict[str, float] = {}
        #: node name -> wall time this process first saw its NoExecute taints (for taints without timeAdded)
        self.tainted_since: dict[str, float] = {}
        #: pod key -> uid of the pod whose delete was sent, so its own status write does not evict it twice
        self.evicted: dict[str, str] = {}
        super().__init__(NAME, [self.pods, self.nodes], WORKERS)
        self.pods.add_event_handler(self._pod_changed, lambda _o, n: self._pod_changed(n), self._pod_changed)
        self.nodes.add_event_handler(self._node_changed, self._node_updated, self._node_changed)

    def _pod_changed(self, pod: Obj) -> None:
        if (pod.get("spec") or {}).get("nodeName") or meta_namespace_key(pod) in self.scheduled:
            self.enqueue(pod)

    def _node_updated(self, old: Obj, new: Obj) -> None:
        if no_execute_taints(old) != no_execute_taints(new):
            self._node_changed(new)

    def _node_changed(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        if no_execute_taints(self.nodes.get(name)):
            self.tainted_since.setdefault(name, time.time())
        else:
            self.tainted_since.pop(name, None)
        for pod in self.pods.store.by_index(NODE_NAME_INDEX, name):
            self.enqueue(pod)

    async def sync(self, key: str) -> None:
        namespace, name = split_key(key)
        pod = self.pods.get(name, namespace)
        if pod is None or self.evicted.get(key) != pod["metadata"].get("uid"):
            self.evicted.pop(key, None)
        elif not pod["metadata"].get("deletionTimestamp"):
            return
        deadline = None
        if pod is not None and not pod["metadata"].get("deletionTimestamp"):
            node_name = (pod.get("spec") or {}).get("nodeName") or ""
            taints = no_execute_taints(self.nodes.get(node_name)) if node_name else []
            observed = self.tainted_since.setdefault(node_name, time.time()) if taints else time.time()
            deadline = eviction_deadline(taints, (pod.get("spec") or {}).get("tolerations") or [], observed)
        if deadline is None:
            if self.scheduled.pop(key, None) is not None and pod is not None:
                self.recorder.normal(pod, "TaintManagerEviction", f"Cancelling deletion of Pod {key}")
            return
        assert pod is not None
        wait = deadline - time.time()
        if wait > 0:
            self.scheduled[key] = deadline
            raise RequeueAfter(wait)
        self.scheduled.pop(key, None)
        await self._evict(pod, key)

    async def _evict(self, pod: Obj, key: str) -> None:
        """Upstream's addConditionAndDeletePod: DisruptionTarget first, then the delete."""
        self.recorder.normal(pod, "TaintManagerEviction", f"Marking for deletion Pod {key}")
        meta = pod["metadata"]
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or []
                      if c.get("type") != "DisruptionTarget"]
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                           "message": "Taint manager: deleting due to NoExecute taint",
                           "lastTransitionTime": now_rfc3339()})
        try:
            await self.client.patch_status(PODS, meta["name"], {"status": {"conditions": conditions}},
                                           meta["namespace"])
            await self.client.delete(PODS, meta["name"], meta["namespace"], preconditions={"uid": meta["uid"]})
        except NotFound:
            return
        self.evicted[key] = meta["uid"]
        self.log.info("evicted pod for NoExecute taint", pod=key, node=(pod.get("spec") or {}).get("nodeName"))

