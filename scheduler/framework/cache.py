"""The scheduler's cache: nodes and the pods on them, including pods assumed before their binding lands.

A pod is *assumed* on its node as soon as the scheduling cycle picks the node, so the next cycle
already counts it; the informer later *confirms* it (the bound pod arrives) or, if binding fails,
the scheduler *forgets* it. An assumed pod whose binding finished but never showed up expires
after `ttl`. Each cycle copies only the nodes that changed into the cycle's Snapshot.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable

import structlog

from scheduler.framework import metrics
from scheduler.framework.podindex import PodIndex
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import ImageStateSummary, NodeInfo, Obj, PodInfo, next_generation

log = structlog.get_logger(__name__)

DEFAULT_ASSUMED_TTL = 900.0
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
LEGACY_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
LEGACY_REGION_LABEL = "failure-domain.beta.kubernetes.io/region"


def zone_key(node: Obj) -> str:
    """region + zone, as upstream's GetZoneKey (empty when the node carries neither)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    zone = labels.get(ZONE_LABEL) or labels.get(LEGACY_ZONE_LABEL) or ""
    region = labels.get(REGION_LABEL) or labels.get(LEGACY_REGION_LABEL) or ""
    if not zone and not region:
        return ""
    return f"{region}:\x00:{zone}"


def _uid(pod: Obj) -> str:
    return pod["metadata"].get("uid") or f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


class _PodState:
    __slots__ = ("pod_info", "node", "assumed", "binding_finished", "deadline")

    def __init__(self, pod_info: PodInfo, node: str, assumed: bool) -> None:
        self.pod_info = pod_info
        self.node = node
        self.assumed = assumed
        self.binding_finished = False
        self.deadline: float | None = None


class NodeTree:
    """Node names grouped by zone; `list()` interleaves zones so consecutive nodes span zones."""

    def __init__(self) -> None:
        self.zones: dict[str, list[str]] = {}
        self._zone_of: dict[str, str] = {}

    def add(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        zone = zone_key(node)
        old = self._zone_of.get(name)
        if old == zone:
            return
        if old is not None:
            self.remove(name)
        self._zone_of[name] = zone
        self.zones.setdefault(zone, []).append(name)

    def remove(self, name: str) -> None:
        zone = self._zone_of.pop(name, None)
        if zone is None:
            return
        names = self.zones[zone]
        names.remove(name)
        if not names:
            del self.zones[zone]

    def list(self) -> list[str]:
        if len(self.zones) <= 1:
            return [n for names in self.zones.values() for n in names]
        out: list[str] = []
        columns = list(self.zones.values())
        depth = max(len(c) for c in columns)
        for i in range(depth):
            for c in columns:
                if i < len(c):
                    out.append(c[i])
        return out

    def __len__(self) -> int:
        return len(self._zone_of)


class Cache:
    def __init__(self, ttl: float = DEFAULT_ASSUMED_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self.nodes: dict[str, NodeInfo] = {}
        self.tree = NodeTree()
        self.pod_states: dict[str, _PodState] = {}
        self.assumed: set[str] = set()
        self.image_nodes: dict[str, set[str]] = {}
        self.image_states: dict[str, ImageStateSummary] = {}
        self._dirty: set[str] = set()
        self._node_set_changed = True
        self._expose_metrics()

    # -- helpers ---------------------------------------------------------------------------------------

    def _node_info(self, name: str) -> NodeInfo:
        ni = self.nodes.get(name)
        if ni is None:
            ni = NodeInfo()
            ni.name = name
            self.nodes[name] = ni
        return ni

    def _touch(self, name: str) -> None:
        self._dirty.add(name)

    def _expose_metrics(self) -> None:
        """Cache-size gauges read the cache when scraped instead of being set on every change."""
        ref = weakref.ref(self)

        def reader(count: Callable[[Cache], int]) -> Callable[[], float]:
            def read() -> float:
                c = ref()
                return float(count(c)) if c is not None else 0.0
            return read

        metrics.CACHE_SIZE.labels("nodes").set_function(reader(lambda c: len(c.tree)))
        metrics.CACHE_SIZE.labels("pods").set_function(reader(lambda c: len(c.pod_states)))
        metrics.CACHE_SIZE.labels("assumed_pods").set_function(reader(lambda c: len(c.assumed)))

    def _add_to_node(self, pi: PodInfo, node: str) -> None:
        self._node_info(node).add_pod(pi)
        self._touch(node)

    def _remove_from_node(self, pod: Obj, node: str) -> None:
        ni = self.nodes.get(node)
        if ni is None:
            return
        ni.remove_pod(pod)
        self._touch(node)
        if ni.node is None and not ni.pods:
            del self.nodes[node]

    # -- pods ------------------------------------------------------------------------------------------

    def is_assumed(self, pod: Obj) -> bool:
        return _uid(pod) in self.assumed

    def get_pod(self, pod: Obj) -> Obj | None:
        st = self.pod_states.get(_uid(pod))
        return st.pod_info.pod if st else None

    def assume_pod(self, pod: Obj, node: str) -> None:
        """Count `pod` (already carrying spec.nodeName = node) on its node before binding completes."""
        uid = _uid(pod)
        if uid in self.pod_states:
            raise ValueError(f"pod {pod['metadata'].get('namespace')}/{pod['metadata']['name']} is in the cache, "
                             "so can't be assumed")
        pi = PodInfo(pod)
        self.pod_states[uid] = _PodState(pi, node, True)
        self.assumed.add(uid)
        self._add_to_node(pi, node)

    def finish_binding(self, pod: Obj) -> None:
        st = self.pod_states.get(_uid(pod))
        if st is not None and st.assumed:
            st.binding_finished = True
            st.deadline = self.clock() + self.ttl

    def forget_pod(self, pod: Obj) -> None:
        """Undo an assumption (binding failed)."""
        uid = _uid(pod)
        st = self.pod_states.get(uid)
        if st is None or not st.assumed:
            return
        self._remove_from_node(st.pod_info.pod, st.node)
        del self.pod_states[uid]
        self.assumed.discard(uid)

    def add_pod(self, pod: Obj) -> None:
        """An assigned pod from the informer: confirms an assumed pod or adds a new one."""
        uid = _uid(pod)
        node = pod["spec"]["nodeName"]
        st = self.pod_states.get(uid)
        if st is not None:
            if st.assumed:
                self.assumed.discard(uid)
                st.assumed = False
                st.deadline = None
            if st.node == node and _same_footprint(st.pod_info.pod, pod):
                # What the node holds is unchanged (the usual confirmation of an assumed pod, or a
                # status update): only the object is newer, so the node keeps its generation.
                st.pod_info.pod = pod
                return
            self._remove_from_node(st.pod_info.pod, st.node)
            st.pod_info = PodInfo(pod)
            st.node = node
            self._add_to_node(st.pod_info, node)
        else:
            pi = PodInfo(pod)
            self.pod_states[uid] = _PodState(pi, node, False)
            self._add_to_node(pi, node)

    def update_pod(self, old: Obj, new: Obj) -> None:
        self.add_pod(new)

    def remove_pod(self, pod: Obj) -> None:
        uid = _uid(pod)
        st = self.pod_states.pop(uid, None)
        self.assumed.discard(uid)
        if st is not None:
            self._remove_from_node(st.pod_info.pod, st.node)

    def cleanup_expired_assumed_pods(self) -> int:
        now = self.clock()
        expired = [uid for uid in self.assumed
                   if (st := self.pod_states[uid]).binding_finished and st.deadline is not None and st.deadline < now]
        for uid in expired:
            st = self.pod_states[uid]
            log.warning("assumed pod expired", pod=st.pod_info.key, node=st.node)
            self._remove_from_node(st.pod_info.pod, st.node)
            del self.pod_states[uid]
            self.assumed.discard(uid)
        return len(expired)

    # -- nodes -----------------------------------------------------------------------------------------

    def _images_add(self, node: Obj) -> None:
        """Count the node's images; summaries are shared objects, so every node sees the new spread."""
        name = node["metadata"]["name"]
        states: dict[str, ImageStateSummary] = {}
        for img in (node.get("status") or {}).get("images") or ():
            size = int(img.get("sizeBytes") or 0)
            for n in img.get("names") or ():
                holders = self.image_nodes.setdefault(n, set())
                holders.add(name)
                summary = self.image_states.get(n)
                if summary is None:
                    summary = self.image_states[n] = ImageStateSummary(size, 0)
                summary.size = size
                summary.num_nodes = len(holders)
                states[n] = summary
        self.nodes[name].image_states = states

    def _images_remove(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        for img in (node.get("status") or {}).get("images") or ():
            for n in img.get("names") or ():
                holders = self.image_nodes.get(n)
                if holders is None:
                    continue
                holders.discard(name)
                if holders:
                    self.image_states[n].num_nodes = len(holders)
                else:
                    del self.image_nodes[n]
                    self.image_states.pop(n).num_nodes = 0

    def add_node(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        ni = self._node_info(name)
        old = ni.node
        if old is not None:
            self._images_remove(old)
        else:
            self._node_set_changed = True
        self.tree.add(node)
        ni.set_node(node)
        self._images_add(node)
        self._touch(name)

    def update_node(self, old: Obj, new: Obj) -> None:
        if zone_key(old) != zone_key(new):
            self._node_set_changed = True
        self.add_node(new)

    def remove_node(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        ni = self.nodes.get(name)
        if ni is None:
            return
        if ni.node is not None:
            self._images_remove(ni.node)
        self.tree.remove(name)
        self._node_set_changed = True
        if ni.pods:
            ni.remove_node()
        else:
            del self.nodes[name]
        self._touch(name)

    def node_count(self) -> int:
        return len(self.tree)

    # -- snapshot --------------------------------------------------------------------------------------

    def update_snapshot(self, snap: Snapshot) -> None:
        """Bring `snap` up to date, copying only nodes changed since the last call (and their index entries)."""
        if not self._dirty and not self._node_set_changed:
            return
        index = snap.pod_index
        pods_changed = False
        for name in self._dirty:
            src = self.nodes.get(name)
            dst = snap.node_info_map.get(name)
            if src is None or src.node is None:
                if dst is not None:
                    for pi in dst.pods:
                        index.remove(pi, name, dst.labels)
                    del snap.node_info_map[name]
                    self._node_set_changed = True
                continue
            if dst is None:
                copy = src.clone()
                for pi in copy.pods:
                    index.add(pi, name, copy.labels)
                snap.node_info_map[name] = copy
                self._node_set_changed = True
                continue
            if _derived_lists_differ(dst, src):
                pods_changed = True
            _reindex(index, dst, src)
            if dst.labels != src.labels:
                snap.node_labels_changed()
            if dst.node is not src.node or dst.image_states is not src.image_states:
                snap.nodes_changed()
            dst.copy_from(src)
            if dst.node is not None:
                snap.node_changed(dst)
        self._dirty.clear()
        if self._node_set_changed:
            snap.rebuild_lists([snap.node_info_map[n] for n in self.tree.list() if n in snap.node_info_map])
            self._node_set_changed = False
        elif pods_changed:
            snap.pods_changed()
        snap.generation = next_generation()


def _same_footprint(old: Obj, new: Obj) -> bool:
    """Whether everything a NodeInfo and the pod index derive from a pod (its spec, namespace, labels,
    being terminating) is the same in both versions."""
    om, nm = old["metadata"], new["metadata"]
    return (old.get("spec") == new.get("spec") and om.get("labels") == nm.get("labels")
            and om.get("namespace") == nm.get("namespace")
            and bool(om.get("deletionTimestamp")) == bool(nm.get("deletionTimestamp")))


def _reindex(index: PodIndex, old: NodeInfo, new: NodeInfo) -> None:
    """Move the index from `old`'s pods to `new`'s: only the difference, unless the node's labels changed."""
    name = new.name
    if old.labels != new.labels:
        for pi in old.pods:
            index.remove(pi, name, old.labels)
        for pi in new.pods:
            index.add(pi, name, new.labels)
        return
    before = {id(pi): pi for pi in old.pods}
    after = {id(pi): pi for pi in new.pods}
    for key, pi in before.items():
        if key not in after:
            index.remove(pi, name, old.labels)
    for key, pi in after.items():
        if key not in before:
            index.add(pi, name, new.labels)


def _derived_lists_differ(old: NodeInfo, new: NodeInfo) -> bool:
    """Whether the snapshot's lists of nodes with affinity pods or PVC users may change with this copy."""
    return (bool(old.pods_with_affinity) != bool(new.pods_with_affinity)
            or bool(old.pods_with_required_anti_affinity) != bool(new.pods_with_required_anti_affinity)
            or old.pvc_ref_counts != new.pvc_ref_counts)

