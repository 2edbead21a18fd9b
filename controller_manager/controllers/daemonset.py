"""DaemonSet controller: one pod per eligible node (nodeSelector, required node affinity,
taints against the template's tolerations plus the ones upstream adds to every daemon pod),
each pinned to its node by a required node-affinity term on metadata.name and left to the
scheduler to bind; RollingUpdate (maxUnavailable, maxSurge) or OnDelete over ControllerRevisions;
the status `kubectl rollout status ds` reads. A node whose kubelet rejects the daemon pod is retried
with back-off per node (upstream's failedPodsBackoff), not in a hot loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.history import (
    REVISION_HASH,
    ensure_revision,
    owned_revisions,
    truncate_history,
)
from controller_manager.podutil import controller_ref, is_available, is_ready, pod_from_template
from controller_manager.resources import CONTROLLER_REVISIONS, DAEMON_SETS, NODES, PODS
from services.api.intstr import scaled_value as int_or_percent
from services.api.nodeaffinity import required_node_affinity_matches, tolerations_tolerate
from services.api.selectors import LabelSelector
from services.client import NotFound
from services.client.flowcontrol import Backoff

NAME = "daemonset"

Obj = dict[str, Any]

#: (key, effect) of the tolerations upstream's AddOrUpdateDaemonPodTolerations adds to every daemon pod
DAEMON_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
NETWORK_UNAVAILABLE = ("node.kubernetes.io/network-unavailable", "NoSchedule")
#: upstream's failedPodsBackoff: deleting a node's failed daemon pod waits 1 s, doubling to 15 min
FAILED_POD_BACKOFF = (1.0, 900.0)


def new(ctx: ControllerContext) -> DaemonSetController:
    return DaemonSetController(ctx)


# -- node eligibility (pure) ----------------------------------------------------------------------------


def daemon_tolerations(pod_spec: Obj) -> list[Obj]:
    """The template's tolerations plus upstream's automatic ones (network-unavailable for hostNetwork)."""
    tolerations = [dict(t) for t in pod_spec.get("tolerations") or []]
    wanted = list(DAEMON_TOLERATIONS)
    if pod_spec.get("hostNetwork"):
        wanted.append(NETWORK_UNAVAILABLE)
    for key, effect in wanted:
        if not any(
            t.get("key") == key and t.get("effect") == effect and t.get("operator") == "Exists"
            for t in tolerations
        ):
            tolerations.append({"key": key, "operator": "Exists", "effect": effect})
    return tolerations


def should_run(node: Obj, pod_spec: Obj) -> tuple[bool, bool]:
    """(should run a daemon pod here, should a running one stay): upstream's NodeShouldRunDaemonPod."""
    name = node["metadata"]["name"]
    if pod_spec.get("nodeName") and pod_spec["nodeName"] != name:
        return False, False
    if not required_node_affinity_matches(pod_spec, node):
        return False, False
    tolerations = daemon_tolerations(pod_spec)
    run, stay = True, True
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if tolerations_tolerate(tolerations, taint):
            continue
        run = False
        if taint.get("effect") == "NoExecute":
            stay = False
    return run, stay


def pin_to_node(pod_spec: Obj, node_name: str) -> None:
    """Upstream's ReplaceDaemonSetPodNodeNameNodeAffinity: one required term, matchFields on the name."""
    affinity = pod_spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }


def target_node(pod: Obj) -> str | None:
    """The node a daemon pod is for: spec.nodeName, or the metadata.name its affinity pins it to."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]  # type: ignore[no-any-return]
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    for term in required:
        for expr in term.get("matchFields") or []:
            values = expr.get("values") or []
            if expr.get("key") == "metadata.name" and expr.get("operator") == "In" and len(values) == 1:
                return expr["values"][0]  # type: ignore[no-any-return]
    return None


def surge_plan(
    nodes: dict[str, list[Obj]],
    update_hash: str,
    max_surge: int,
    min_ready: int,
) -> tuple[list[str], list[Obj]]:
    """maxSurge > 0: nodes to start a new pod on beside the old one, and old pods whose new one is
    available."""
    create: list[str] = []
    delete: list[Obj] = []
    surging = 0
    for node, pods in sorted(nodes.items()):
        new = [p for p in pods if _hash(p) == update_hash]
        old = [p for p in pods if _hash(p) != update_hash]
        if not old:
            continue
        if new:
            if any(is_available(p, min_ready) for p in new):
                delete.extend(old)
            else:
                surging += 1
        elif not any(is_available(p, min_ready) for p in old):
            delete.extend(old)
        else:
            create.append(node)
    room = max(max_surge - surging, 0)
    return create[:room], delete


def unavailable_plan(
    nodes: dict[str, list[Obj]], update_hash: str, max_unavailable: int, min_ready: int
) -> list[Obj]:
    """maxSurge == 0: old pods to delete, unavailable ones first, so at most maxUnavailable nodes are down."""
    unavailable = 0
    old_unavailable: list[Obj] = []
    old_available: list[Obj] = []
    for _, pods in sorted(nodes.items()):
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if not live or not any(is_available(p, min_ready) for p in live):
            unavailable += 1
        for pod in live:
            if _hash(pod) == update_hash:
                continue
            (old_available if is_available(pod, min_ready) else old_unavailable).append(pod)
    room = max(max_unavailable - unavailable, 0)
    return old_unavailable + old_available[:room]


def _hash(pod: Obj) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_HASH, "")


# -- controller -------------------------------------------------------------------------------------


class DaemonSetController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.sets = ctx.informer(DAEMON_SETS)
        self.pods = ctx.informer(PODS)
        self.nodes = ctx.informer(NODES)
        self.revisions = ctx.informer(CONTROLLER_REVISIONS)
        self.recorder = ctx.recorder("daemonset-controller")
        self.failed_pods_backoff = Backoff(*FAILED_POD_BACKOFF)
        super().__init__(
            "daemonset",
            [self.sets, self.pods, self.nodes, self.revisions],
            int(ctx.options.concurrent_daemonset_syncs),
        )
        self.sets.add_event_handler(self.enqueue, lambda old, new: self.enqueue(new), self.enqueue)
        self.pods.add_event_handler(self._pod_event, lambda old, new: self._pod_event(new), self._pod_event)
        self.nodes.add_event_handler(self._node_event, self._node_update, self._node_event)

    def _pod_event(self, pod: Obj) -> None:
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "DaemonSet":
            return
        owner = self.sets.get(ref.get("name", ""), pod["metadata"].get("namespace"))
        if owner is not None and owner["metadata"].get("uid") == ref.get("uid"):
            self.enqueue(owner)

    def _node_event(self, node: Obj) -> None:
        for ds in self.sets.list():
            self.enqueue(ds)

    def _node_update(self, old: Obj, new: Obj) -> None:
        if old["metadata"].get("labels") != new["metadata"].get("labels") or (old.get("spec") or {}).get(
            "taints"
        ) != (new.get("spec") or {}).get("taints"):
            self._node_event(new)

    async def sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        ds = self.sets.get(name, namespace)
        if ds is None:
            return
        self.failed_pods_backoff.gc()
        spec = ds.get("spec") or {}
        template = spec.get("template") or {}
        revisions = owned_revisions(ds, self.revisions.list(namespace))
        labels = dict(((template.get("metadata") or {}).get("labels")) or {})
        revision, collision = await ensure_revision(self.client, ds, revisions, template, labels)
        update_hash = (revision["metadata"].get("labels") or {}).get(REVISION_HASH, "")
        uid = ds["metadata"]["uid"]
        try:
            selector = LabelSelector.from_dict(spec.get("selector"))
        except ValueError:
            selector = LabelSelector.nothing()
        owned = [
            p
            for p in self.pods.list(namespace)
            if (controller_ref(p) or {}).get("uid") == uid and selector.matches(p["metadata"].get("labels"))
        ]
        by_node: dict[str, list[Obj]] = {}
        for pod in owned:
            node = target_node(pod)
            if node:
                by_node.setdefault(node, []).append(pod)
        pod_spec = template.get("spec") or {}
        eligible: dict[str, list[Obj]] = {}
        create: list[str] = []
        delete: list[Obj] = []
        misscheduled = 0
        for node in self.nodes.list():
            node_name = node["metadata"]["name"]
            run, stay = should_run(node, pod_spec)
            pods = [p for p in by_node.pop(node_name, []) if not p["metadata"].get("deletionTimestamp")]
            if run:
                finished = self._finished_pods(ds, node_name, pods)
                delete.extend(finished)
                eligible[node_name] = [p for p in pods if (p.get("status") or {}).get("phase")
                                       not in ("Failed", "Succeeded")]
                if not pods:
                    create.append(node_name)
            elif pods:
                misscheduled += 1
                if not stay:
                    delete.extend(pods)
        for pods in by_node.values():  # pods for nodes that no longer exist
            delete.extend(p for p in pods if not p["metadata"].get("deletionTimestamp"))
        min_ready = int(spec.get("minReadySeconds") or 0)
        if not ds["metadata"].get("deletionTimestamp"):
            strategy = spec.get("updateStrategy") or {}
            if strategy.get("type", "RollingUpdate") == "RollingUpdate":
                rolling = strategy.get("rollingUpdate") or {}
                desired = len(eligible)
                max_surge = int_or_percent(rolling.get("maxSurge", 0), desired, round_up=True)
                max_unavailable = int_or_percent(rolling.get("maxUnavailable", 1), desired, round_up=True)
                if max_surge > 0:
                    surge_nodes, old = surge_plan(eligible, update_hash, max_surge, min_ready)
                    create.extend(surge_nodes)
                    delete.extend(old)
                else:
                    delete.extend(unavailable_plan(eligible, update_hash, max(max_unavailable, 1), min_ready))
                    duplicates = [
                        p for pods in eligible.values() if len(pods) > 1 for p in _extra(pods, update_hash)
                    ]
                    delete.extend(duplicates)
            await self._apply(ds, template, update_hash, create, delete)
        await self._update_status(ds, eligible, misscheduled, update_hash, min_ready, collision)
        live = {revision["metadata"]["name"]}
        hashes = {_hash(p) for p in owned}
        live |= {
            r["metadata"]["name"]
            for r in revisions
            if (r["metadata"].get("labels") or {}).get(REVISION_HASH) in hashes
        }
        await truncate_history(self.client, ds, owned_revisions(ds, self.revisions.list(namespace)), live)
        if min_ready > 0 and any(is_ready(p) and not is_available(p, min_ready) for p in owned):
            raise RequeueAfter(float(min_ready))

    def _finished_pods(self, ds: Obj, node_name: str, pods: list[Obj]) -> list[Obj]:
        """The node's failed and succeeded daemon pods to delete now. A failed one waits out the node's
        back-off first (the set is requeued for then): a kubelet that keeps rejecting the pod is not met
        with a new pod every sync. A node with any of them gets its new pod once they are gone."""
        out: list[Obj] = []
        backoff = self.failed_pods_backoff
        key = f"{ds['metadata']['uid']}/{(ds.get('status') or {}).get('observedGeneration', 0)}/{node_name}"
        for pod in pods:
            phase = (pod.get("status") or {}).get("phase")
            where = f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']} on node {node_name}"
            if phase == "Failed":
                if backoff.in_backoff_since_update(key):
                    self.enqueue_after(ds, backoff.current(key))
                    continue
                backoff.next(key)
                self.recorder.warning(ds, "FailedDaemonPod", f"Found failed daemon pod {where}, will try to kill it")
                out.append(pod)
            elif phase == "Succeeded":
                self.recorder.normal(ds, "SucceededDaemonPod",
                                     f"Found succeeded daemon pod {where}, will try to delete it")
                out.append(pod)
        return out

    async def _apply(
        self, ds: Obj, template: Obj, update_hash: str, create: list[str], delete: list[Obj]
    ) -> None:
        namespace = ds["metadata"]["namespace"]

        async def make(node: str) -> None:
            pod = pod_from_template(template, ds)
            pod["metadata"].setdefault("labels", {})[REVISION_HASH] = update_hash
            pod["spec"]["tolerations"] = daemon_tolerations(pod["spec"])
            pin_to_node(pod["spec"], node)
            try:
                created = await self.client.create(PODS, pod, namespace)
            except Exception as exc:
                self.recorder.warning(ds, "FailedCreate", f"Error creating: {exc}")
                raise
            self.recorder.normal(ds, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")

        async def remove(pod: Obj) -> None:
            meta = pod["metadata"]
            try:
                await self.client.delete(
                    PODS, meta["name"], meta["namespace"], preconditions={"uid": meta["uid"]}
                )
            except NotFound:
                return
            self.recorder.normal(ds, "SuccessfulDelete", f"Deleted pod: {meta['name']}")

        seen: set[str] = set()
        unique = [p for p in delete if not (p["metadata"]["uid"] in seen or seen.add(p["metadata"]["uid"]))]
        results = await asyncio.gather(
            *(make(n) for n in create), *(remove(p) for p in unique), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            raise errors[0]

    async def _update_status(
        self,
        ds: Obj,
        eligible: dict[str, list[Obj]],
        misscheduled: int,
        update_hash: str,
        min_ready: int,
        collision: int,
    ) -> None:
        current = ready = available = updated = 0
        for pods in eligible.values():
            if not pods:
                continue
            current += 1
            pod = min(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")
            if is_ready(pod):
                ready += 1
                if is_available(pod, min_ready):
                    available += 1
            if any(_hash(p) == update_hash for p in pods):
                updated += 1
        desired = len(eligible)
        status: Obj = {
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": current,
            "numberMisscheduled": misscheduled,
            "numberReady": ready,
            "numberAvailable": available,
            "numberUnavailable": desired - available,
            "updatedNumberScheduled": updated,
            "observedGeneration": ds["metadata"].get("generation", 0),
        }
        if collision:
            status["collisionCount"] = collision
        old = ds.get("status") or {}
        if all((old.get(k) or 0) == (v or 0) for k, v in status.items()):
            return
        try:
            await self.client.patch_status(
                DAEMON_SETS, ds["metadata"]["name"], {"status": status}, ds["metadata"]["namespace"]
            )
        except NotFound:
            return


def _extra(pods: list[Obj], update_hash: str) -> list[Obj]:
    """Beyond one pod per node (maxSurge 0): keep the newest-revision, oldest pod; the rest go."""
    keep = min(pods, key=lambda p: (_hash(p) != update_hash, p["metadata"].get("creationTimestamp") or ""))
    return [p for p in pods if p is not keep]
