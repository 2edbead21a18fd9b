"""The runtime-neutral shape of CRI: what the pod workers ask of a runtime and what they get back.

Both the containerd client and the hollow runtime implement `Runtime`, so the pod workers,
status and probes are the same code whether containers are real or simulated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

CONTAINER_CREATED = "created"
CONTAINER_RUNNING = "running"
CONTAINER_EXITED = "exited"
CONTAINER_UNKNOWN = "unknown"

# CRI labels that tie runtime objects to the pod, as upstream writes them (adoption matches on these).
LABEL_POD_NAME = "io.kubernetes.pod.name"
LABEL_POD_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"
ANNOTATION_RESTART_COUNT = "io.kubernetes.container.restartCount"
ANNOTATION_HASH = "io.kubernetes.container.hash"
ANNOTATION_TERMINATION_MESSAGE_PATH = "io.kubernetes.container.terminationMessagePath"


class RuntimeError_(Exception):  # noqa: N801 - keeps the builtin name free
    """A runtime call failed; `code` is the gRPC status name where there is one."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


@dataclass
class PortMapping:
    container_port: int
    host_port: int
    protocol: str = "TCP"
    host_ip: str = ""


@dataclass
class Mount:
    container_path: str
    host_path: str
    readonly: bool = False
    propagation: str = "None"


@dataclass
class SandboxSpec:
    name: str
    namespace: str
    uid: str
    attempt: int = 0
    hostname: str = ""
    host_network: bool = False
    host_pid: bool = False
    host_ipc: bool = False
    dns_servers: list[str] = field(default_factory=list)
    dns_searches: list[str] = field(default_factory=list)
    dns_options: list[str] = field(default_factory=list)
    port_mappings: list[PortMapping] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    log_directory: str = ""
    cgroup_parent: str = ""
    sysctls: dict[str, str] = field(default_factory=dict)
    #: a privileged container needs a privileged sandbox (CRI LinuxSandboxSecurityContext.privileged)
    privileged: bool = False
    #: The CRI runtime handler (containerd's runtime name) from the pod's RuntimeClass; "" is the default.
    runtime_handler: str = ""


@dataclass
class ContainerSpec:
    name: str
    image: str
    attempt: int = 0
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    working_dir: str = ""
    envs: list[tuple[str, str]] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    log_path: str = ""
    stdin: bool = False
    stdin_once: bool = False
    tty: bool = False
    cpu_shares: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    memory_limit: int = 0
    oom_score_adj: int = 0
    privileged: bool = False
    run_as_user: int | None = None
    run_as_group: int | None = None
    supplemental_groups: list[int] = field(default_factory=list)
    #: allowPrivilegeEscalation: false, the process may gain no privileges (setuid, file capabilities)
    no_new_privs: bool = False
    add_capabilities: list[str] = field(default_factory=list)
    drop_capabilities: list[str] = field(default_factory=list)
    readonly_rootfs: bool = False
    init: bool = False
    #: ID of the container whose PID namespace this one joins (an ephemeral container's target).
    pid_target: str = ""


@dataclass
class SandboxInfo:
    id: str
    name: str
    namespace: str
    uid: str
    attempt: int
    ready: bool
    ip: str = ""
    created_at: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class ContainerInfo:
    id: str
    sandbox_id: str
    name: str
    attempt: int
    state: str
    image: str = ""
    image_ref: str = ""
    created_at: int = 0
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def pod_uid(self) -> str:
        return self.labels.get(LABEL_POD_UID, "")


@dataclass
class ImageInfo:
    id: str
    repo_tags: list[str] = field(default_factory=list)
    repo_digests: list[str] = field(default_factory=list)
    size: int = 0
    #: the user of the image's config: a numeric uid, or a name, or neither (root)
    uid: int | None = None
    username: str = ""


Listener = Callable[[str], None]


class Runtime(Protocol):
    """The CRI calls the kubelet makes; times are nanoseconds since the epoch, as CRI reports them."""

    name: str
    simulated: bool

    def set_listener(self, listener: Listener) -> None:
        """Call `listener(pod_uid)` whenever something about that pod's containers changes on its own."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def version(self) -> tuple[str, str]: ...

    async def run_sandbox(self, spec: SandboxSpec) -> str: ...

    async def stop_sandbox(self, sandbox_id: str) -> None: ...

    async def remove_sandbox(self, sandbox_id: str) -> None: ...

    async def list_sandboxes(self, pod_uid: str | None = None) -> list[SandboxInfo]: ...

    async def create_container(self, sandbox_id: str, spec: ContainerSpec, sandbox: SandboxSpec) -> str: ...

    async def start_container(self, container_id: str) -> None: ...

    async def stop_container(self, container_id: str, grace: int) -> None: ...

    async def remove_container(self, container_id: str) -> None: ...

    async def list_containers(self, pod_uid: str | None = None) -> list[ContainerInfo]: ...

    async def container_status(self, container_id: str) -> ContainerInfo: ...

    async def exec_sync(self, container_id: str, cmd: list[str], timeout_s: int) -> tuple[int, bytes, bytes]: ...

    async def image_status(self, image: str) -> ImageInfo | None: ...

    async def pull_image(self, image: str) -> str: ...
