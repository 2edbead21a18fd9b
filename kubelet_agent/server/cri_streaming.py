"""The CRI calls the kubelet API needs beyond what pod workers use: streaming URLs, log paths, stats.

A separate grpc.aio channel on the runtime socket keeps the server independent of the pod
workers' runtime client (and of the hollow runtime, which has none of this).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import grpc
from cri_api.v1 import api_pb2 as pb
from cri_api.v1 import api_pb2_grpc as pb_grpc

LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"


class CRIError(Exception):
    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Container:
    id: str
    name: str
    attempt: int
    running: bool
    created_at: int
    log_path: str = ""


def _target(endpoint: str) -> str:
    if endpoint.startswith("unix://"):
        return "unix:" + endpoint[len("unix://"):]
    return "unix:" + endpoint if endpoint.startswith("/") else endpoint


class CRIStreaming:
    def __init__(self, endpoint: str, timeout: float = 30.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._rt: pb_grpc.RuntimeServiceStub | None = None

    @property
    def rt(self) -> pb_grpc.RuntimeServiceStub:
        if self._rt is None:
            self._channel = grpc.aio.insecure_channel(_target(self.endpoint))
            self._rt = pb_grpc.RuntimeServiceStub(self._channel)
        return self._rt

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._rt = None

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise CRIError(exc.details() or str(exc.code()), exc.code().name) from exc

    async def containers(self, pod_uid: str, name: str) -> list[Container]:
        """The pod's containers called `name`, newest first."""
        flt = pb.ContainerFilter(label_selector={LABEL_POD_UID: pod_uid, LABEL_CONTAINER_NAME: name})
        resp = await self._call(self.rt.ListContainers, pb.ListContainersRequest(filter=flt))
        out = [Container(c.id, c.metadata.name, c.metadata.attempt, c.state == pb.CONTAINER_RUNNING, c.created_at)
               for c in resp.containers]
        return sorted(out, key=lambda c: (c.attempt, c.created_at), reverse=True)

    async def status(self, container_id: str) -> Container:
        resp = await self._call(self.rt.ContainerStatus, pb.ContainerStatusRequest(container_id=container_id))
        s = resp.status
        return Container(s.id, s.metadata.name, s.metadata.attempt, s.state == pb.CONTAINER_RUNNING, s.created_at,
                         s.log_path)

    async def exec_url(self, container_id: str, cmd: list[str], *, tty: bool, stdin: bool, stdout: bool,
                       stderr: bool) -> str:
        req = pb.ExecRequest(container_id=container_id, cmd=cmd, tty=tty, stdin=stdin, stdout=stdout,
                             stderr=stderr and not tty)
        return (await self._call(self.rt.Exec, req)).url

    async def attach_url(self, container_id: str, *, tty: bool, stdin: bool, stdout: bool, stderr: bool) -> str:
        req = pb.AttachRequest(container_id=container_id, tty=tty, stdin=stdin, stdout=stdout,
                               stderr=stderr and not tty)
        return (await self._call(self.rt.Attach, req)).url

    async def sandbox_pid(self, pod_uid: str) -> int:
        """PID of the pod sandbox's process, whose network namespace port-forward connects in."""
        flt = pb.PodSandboxFilter(label_selector={LABEL_POD_UID: pod_uid},
                                  state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
        resp = await self._call(self.rt.ListPodSandbox, pb.ListPodSandboxRequest(filter=flt))
        if not resp.items:
            raise CRIError(f"no running sandbox for pod {pod_uid}", "NOT_FOUND")
        status = await self._call(self.rt.PodSandboxStatus,
                                  pb.PodSandboxStatusRequest(pod_sandbox_id=resp.items[0].id, verbose=True))
        info = json.loads(status.info.get("info") or "{}")
        pid = int(info.get("pid") or 0)
        if not pid:
            raise CRIError(f"runtime did not report the sandbox process of pod {pod_uid}", "UNKNOWN")
        return pid

    async def container_stats(self) -> list[Any]:
        return list((await self._call(self.rt.ListContainerStats, pb.ListContainerStatsRequest())).stats)

    async def sandbox_stats(self) -> list[Any]:
        """Pod-level stats (network); runtimes that lack them (containerd 1.6 on some hosts) give none."""
        try:
            return list((await self._call(self.rt.ListPodSandboxStats, pb.ListPodSandboxStatsRequest())).stats)
        except CRIError:
            return []
