"""Pod status as upstream's kubelet writes it, and the manager that sends it batched, only on change."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

import structlog

from kubelet_agent.cri.types import CONTAINER_EXITED, CONTAINER_RUNNING, ContainerInfo, SandboxInfo
from kubelet_agent.pods import sidecars
from kubelet_agent.pods.util import normalize_image, ns_to_rfc3339, qos_class
from services.api.meta import now_rfc3339
from services.client import ApiError, Client, NotFound, gvr

log = structlog.get_logger(__name__)

PODS = gvr("v1", "pods")
KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
KUBELET_FIELDS = ("phase", "conditions", "hostIP", "hostIPs", "podIP", "podIPs", "startTime",
                  "containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses", "qosClass")


def runtime_prefix(runtime_name: str) -> str:
    return f"{runtime_name}://"


def terminated_state(c: ContainerInfo, prefix: str) -> dict[str, Any]:
    reason = c.reason or ("Completed" if c.exit_code == 0 else "Error")
    state: dict[str, Any] = {"exitCode": c.exit_code, "reason": reason}
    if c.message:
        state["message"] = c.message
    state["startedAt"] = ns_to_rfc3339(c.started_at)
    state["finishedAt"] = ns_to_rfc3339(c.finished_at)
    state["containerID"] = prefix + c.id
    return state


def instances_by_name(containers: Iterable[ContainerInfo]) -> dict[str, list[ContainerInfo]]:
    """Each container name's runtime instances, newest (highest attempt) first."""
    out: dict[str, list[ContainerInfo]] = {}
    for c in containers:
        out.setdefault(c.name, []).append(c)
    for items in out.values():
        items.sort(key=lambda c: (c.attempt, c.created_at), reverse=True)
    return out


def container_status(
    spec: dict[str, Any],
    instances: list[ContainerInfo],
    waiting: tuple[str, str] | None,
    default_waiting: str,
    ready: bool,
    started: bool,
    prefix: str,
    init: bool = False,
) -> dict[str, Any]:
    """One entry of containerStatuses: the newest instance decides state, the one before lastState."""
    image = spec.get("image", "")
    status: dict[str, Any] = {"name": spec.get("name", ""), "state": {}, "lastState": {}, "ready": False,
                              "restartCount": 0, "image": image, "imageID": "", "started": False}
    latest = instances[0] if instances else None
    if latest is None:
        reason, message = waiting or (default_waiting, "")
        status["state"] = {"waiting": _waiting(reason, message)}
        return status
    status["restartCount"] = latest.attempt
    status["image"] = normalize_image(latest.image or image) if latest.image and "sha256:" not in latest.image \
        else image
    status["imageID"] = latest.image_ref
    status["containerID"] = prefix + latest.id
    previous = instances[1] if len(instances) > 1 else None
    if latest.state == CONTAINER_RUNNING:
        status["state"] = {"running": {"startedAt": ns_to_rfc3339(latest.started_at)}}
        status["ready"] = ready
        status["started"] = started
        if previous is not None and previous.state == CONTAINER_EXITED:
            status["lastState"] = {"terminated": terminated_state(previous, prefix)}
    elif latest.state == CONTAINER_EXITED:
        if waiting is not None:
            status["state"] = {"waiting": _waiting(*waiting)}
            status["lastState"] = {"terminated": terminated_state(latest, prefix)}
        else:
            status["state"] = {"terminated": terminated_state(latest, prefix)}
            status["ready"] = init and latest.exit_code == 0
            if previous is not None and previous.state == CONTAINER_EXITED:
                status["lastState"] = {"terminated": terminated_state(previous, prefix)}
    else:
        reason, message = waiting or ("ContainerCreating", "")
        status["state"] = {"waiting": _waiting(reason, message)}
        if previous is not None and previous.state == CONTAINER_EXITED:
            status["lastState"] = {"terminated": terminated_state(previous, prefix)}
    return status


def _waiting(reason: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message} if message else {"reason": reason}


def pod_phase(pod: dict[str, Any], init_statuses: list[dict[str, Any]], statuses: list[dict[str, Any]],
              terminal: bool) -> str:
    """Upstream's getPhase, including the terminal rule for pods that are finished for good."""
    spec = pod.get("spec") or {}
    policy = spec.get("restartPolicy") or "Always"
    restartable = sidecars.names(spec)
    apps_began = any(s["state"].get("running") or s["state"].get("terminated") or (s.get("lastState") or {})
                     for s in statuses)
    pending_init = 0
    for s in init_statuses:
        if s["name"] in restartable:
            if not s.get("started") and not apps_began:
                pending_init += 1
            continue
        term = (s["state"].get("terminated") or {})
        if term and term.get("exitCode") == 0:
            continue
        if term or (s["state"].get("waiting") and (s.get("lastState") or {}).get("terminated")):
            if policy == "Never" and term:
                return "Failed"
            last = (s.get("lastState") or {}).get("terminated") or {}
            if policy == "Never" and last and last.get("exitCode") != 0:
                return "Failed"
        pending_init += 1
    if pending_init:
        return "Pending"
    running = waiting = stopped = succeeded = 0
    for s in statuses:
        state = s["state"]
        if state.get("running"):
            running += 1
        elif state.get("terminated"):
            stopped += 1
            if state["terminated"].get("exitCode") == 0:
                succeeded += 1
        elif state.get("waiting") and (s.get("lastState") or {}).get("terminated"):
            stopped += 1
        else:
            waiting += 1
    total = len(statuses)
    if waiting and not terminal:
        return "Pending"
    if running and not terminal:
        return "Running"
    if stopped == total or terminal:
        if terminal:
            return "Succeeded" if succeeded == total else "Failed"
        if policy == "Always":
            return "Running"
        if policy == "OnFailure":
            return "Succeeded" if succeeded == total else "Running"
        return "Succeeded" if succeeded == total else "Failed"
    return "Running"


def _condition(old: dict[str, dict[str, Any]], ctype: str, status: bool, reason: str = "",
               message: str = "", now: str = "") -> dict[str, Any]:
    value = "True" if status else "False"
    prev = old.get(ctype)
    transition = prev.get("lastTransitionTime") if prev and prev.get("status") == value else now
    cond: dict[str, Any] = {"type": ctype, "status": value, "lastProbeTime": None,
                            "lastTransitionTime": transition or now}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def build_status(
    pod: dict[str, Any],
    *,
    sandbox: SandboxInfo | None,
    containers: list[ContainerInfo],
    waiting: dict[str, tuple[str, str]],
    ready: dict[str, bool],
    started: dict[str, bool],
    host_ips: list[str],
    runtime_name: str,
    old: dict[str, Any],
    terminal: bool = False,
) -> dict[str, Any]:
    """The whole status subresource the kubelet owns, from the runtime's view of the pod."""
    spec = pod.get("spec") or {}
    now = now_rfc3339()
    prefix = runtime_prefix(runtime_name)
    by_name = instances_by_name(containers)
    init_specs = spec.get("initContainers") or []
    init_statuses = []
    for c in init_specs:
        inst = by_name.get(c["name"], [])
        cid = inst[0].id if inst else ""
        if sidecars.is_sidecar(c):
            running = bool(inst) and inst[0].state == CONTAINER_RUNNING
            entry = container_status(c, inst, waiting.get(c["name"]), "PodInitializing", ready.get(cid, False),
                                     sidecars.started(c, running, started.get(cid)), prefix)
        else:
            entry = container_status(c, inst, waiting.get(c["name"]), "PodInitializing", False,
                                     bool(inst) and started.get(cid, True), prefix, init=True)
        init_statuses.append(entry)
    restartable = sidecars.names(spec)
    apps_began = any(by_name.get(c["name"]) for c in spec.get("containers") or [])

    def init_done(s: dict[str, Any]) -> bool:
        if s["name"] in restartable:
            return bool(s["started"]) or apps_began
        return (s["state"].get("terminated") or {}).get("exitCode") == 0

    initialized = all(init_done(s) for s in init_statuses)
    statuses = []
    for c in spec.get("containers") or []:
        inst = by_name.get(c["name"], [])
        cid = inst[0].id if inst else ""
        default = "ContainerCreating" if initialized else "PodInitializing"
        statuses.append(container_status(c, inst, waiting.get(c["name"]), default, ready.get(cid, False),
                                         started.get(cid, False), prefix))
    phase = pod_phase(pod, init_statuses, statuses, terminal)
    ephemeral_statuses = []
    for c in spec.get("ephemeralContainers") or []:
        inst = by_name.get(c["name"], [])
        entry = container_status(c, inst, waiting.get(c["name"]), "ContainerCreating", False, False, prefix)
        entry.pop("started")  # the prober owns `started`, and it never sees ephemeral containers
        ephemeral_statuses.append(entry)
    old_conds = {c.get("type", ""): c for c in old.get("conditions") or []}
    conditions = [c for c in old.get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS]
    sandbox_ok = sandbox is not None and sandbox.ready and phase not in ("Succeeded", "Failed")
    conditions.append(_condition(old_conds, "PodReadyToStartContainers", sandbox_ok, now=now))
    if init_specs and not initialized:
        pending = [s["name"] for s in init_statuses if not init_done(s)]
        conditions.append(_condition(old_conds, "Initialized", False, "ContainersNotInitialized",
                                     f"containers with incomplete status: [{' '.join(pending)}]", now))
    elif init_specs and phase in ("Succeeded", "Failed"):
        conditions.append(_condition(old_conds, "Initialized", True, "PodCompleted", now=now))
    else:
        conditions.append(_condition(old_conds, "Initialized", True, now=now))
    if phase in ("Succeeded", "Failed"):
        ready_cond = _condition(old_conds, "Ready", False, "PodCompleted", now=now)
        containers_ready = _condition(old_conds, "ContainersReady", False, "PodCompleted", now=now)
    else:
        unready = [s["name"] for s in (*(s for s in init_statuses if s["name"] in restartable), *statuses)
                   if not s["ready"]]
        message = f"containers with unready status: [{' '.join(unready)}]" if unready else ""
        reason = "ContainersNotReady" if unready else ""
        containers_ready = _condition(old_conds, "ContainersReady", not unready, reason, message, now)
        gates = [g.get("conditionType") for g in spec.get("readinessGates") or []]
        missing = [g for g in gates if (old_conds.get(g) or {}).get("status") != "True"]
        if not unready and missing:
            gate_msg = f'corresponding condition of pod readiness gate "{missing[0]}" does not exist.' \
                if missing[0] not in old_conds else f"the status of pod readiness gate \"{missing[0]}\" is not \"True\""
            ready_cond = _condition(old_conds, "Ready", False, "ReadinessGatesNotReady", gate_msg, now)
        else:
            ready_cond = _condition(old_conds, "Ready", not unready, reason, message, now)
    conditions.extend([ready_cond, containers_ready])
    conditions.append(_condition(old_conds, "PodScheduled", True, now=now))
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if host_ips:
        status["hostIP"] = host_ips[0]
        status["hostIPs"] = [{"ip": ip} for ip in host_ips]
    pod_ip = host_ips[0] if spec.get("hostNetwork") and host_ips else (sandbox.ip if sandbox else "")
    if not pod_ip and old.get("podIP"):
        pod_ip = old["podIP"]
    if pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    status["startTime"] = old.get("startTime") or now
    if init_specs:
        status["initContainerStatuses"] = init_statuses
    status["containerStatuses"] = statuses
    if ephemeral_statuses:
        status["ephemeralContainerStatuses"] = ephemeral_statuses
    status["qosClass"] = old.get("qosClass") or qos_class(spec)
    return status


def same_status(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return False
    return all(a.get(k) == b.get(k) for k in KUBELET_FIELDS)


class StatusManager:
    """Holds the newest status per pod and sends each change once, coalescing bursts.

    Shared by every kubelet of a hollow process; sends through a bounded number of requests.
    """

    def __init__(self, client: Client, concurrency: int = 16, batch_delay: float = 0.02) -> None:
        self.client = client
        self.batch_delay = batch_delay
        self._sent: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {}
        self._wake = asyncio.Event()
        self._sem = asyncio.Semaphore(concurrency)
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def set_status(self, namespace: str, name: str, uid: str, status: dict[str, Any],
                   api_status: dict[str, Any]) -> None:
        """Queue `status` unless it equals what was last sent (or, before any send, what the API has)."""
        baseline = self._sent.get(uid, api_status)
        if same_status(status, baseline) and uid not in self._pending:
            return
        self._pending[uid] = (namespace, name, status, api_status)
        self._wake.set()

    def forget(self, uid: str) -> None:
        """The pod is gone; drop its cached status so a new pod object starts clean."""
        self._sent.pop(uid, None)
        self._pending.pop(uid, None)

    def sent(self, uid: str) -> dict[str, Any] | None:
        return self._sent.get(uid)

    async def flush(self) -> None:
        """Send everything pending now (used before deleting a pod so its final status lands first)."""
        items = list(self._pending.items())
        self._pending.clear()
        await asyncio.gather(*(self._send(uid, *item) for uid, item in items))

    async def flush_one(self, uid: str) -> None:
        item = self._pending.pop(uid, None)
        if item is not None:
            await self._send(uid, *item)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.batch_delay)
            self._wake.clear()
            items = list(self._pending.items())
            self._pending.clear()
            for uid, item in items:
                await self._sem.acquire()
                task = asyncio.create_task(self._send_released(uid, *item))
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)

    async def _send_released(self, uid: str, namespace: str, name: str, status: dict[str, Any],
                             api_status: dict[str, Any]) -> None:
        try:
            await self._send(uid, namespace, name, status, api_status)
        finally:
            self._sem.release()

    async def _send(self, uid: str, namespace: str, name: str, status: dict[str, Any],
                    api_status: dict[str, Any]) -> None:
        previous = self._sent.get(uid, api_status)
        body: dict[str, Any] = dict(status)
        for key in ("podIP", "podIPs", "initContainerStatuses", "reason", "message", "nominatedNodeName"):
            if key in previous and key not in body and key != "nominatedNodeName":
                body[key] = None
        try:
            # Strategic merge, as upstream's kubelet: conditions merge by type, so a condition another
            # component wrote since this kubelet's copy (DisruptionTarget, readiness gates) is kept.
            await self.client.patch_status(PODS, name, {"status": body}, namespace, patch_type="strategic")
            self._sent[uid] = status
        except NotFound:
            self._sent.pop(uid, None)
        except ApiError as exc:
            log.warning("pod status update failed", pod=f"{namespace}/{name}", error=str(exc))
            if uid not in self._pending:
                self._pending[uid] = (namespace, name, status, api_status)
                asyncio.get_running_loop().call_later(1.0, self._wake.set)
        except Exception as exc:  # noqa: BLE001 - transport errors: retry later, never lose the status
            log.warning("pod status update failed", pod=f"{namespace}/{name}", error=repr(exc))
            if uid not in self._pending:
                self._pending[uid] = (namespace, name, status, api_status)
                asyncio.get_running_loop().call_later(1.0, self._wake.set)
