"""containerd (or any CRI runtime) over gRPC with the `container-runtime-interface-api` stubs.

A relist every second (upstream's generic PLEG) notices containers that exit on their own and
wakes the worker of their pod.
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc
from cri_api.v1 import api_pb2 as pb
from cri_api.v1 import api_pb2_grpc as pb_grpc

from kubelet_agent.cri.types import (
    CONTAINER_CREATED,
    CONTAINER_EXITED,
    CONTAINER_RUNNING,
    CONTAINER_UNKNOWN,
    LABEL_POD_UID,
    ContainerInfo,
    ContainerSpec,
    ImageInfo,
    Listener,
    RuntimeError_,
    SandboxInfo,
    SandboxSpec,
)

_STATES = {pb.CONTAINER_CREATED: CONTAINER_CREATED, pb.CONTAINER_RUNNING: CONTAINER_RUNNING,
           pb.CONTAINER_EXITED: CONTAINER_EXITED, pb.CONTAINER_UNKNOWN: CONTAINER_UNKNOWN}
_PROTOCOLS = {"TCP": pb.TCP, "UDP": pb.UDP, "SCTP": pb.SCTP}
_PROPAGATION = {"None": pb.PROPAGATION_PRIVATE, "HostToContainer": pb.PROPAGATION_HOST_TO_CONTAINER,
                "Bidirectional": pb.PROPAGATION_BIDIRECTIONAL}


def _target(endpoint: str) -> str:
    if endpoint.startswith("unix://"):
        return "unix:" + endpoint[len("unix://"):]
    if endpoint.startswith("/"):
        return "unix:" + endpoint
    return endpoint


class RemoteRuntime:
    name = "containerd"
    simulated = False

    def __init__(self, endpoint: str, timeout: float = 120.0, relist: float = 1.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.relist = relist
        self._channel: grpc.aio.Channel | None = None
        self._listener: Listener | None = None
        self._task: asyncio.Task[None] | None = None
        self._seen: dict[str, tuple[int, str]] = {}

    def set_listener(self, listener: Listener) -> None:
        self._listener = listener

    async def start(self) -> None:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(_target(self.endpoint))
            self.rt = pb_grpc.RuntimeServiceStub(self._channel)
            self.img = pb_grpc.ImageServiceStub(self._channel)
        if self._task is None:
            self._task = asyncio.create_task(self._pleg())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _call(self, method: object, request: object, deadline: float | None = None) -> object:
        try:
            return await method(request, timeout=deadline or self.timeout)  # type: ignore[operator]
        except grpc.aio.AioRpcError as exc:
            raise RuntimeError_(exc.details() or str(exc.code()), exc.code().name) from exc

    async def _pleg(self) -> None:
        while True:
            await asyncio.sleep(self.relist)
            try:
                containers = await self.list_containers()
            except RuntimeError_:
                continue
            current = {c.id: (c.finished_at, c.state) for c in containers}
            if self._listener is not None:
                for c in containers:
                    if self._seen.get(c.id) != current[c.id]:
                        self._listener(c.pod_uid)
            self._seen = current

    async def version(self) -> tuple[str, str]:
        resp = await self._call(self.rt.Version, pb.VersionRequest(version="v1"))
        return resp.runtime_name, resp.runtime_version  # type: ignore[attr-defined]

    # -- sandboxes ---------------------------------------------------------------------------------

    def _sandbox_config(self, spec: SandboxSpec) -> pb.PodSandboxConfig:
        node = pb.NODE
        ns_options = pb.NamespaceOption(network=node if spec.host_network else pb.POD,
                                        pid=node if spec.host_pid else pb.CONTAINER,
                                        ipc=node if spec.host_ipc else pb.POD)
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=spec.name, uid=spec.uid, namespace=spec.namespace,
                                           attempt=spec.attempt),
            hostname="" if spec.host_network else spec.hostname, log_directory=spec.log_directory,
            dns_config=pb.DNSConfig(servers=spec.dns_servers, searches=spec.dns_searches, options=spec.dns_options),
            port_mappings=[pb.PortMapping(protocol=_PROTOCOLS.get(p.protocol, pb.TCP), container_port=p.container_port,
                                          host_port=p.host_port, host_ip=p.host_ip) for p in spec.port_mappings],
            labels=spec.labels, annotations=spec.annotations,
            linux=pb.LinuxPodSandboxConfig(cgroup_parent=spec.cgroup_parent, sysctls=spec.sysctls,
                                           security_context=pb.LinuxSandboxSecurityContext(
                                               namespace_options=ns_options, privileged=spec.privileged)),
        )

    async def run_sandbox(self, spec: SandboxSpec) -> str:
        resp = await self._call(self.rt.RunPodSandbox, pb.RunPodSandboxRequest(
            config=self._sandbox_config(spec), runtime_handler=spec.runtime_handler))
        return resp.pod_sandbox_id  # type: ignore[attr-defined]

    async def stop_sandbox(self, sandbox_id: str) -> None:
        await self._call(self.rt.StopPodSandbox, pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id))

    async def remove_sandbox(self, sandbox_id: str) -> None:
        await self._call(self.rt.RemovePodSandbox, pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id))

    async def list_sandboxes(self, pod_uid: str | None = None) -> list[SandboxInfo]:
        flt = pb.PodSandboxFilter(label_selector={LABEL_POD_UID: pod_uid} if pod_uid else {})
        resp = await self._call(self.rt.ListPodSandbox, pb.ListPodSandboxRequest(filter=flt))
        out = []
        for s in resp.items:  # type: ignore[attr-defined]
            ip = ""
            ready = s.state == pb.SANDBOX_READY
            if ready:
                status = await self._call(self.rt.PodSandboxStatus,
                                          pb.PodSandboxStatusRequest(pod_sandbox_id=s.id))
                ip = status.status.network.ip  # type: ignore[attr-defined]
            out.append(SandboxInfo(s.id, s.metadata.name, s.metadata.namespace, s.metadata.uid, s.metadata.attempt,
                                   ready, ip, s.created_at, dict(s.labels), dict(s.annotations)))
        return out

    # -- containers --------------------------------------------------------------------------------

    async def create_container(self, sandbox_id: str, spec: ContainerSpec, sandbox: SandboxSpec) -> str:
        resources = pb.LinuxContainerResources(cpu_shares=spec.cpu_shares, cpu_quota=spec.cpu_quota,
                                               cpu_period=spec.cpu_period, memory_limit_in_bytes=spec.memory_limit,
                                               oom_score_adj=spec.oom_score_adj)
        security = pb.LinuxContainerSecurityContext(
            privileged=spec.privileged, readonly_rootfs=spec.readonly_rootfs,
            namespace_options=pb.NamespaceOption(network=pb.NODE if sandbox.host_network else pb.POD,
                                                 pid=pb.NODE if sandbox.host_pid
                                                 else pb.TARGET if spec.pid_target else pb.CONTAINER,
                                                 ipc=pb.NODE if sandbox.host_ipc else pb.POD,
                                                 target_id="" if sandbox.host_pid else spec.pid_target))
        if spec.run_as_user is not None:
            security.run_as_user.value = spec.run_as_user
        if spec.run_as_group is not None:
            security.run_as_group.value = spec.run_as_group
        security.supplemental_groups.extend(spec.supplemental_groups)
        security.no_new_privs = spec.no_new_privs
        if spec.add_capabilities or spec.drop_capabilities:
            security.capabilities.CopyFrom(pb.Capability(add_capabilities=spec.add_capabilities,
                                                         drop_capabilities=spec.drop_capabilities))
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=spec.name, attempt=spec.attempt),
            image=pb.ImageSpec(image=spec.image), command=spec.command, args=spec.args,
            working_dir=spec.working_dir, envs=[pb.KeyValue(key=k, value=v) for k, v in spec.envs],
            mounts=[pb.Mount(container_path=m.container_path, host_path=m.host_path, readonly=m.readonly,
                             propagation=_PROPAGATION.get(m.propagation, pb.PROPAGATION_PRIVATE))
                    for m in spec.mounts],
            labels=spec.labels, annotations=spec.annotations, log_path=spec.log_path, stdin=spec.stdin,
            stdin_once=spec.stdin_once, tty=spec.tty,
            linux=pb.LinuxContainerConfig(resources=resources, security_context=security),
        )
        request = pb.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config,
                                            sandbox_config=self._sandbox_config(sandbox))
        resp = await self._call(self.rt.CreateContainer, request)
        return resp.container_id  # type: ignore[attr-defined]

    async def start_container(self, container_id: str) -> None:
        await self._call(self.rt.StartContainer, pb.StartContainerRequest(container_id=container_id))

    async def stop_container(self, container_id: str, grace: int) -> None:
        await self._call(self.rt.StopContainer, pb.StopContainerRequest(container_id=container_id, timeout=grace),
                         deadline=self.timeout + grace)

    async def remove_container(self, container_id: str) -> None:
        await self._call(self.rt.RemoveContainer, pb.RemoveContainerRequest(container_id=container_id))

    async def list_containers(self, pod_uid: str | None = None) -> list[ContainerInfo]:
        flt = pb.ContainerFilter(label_selector={LABEL_POD_UID: pod_uid} if pod_uid else {})
        resp = await self._call(self.rt.ListContainers, pb.ListContainersRequest(filter=flt))
        items = list(resp.containers)  # type: ignore[attr-defined]
        if pod_uid is None:
            return [ContainerInfo(c.id, c.pod_sandbox_id, c.metadata.name, c.metadata.attempt, _STATES[c.state],
                                  c.image.image, c.image_ref, c.created_at, labels=dict(c.labels),
                                  annotations=dict(c.annotations)) for c in items]
        return list(await asyncio.gather(*(self.container_status(c.id) for c in items)))

    async def container_status(self, container_id: str) -> ContainerInfo:
        resp = await self._call(self.rt.ContainerStatus, pb.ContainerStatusRequest(container_id=container_id))
        s = resp.status  # type: ignore[attr-defined]
        sandbox = s.labels.get("io.kubernetes.pod.uid", "")
        return ContainerInfo(s.id, sandbox, s.metadata.name, s.metadata.attempt, _STATES[s.state], s.image.image,
                             s.image_ref, s.created_at, s.started_at, s.finished_at, s.exit_code, s.reason,
                             s.message, dict(s.labels), dict(s.annotations))

    async def exec_sync(self, container_id: str, cmd: list[str], timeout_s: int) -> tuple[int, bytes, bytes]:
        resp = await self._call(self.rt.ExecSync, pb.ExecSyncRequest(container_id=container_id, cmd=cmd,
                                                                      timeout=timeout_s), deadline=timeout_s + 5)
        return resp.exit_code, resp.stdout, resp.stderr  # type: ignore[attr-defined]

    # -- images ------------------------------------------------------------------------------------

    async def image_status(self, image: str) -> ImageInfo | None:
        resp = await self._call(self.img.ImageStatus, pb.ImageStatusRequest(image=pb.ImageSpec(image=image)))
        img = resp.image  # type: ignore[attr-defined]
        if not img.id:
            return None
        return ImageInfo(img.id, list(img.repo_tags), list(img.repo_digests), img.size,
                         img.uid.value if img.HasField("uid") else None, img.username)

    async def image_fs_path(self) -> str | None:
        """Where the runtime keeps image layers (imagefs for eviction signals)."""
        resp = await self._call(self.img.ImageFsInfo, pb.ImageFsInfoRequest())
        for fs in resp.image_filesystems:  # type: ignore[attr-defined]
            if fs.fs_id.mountpoint:
                return str(fs.fs_id.mountpoint)
        return None

    async def pull_image(self, image: str) -> str:
        resp = await self._call(self.img.PullImage, pb.PullImageRequest(image=pb.ImageSpec(image=image)))
        return resp.image_ref  # type: ignore[attr-defined]
