"""An in-memory runtime with the CRI client's interface, for hollow (simulated) nodes.

Containers start at once; init containers exit 0 at once, and app containers end as the first
matching stage says (kubelet_agent/cri/stages.py: by default, a Job's pods finish after a short run
and every other container runs until stopped). A pod annotation scripts a container instead:
`hollow.pyk8s.io/container.<name>: "exit=<code>,after=<seconds>"` makes it exit with that code
(every time it runs, so a non-zero code crash-loops), `"fail=<message>"` makes its start fail.
Ephemeral containers run like app containers (scripted the same way) and may name a target
container whose PID namespace they join; that container must exist.
Readiness probes pass unless `hollow.pyk8s.io/ready.<name>` (or, for every container,
`hollow.pyk8s.io/ready`) is "false"; the prober reads the pod's current annotations, so changing
them flips a running container's readiness.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import random
import time
from collections.abc import Callable
from typing import Any

from kubelet_agent.cri.stages import Stage, default_stages, select
from kubelet_agent.cri.types import (
    ANNOTATION_RESTART_COUNT,
    CONTAINER_CREATED,
    CONTAINER_EXITED,
    CONTAINER_RUNNING,
    LABEL_POD_UID,
    ContainerInfo,
    ContainerSpec,
    ImageInfo,
    Listener,
    RuntimeError_,
    SandboxInfo,
    SandboxSpec,
)

ANNOTATION_PREFIX = "hollow.pyk8s.io/container."
ANNOTATION_READY = "hollow.pyk8s.io/ready"
_ids = itertools.count(1)


def parse_behavior(value: str) -> dict[str, str]:
    """`exit=1,after=2` -> {"exit": "1", "after": "2"}; `fail=...` keeps commas in its message."""
    value = value.strip()
    if value.startswith("fail="):
        return {"fail": value[5:]}
    out: dict[str, str] = {}
    for part in value.split(","):
        key, _, val = part.partition("=")
        if key.strip():
            out[key.strip()] = val.strip()
    return out


def simulated_ready(annotations: dict[str, str], container: str) -> bool:
    """A hollow readiness probe's verdict for `container` from the pod's annotations."""
    value = annotations.get(f"{ANNOTATION_READY}.{container}", annotations.get(ANNOTATION_READY, "true"))
    return value.strip().lower() != "false"


class HollowRuntime:
    """One simulated node's containers, sandboxes and images, all in memory."""

    name = "containerd"
    simulated = True

    def __init__(self, pod_cidr: str = "10.250.0.0/24", version: str = "1.6.20",
                 stages: list[Stage] | None = None) -> None:
        self._version = version
        self.stages = default_stages() if stages is None else stages
        self._pods: Callable[[str], dict[str, Any] | None] | None = None
        self._listener: Listener | None = None
        self._sandboxes: dict[str, SandboxInfo] = {}
        self._containers: dict[str, ContainerInfo] = {}
        self._behavior: dict[str, dict[str, str]] = {}
        self._by_pod: dict[str, set[str]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.set_pod_cidr(pod_cidr)

    def set_pod_cidr(self, cidr: str) -> None:
        net = ipaddress.ip_network(cidr, strict=False)
        self._ips = (str(ip) for ip in itertools.islice(itertools.cycle(net.hosts()), 1, None))

    def set_listener(self, listener: Listener) -> None:
        self._listener = listener

    def set_pod_lookup(self, lookup: Callable[[str], dict[str, Any] | None]) -> None:
        """Where the stages read a pod (by UID) from: kwok's stages match on the whole object."""
        self._pods = lookup

    def _staged(self, pod_uid: str, container: str) -> dict[str, str]:
        """The first matching stage's script for one run of an app container ({} runs it until stopped)."""
        pod = self._pods(pod_uid) if self._pods is not None else None
        if pod is None or not any(c.get("name") == container for c in (pod.get("spec") or {}).get("containers") or []):
            return {}
        stage = select(self.stages, pod, container)
        if stage is None:
            return {}
        return stage.behavior(stage.delay + random.uniform(0, stage.jitter))  # noqa: S311 - timing, not secrets

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    async def version(self) -> tuple[str, str]:
        return self.name, self._version

    # -- sandboxes ---------------------------------------------------------------------------------

    async def run_sandbox(self, spec: SandboxSpec) -> str:
        sid = f"hollow-sandbox-{next(_ids)}"
        ip = "" if spec.host_network else next(self._ips)
        self._sandboxes[sid] = SandboxInfo(
            sid, spec.name, spec.namespace, spec.uid, spec.attempt, True, ip, time.time_ns(),
            dict(spec.labels), dict(spec.annotations),
        )
        self._by_pod.setdefault(spec.uid, set()).add(sid)
        return sid

    async def stop_sandbox(self, sandbox_id: str) -> None:
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None:
            return
        for c in list(self._containers.values()):
            if c.sandbox_id == sandbox_id and c.state == CONTAINER_RUNNING:
                self._exit(c.id, 137, "Error")
        sandbox.ready = False

    async def remove_sandbox(self, sandbox_id: str) -> None:
        await self.stop_sandbox(sandbox_id)
        sandbox = self._sandboxes.pop(sandbox_id, None)
        for c in [c for c in self._containers.values() if c.sandbox_id == sandbox_id]:
            await self.remove_container(c.id)
        if sandbox is not None:
            ids = self._by_pod.get(sandbox.uid, set())
            ids.discard(sandbox_id)
            if not ids:
                self._by_pod.pop(sandbox.uid, None)

    async def list_sandboxes(self, pod_uid: str | None = None) -> list[SandboxInfo]:
        if pod_uid is None:
            return list(self._sandboxes.values())
        return [self._sandboxes[i] for i in self._by_pod.get(pod_uid, ()) if i in self._sandboxes]

    # -- containers --------------------------------------------------------------------------------

    async def create_container(self, sandbox_id: str, spec: ContainerSpec, sandbox: SandboxSpec) -> str:
        if sandbox_id not in self._sandboxes:
            raise RuntimeError_(f"sandbox {sandbox_id} not found", "NotFound")
        if spec.pid_target and spec.pid_target not in self._containers:
            raise RuntimeError_(f"target container {spec.pid_target} not found", "NotFound")
        cid = f"hollow-{next(_ids):012x}"
        labels = {**spec.labels, LABEL_POD_UID: sandbox.uid}
        self._containers[cid] = ContainerInfo(
            cid, sandbox_id, spec.name, spec.attempt, CONTAINER_CREATED, spec.image,
            f"sha256:{abs(hash(spec.image)):064x}"[:71], time.time_ns(), labels=labels,
            annotations={**spec.annotations, ANNOTATION_RESTART_COUNT: str(spec.attempt)},
        )
        behavior = sandbox.annotations.get(ANNOTATION_PREFIX + spec.name)
        if behavior:
            self._behavior[cid] = parse_behavior(behavior)
        elif spec.init:
            self._behavior[cid] = {"exit": "0"}
        elif staged := self._staged(sandbox.uid, spec.name):
            self._behavior[cid] = staged
        self._by_pod.setdefault(sandbox.uid, set()).add(cid)
        return cid

    async def start_container(self, container_id: str) -> None:
        c = self._get(container_id)
        behavior = self._behavior.get(container_id, {})
        if "fail" in behavior:
            raise RuntimeError_(behavior["fail"] or "simulated start failure", "Unknown")
        c.state = CONTAINER_RUNNING
        c.started_at = time.time_ns()
        if "exit" in behavior:
            code = int(behavior["exit"] or 0)
            delay = float(behavior.get("after") or 0)
            loop = asyncio.get_running_loop()
            self._timers[container_id] = loop.call_later(
                delay, self._exit, container_id, code, "Completed" if code == 0 else "Error"
            )

    def _exit(self, container_id: str, code: int, reason: str) -> None:
        timer = self._timers.pop(container_id, None)
        if timer is not None:
            timer.cancel()
        c = self._containers.get(container_id)
        if c is None or c.state != CONTAINER_RUNNING:
            return
        c.state = CONTAINER_EXITED
        c.exit_code = code
        c.reason = reason
        c.finished_at = time.time_ns()
        if self._listener is not None:
            self._listener(c.pod_uid)

    async def stop_container(self, container_id: str, grace: int) -> None:
        c = self._containers.get(container_id)
        if c is None:
            return
        if c.state == CONTAINER_CREATED:
            c.state = CONTAINER_EXITED
            c.finished_at = time.time_ns()
        self._exit(container_id, 0 if grace > 0 else 137, "Completed" if grace > 0 else "Error")

    async def remove_container(self, container_id: str) -> None:
        timer = self._timers.pop(container_id, None)
        if timer is not None:
            timer.cancel()
        c = self._containers.pop(container_id, None)
        self._behavior.pop(container_id, None)
        if c is not None:
            ids = self._by_pod.get(c.pod_uid, set())
            ids.discard(container_id)

    async def list_containers(self, pod_uid: str | None = None) -> list[ContainerInfo]:
        if pod_uid is None:
            return list(self._containers.values())
        return [self._containers[i] for i in self._by_pod.get(pod_uid, ()) if i in self._containers]

    async def container_status(self, container_id: str) -> ContainerInfo:
        return self._get(container_id)

    def _get(self, container_id: str) -> ContainerInfo:
        c = self._containers.get(container_id)
        if c is None:
            raise RuntimeError_(f"container {container_id} not found", "NotFound")
        return c

    async def exec_sync(self, container_id: str, cmd: list[str], timeout_s: int) -> tuple[int, bytes, bytes]:
        c = self._get(container_id)
        if c.state != CONTAINER_RUNNING:
            raise RuntimeError_(f"container {container_id} is not running", "Unknown")
        return 0, b"", b""

    # -- images ------------------------------------------------------------------------------------

    async def image_status(self, image: str) -> ImageInfo | None:
        return ImageInfo(f"sha256:{abs(hash(image)):064x}"[:71], [image])

    async def pull_image(self, image: str) -> str:
        return f"sha256:{abs(hash(image)):064x}"[:71]
