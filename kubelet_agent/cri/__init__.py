"""Container runtimes the kubelet drives: containerd over CRI, or the in-memory hollow runtime."""

from kubelet_agent.cri.types import (
    CONTAINER_CREATED,
    CONTAINER_EXITED,
    CONTAINER_RUNNING,
    CONTAINER_UNKNOWN,
    ContainerInfo,
    ContainerSpec,
    ImageInfo,
    Mount,
    PortMapping,
    Runtime,
    RuntimeError_,
    SandboxInfo,
    SandboxSpec,
)

__all__ = [
    "CONTAINER_CREATED",
    "CONTAINER_EXITED",
    "CONTAINER_RUNNING",
    "CONTAINER_UNKNOWN",
    "ContainerInfo",
    "ContainerSpec",
    "ImageInfo",
    "Mount",
    "PortMapping",
    "Runtime",
    "RuntimeError_",
    "SandboxInfo",
    "SandboxSpec",
]
