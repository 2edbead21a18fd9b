"""One node's kubelet: the Node and its Lease, a worker per bound pod, static pods and housekeeping."""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from typing import Any

import structlog

from kubelet_agent import cni
from kubelet_agent.cri.types import Runtime
from kubelet_agent.eviction import (
    DEFAULT_EVICTION_HARD,
    EvictionManager,
    Observations,
    PodStats,
    RuntimeStats,
    Threshold,
    admit_under_pressure,
    empty_dir_violations,
    hollow_observations,
    hollow_stats,
    parse_thresholds,
)
from kubelet_agent.node import NODES, NodeAgent, NodeConfig
from kubelet_agent.pods.admission import NODE_DEPENDENT, admit
from kubelet_agent.pods.events import EventRecorder
from kubelet_agent.pods.gate import StartGate
from kubelet_agent.pods.resolver import Resolver
from kubelet_agent.pods.status import PODS, StatusManager
from kubelet_agent.pods.sysctl import SysctlAllowlist
from kubelet_agent.pods.util import qos_class
from kubelet_agent.pods.volumes import PLUGIN_DIRS, VolumeManager
from kubelet_agent.pods.worker import NodeContext, PodWorker
from kubelet_agent.static import is_mirror, mirror_of, read_manifests_async
from services.client import AlreadyExists, ApiError, Client, Conflict, Forbidden, NotFound, gvr
from services.informers import Informer, strip_managed_fields
from services.runtime.netns import Dialer

log = structlog.get_logger(__name__)
NAMESPACES = gvr("v1", "namespaces", namespaced=False)
NETWORK_NOT_READY = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
                     "message:Network plugin returns error: cni plugin not initialized")


@dataclass
class KubeletOptions:
    root_dir: str = "/var/lib/kubelet"
    cluster_dns: list[str] = field(default_factory=list)
    cluster_domain: str = "cluster.local"
    pod_manifest_path: str = ""
    cni_conf_dir: str = ""
    node_netns: str = ""
    resolv_conf: str = "/etc/resolv.conf"
    hollow: bool = False
    housekeeping: float = 10.0
    static_interval: float = 5.0
    ca_file: str | None = None
    non_masquerade_cidr: str = cni.DEFAULT_NON_MASQUERADE_CIDR
    pod_cidr_wait: float = 3.0
    max_parallel_pod_starts: int = 0
    eviction_hard: dict[str, str] | None = None
    eviction_soft: dict[str, str] = field(default_factory=dict)
    eviction_soft_grace_period: dict[str, float] = field(default_factory=dict)
    eviction_minimum_reclaim: dict[str, str] = field(default_factory=dict)
    eviction_max_pod_grace_period: int = 0
    eviction_pressure_transition: float = 300.0
    allow_privileged: bool = True
    allowed_unsafe_sysctls: list[str] = field(default_factory=list)


def read_resolv_conf(path: str) -> tuple[list[str], list[str], list[str]]:
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    with contextlib.suppress(OSError), open(path) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0].startswith(("#", ";")):
                continue
            if parts[0] == "nameserver" and len(parts) > 1:
                servers.append(parts[1])
            elif parts[0] in ("search", "domain"):
                searches = parts[1:]
            elif parts[0] == "options":
                options.extend(parts[1:])
    return servers, searches, options


class Kubelet:
    def __init__(self, client: Client, runtime: Runtime, node: NodeConfig, options: KubeletOptions,
                 status: StatusManager | None = None, *, own_informer: bool = True,
                 nodes: Informer | None = None) -> None:
        """`nodes`, when given, is a Node informer shared with other kubelets of the process (hollow nodes);
        otherwise the kubelet watches its own Node."""
        self.client = client
        self.runtime = runtime
        self.node_config = node
        self.options = options
        self.status = status or StatusManager(client)
        self._own_status = status is None
        self.own_informer = own_informer
        self.agent = NodeAgent(client, node)
        self.workers: dict[str, PodWorker] = {}
        self.static_pods: dict[str, dict[str, Any]] = {}
        self.mirrors: dict[str, dict[str, Any]] = {}
        self.informer: Informer | None = None
        self.ctx: NodeContext | None = None
        self.ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self.pod_cidr = ""
        self.node_informer: Informer | None = nodes
        self._own_node_informer = nodes is None
        #: pods whose node-dependent rejection waits for a fresh read of the Node, by UID
        self._rechecking: dict[str, dict[str, Any]] = {}
        self._recheck_tasks: set[asyncio.Task[None]] = set()
        self._cidr_seen = asyncio.Event()
        self.eviction: EvictionManager | None = None
        self._runtime_stats: RuntimeStats | None = None
        self.rejections: EventRecorder | None = None
        self.sysctls = SysctlAllowlist(options.allowed_unsafe_sysctls)

    @property
    def name(self) -> str:
        return self.node_config.name

    async def start(self) -> None:
        """Register the node and start everything; returns once pods are being watched."""
        await self.runtime.start()
        rt_name, rt_version = await self.runtime.version()
        self.node_config.runtime_version = f"{rt_name}://{rt_version}"
        if self.manages_cni:
            self.agent.runtime_errors = [NETWORK_NOT_READY]
        if not self.runtime.simulated or self.options.eviction_hard is not None or self.options.eviction_soft:
            self.eviction = self._eviction_manager()
            self.agent.pressure = self.eviction.pressure
            await self.eviction.synchronize()
        node = await self.agent.register()
        if self._own_node_informer:
            self.node_informer = Informer(self.client, NODES, field_selector=f"metadata.name={self.name}",
                                          transform=strip_managed_fields)
            self.node_informer.add_event_handler(self._on_node, lambda _o, n: self._on_node(n))
            self.node_informer.start()
        await self._start_network(node)
        simulated = self.runtime.simulated
        resolver = None if simulated else Resolver(self.client)
        self.ctx = NodeContext(
            node_name=self.name, client=self.client, runtime=self.runtime, status=self.status,
            host_ips=list(self.node_config.node_ips), allocatable=self.agent.allocatable,
            root_dir=self.options.root_dir, resolver=resolver,
            volumes=None if resolver is None else VolumeManager(self.options.root_dir, resolver,
                                                                 ca_file=self.options.ca_file,
                                                                 allocatable=self.agent.allocatable),
            events=None if simulated else EventRecorder(self.client, self.name),
            dialer=Dialer(self.options.node_netns or None), cluster_dns=list(self.options.cluster_dns),
            cluster_domain=self.options.cluster_domain, host_dns=read_resolv_conf(self.options.resolv_conf),
            resync=None if simulated else 10.0, gate=None if simulated else StartGate(self._start_parallelism()),
        )
        self.rejections = self.ctx.events or EventRecorder(self.client, self.name)
        self.runtime.set_listener(self._on_runtime_event)
        set_pod_lookup = getattr(self.runtime, "set_pod_lookup", None)
        if set_pod_lookup is not None:
            set_pod_lookup(self._pod_by_uid)
        if self._own_status:
            self.status.start()
        await self._ensure_lease_namespace()
        self._tasks.append(asyncio.create_task(self.agent.run(), name=f"node-{self.name}"))
        if self.own_informer:
            self.informer = Informer(self.client, PODS, field_selector=f"spec.nodeName={self.name}",
                                     transform=strip_managed_fields)
            self.informer.add_event_handler(self.on_pod, lambda _o, n: self.on_pod(n), self.on_pod_deleted)
            self.informer.start()
        for kind, pod in self._pending:
            self.on_pod(pod) if kind == "pod" else self.on_pod_deleted(pod)
        self._pending.clear()
        if self.options.pod_manifest_path:
            self._tasks.append(asyncio.create_task(self._static_loop()))
        if not simulated:
            self._tasks.append(asyncio.create_task(self._housekeeping()))
        if self.eviction is not None:
            self._tasks.append(asyncio.create_task(self._eviction_loop()))
        if self.agent.runtime_errors:
            self.agent.runtime_errors = []
            await self._post_node_status()
        self.ready.set()

    def _eviction_manager(self) -> EvictionManager:
        """Thresholds as configured (upstream's hard defaults when none is); a hollow node's signals and pod
        usage come from its pods' usage annotations, a real node's from the host and the runtime's stats."""
        o = self.options
        hard = DEFAULT_EVICTION_HARD if o.eviction_hard is None else o.eviction_hard
        thresholds = parse_thresholds(hard, soft=o.eviction_soft, grace_periods=o.eviction_soft_grace_period,
                                      min_reclaim=o.eviction_minimum_reclaim)
        if self.runtime.simulated:
            async def observer() -> Observations:
                return hollow_observations(self.agent.capacity, [w.pod for w in self._running().values()])

            async def stats(pods: list[dict[str, Any]], _resource: str) -> dict[str, PodStats]:
                return {p["metadata"]["uid"]: seen for p in pods if (seen := hollow_stats(p)) is not None}

            return EvictionManager(thresholds, o.root_dir, transition=o.eviction_pressure_transition,
                                   on_change=self._post_node_status, observer=observer, stats=stats,
                                   max_pod_grace=o.eviction_max_pod_grace_period)
        endpoint = getattr(self.runtime, "endpoint", None)
        self._runtime_stats = RuntimeStats(endpoint, o.root_dir) if endpoint else None
        return EvictionManager(thresholds, o.root_dir, transition=o.eviction_pressure_transition,
                               image_fs=getattr(self.runtime, "image_fs_path", None),
                               on_change=self._post_node_status, stats=self._runtime_stats,
                               max_pod_grace=o.eviction_max_pod_grace_period)

    async def _post_node_status(self) -> None:
        if not self.agent.registered.is_set():
            return
        try:
            await self.agent.update_status()
        except Exception as exc:  # noqa: BLE001 - the heartbeat posts it again soon
            log.warning("node status update failed", node=self.name, error=repr(exc))

    def _start_parallelism(self) -> int:
        """Runtime start operations in flight at once: by default four per CPU, enough to cover I/O waits."""
        return self.options.max_parallel_pod_starts or 4 * (os.cpu_count() or 1)

    async def _ensure_lease_namespace(self) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-node-lease"}}
        with contextlib.suppress(AlreadyExists, Conflict, Forbidden):
            await self.client.create(NAMESPACES, body)

    async def stop(self) -> None:
        """Stop the agent; containers keep running and are adopted by the next kubelet."""
        for task in [*self._tasks, *self._recheck_tasks]:
            task.cancel()
        for task in [*self._tasks, *self._recheck_tasks]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.informer is not None:
            await self.informer.stop()
        if self.node_informer is not None and self._own_node_informer:
            await self.node_informer.stop()
        await asyncio.gather(*(w.stop() for w in self.workers.values()))
        if self._own_status:
            await self.status.stop()
        await self.runtime.close()
        if self._runtime_stats is not None:
            await self._runtime_stats.close()
        if self.ctx is not None:
            self.ctx.dialer.close()

    # -- the pod network -------------------------------------------------------------------------------

    @property
    def manages_cni(self) -> bool:
        return bool(self.options.cni_conf_dir) and not self.runtime.simulated

    async def _start_network(self, node: dict[str, Any]) -> None:
        """Configure pods' network from the Node's spec.podCIDR, and follow it when node IPAM sets or moves it.

        Node IPAM assigns the CIDR just after the Node appears, so a fresh node waits briefly for it
        before falling back to --pod-cidr or a CIDR of its own.
        """
        cidr = (node.get("spec") or {}).get("podCIDR") or ""
        if self.manages_cni:
            self._tasks.append(asyncio.create_task(self._follow_pod_cidr(), name=f"podcidr-{self.name}"))
            if not cidr and not self.node_config.pod_cidr:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.options.pod_cidr_wait):
                        await self._cidr_seen.wait()
                cidr = self._node_cidr()
        await self._apply_pod_cidr(cidr or self.node_config.pod_cidr or cni.default_pod_cidr(self.name))

    def _on_node(self, node: dict[str, Any]) -> None:
        if (node.get("spec") or {}).get("podCIDR"):
            self._cidr_seen.set()

    def _node_cidr(self) -> str:
        return str((self.current_node().get("spec") or {}).get("podCIDR") or "")

    def current_node(self) -> dict[str, Any]:
        """The Node as the watch last delivered it (upstream's node lister), else as registration wrote it."""
        watched = self.node_informer.get(self.name) if self.node_informer is not None else None
        return watched or self.agent.node or {"metadata": {"name": self.name}}

    async def _follow_pod_cidr(self) -> None:
        while True:
            await self._cidr_seen.wait()
            self._cidr_seen.clear()
            cidr = self._node_cidr()
            if cidr and cidr != self.pod_cidr and self.pod_cidr:
                log.info("node pod CIDR changed", node=self.name, old=self.pod_cidr, new=cidr)
                await self._apply_pod_cidr(cidr)

    async def _apply_pod_cidr(self, cidr: str) -> None:
        """The CNI conflist (per-node IPAM state under the root dir) and the masquerade rule for `cidr`."""
        if self.manages_cni:
            await asyncio.to_thread(cni.write_conf, self.options.cni_conf_dir, cidr,
                                    f"{self.options.root_dir}/cni-ipam")
            try:
                await cni.ensure_masquerade(cidr, self.options.non_masquerade_cidr, self.options.node_netns or None)
            except OSError as exc:
                log.warning("pod masquerade rule not installed", node=self.name, error=str(exc))
        set_cidr = getattr(self.runtime, "set_pod_cidr", None)
        if set_cidr is not None:
            set_cidr(cidr)
        self.pod_cidr = cidr

    # -- pods from the API -------------------------------------------------------------------------

    def on_pod(self, pod: dict[str, Any]) -> None:
        if self.ctx is None:
            self._pending.append(("pod", pod))
            return
        if is_mirror(pod):
            self._on_mirror(pod)
            return
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if worker is not None:
            worker.update(pod)
            return
        if uid in self._rechecking:
            self._rechecking[uid] = pod
            return
        verdict = self._admit(pod)
        if verdict is not None and verdict[0] in NODE_DEPENDENT:
            self._rechecking[uid] = pod
            task = asyncio.get_running_loop().create_task(self._admit_against_fresh_node(uid))
            self._recheck_tasks.add(task)
            task.add_done_callback(self._recheck_tasks.discard)
            return
        self._spawn(pod, rejection=self._rejected(pod, verdict))

    async def _admit_against_fresh_node(self, uid: str) -> None:
        """Check a node-affinity or taint rejection once more against a quorum read of the Node.

        The pod and Node watches are separate streams: a pod bound just after a label or taint change
        can arrive before the change does, and the scheduler (or the DaemonSet controller) that placed
        it saw the newer Node. Only would-be rejections pay for the read.
        """
        try:
            node = await self.client.get(NODES, self.name)
        except Exception as exc:  # noqa: BLE001 - without a fresh read the watched Node decides
            log.warning("node read for admission failed", node=self.name, error=repr(exc))
            node = self.current_node()
        pod = self._rechecking.pop(uid, None)
        if pod is None or uid in self.workers:
            return
        self._spawn(pod, rejection=self._rejected(pod, self._admit(pod, node)))

    def on_pod_deleted(self, pod: dict[str, Any]) -> None:
        if self.ctx is None:
            self._pending.append(("delete", pod))
            return
        if is_mirror(pod):
            self.mirrors.pop(pod["metadata"]["annotations"].get("kubernetes.io/config.mirror", ""), None)
            return
        self._rechecking.pop(pod["metadata"]["uid"], None)
        worker = self.workers.get(pod["metadata"]["uid"])
        if worker is not None:
            worker.remove()

    def _admit(self, pod: dict[str, Any], node: dict[str, Any] | None = None) -> tuple[str, str] | None:
        """Admit a pod seen for the first time against `node` (the watched Node by default) and the pods
        already admitted here.

        A pod with a start time was accepted by a kubelet before (this one, before a restart), and a
        finished or deleted pod needs no room, so neither is checked again.
        """
        status = pod.get("status") or {}
        if status.get("startTime") or status.get("phase") in ("Succeeded", "Failed") or \
                pod["metadata"].get("deletionTimestamp"):
            return None
        active = [w.pod for w in self.workers.values() if not w.terminal and w.rejected is None and not w.gone]
        verdict = self.sysctls.admit(pod) or admit(pod, node or self.current_node(), active, self.agent.allocatable,
                                                    allow_privileged=self.options.allow_privileged)
        if verdict is None and self.eviction is not None:
            verdict = admit_under_pressure(pod, self.eviction.pressure, qos_class(pod.get("spec") or {}))
        return verdict

    def _rejected(self, pod: dict[str, Any], verdict: tuple[str, str] | None) -> tuple[str, str] | None:
        """Log and record (as a Warning event on the pod) a rejection; returns the verdict."""
        if verdict is not None and self.rejections is not None:
            log.info("pod rejected", pod=f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}",
                     reason=verdict[0], message=verdict[1])
            self.rejections.record({"kind": "Pod", "metadata": pod["metadata"]}, "Warning", verdict[0], verdict[1])
        return verdict

    def _spawn(self, pod: dict[str, Any], status_target: tuple[str, str] | None = None,
               api_status: dict[str, Any] | None = None, rejection: tuple[str, str] | None = None) -> PodWorker:
        assert self.ctx is not None
        worker = PodWorker(self.ctx, pod, status_target=status_target)
        if api_status is not None:
            worker.api_status = api_status
        if rejection is not None:
            worker.reject(*rejection)
        uid = worker.uid
        self.workers[uid] = worker
        worker.start()
        asyncio.get_running_loop().create_task(self._reap(uid, worker))
        return worker

    async def _reap(self, uid: str, worker: PodWorker) -> None:
        await worker.done.wait()
        if self.workers.get(uid) is worker:
            del self.workers[uid]

    def _pod_by_uid(self, pod_uid: str) -> dict[str, Any] | None:
        worker = self.workers.get(pod_uid)
        return worker.pod if worker is not None else None

    def _on_runtime_event(self, pod_uid: str) -> None:
        worker = self.workers.get(pod_uid)
        if worker is not None:
            worker.wake()

    # -- static pods -------------------------------------------------------------------------------

    def _on_mirror(self, mirror: dict[str, Any]) -> None:
        uid = mirror["metadata"]["annotations"].get("kubernetes.io/config.mirror", "")
        if mirror["metadata"].get("deletionTimestamp"):
            self.mirrors.pop(uid, None)
            return
        self.mirrors[uid] = mirror
        worker = self.workers.get(uid)
        if worker is not None and uid in self.static_pods:
            worker.update(worker.pod, mirror.get("status") or {})

    async def _static_loop(self) -> None:
        while True:
            try:
                await self._sync_static()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("static pod sync failed")
            await asyncio.sleep(self.options.static_interval)

    async def _sync_static(self) -> None:
        assert self.ctx is not None
        wanted = await read_manifests_async(self.options.pod_manifest_path, self.name)
        for uid in [u for u in self.static_pods if u not in wanted]:
            old = self.static_pods.pop(uid)
            worker = self.workers.get(uid)
            if worker is not None:
                worker.remove()
            with contextlib.suppress(NotFound, ApiError):
                await self.client.delete(PODS, old["metadata"]["name"], old["metadata"]["namespace"],
                                         grace_period_seconds=0)
        for uid, pod in wanted.items():
            target = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            if uid not in self.static_pods:
                self.static_pods[uid] = pod
                self._spawn(pod, status_target=target, api_status={})
            if uid not in self.mirrors:
                await self._create_mirror(pod)

    async def _create_mirror(self, pod: dict[str, Any]) -> None:
        body = mirror_of(pod, self.current_node())
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        try:
            created = await self.client.create(PODS, body, ns)
        except AlreadyExists:
            try:
                existing = await self.client.get(PODS, name, ns)
            except NotFound:
                return
            if not is_mirror(existing) or existing["metadata"]["annotations"].get(
                    "kubernetes.io/config.mirror") != pod["metadata"]["uid"]:
                with contextlib.suppress(NotFound, ApiError):
                    await self.client.delete(PODS, name, ns, grace_period_seconds=0,
                                             preconditions={"uid": existing["metadata"]["uid"]})
                return
            created = existing
        except ApiError as exc:
            log.warning("mirror pod not created", pod=f"{ns}/{name}", error=str(exc))
            return
        self.mirrors[pod["metadata"]["uid"]] = created
        worker = self.workers.get(pod["metadata"]["uid"])
        if worker is not None:
            self.status.forget(worker.uid)
            worker.update(worker.pod, created.get("status") or {})

    # -- eviction ----------------------------------------------------------------------------------

    async def _eviction_loop(self) -> None:
        """Node pressure and emptyDir limits, every housekeeping interval (upstream's monitoring period)."""
        while True:
            await asyncio.sleep(self.options.housekeeping)
            try:
                if self.eviction is not None:
                    evicted = await self.evict_for_pressure(await self.eviction.synchronize())
                    if evicted is not None:
                        await self._wait_for_cleanup(evicted)
                await self.check_empty_dirs()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("eviction check failed")

    def _running(self) -> dict[str, PodWorker]:
        return {w.uid: w for w in self.workers.values()
                if not w.terminal and w.rejected is None and w.evicted is None and not w.gone}

    async def evict_for_pressure(self, met: list[Threshold]) -> PodWorker | None:
        """Evict one pod per pass while a threshold is met, so the next pass sees its effect first."""
        if self.eviction is None or not met:
            return None
        running = self._running()
        chosen = await self.eviction.victim(met, [w.pod for w in running.values()], qos_class)
        worker = running.get(chosen.pod["metadata"]["uid"]) if chosen is not None else None
        if chosen is not None and worker is not None:
            log.info("evicting pod", pod=f"{worker.meta.get('namespace')}/{worker.meta.get('name')}",
                     message=chosen.message, grace=chosen.grace)
            worker.evict(chosen.message, chosen.grace)
            return worker
        return None

    @staticmethod
    async def _wait_for_cleanup(worker: PodWorker) -> None:
        """Let a gracefully evicted pod stop (for up to 30s, as upstream) before the next pass measures again."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(30):
                while not worker.terminal and not worker.done.is_set():  # noqa: ASYNC110 - a flag; upstream polls
                    await asyncio.sleep(1.0)

    async def check_empty_dirs(self) -> None:
        """Evict each running pod whose emptyDir holds more than its sizeLimit."""
        if self.ctx is None or self.ctx.volumes is None:
            return
        for worker in list(self.workers.values()):
            if worker.terminal or worker.evicted is not None or not any(
                    (v.get("emptyDir") or {}).get("sizeLimit") for v in worker.spec.get("volumes") or []):
                continue
            volume_dir = self.ctx.volumes.pod_dir(worker.uid) / "volumes" / PLUGIN_DIRS["emptyDir"]
            message = await asyncio.to_thread(empty_dir_violations, worker.pod, volume_dir)
            if message is not None:
                log.info("evicting pod", pod=f"{worker.meta.get('namespace')}/{worker.meta.get('name')}",
                         message=message)
                worker.evict(message)

    # -- housekeeping ------------------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        """Remove sandboxes of pods this node no longer has (deleted while the kubelet was down)."""
        while True:
            await asyncio.sleep(self.options.housekeeping)
            if self.informer is not None and not self.informer.has_synced():
                continue
            try:
                for sandbox in await self.runtime.list_sandboxes():
                    if sandbox.uid in self.workers or sandbox.uid in self.static_pods:
                        continue
                    for c in await self.runtime.list_containers(sandbox.uid):
                        with contextlib.suppress(Exception):
                            await self.runtime.stop_container(c.id, 2)
                            await self.runtime.remove_container(c.id)
                    with contextlib.suppress(Exception):
                        await self.runtime.stop_sandbox(sandbox.id)
                        await self.runtime.remove_sandbox(sandbox.id)
                    if self.ctx is not None and self.ctx.volumes is not None:
                        await self.ctx.volumes.teardown(sandbox.uid)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("housekeeping failed")
