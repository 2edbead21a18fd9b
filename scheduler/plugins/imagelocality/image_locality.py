"""ImageLocality: prefer nodes that already hold the pod's images, weighted by how widely they spread."""

from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import MAX_NODE_SCORE, Plugin, Status
from scheduler.framework.types import NodeInfo, Obj, normalized_image_name

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def _containers(pod: Obj) -> list[Obj]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]


def _priority(sum_scores: int, num_containers: int) -> int:
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    sum_scores = min(max(sum_scores, MIN_THRESHOLD), max_threshold)
    if max_threshold == MIN_THRESHOLD:
        return 0
    return MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)


_PRE_SCORE_KEY = "PreScoreImageLocality"


def _sum_image_scores(node_info: NodeInfo, images: list[str], total_nodes: int) -> int:
    """Image sizes on the node, each scaled by the share of nodes that hold it (spread)."""
    total = 0
    if total_nodes and node_info.image_states:
        for image in images:
            st = node_info.image_states.get(image)
            if st is not None:
                total += int(st.size * (st.num_nodes / total_nodes))
    return total


class ImageLocality(Plugin):
    name = "ImageLocality"

    def pre_score(self, state: CycleState, pod: Obj, nodes: list[NodeInfo]) -> Status | None:
        images = [normalized_image_name(c.get("image", "")) for c in _containers(pod)]
        state.write(_PRE_SCORE_KEY, (images, self.handle.snapshot_shared_lister().num_nodes()))
        return None

    def score(self, state: CycleState, pod: Obj, node_info: NodeInfo) -> tuple[int, Status | None]:
        pre = state.get(_PRE_SCORE_KEY)
        if pre is None:
            self.pre_score(state, pod, [])
            pre = state.read(_PRE_SCORE_KEY)
        images, total_nodes = pre
        return _priority(_sum_image_scores(node_info, images, total_nodes), len(images)), None

    def score_nodes(self, state: CycleState, pod: Obj,
                    nodes: list[NodeInfo]) -> tuple[list[int], Status | None]:
        if state.get(_PRE_SCORE_KEY) is None:
            self.pre_score(state, pod, nodes)
        images, total_nodes = state.read(_PRE_SCORE_KEY)
        without = _priority(0, len(images))
        if not self.handle.snapshot_shared_lister().traits().images:
            return [without] * len(nodes), None
        return [_priority(_sum_image_scores(ni, images, total_nodes), len(images)) if ni.image_states else without
                for ni in nodes], None
