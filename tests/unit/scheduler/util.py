"""Builders for node and pod dicts used by the scheduler's unit tests."""

from __future__ import annotations

import itertools
from typing import Any

from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import NodeInfo

_uids = itertools.count(1)


def make_node(name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110", labels: dict | None = None,
              taints: list | None = None, **extra_alloc: str) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods, **{k.replace("__", "/"): v for k, v in extra_alloc.items()}}
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
                            "spec": {}, "status": {"capacity": dict(alloc), "allocatable": alloc}}
    if taints:
        node["spec"]["taints"] = taints
    return node


def make_pod(name: str, cpu: str | None = None, memory: str | None = None, namespace: str = "default",
             node: str | None = None, priority: int | None = None, labels: dict | None = None,
             **spec: Any) -> dict[str, Any]:
    requests = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    container: dict[str, Any] = {"name": "c", "image": "nginx"}
    if requests:
        container["resources"] = {"requests": requests}
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}-{next(_uids)}",
                     "labels": labels or {}},
        "spec": {"containers": [container], "schedulerName": "default-scheduler", **spec},
        "status": {"phase": "Pending"},
    }
    if node:
        pod["spec"]["nodeName"] = node
    if priority is not None:
        pod["spec"]["priority"] = priority
    return pod


def node_info(node: dict[str, Any], *pods: dict[str, Any]) -> NodeInfo:
    ni = NodeInfo(node)
    for p in pods:
        ni.add_pod(p)
    return ni


class FakeHandle:
    """Just enough of a Handle for plugins that read the snapshot."""

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self.snapshot = snapshot or Snapshot()

    def snapshot_shared_lister(self) -> Snapshot:
        return self.snapshot
