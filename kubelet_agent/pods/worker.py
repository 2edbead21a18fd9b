"""One worker per pod: drives the runtime towards the pod's spec and reports what it sees.

Each sync reads the runtime's view of the pod (sandboxes and containers labelled with its UID),
so a restarted kubelet adopts containers that are still running instead of starting new ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from kubelet_agent.cri.types import (
    ANNOTATION_HASH,
    ANNOTATION_RESTART_COUNT,
    ANNOTATION_TERMINATION_MESSAGE_PATH,
    CONTAINER_CREATED,
    CONTAINER_EXITED,
    CONTAINER_RUNNING,
    LABEL_CONTAINER_NAME,
    LABEL_POD_NAME,
    LABEL_POD_NAMESPACE,
    LABEL_POD_UID,
    ContainerInfo,
    ContainerSpec,
    Mount,
    PortMapping,
    Runtime,
    RuntimeError_,
    SandboxInfo,
    SandboxSpec,
)
from kubelet_agent.pods import deadline, securitycontext, sidecars, termination
from kubelet_agent.pods.admission import has_privileged_container
from kubelet_agent.pods.backoff import RESET_AFTER_RUNNING, Backoff
from kubelet_agent.pods.env import EnvError, build_env, expand
from kubelet_agent.pods.events import EventRecorder
from kubelet_agent.pods.gate import StartGate
from kubelet_agent.pods.probes import ProbeManager, run_handler
from kubelet_agent.pods.resolver import Resolver
from kubelet_agent.pods.status import PODS, StatusManager, build_status, instances_by_name
from kubelet_agent.pods.sysctl import sandbox_sysctls
from kubelet_agent.pods.util import cpu_quota, cpu_shares, normalize_image, quantity
from kubelet_agent.pods.volumes import MountedVolume, VolumeError, VolumeManager
from services.api.meta import now_rfc3339
from services.client import ApiError, Client, NotFound
from services.runtime.netns import Dialer

log = structlog.get_logger(__name__)

PULL_TIMEOUT = 60.0
ANNOTATION_MIRROR = "kubernetes.io/config.mirror"


@dataclass
class NodeContext:
    """What every pod worker of one node shares."""

    node_name: str
    client: Client
    runtime: Runtime
    status: StatusManager
    host_ips: list[str]
    allocatable: dict[str, str]
    root_dir: str
    resolver: Resolver | None = None
    volumes: VolumeManager | None = None
    events: EventRecorder | None = None
    dialer: Dialer = field(default_factory=Dialer)
    cluster_dns: list[str] = field(default_factory=list)
    cluster_domain: str = "cluster.local"
    host_dns: tuple[list[str], list[str], list[str]] = ([], [], [])
    resync: float | None = 10.0
    image_backoff: Backoff = field(default_factory=Backoff)
    pull_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    pull_failures: dict[str, float] = field(default_factory=dict)
    gate: StartGate | None = None


def container_hash(spec: dict[str, Any]) -> str:
    return f"{hash(repr(sorted(spec.items()))) & 0xFFFFFFFF:08x}"


class PodWorker:
    def __init__(self, ctx: NodeContext, pod: dict[str, Any], *, status_target: tuple[str, str] | None = None) -> None:
        self.ctx = ctx
        self.pod = pod
        self.uid = pod["metadata"]["uid"]
        self.status_target = status_target
        self.api_status: dict[str, Any] = dict(pod.get("status") or {})
        self.gone = False
        self.terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        self.backoff = Backoff()
        self.waiting: dict[str, tuple[str, str]] = {}
        self.kill_requests: dict[str, tuple[str, int | None]] = {}
        self._wake = asyncio.Event()
        self._deadline: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._mounts: dict[str, MountedVolume] = {}
        self._sandbox_spec: SandboxSpec | None = None
        self.probes = ProbeManager(ctx.runtime, ctx.dialer, self.wake, self._on_probe_failure, self._on_probe_event,
                                   lambda: self.meta.get("annotations") or {})
        self.done = asyncio.Event()
        self.ticket = ctx.gate.ticket() if ctx.gate is not None else 0
        self.evicted: str | None = None
        #: (reason, message) of a failure the kubelet decided itself, e.g. the active deadline passing
        self.failed: tuple[str, str] | None = None
        #: termination messages of exited container instances, by container ID
        self._messages: dict[str, str] = {}
        self.evict_grace = 0
        self.rejected: tuple[str, str] | None = None

    @property
    def meta(self) -> dict[str, Any]:
        return self.pod["metadata"]

    @property
    def spec(self) -> dict[str, Any]:
        return self.pod.get("spec") or {}

    # -- driving -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"pod-{self.uid}")

    def update(self, pod: dict[str, Any], api_status: dict[str, Any] | None = None) -> None:
        """A newer pod object, or (for static pods) the mirror's status.

        An informer update that changed only the status (most often our own write coming back) needs
        no sync, as upstream's pod config only reconciles those; readiness gates are the exception,
        since the Ready condition follows them.
        """
        spec_changed = api_status is not None or _differs(self.pod, pod) or bool(
            (pod.get("spec") or {}).get("readinessGates"))
        self.pod = pod
        self.api_status = dict(api_status if api_status is not None else pod.get("status") or {})
        if spec_changed:
            self.wake()

    def remove(self) -> None:
        """The pod object is gone from the API: stop everything now."""
        self.gone = True
        self.wake()

    def evict(self, message: str, grace: int = 0) -> None:
        """Fail the pod with reason Evicted and `message`, stopping it within `grace` seconds (0 for a hard
        threshold or an emptyDir over its limit; a soft threshold gives the pod its capped grace period)."""
        if self.evicted is None and not self.terminal:
            self.evicted = message
            self.evict_grace = grace
            self.wake()

    def reject(self, reason: str, message: str) -> None:
        """Admission refused the pod: it never starts and ends Failed with `reason` (before start())."""
        self.rejected = (reason, f"Pod was rejected: {message}")

    def wake(self) -> None:
        self._wake.set()

    def _gated(self) -> contextlib.AbstractAsyncContextManager[None]:
        """A slot of the node's start gate for runtime work that starts something."""
        return self.ctx.gate.slot(self.ticket) if self.ctx.gate is not None else contextlib.nullcontext()

    def _after(self, seconds: float) -> None:
        at = time.monotonic() + max(0.0, seconds)
        if self._deadline is None or at < self._deadline:
            self._deadline = at

    async def stop(self) -> None:
        """Stop the worker without touching containers (kubelet shutdown keeps pods running)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.probes.stop()

    async def _run(self) -> None:
        try:
            while True:
                self._deadline = None
                try:
                    finished = await self.sync()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("pod sync failed", pod=f"{self.meta.get('namespace')}/{self.meta.get('name')}")
                    finished = False
                    self._after(2.0)
                if finished:
                    return
                if self.ctx.resync:
                    self._after(self.ctx.resync)
                timeout = None if self._deadline is None else max(0.0, self._deadline - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                self._wake.clear()
        finally:
            self.done.set()

    def _event(self, event_type: str, reason: str, message: str, container: str = "") -> None:
        if self.ctx.events is None:
            return
        path = ""
        if container:
            kind = next((key for key in ("initContainers", "ephemeralContainers")
                         if any(c["name"] == container for c in self.spec.get(key) or [])), "containers")
            path = f"spec.{kind}{{{container}}}"
        self.ctx.events.record({"kind": "Pod", "metadata": self.meta}, event_type, reason, message, path)

    def _on_probe_failure(self, name: str, cid: str, message: str, grace: str) -> None:
        self.kill_requests[cid] = (message, int(grace) if grace else None)
        self.wake()

    def _on_probe_event(self, name: str, reason: str, message: str) -> None:
        self._event("Warning", reason, message, name)

    # -- sync --------------------------------------------------------------------------------------

    async def sync(self) -> bool:
        """One pass; True when the worker is finished for good."""
        rt = self.ctx.runtime
        if self.gone or self.meta.get("deletionTimestamp"):
            await self.terminate()
            return True
        if self.rejected is not None:
            if not self.terminal:
                self._publish(None, [], terminal=True)
            return False
        sandboxes = sorted(await rt.list_sandboxes(self.uid), key=lambda s: s.attempt, reverse=True)
        containers = await rt.list_containers(self.uid)
        sandbox = sandboxes[0] if sandboxes else None
        if self.evicted is not None and not self.terminal:
            await self._evict(sandbox, containers)
            return False
        if not self.terminal and self._deadline_passed():
            self._event("Normal", deadline.REASON, deadline.MESSAGE)
            self.failed = (deadline.REASON, deadline.MESSAGE)
            await self._stop_pod(sandbox, containers, self._grace())
            return False
        if self.terminal:
            if sandbox is not None and sandbox.ready:
                await self._kill_all(containers, self._grace(), "pod finished")
                await rt.stop_sandbox(sandbox.id)
            return False
        if sandbox is None or not sandbox.ready:
            if sandbox is not None:
                self._event("Normal", "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
                await self._kill_all(containers, 2, "sandbox changed")
            if not await self._setup_volumes(None):
                self._publish(None, containers)
                return False
            sandbox = await self._create_sandbox(sandbox.attempt + 1 if sandbox else 0)
            if sandbox is None:
                self._publish(None, containers)
                return False
            containers = await rt.list_containers(self.uid)
        elif not await self._setup_volumes(sandbox):
            self._publish(sandbox, containers)
            return False
        await self._handle_kill_requests(containers)
        await self._sync_containers(sandbox, containers)
        await self._sync_ephemeral(sandbox, await rt.list_containers(self.uid))
        containers = await rt.list_containers(self.uid)
        await self._gc_containers(containers)
        running = {c.name: (c.id, self._spec_of(c.name) or {}) for c in self._latest(containers).values()
                   if c.state == CONTAINER_RUNNING and (self._is_app(c.name) or self._is_sidecar(c.name))}
        self.probes.sync(running, sandbox.ip or (self.ctx.host_ips[0] if self.ctx.host_ips else ""))
        await self._read_messages(containers)
        self._publish(sandbox, containers)
        if self.terminal or self._deadline_passed():
            self.wake()
        return False

    def _deadline_passed(self) -> bool:
        """Whether spec.activeDeadlineSeconds has run out; if not, wake when it will."""
        left = deadline.seconds_left(self.spec, self.ctx.status.sent(self.uid) or self.api_status)
        if left is None:
            return False
        if left > 0:
            self._after(left)
        return left <= 0

    async def _evict(self, sandbox: SandboxInfo | None, containers: list[ContainerInfo]) -> None:
        self._event("Warning", "Evicted", self.evicted or "")
        await self._stop_pod(sandbox, containers, self.evict_grace)

    async def _stop_pod(self, sandbox: SandboxInfo | None, containers: list[ContainerInfo], grace: int) -> None:
        """Kill every container within `grace` and stop the sandbox: the pod is finished for good."""
        rt = self.ctx.runtime
        await self.probes.stop()
        await self._kill_all(containers, grace, "pod failed")
        if sandbox is not None and sandbox.ready:
            with contextlib.suppress(RuntimeError_):
                await rt.stop_sandbox(sandbox.id)
            sandbox.ready = False
        self.terminal = True
        containers = await rt.list_containers(self.uid)
        await self._read_messages(containers)
        self._publish(sandbox, containers, terminal=True)

    def _latest(self, containers: list[ContainerInfo]) -> dict[str, ContainerInfo]:
        return {name: items[0] for name, items in instances_by_name(containers).items()}

    def _spec_of(self, name: str) -> dict[str, Any] | None:
        for c in [*(self.spec.get("initContainers") or []), *(self.spec.get("containers") or []),
                  *(self.spec.get("ephemeralContainers") or [])]:
            if c["name"] == name:
                return c
        return None

    def _is_app(self, name: str) -> bool:
        return any(c["name"] == name for c in self.spec.get("containers") or [])

    def _is_sidecar(self, name: str) -> bool:
        return name in sidecars.names(self.spec)

    def _is_init(self, name: str) -> bool:
        return any(c["name"] == name for c in self.spec.get("initContainers") or [])

    async def _read_messages(self, containers: list[ContainerInfo]) -> None:
        """Read the termination message of each instance that exited since the last look."""
        if self.ctx.runtime.simulated:
            return
        pod_dir = Path(self.ctx.root_dir, "pods", self.uid)
        for c in containers:
            if c.state != CONTAINER_EXITED or c.id in self._messages:
                continue
            spec = self._spec_of(c.name) or {}
            fallback = (spec.get("terminationMessagePolicy") == termination.FALLBACK_TO_LOGS and c.exit_code != 0
                        and c.reason != "ContainerCannotRun")
            log_file = Path(self._log_directory(), c.name, f"{c.attempt}.log") if fallback else None
            self._messages[c.id] = await asyncio.to_thread(
                termination.read_message, termination.message_file(pod_dir, c.name, c.attempt), log_file)

    def _with_messages(self, containers: list[ContainerInfo]) -> list[ContainerInfo]:
        """The runtime's own message (an OOM kill, say) first, then what the container left, as upstream."""
        out = []
        for c in containers:
            text = self._messages.get(c.id)
            if text:
                c = dataclasses.replace(c, message=f"{c.message}: {text}" if c.message else text)
            out.append(c)
        return out

    def _publish(self, sandbox: SandboxInfo | None, containers: list[ContainerInfo], terminal: bool = False) -> None:
        containers = self._with_messages(containers)
        status = build_status(
            self.pod, sandbox=sandbox, containers=containers, waiting=self.waiting, ready=self.probes.ready,
            started=self.probes.started, host_ips=self.ctx.host_ips, runtime_name=self.ctx.runtime.name,
            old=self.ctx.status.sent(self.uid) or self.api_status, terminal=terminal,
        )
        if self.evicted is not None:
            status["phase"], status["reason"], status["message"] = "Failed", "Evicted", self.evicted
            before = self.ctx.status.sent(self.uid) or self.api_status
            old = {c.get("type"): c for c in before.get("conditions") or []}
            target = old.get("DisruptionTarget") or {"type": "DisruptionTarget", "status": "True",
                                                      "lastProbeTime": None, "lastTransitionTime": now_rfc3339(),
                                                      "reason": "TerminationByKubelet", "message": self.evicted}
            status["conditions"] = [c for c in status["conditions"] if c.get("type") != "DisruptionTarget"]
            status["conditions"].insert(0, target)
        if self.failed is not None:
            status["phase"], status["reason"], status["message"] = "Failed", *self.failed
        if self.rejected is not None:
            status = {"phase": "Failed", "reason": self.rejected[0], "message": self.rejected[1],
                      "qosClass": status["qosClass"], "startTime": status["startTime"],
                      "conditions": list(self.api_status.get("conditions") or [])}
        termination.cap_messages(self.spec, status)
        if status["phase"] in ("Succeeded", "Failed"):
            self.terminal = True
        ns, name = self.status_target or (self.meta.get("namespace", ""), self.meta.get("name", ""))
        self.ctx.status.set_status(ns, name, self.uid, status, self.api_status)

    # -- sandbox and volumes -----------------------------------------------------------------------

    async def _setup_volumes(self, sandbox: SandboxInfo | None) -> bool:
        if self.ctx.volumes is None:
            return True
        try:
            self._mounts = await self.ctx.volumes.setup(self.pod, sandbox.ip if sandbox else "", self.ctx.host_ips)
            return True
        except VolumeError as exc:
            self._event("Warning", "FailedMount", f"MountVolume.SetUp failed: {exc}")
            self._after(5.0)
            return False

    def sandbox_spec(self, attempt: int) -> SandboxSpec:
        meta, spec = self.meta, self.spec
        host_network = bool(spec.get("hostNetwork"))
        hostname = "" if host_network else (spec.get("hostname") or meta["name"])[:63]
        servers, searches, options = self._dns()
        ports = []
        for c in spec.get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("hostPort"):
                    ports.append(PortMapping(int(p["containerPort"]), int(p["hostPort"]), p.get("protocol") or "TCP",
                                             p.get("hostIP") or ""))
        labels = {**(meta.get("labels") or {}), LABEL_POD_NAME: meta["name"],
                  LABEL_POD_NAMESPACE: meta.get("namespace", ""), LABEL_POD_UID: self.uid}
        return SandboxSpec(
            name=meta["name"], namespace=meta.get("namespace", ""), uid=self.uid, attempt=attempt,
            hostname=hostname, host_network=host_network, host_pid=bool(spec.get("hostPID")),
            host_ipc=bool(spec.get("hostIPC")), dns_servers=servers, dns_searches=searches, dns_options=options,
            port_mappings=ports, labels=labels, annotations=dict(meta.get("annotations") or {}),
            log_directory=self._log_directory(),
            sysctls=sandbox_sysctls(spec),
            privileged=has_privileged_container(spec),
        )

    def _log_directory(self) -> str:
        return f"/var/log/pods/{self.meta.get('namespace')}_{self.meta['name']}_{self.uid}"

    def _dns(self) -> tuple[list[str], list[str], list[str]]:
        """resolv.conf for the pod from dnsPolicy and dnsConfig, like upstream's dns configurer."""
        spec = self.spec
        policy = spec.get("dnsPolicy") or "ClusterFirst"
        host_servers, host_searches, host_options = self.ctx.host_dns
        if policy == "ClusterFirst" and spec.get("hostNetwork"):
            policy = "Default"
        if policy in ("ClusterFirst", "ClusterFirstWithHostNet") and not self.ctx.cluster_dns:
            policy = "Default"
        if policy in ("ClusterFirst", "ClusterFirstWithHostNet"):
            ns = self.meta.get("namespace", "default")
            domain = self.ctx.cluster_domain
            servers = list(self.ctx.cluster_dns)
            searches = [f"{ns}.svc.{domain}", f"svc.{domain}", domain, *host_searches]
            options = ["ndots:5"]
        elif policy == "None":
            servers, searches, options = [], [], []
        else:
            servers, searches, options = list(host_servers), list(host_searches), list(host_options)
        config = spec.get("dnsConfig") or {}
        servers += [s for s in config.get("nameservers") or [] if s not in servers]
        searches += [s for s in config.get("searches") or [] if s not in searches]
        merged = {o.split(":", 1)[0]: o for o in options}
        for opt in config.get("options") or []:
            merged[opt["name"]] = f"{opt['name']}:{opt['value']}" if opt.get("value") else opt["name"]
        return servers[:3], searches[:32], list(merged.values())

    async def _runtime_handler(self) -> str | None:
        """The CRI handler the pod's RuntimeClass names ("" without one); None when the class is missing."""
        name = self.spec.get("runtimeClassName")
        if not name:
            return ""
        rc = await self.ctx.resolver.runtime_class(name) if self.ctx.resolver is not None else None
        return None if rc is None else str(rc.get("handler") or "")

    async def _create_sandbox(self, attempt: int) -> SandboxInfo | None:
        spec = self.sandbox_spec(attempt)
        handler = await self._runtime_handler()
        if handler is None:
            name = self.spec.get("runtimeClassName")
            self._event("Warning", "FailedCreatePodSandBox",
                        f'Failed to create pod sandbox: RuntimeClass "{name}" not found')
            self._after(min(30.0, 2.0 * (attempt + 1)))
            return None
        spec.runtime_handler = handler
        try:
            async with self._gated():
                sid = await self.ctx.runtime.run_sandbox(spec)
        except RuntimeError_ as exc:
            message = f"Failed to create pod sandbox: {exc}"
            self._event("Warning", "FailedCreatePodSandBox", message)
            self._after(min(30.0, 2.0 * (attempt + 1)))
            return None
        self._sandbox_spec = spec
        sandboxes = await self.ctx.runtime.list_sandboxes(self.uid)
        return next((s for s in sandboxes if s.id == sid), None)

    # -- containers --------------------------------------------------------------------------------

    async def _sync_containers(self, sandbox: SandboxInfo, containers: list[ContainerInfo]) -> None:
        latest = self._latest(containers)
        policy = self.spec.get("restartPolicy") or "Always"
        for c in self.spec.get("initContainers") or []:
            inst = latest.get(c["name"])
            if inst is None:
                await self._start(sandbox, c, 0, None)
                return
            if sidecars.is_sidecar(c):
                if inst.state == CONTAINER_EXITED:
                    await self._restart(sandbox, c, inst)
                if not any(latest.get(app["name"]) for app in self.spec.get("containers") or []) and \
                        not sidecars.started(c, inst.state == CONTAINER_RUNNING, self.probes.started.get(inst.id)):
                    return
                continue
            if inst.state in (CONTAINER_RUNNING, CONTAINER_CREATED):
                return
            if inst.exit_code == 0:
                self.waiting.pop(c["name"], None)
                continue
            if policy == "Never":
                return
            await self._restart(sandbox, c, inst)
            return
        for c in self.spec.get("containers") or []:
            inst = latest.get(c["name"])
            if inst is None:
                await self._start(sandbox, c, 0, None)
            elif inst.state == CONTAINER_CREATED:
                await self.ctx.runtime.remove_container(inst.id)
                await self._start(sandbox, c, inst.attempt + 1, inst)
            elif inst.state == CONTAINER_EXITED:
                if policy == "Always" or (policy == "OnFailure" and inst.exit_code != 0):
                    await self._restart(sandbox, c, inst)
                else:
                    self.waiting.pop(c["name"], None)
            else:
                self.waiting.pop(c["name"], None)

    async def _sync_ephemeral(self, sandbox: SandboxInfo, containers: list[ContainerInfo]) -> None:
        """Start each ephemeral container that has never run; once started, it is never restarted."""
        latest = self._latest(containers)
        for c in self.spec.get("ephemeralContainers") or []:
            if c["name"] in latest:
                continue
            target = c.get("targetContainerName") or ""
            pid_target = ""
            if target:
                inst = latest.get(target)
                if inst is None:
                    self.waiting[c["name"]] = ("CreateContainerConfigError",
                                               f"unable to find target container {target}")
                    self._after(2.0)
                    continue
                pid_target = inst.id
            await self._start(sandbox, c, 0, None, pid_target)

    async def _restart(self, sandbox: SandboxInfo, spec: dict[str, Any], dead: ContainerInfo) -> None:
        name = spec["name"]
        key = name
        finished = dead.finished_at / 1e9 if dead.finished_at else time.time()
        if dead.started_at and dead.finished_at and (dead.finished_at - dead.started_at) / 1e9 >= RESET_AFTER_RUNNING:
            self.backoff.reset(key)
        wait = self.backoff.in_backoff(key, finished)
        if wait > 0:
            delay = int(self.backoff.current(key))
            ns, pod_name = self.meta.get("namespace"), self.meta.get("name")
            message = f"back-off {_duration(delay)} restarting failed container={name} pod={pod_name}_{ns}({self.uid})"
            if self.waiting.get(name, ("",))[0] != "CrashLoopBackOff":
                self._event("Warning", "BackOff", "Back-off restarting failed container", name)
            self.waiting[name] = ("CrashLoopBackOff", message)
            self._after(wait)
            return
        self.backoff.next(key)
        await self._start(sandbox, spec, dead.attempt + 1, dead)

    async def _ensure_image(self, spec: dict[str, Any]) -> str | None:
        """The image reference to run, or None with the container's waiting reason set."""
        rt, name = self.ctx.runtime, spec["name"]
        image = spec.get("image", "")
        ref = normalize_image(image)
        policy = spec.get("imagePullPolicy") or ("Always" if ref.endswith(":latest") else "IfNotPresent")
        present = None
        if policy != "Always":
            try:
                present = await rt.image_status(ref)
            except RuntimeError_ as exc:
                self.waiting[name] = ("ErrImageInspect", f"Failed to inspect image {image!r}: {exc}")
                return None
            if present is not None:
                self._event("Normal", "Pulled", f'Container image "{image}" already present on machine', name)
                return ref
            if policy == "Never":
                message = f'Container image "{image}" is not present with pull policy of Never'
                self.waiting[name] = ("ErrImageNeverPull", message)
                self._event("Warning", "ErrImageNeverPull", message, name)
                self._after(10.0)
                return None
        backoff = self.ctx.image_backoff
        wait = backoff.in_backoff(ref, self._pull_failed_at(ref))
        if wait > 0:
            self.waiting[name] = ("ImagePullBackOff", f'Back-off pulling image "{image}"')
            self._event("Normal", "BackOff", f'Back-off pulling image "{image}"', name)
            self._after(wait)
            return None
        lock = self.ctx.pull_locks.setdefault(ref, asyncio.Lock())
        self._event("Normal", "Pulling", f'Pulling image "{image}"', name)
        started = time.monotonic()
        try:
            async with lock, asyncio.timeout(PULL_TIMEOUT):
                await rt.pull_image(ref)
        except (RuntimeError_, TimeoutError) as exc:
            message = f'Failed to pull image "{image}": {exc or "timed out"}'
            backoff.next(ref)
            self.ctx.pull_failures[ref] = time.time()
            self.waiting[name] = ("ErrImagePull", message)
            self._event("Warning", "Failed", message, name)
            self._after(backoff.current(ref))
            return None
        backoff.reset(ref)
        self._event("Normal", "Pulled", f'Successfully pulled image "{image}" in '
                    f"{time.monotonic() - started:.3f}s", name)
        return ref

    def _pull_failed_at(self, ref: str) -> float:
        return self.ctx.pull_failures.get(ref, 0.0)

    async def _container_spec(self, sandbox: SandboxInfo, spec: dict[str, Any], attempt: int,
                              image: str, pid_target: str = "") -> ContainerSpec | None:
        name = spec["name"]
        meta = self.meta
        env: dict[str, str] = {}
        if not self.ctx.runtime.simulated:
            try:
                env = await build_env(self.pod, spec, self.ctx.resolver, pod_ip=sandbox.ip,
                                      host_ips=self.ctx.host_ips, allocatable=self.ctx.allocatable)
            except EnvError as exc:
                self.waiting[name] = ("CreateContainerConfigError", str(exc))
                self._event("Warning", "Failed", f"Error: {exc}", name)
                self._after(5.0)
                return None
        mounts = self._mounts_for(spec, env, sandbox)
        if mounts is None:
            return None
        if not self.ctx.runtime.simulated:
            message_file = termination.message_file(Path(self.ctx.root_dir, "pods", self.uid), name, attempt)
            await asyncio.to_thread(termination.prepare, message_file)
            mounts.append(Mount(spec.get("terminationMessagePath") or termination.DEFAULT_PATH, str(message_file)))
        resources = spec.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        cpu_request = quantity(requests.get("cpu", limits.get("cpu", 0)))
        security = securitycontext.effective(self.spec, spec)
        if security.run_as_non_root and not self.ctx.runtime.simulated:
            pod_text = f"{meta['name']}_{meta.get('namespace', '')}({self.uid})"
            violation = securitycontext.non_root_violation(security, await self.ctx.runtime.image_status(image),
                                                           pod_text, name)
            if violation is not None:
                self.waiting[name] = ("CreateContainerConfigError", violation)
                self._event("Warning", "Failed", f"Error: {violation}", name)
                self._after(5.0)
                return None
        return ContainerSpec(
            name=name, image=image, attempt=attempt,
            command=[expand(a, env) for a in spec.get("command") or []],
            args=[expand(a, env) for a in spec.get("args") or []],
            working_dir=spec.get("workingDir") or "", envs=list(env.items()), mounts=mounts,
            labels={LABEL_POD_NAME: meta["name"], LABEL_POD_NAMESPACE: meta.get("namespace", ""),
                    LABEL_POD_UID: self.uid, LABEL_CONTAINER_NAME: name},
            annotations={ANNOTATION_HASH: container_hash(spec), ANNOTATION_RESTART_COUNT: str(attempt),
                         ANNOTATION_TERMINATION_MESSAGE_PATH: spec.get("terminationMessagePath")
                         or termination.DEFAULT_PATH,
                         "io.kubernetes.pod.terminationGracePeriod": str(self._grace())},
            log_path=f"{name}/{attempt}.log", stdin=bool(spec.get("stdin")), stdin_once=bool(spec.get("stdinOnce")),
            tty=bool(spec.get("tty")), cpu_shares=cpu_shares(cpu_request) if not self.ctx.runtime.simulated else 0,
            cpu_quota=cpu_quota(quantity(limits.get("cpu", 0))), cpu_period=100_000 if limits.get("cpu") else 0,
            memory_limit=int(quantity(limits.get("memory", 0))),
            privileged=security.privileged, run_as_user=security.run_as_user, run_as_group=security.run_as_group,
            supplemental_groups=security.supplemental_groups, no_new_privs=security.no_new_privs,
            add_capabilities=security.add_capabilities, drop_capabilities=security.drop_capabilities,
            readonly_rootfs=security.readonly_rootfs,
            init=self._is_init(name), pid_target=pid_target,
        )

    def _mounts_for(self, spec: dict[str, Any], env: dict[str, str], sandbox: SandboxInfo) -> list[Mount] | None:
        if self.ctx.runtime.simulated:
            return []
        mounts: list[Mount] = []
        for vm in spec.get("volumeMounts") or []:
            vol = self._mounts.get(vm["name"])
            if vol is None:
                self.waiting[spec["name"]] = ("CreateContainerConfigError", f"cannot find volume {vm['name']!r} "
                                              f"to mount into container {spec['name']!r}")
                return None
            host = vol.path
            sub = vm.get("subPath") or (expand(vm["subPathExpr"], env) if vm.get("subPathExpr") else "")
            if sub:
                target = Path(vol.path, sub)
                if ".." in Path(sub).parts or Path(sub).is_absolute():
                    self.waiting[spec["name"]] = ("CreateContainerConfigError", f"invalid subPath {sub!r}")
                    return None
                if not target.exists() and not vol.readonly:
                    target.mkdir(parents=True, exist_ok=True)
                host = str(target)
            propagation = {"HostToContainer": "HostToContainer", "Bidirectional": "Bidirectional"}.get(
                vm.get("mountPropagation") or "", "None")
            mounts.append(Mount(vm["mountPath"], host, bool(vm.get("readOnly")) or vol.readonly, propagation))
        pod_dir = Path(self.ctx.root_dir, "pods", self.uid)
        if not self.spec.get("hostNetwork") and not any(m.container_path == "/etc/hosts" for m in mounts):
            hosts = pod_dir / "etc-hosts"
            hosts.parent.mkdir(parents=True, exist_ok=True)
            hosts.write_text(self._hosts_file(sandbox.ip))
            mounts.append(Mount("/etc/hosts", str(hosts)))
        return mounts

    def _hosts_file(self, ip: str) -> str:
        lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost",
                 "::1\tlocalhost ip6-localhost ip6-loopback", "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix",
                 "fe00::1\tip6-allnodes", "fe00::2\tip6-allrouters"]
        hostname = self.spec.get("hostname") or self.meta["name"]
        if self.spec.get("subdomain"):
            ns = self.meta.get("namespace")
            fqdn = f"{hostname}.{self.spec['subdomain']}.{ns}.svc.{self.ctx.cluster_domain}"
            lines.append(f"{ip}\t{fqdn}\t{hostname}")
        elif ip:
            lines.append(f"{ip}\t{hostname}")
        aliases = self.spec.get("hostAliases") or []
        if aliases:
            lines.append("\n# Entries added by HostAliases.")
            lines.extend(f"{a['ip']}\t{chr(9).join(a.get('hostnames') or [])}" for a in aliases)
        return "\n".join(lines) + "\n"

    async def _start(self, sandbox: SandboxInfo, spec: dict[str, Any], attempt: int,
                     previous: ContainerInfo | None, pid_target: str = "") -> None:
        """Create and start one container; `pid_target` (a container ID) puts it in that PID namespace."""
        rt, name = self.ctx.runtime, spec["name"]
        image = await self._ensure_image(spec)
        if image is None:
            return
        cspec = await self._container_spec(sandbox, spec, attempt, image, pid_target)
        if cspec is None:
            return
        sandbox_spec = self._sandbox_spec or self.sandbox_spec(sandbox.attempt)
        async with self._gated():
            try:
                cid = await rt.create_container(sandbox.id, cspec, sandbox_spec)
            except RuntimeError_ as exc:
                self.waiting[name] = ("CreateContainerError", str(exc))
                self._event("Warning", "Failed", f"Error: {exc}", name)
                self.backoff.next(name)
                self._after(self.backoff.current(name))
                return
            self._event("Normal", "Created", f"Created container {name}", name)
            try:
                await rt.start_container(cid)
            except RuntimeError_ as exc:
                self.waiting[name] = ("RunContainerError", str(exc))
                self._event("Warning", "Failed", f"Error: {exc}", name)
                with contextlib.suppress(RuntimeError_):
                    await rt.remove_container(cid)
                self.backoff.next(name)
                self._after(self.backoff.current(name))
                return
        self.waiting.pop(name, None)
        self._event("Normal", "Started", f"Started container {name}", name)
        if previous is not None:
            with contextlib.suppress(RuntimeError_):
                await self._remove_older(name, keep={cid, previous.id})
        post_start = (spec.get("lifecycle") or {}).get("postStart")
        if post_start:
            result = await run_handler(post_start, runtime=rt, dialer=self.ctx.dialer, container_id=cid,
                                       container=spec, pod_ip=sandbox.ip, limit=float(self._grace() or 30))
            if not result.ok:
                self._event("Warning", "FailedPostStartHook", result.message, name)
                await rt.stop_container(cid, self._grace())

    async def _remove_older(self, name: str, keep: set[str]) -> None:
        for c in await self.ctx.runtime.list_containers(self.uid):
            if c.name == name and c.id not in keep and c.state == CONTAINER_EXITED:
                await self._remove_instance(c)

    async def _remove_instance(self, c: ContainerInfo) -> None:
        """Remove an exited container instance, and its termination message file with it."""
        await self.ctx.runtime.remove_container(c.id)
        self._messages.pop(c.id, None)
        path = termination.message_file(Path(self.ctx.root_dir, "pods", self.uid), c.name, c.attempt)
        await asyncio.to_thread(path.unlink, missing_ok=True)

    async def _gc_containers(self, containers: list[ContainerInfo]) -> None:
        """Keep the newest two instances of each container (current state and lastState), and their
        termination message files."""
        for items in instances_by_name(containers).values():
            for old in items[2:]:
                if old.state == CONTAINER_EXITED:
                    with contextlib.suppress(RuntimeError_):
                        await self._remove_instance(old)

    async def _handle_kill_requests(self, containers: list[ContainerInfo]) -> None:
        if not self.kill_requests:
            return
        by_id = {c.id: c for c in containers}
        requests, self.kill_requests = self.kill_requests, {}
        for cid, (message, grace) in requests.items():
            c = by_id.get(cid)
            if c is None or c.state != CONTAINER_RUNNING:
                continue
            self._event("Normal", "Killing", message, c.name)
            await self._kill(c, self._grace() if grace is None else grace)

    def _grace(self) -> int:
        value = self.spec.get("terminationGracePeriodSeconds")
        return 30 if value is None else int(value)

    async def _kill(self, c: ContainerInfo, grace: int) -> None:
        """preStop within the grace period, then StopContainer with what is left (SIGTERM, then SIGKILL)."""
        deadline = time.monotonic() + grace
        spec = self._spec_of(c.name) or {}
        pre_stop = (spec.get("lifecycle") or {}).get("preStop")
        if pre_stop and grace > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    result = await run_handler(pre_stop, runtime=self.ctx.runtime, dialer=self.ctx.dialer,
                                               container_id=c.id, container=spec,
                                               pod_ip=self.api_status.get("podIP", ""), limit=float(grace))
                    if not result.ok:
                        self._event("Warning", "FailedPreStopHook", result.message, c.name)
        remaining = max(0, int(round(deadline - time.monotonic())))
        if pre_stop and remaining < 2 and grace > 0:
            remaining = 2
        try:
            await self.ctx.runtime.stop_container(c.id, remaining)
        except RuntimeError_ as exc:
            log.warning("stop container failed", container=c.id, error=str(exc))

    async def _kill_all(self, containers: list[ContainerInfo], grace: int, why: str) -> None:
        """Stop the pod's containers within `grace`: sidecars after everything else, with what is left."""
        running = [c for c in containers if c.state in (CONTAINER_RUNNING, CONTAINER_CREATED)]
        later = sidecars.names(self.spec)
        deadline_at = time.monotonic() + grace
        await asyncio.gather(*(self._kill(c, grace) for c in running if c.name not in later))
        left = max(0, int(round(deadline_at - time.monotonic())))
        await asyncio.gather(*(self._kill(c, left) for c in running if c.name in later))

    # -- termination -------------------------------------------------------------------------------

    async def terminate(self) -> None:
        """Stop the pod within its grace period, report the final status, then remove the pod object."""
        rt = self.ctx.runtime
        grace = self.meta.get("deletionGracePeriodSeconds")
        grace = self._grace() if grace is None else int(grace)
        if self.gone:
            grace = min(grace, 2)
        containers = await rt.list_containers(self.uid)
        for c in containers:
            if c.state == CONTAINER_RUNNING:
                self._event("Normal", "Killing", f"Stopping container {c.name}", c.name)
        await self.probes.stop()
        await self._kill_all(containers, grace, "pod deleted")
        containers = await rt.list_containers(self.uid)
        sandboxes = await rt.list_sandboxes(self.uid)
        for s in sandboxes:
            with contextlib.suppress(RuntimeError_):
                await rt.stop_sandbox(s.id)
        if not self.gone:
            latest = max(sandboxes, key=lambda s: s.attempt, default=None)
            if latest is not None:
                latest.ready = False
            await self._read_messages(containers)
            self._publish(latest, containers, terminal=True)
            await self.ctx.status.flush_one(self.uid)
        for s in sandboxes:
            with contextlib.suppress(RuntimeError_):
                await rt.remove_sandbox(s.id)
        for c in await rt.list_containers(self.uid):
            with contextlib.suppress(RuntimeError_):
                await rt.remove_container(c.id)
        if self.ctx.volumes is not None:
            await self.ctx.volumes.teardown(self.uid)
        if not self.gone and self.status_target is None:
            ns, name = self.meta.get("namespace"), self.meta["name"]
            try:
                await self.ctx.client.delete(PODS, name, ns, grace_period_seconds=0,
                                             preconditions={"uid": self.uid})
            except NotFound:
                pass
            except ApiError as exc:
                log.warning("deleting pod failed", pod=f"{ns}/{name}", error=str(exc))
        self.ctx.status.forget(self.uid)


def _differs(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether two versions of a pod differ in what the kubelet acts on (upstream's podsDifferSemantically)."""
    if old.get("spec") != new.get("spec"):
        return True
    a, b = old.get("metadata") or {}, new.get("metadata") or {}
    return any(a.get(k) != b.get(k) for k in ("labels", "annotations", "deletionTimestamp",
                                               "deletionGracePeriodSeconds"))


def _duration(seconds: int) -> str:
    """Go's time.Duration text for whole seconds: 10s, 1m20s, 5m0s."""
    if seconds < 60:
        return f"{seconds}s"
    return f"{seconds // 60}m{seconds % 60}s"
