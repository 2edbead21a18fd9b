"""The Node object: registration, the heartbeat Lease, and node status as upstream's nodestatus
setters write it (posted when it changes and at least every nodeStatusReportFrequency)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import random
import shutil
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import structlog

from kubelet_agent.pods.util import quantity
from services.api.meta import now_micro, now_rfc3339
from services.api.quantity import format_quantity
from services.client import AlreadyExists, ApiError, Client, Conflict, NotFound, gvr

log = structlog.get_logger(__name__)

NODES = gvr("v1", "nodes", namespaced=False)
LEASES = gvr("coordination.k8s.io/v1", "leases")
KUBELET_VERSION = "v1.32.0-pyk8s"


@dataclass
class HostInfo:
    """What the node reports about its machine (faked per node for hollow ones)."""

    cpu: str
    memory: str
    ephemeral_storage: str
    kernel_version: str
    os_image: str
    machine_id: str = ""
    boot_id: str = ""
    architecture: str = "amd64"

    @classmethod
    def detect(cls, root_dir: str = "/") -> HostInfo:
        mem_kib = 0
        with contextlib.suppress(OSError), open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
        path = root_dir if os.path.exists(root_dir) else "/"
        disk = shutil.disk_usage(path).total
        os_image = "Linux"
        with contextlib.suppress(OSError), open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    os_image = line.split("=", 1)[1].strip().strip('"')
        machine = platform.machine()
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
        return cls(str(os.cpu_count() or 1), f"{mem_kib}Ki", str(disk), platform.release(), os_image,
                   _read("/etc/machine-id"), _read("/proc/sys/kernel/random/boot_id"), arch)

    @classmethod
    def hollow(cls) -> HostInfo:
        return cls("4", "16Gi", "100Gi", platform.release(), "pyk8s hollow node", architecture="amd64")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass
class NodeConfig:
    name: str
    node_ips: list[str]
    host: HostInfo
    runtime_version: str
    max_pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    reserved: dict[str, str] = field(default_factory=dict)
    pod_cidr: str = ""
    lease_duration: int = 40
    lease_renew: float = 10.0
    status_update: float = 10.0
    status_report: float = 300.0
    kubelet_port: int = 10250


def allocatable(capacity: dict[str, str], reserved: dict[str, str]) -> dict[str, str]:
    out = dict(capacity)
    for name, value in reserved.items():
        if name in out:
            left = max(Decimal(0), quantity(out[name]) - quantity(value))
            out[name] = format_quantity(left, out[name])
    return out


def parse_taint(text: str) -> dict[str, str]:
    """`key=value:Effect` or `key:Effect`, as --register-with-taints takes them."""
    key_value, _, effect = text.partition(":")
    key, _, value = key_value.partition("=")
    taint = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return taint


class NodeAgent:
    """Keeps one Node and its Lease current."""

    def __init__(self, client: Client, config: NodeConfig, *, pressure: dict[str, bool] | None = None) -> None:
        self.client = client
        self.config = config
        self.pressure = pressure or {}
        self.node: dict[str, Any] | None = None
        self._last_report = 0.0
        self._last_conditions: list[tuple[str, str]] = []
        self.registered = asyncio.Event()
        self.runtime_errors: list[str] = []

    @property
    def capacity(self) -> dict[str, str]:
        h = self.config.host
        return {"cpu": h.cpu, "ephemeral-storage": h.ephemeral_storage, "hugepages-1Gi": "0",
                "hugepages-2Mi": "0", "memory": h.memory, "pods": str(self.config.max_pods)}

    @property
    def allocatable(self) -> dict[str, str]:
        return allocatable(self.capacity, self.config.reserved)

    def _addresses(self) -> list[dict[str, str]]:
        out = [{"type": "InternalIP", "address": ip} for ip in self.config.node_ips]
        out.append({"type": "Hostname", "address": self.config.name})
        return out

    def _conditions(self, old: list[dict[str, Any]]) -> list[dict[str, Any]]:
        now = now_rfc3339()
        previous = {c["type"]: c for c in old}
        specs = [
            ("MemoryPressure", self.pressure.get("memory", False), "KubeletHasInsufficientMemory",
             "KubeletHasSufficientMemory", "kubelet has {} memory available"),
            ("DiskPressure", self.pressure.get("disk", False), "KubeletHasDiskPressure", "KubeletHasNoDiskPressure",
             "kubelet has {}disk pressure"),
            ("PIDPressure", self.pressure.get("pid", False), "KubeletHasInsufficientPID", "KubeletHasSufficientPID",
             "kubelet has {} PID available"),
        ]
        out = []
        for ctype, bad, bad_reason, good_reason, text in specs:
            status = "True" if bad else "False"
            if ctype == "DiskPressure":
                message = text.format("" if bad else "no ")
            else:
                message = text.format("insufficient" if bad else "sufficient")
            out.append(self._cond(previous, ctype, status, bad_reason if bad else good_reason, message, now))
        if self.runtime_errors:
            out.append(self._cond(previous, "Ready", "False", "KubeletNotReady", ", ".join(self.runtime_errors), now))
        else:
            out.append(self._cond(previous, "Ready", "True", "KubeletReady", "kubelet is posting ready status", now))
        return out

    @staticmethod
    def _cond(previous: dict[str, dict[str, Any]], ctype: str, status: str, reason: str, message: str,
              now: str) -> dict[str, Any]:
        prev = previous.get(ctype)
        transition = prev["lastTransitionTime"] if prev and prev.get("status") == status else now
        return {"type": ctype, "status": status, "lastHeartbeatTime": now, "lastTransitionTime": transition,
                "reason": reason, "message": message}

    def _status(self, old: dict[str, Any]) -> dict[str, Any]:
        h = self.config.host
        return {
            "capacity": self.capacity,
            "allocatable": self.allocatable,
            "conditions": self._conditions(old.get("conditions") or []),
            "addresses": self._addresses(),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.config.kubelet_port}},
            "nodeInfo": {
                "machineID": h.machine_id, "systemUUID": h.machine_id, "bootID": h.boot_id,
                "kernelVersion": h.kernel_version, "osImage": h.os_image,
                "containerRuntimeVersion": self.config.runtime_version, "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION, "operatingSystem": "linux", "architecture": h.architecture,
            },
        }

    async def register(self) -> dict[str, Any]:
        """Create the Node, or adopt an existing one of the same name, retrying until the API answers."""
        c = self.config
        labels = {"beta.kubernetes.io/arch": c.host.architecture, "beta.kubernetes.io/os": "linux",
                  "kubernetes.io/arch": c.host.architecture, "kubernetes.io/hostname": c.name,
                  "kubernetes.io/os": "linux", **c.labels}
        spec: dict[str, Any] = {}
        if c.pod_cidr:
            spec["podCIDR"] = c.pod_cidr
            spec["podCIDRs"] = [c.pod_cidr]
        if c.taints:
            spec["taints"] = c.taints
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": c.name, "labels": labels,
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": spec, "status": self._status({})}
        delay = 0.5
        while True:
            try:
                try:
                    node = await self.client.create(NODES, body)
                except AlreadyExists:
                    node = await self.client.get(NODES, c.name)
                    patch = {"metadata": {"labels": labels}}
                    node = await self.client.patch(NODES, c.name, patch)
                node = await self.client.patch_status(NODES, c.name, {"status": self._status(node.get("status")
                                                                                              or {})})
                self.node = node
                self._remember(node)
                self.registered.set()
                return node
            except (ApiError, OSError) as exc:
                log.warning("node registration failed, retrying", node=c.name, error=str(exc))
            except Exception as exc:  # noqa: BLE001 - transport errors while the apiserver starts
                log.warning("node registration failed, retrying", node=c.name, error=repr(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 7.0)

    def _remember(self, node: dict[str, Any]) -> None:
        self._last_report = time.monotonic()
        self._last_conditions = [(c["type"], c["status"]) for c in (node.get("status") or {}).get("conditions") or []]

    async def update_status(self, force: bool = False) -> None:
        """Post status when conditions changed or the report interval passed (upstream's tryUpdateNodeStatus).

        The node is read first, from the apiserver's cache as upstream does, so a condition someone else
        changed (the node lifecycle controller's Unknown after missed heartbeats) is put right at once.
        """
        try:
            self.node = await self.client.get(NODES, self.config.name, resource_version="0")
        except NotFound:
            log.warning("node object deleted; registering again", node=self.config.name)
            await self.register()
            return
        old = (self.node or {}).get("status") or {}
        status = self._status(old)
        wanted = [(c["type"], c["status"]) for c in status["conditions"]]
        changed = wanted != self._last_conditions
        changed |= wanted != [(c.get("type"), c.get("status")) for c in old.get("conditions") or []]
        changed |= status["capacity"] != old.get("capacity") or status["addresses"] != old.get("addresses")
        if not force and not changed and time.monotonic() - self._last_report < self.config.status_report:
            return
        try:
            self.node = await self.client.patch_status(NODES, self.config.name, {"status": status})
            self._remember(self.node)
        except NotFound:
            log.warning("node object deleted; registering again", node=self.config.name)
            await self.register()

    async def renew_lease(self) -> None:
        c = self.config
        now = now_micro()
        try:
            lease = await self.client.get(LEASES, c.name, "kube-node-lease")
            lease["spec"]["renewTime"] = now
            lease["spec"]["holderIdentity"] = c.name
            lease["spec"]["leaseDurationSeconds"] = c.lease_duration
            await self.client.replace(LEASES, lease, namespace="kube-node-lease")
        except NotFound:
            node = self.node or {}
            owner = [{"apiVersion": "v1", "kind": "Node", "name": c.name, "uid": node["metadata"]["uid"]}] \
                if node.get("metadata", {}).get("uid") else []
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": c.name, "namespace": "kube-node-lease", "ownerReferences": owner},
                    "spec": {"holderIdentity": c.name, "leaseDurationSeconds": c.lease_duration,
                             "renewTime": now}}
            with contextlib.suppress(AlreadyExists, Conflict):
                await self.client.create(LEASES, body, "kube-node-lease")

    async def run(self) -> None:
        """Register, then heartbeat forever: the lease every 10 s, status when due."""
        if not self.registered.is_set():
            await self.register()
        await asyncio.sleep(random.random() * self.config.lease_renew)
        next_status = time.monotonic() + self.config.status_update
        while True:
            try:
                await self.renew_lease()
                if time.monotonic() >= next_status:
                    next_status = time.monotonic() + self.config.status_update
                    await self.update_status()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - heartbeats must outlive API hiccups
                log.warning("node heartbeat failed", node=self.config.name, error=repr(exc))
            await asyncio.sleep(self.config.lease_renew)
