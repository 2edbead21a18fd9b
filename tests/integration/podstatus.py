"""A stand-in kubelet for controller tests until the hollow kubelet lands: it binds pods to
test nodes when asked, marks pods on its nodes Running and Ready through the status
subresource, and finishes graceful deletions by deleting terminating pods with grace 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from services.api.meta import now_rfc3339
from services.client import ApiError, Client, gvr
from services.informers import Informer

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)


def node_body(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    now = now_rfc3339()
    capacity = {"cpu": "32", "memory": "128Gi", "pods": "1100"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              **(labels or {})}},
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status", "lastHeartbeatTime": now,
                            "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": name}],
        },
    }


async def create_nodes(client: Client, names: list[str], labels: dict[str, str] | None = None) -> None:
    """Create Ready nodes (and set their status, which create may ignore)."""
    for name in names:
        body = node_body(name, labels)
        with contextlib.suppress(ApiError):
            await client.create(NODES, body)
        await client.patch_status(NODES, name, {"status": body["status"]})


def running_status(pod: dict[str, Any], ip: str) -> dict[str, Any]:
    now = now_rfc3339()
    containers = (pod.get("spec") or {}).get("containers") or []
    conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": "10.0.0.1",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "qosClass": "BestEffort",
        "containerStatuses": [{
            "name": c.get("name", ""), "image": c.get("image", ""), "imageID": f"docker.io/{c.get('image', '')}",
            "containerID": f"containerd://{pod['metadata']['uid'].replace('-', '')}{i}", "ready": True,
            "started": True, "restartCount": 0, "state": {"running": {"startedAt": now}},
        } for i, c in enumerate(containers)],
    }


class FakeKubelet:
    """Drives pods on `nodes` (every bound pod when None); binds unscheduled pods when `bind`."""

    def __init__(self, client: Client, nodes: list[str] | None = None, *, bind: bool = False,
                 namespace: str | None = None, ready: bool = True, concurrency: int = 64) -> None:
        self.client = client
        self.nodes = nodes
        self.bind = bind
        self.ready = ready
        self.informer = Informer(client, PODS, namespace=namespace)
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._next_node = itertools.cycle(nodes or ["node-1"])
        self._ips = itertools.count(1)
        self._done: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self.concurrency = concurrency
        self.paused = False

    async def __aenter__(self) -> FakeKubelet:
        self.informer.add_event_handler(self._seen, lambda old, new: self._seen(new))
        self.informer.start()
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self.concurrency)]
        await self.informer.wait_for_sync()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.informer.stop()

    def _seen(self, pod: dict[str, Any]) -> None:
        if not self.paused:
            self._queue.put_nowait(pod)

    def resync(self) -> None:
        """Look at every cached pod again (after unpausing)."""
        for pod in self.informer.list():
            self._queue.put_nowait(pod)

    def _mine(self, node: str | None) -> bool:
        return bool(node) and (self.nodes is None or node in self.nodes)

    async def _work(self) -> None:
        while True:
            pod = await self._queue.get()
            try:
                await self.handle(pod)
            except ApiError:
                pass

    async def handle(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        node = (pod.get("spec") or {}).get("nodeName")
        if meta.get("deletionTimestamp"):
            if self._mine(node) or not node:
                await self.client.delete(PODS, meta["name"], meta["namespace"], grace_period_seconds=0,
                                         preconditions={"uid": meta["uid"]})
            return
        if not node:
            if self.bind and meta["uid"] not in self._done:
                self._done.add(meta["uid"])
                target = next(self._next_node)
                await self.client.create(PODS, {"apiVersion": "v1", "kind": "Binding",
                                                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                                                "target": {"apiVersion": "v1", "kind": "Node", "name": target}},
                                         meta["namespace"], name=meta["name"], subresource="binding")
            return
        if not self.ready or not self._mine(node):
            return
        if (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
            return
        n = next(self._ips)
        status = running_status(pod, f"10.244.{n // 250}.{n % 250 + 1}")
        await self.client.patch_status(PODS, meta["name"], {"status": status}, meta["namespace"])
