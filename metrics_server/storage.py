"""The last two points of each node and container, and the usage they give: CPU as the rate between
them (so a new container reports nothing until its second scrape, as upstream's metrics-server) and the
working set as last read."""

from __future__ import annotations

from dataclasses import dataclass

from metrics_server.scraper import NodeSample, Point


@dataclass(frozen=True)
class Usage:
    cores: float
    memory: int
    at: float
    window: float


def _usage(prev: Point | None, last: Point) -> Usage | None:
    if prev is None or last.at_ms <= prev.at_ms or last.cpu < prev.cpu or (
            prev.started and prev.started != last.started):
        return None
    window = (last.at_ms - prev.at_ms) / 1000
    return Usage((last.cpu - prev.cpu) / window, last.memory, last.at_ms / 1000, window)


class Storage:
    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Point | None, Point]] = {}
        #: node -> (namespace, pod) -> container -> (previous, last)
        self._pods: dict[str, dict[tuple[str, str], dict[str, tuple[Point | None, Point]]]] = {}
        #: (namespace, pod) -> the node that last reported it
        self._where: dict[tuple[str, str], str] = {}

    def store(self, node: str, sample: NodeSample) -> None:
        if sample.node is not None:
            old = self._nodes.get(node)
            prev = old[1] if old is not None and old[1].at_ms < sample.node.at_ms else (old[0] if old else None)
            self._nodes[node] = (prev, sample.node)
        known = self._pods.get(node, {})
        pods: dict[tuple[str, str], dict[str, tuple[Point | None, Point]]] = {}
        for key, containers in sample.pods.items():
            before = known.get(key, {})
            pods[key] = {}
            for name, point in containers.items():
                old_pair = before.get(name)
                prev = old_pair[1] if old_pair is not None and old_pair[1].at_ms < point.at_ms else (
                    old_pair[0] if old_pair else None)
                pods[key][name] = (prev, point)
            self._where[key] = node
        for key in set(known) - set(pods):
            if self._where.get(key) == node:
                del self._where[key]
        self._pods[node] = pods

    def forget(self, nodes: set[str]) -> None:
        """Drop what is stored for nodes that no longer exist."""
        for name in set(self._nodes) - nodes:
            del self._nodes[name]
        for name in set(self._pods) - nodes:
            for key in self._pods.pop(name):
                if self._where.get(key) == name:
                    del self._where[key]

    def node(self, name: str) -> Usage | None:
        pair = self._nodes.get(name)
        return _usage(*pair) if pair is not None else None

    def pod(self, namespace: str, name: str) -> dict[str, Usage] | None:
        """Each container's usage, or None unless every container of the pod has one."""
        node = self._where.get((namespace, name))
        containers = self._pods.get(node, {}).get((namespace, name)) if node is not None else None
        if containers is None:
            return None
        out = {}
        for container, pair in containers.items():
            usage = _usage(*pair)
            if usage is None:
                return None
            out[container] = usage
        return out or None
