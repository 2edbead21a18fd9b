"""The Snapshot: the cluster as one scheduling cycle sees it (upstream's `backend/cache/snapshot.go`).

The listers it implements are upstream's `framework/listers.go`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from scheduler.framework.podindex import PodIndex
from scheduler.framework.types import NodeInfo


class NodeInfoLister(Protocol):
    def list(self) -> list[NodeInfo]: ...
    def have_pods_with_affinity_list(self) -> list[NodeInfo]: ...
    def have_pods_with_required_anti_affinity_list(self) -> list[NodeInfo]: ...
    def get(self, node_name: str) -> NodeInfo: ...


class StorageInfoLister(Protocol):
    def is_pvc_used_by_pods(self, key: str) -> bool: ...


def _free(ni: NodeInfo) -> tuple[int, int, int, int]:
    alloc, used = ni.allocatable, ni.requested
    return (alloc.allowed_pod_number - len(ni.pods), alloc.milli_cpu - used.milli_cpu, alloc.memory - used.memory,
            alloc.ephemeral_storage - used.ephemeral_storage)


@dataclass(frozen=True, slots=True)
class NodeTraits:
    """Whether any node of a snapshot is unschedulable, has taints, or has images."""

    unschedulable: bool
    taints: bool
    images: bool


class Snapshot:
    """The cluster as one scheduling cycle sees it; the cache refreshes it incrementally each cycle."""

    def __init__(self, node_infos: Iterable[NodeInfo] = ()) -> None:
        self.node_info_map: dict[str, NodeInfo] = {}
        self.node_info_list: list[NodeInfo] = []
        # node_info_list's generations, in its order: cycles compare them without touching every node.
        self.generations = array("q")
        self._positions: dict[str, int] = {}
        self.generation = 0
        self.pod_index = PodIndex()
        self._keyed_nodes: dict[tuple[str, ...], dict[str, NodeInfo]] = {}
        self._domains: dict[tuple[int, str], set[str]] = {}
        # Derived from node_info_list on first use after a change (most cycles never ask).
        self._with_affinity: list[NodeInfo] | None = None
        self._with_required_anti_affinity: list[NodeInfo] | None = None
        self._used_pvcs: set[str] | None = None
        self._traits: NodeTraits | None = None
        # A lower bound of every listed node's free (pod slots, milli-cpu, memory, ephemeral storage):
        # lowered as nodes change, recomputed when the node set does. A pod asking for no more fits all.
        self.free_floor: tuple[int, int, int, int] = (0, 0, 0, 0)
        infos = list(node_infos)
        if infos:
            for ni in infos:
                self.node_info_map[ni.name] = ni
                if ni.node is not None:
                    for pi in ni.pods:
                        self.pod_index.add(pi, ni.name, ni.labels)
            self.rebuild_lists(infos)

    def node_labels_changed(self) -> None:
        """Forget what was derived from node labels (the cache calls it when a node's labels change)."""
        self._keyed_nodes.clear()
        self._domains.clear()

    def nodes_changed(self) -> None:
        """Forget what was derived from the Node objects (the cache calls it when one is replaced)."""
        self._traits = None

    def traits(self) -> NodeTraits:
        """What no node of the snapshot has, so plugins can skip their per-node loop for every pod."""
        if self._traits is None:
            nodes = self.node_info_list
            self._traits = NodeTraits(
                any(ni.unschedulable for ni in nodes), any(ni.taints for ni in nodes),
                any(ni.image_states for ni in nodes))
        return self._traits

    def nodes_with_keys(self, keys: tuple[str, ...]) -> dict[str, NodeInfo]:
        """The nodes carrying every label in `keys`, by name; kept until nodes or their labels change."""
        found = self._keyed_nodes.get(keys)
        if found is None:
            found = self._keyed_nodes[keys] = {
                ni.name: ni for ni in self.node_info_list if all(k in ni.labels for k in keys)}
        return found

    def domains(self, nodes: dict[str, NodeInfo], key: str) -> set[str]:
        """The values of label `key` among `nodes` (a `nodes_with_keys` result), kept alongside it."""
        cache_key = (id(nodes), key)
        found = self._domains.get(cache_key)
        if found is None:
            found = self._domains[cache_key] = {ni.labels[key] for ni in nodes.values()}
        return found

    def rebuild_lists(self, ordered: list[NodeInfo]) -> None:
        self._keyed_nodes.clear()
        self._domains.clear()
        self._traits = None
        self.node_info_list = [ni for ni in ordered if ni.node is not None]
        self.generations = array("q", [ni.generation for ni in self.node_info_list])
        self._positions = {ni.name: i for i, ni in enumerate(self.node_info_list)}
        frees = [_free(ni) for ni in self.node_info_list]
        self.free_floor = tuple(map(min, *frees)) if len(frees) > 1 else (frees[0] if frees else (0, 0, 0, 0))
        self.pods_changed()

    def node_changed(self, ni: NodeInfo) -> None:
        """Keep `free_floor` a lower bound and `generations` current after `ni` (a listed node) changed."""
        self.free_floor = tuple(map(min, self.free_floor, _free(ni)))  # type: ignore[assignment]
        pos = self._positions.get(ni.name)
        if pos is not None:
            self.generations[pos] = ni.generation

    def pods_changed(self) -> None:
        """Drop the lists derived from the nodes' pods; they are recomputed when next asked for."""
        self._with_affinity = None
        self._with_required_anti_affinity = None
        self._used_pvcs = None

    # NodeInfoLister
    def node_infos(self) -> Snapshot:
        return self

    def storage_infos(self) -> Snapshot:
        return self

    def list(self) -> list[NodeInfo]:
        return self.node_info_list

    def have_pods_with_affinity_list(self) -> list[NodeInfo]:
        if self._with_affinity is None:
            self._with_affinity = [ni for ni in self.node_info_list if ni.pods_with_affinity]
        return self._with_affinity

    def have_pods_with_required_anti_affinity_list(self) -> list[NodeInfo]:
        if self._with_required_anti_affinity is None:
            self._with_required_anti_affinity = [
                ni for ni in self.node_info_list if ni.pods_with_required_anti_affinity]
        return self._with_required_anti_affinity

    def get(self, node_name: str) -> NodeInfo:
        """The node's info; KeyError when it is not in the snapshot."""
        return self.node_info_map[node_name]

    def num_nodes(self) -> int:
        return len(self.node_info_list)

    # StorageInfoLister
    def is_pvc_used_by_pods(self, key: str) -> bool:
        if self._used_pvcs is None:
            self._used_pvcs = {k for ni in self.node_info_list for k in ni.pvc_ref_counts}
        return key in self._used_pvcs
