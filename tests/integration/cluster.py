"""A control plane of real processes for the controller-manager tests: etcd, an apiserver, the
scheduler and a hollow kubelet running a few nodes. It has an etcd and apiserver of its own, so its
scheduler binds no other test's pods and its nodes show up in no other test's node list.

One cluster serves every module that uses it (started by the first, stopped at the end of the
session); each module starts the controller-manager it needs with `Cluster.controller_manager`,
because their flags differ (pod GC threshold, CronJob clock, node IPAM).

Pods are bound by the scheduler and run by the hollow kubelet. A test scripts a container with
`script()` (exit with a code after a while, or fail to start). What the hollow runtime cannot do on
demand, a kubelet that does not act for a while, is had by freezing its process (`Proc.frozen`),
never by writing pod status from the test.

A test module uses it by naming the fixtures at module level (they override the session
apiserver's `kubectl` and `unique_ns` from tests/conftest.py):

    from tests.integration import cluster as plane
    cluster = plane.cluster
    kubectl = plane.kubectl
    unique_ns = plane.unique_ns
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.api.meta import now_rfc3339
from services.client import AlreadyExists, Client, gvr
from tests.conftest import REPO, Etcd, Kubectl, start_apiserver, start_etcd_cluster
from tests.conftest import eventually as shared_eventually

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)

NODE_PREFIX = "hollow"
NODE_COUNT = 3
#: the names of the hollow kubelet's nodes, all Ready and labelled with POOL and ZONE
NODE_NAMES = [f"{NODE_PREFIX}-{i}" for i in range(NODE_COUNT)]
POOL = ("pool", "controllers")
ZONE = ("topology.kubernetes.io/zone", "zone-a")
#: room for every pod the three modules leave behind plus the 250-pod EndpointSlice test
MAX_PODS = 400
SCRIPT_PREFIX = "hollow.pyk8s.io/container."


def script(container: str, behaviour: str) -> dict[str, str]:
    """The pod annotation that scripts `container` on a hollow node: "exit=<code>,after=<seconds>"
    (exits every time it runs, so a non-zero code under restartPolicy Always crash-loops) or
    "fail=<message>" (its start fails)."""
    return {SCRIPT_PREFIX + container: behaviour}


class Proc:
    """A component subprocess whose output goes to a log file kept for failure messages."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=log)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP the process for the block: a kubelet that starts and stops nothing, or a
        controller-manager that leaves the stage to another one."""
        self.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.proc.send_signal(signal.SIGCONT)

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


@dataclass
class Cluster:
    url: str
    workdir: Path
    kubeconfig: Path
    kubectl: Kubectl
    scheduler: Proc
    kubelet: Proc
    etcd: list[Etcd]
    stop_apiserver: Callable[[], None]
    procs: list[Proc] = field(default_factory=list)

    def controller_manager(self, log_name: str, *flags: str) -> Proc:
        """Start `python -m controller_manager` with fast pod GC and GC discovery periods."""
        cm = Proc([sys.executable, "-m", "controller_manager", "--master", self.url, "--secure-port", "0",
                   "--podgc-period", "1", "--podgc-orphan-grace", "2", "--gc-discovery-period", "2",
                   "--log-format", "console", *flags], self.workdir / f"{log_name}.log")
        self.procs.append(cm)
        return cm

    def hollow_kubelet(self, prefix: str, count: int, *flags: str) -> Proc:
        """Start a hollow kubelet process running nodes `<prefix>-0` .. `<prefix>-<count-1>`."""
        proc = Proc([sys.executable, "-m", "kubelet_agent", "--kubeconfig", str(self.kubeconfig),
                     "--hollow-nodes", str(count), "--hostname-override", prefix, "--healthz-port", "0",
                     "--log-format", "console", *flags], self.workdir / f"kubelet-{prefix}.log")
        self.procs.append(proc)
        return proc

    def wait_nodes_ready(self, names: list[str], timeout: float = 60) -> None:
        """Block until every named Node reports Ready (used before the event loop runs a test)."""
        deadline = time.monotonic() + timeout
        ready: set[str] = set()
        while time.monotonic() < deadline:
            items = httpx.get(f"{self.url}/api/v1/nodes", timeout=10).json()["items"]
            ready = {n["metadata"]["name"] for n in items
                     if any(c["type"] == "Ready" and c["status"] == "True"
                            for c in (n.get("status") or {}).get("conditions") or [])}
            if ready.issuperset(names):
                return
            time.sleep(0.2)
        raise RuntimeError(f"nodes {sorted(set(names) - ready)} not Ready:\n{self.kubelet.log_tail()}")

    def stop(self) -> None:
        for proc in reversed([self.scheduler, self.kubelet, *self.procs]):
            proc.stop()
        self.stop_apiserver()
        for member in self.etcd:
            member.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_cluster(workdir: Path, nodes: int = NODE_COUNT, max_pods: int = MAX_PODS) -> Cluster:
    """Start the processes and wait for the hollow nodes `hollow-0` .. `hollow-<nodes-1>` to be Ready."""
    members = start_etcd_cluster(1, workdir / "etcd")
    api = start_apiserver([members[0].client_url], workdir / "apiserver")
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": api.url}}],
        "users": [{"name": "test", "user": {"token": "test"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }))
    scheduler = Proc([sys.executable, "-m", "scheduler", "--master", api.url, "--secure-port", "0",
                      "--leader-elect=false", "--log-format", "console"], workdir / "scheduler.log")
    labels = ",".join(f"{k}={v}" for k, v in (POOL, ZONE))
    kubelet = Proc([sys.executable, "-m", "kubelet_agent", "--kubeconfig", str(kubeconfig), "--hollow-nodes",
                    str(nodes), "--hostname-override", NODE_PREFIX, "--healthz-port", "0",
                    "--node-labels", labels, "--max-pods", str(max_pods), "--log-format", "console"],
                   workdir / "kubelet.log")
    cluster = Cluster(api.url, workdir, kubeconfig, Kubectl(kubeconfig), scheduler, kubelet, members, api.stop)
    try:
        cluster.wait_nodes_ready([f"{NODE_PREFIX}-{i}" for i in range(nodes)], timeout=60 + nodes / 2)
    except BaseException:
        cluster.stop()
        raise
    return cluster


_shared: list[Cluster] = []


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The session's cluster. Each module that names this fixture gets its own session-scoped copy of
    it from pytest, so the cluster itself is started once per process and stopped by the first
    teardown at the end of the session."""
    if not _shared:
        _shared.append(start_cluster(Path(tempfile.mkdtemp(prefix="pyk8s-cm-cluster-"))))
    yield _shared[0]
    while _shared:
        _shared.pop().stop()


@pytest.fixture
def kubectl(cluster: Cluster) -> Kubectl:
    return cluster.kubectl


@pytest.fixture
def unique_ns(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (its objects go when a namespace
    controller runs; the cluster has room for those that stay)."""
    name = f"t-{request.node.name.lower().replace('_', '-')[:40].strip('-')}-{os.getpid() % 1000}"
    name = "".join(c for c in name if c.isalnum() or c == "-")[:60].strip("-")
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    httpx.post(f"{cluster.url}/api/v1/namespaces", json=body, timeout=10).raise_for_status()
    yield name
    httpx.delete(f"{cluster.url}/api/v1/namespaces/{name}", timeout=10)


async def eventually(check: Callable[[], Awaitable[Any]], within: float = 40, what: str = "") -> Any:
    """The shared poll, with this module's longer default: whole clusters take longer to settle."""
    return await shared_eventually(check, within, what=what)


async def register_nodes(client: Client, names: list[str], labels: dict[str, str] | None = None,
                         **spec: Any) -> None:
    """Ready Node objects no kubelet runs, for tests about nodes themselves (IPAM, missing nodes)."""
    now = now_rfc3339()
    capacity = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    status = {"capacity": capacity, "allocatable": capacity,
              "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                              "message": "kubelet is posting ready status", "lastHeartbeatTime": now,
                              "lastTransitionTime": now}],
              "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
    for name in names:
        body = {"apiVersion": "v1", "kind": "Node", "spec": spec,
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}}
        with contextlib.suppress(AlreadyExists):
            await client.create(NODES, body)
        await client.patch_status(NODES, name, {"status": status})


class PodLog:
    """Records from a watch, in order, which pods were created and which were marked for deletion,
    and the most pods active (neither finished nor deleting) at once."""

    def __init__(self, client: Client, ns: str) -> None:
        self.client = client
        self.ns = ns
        self.created: list[str] = []
        self.created_uids: dict[str, str] = {}
        self.deleted: list[str] = []
        self.max_active = 0
        self._active: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PodLog:
        listed = await self.client.list(PODS, self.ns)
        self._task = asyncio.create_task(self._run(listed["metadata"]["resourceVersion"]))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self, rv: str) -> None:
        async with self.client.watch(PODS, self.ns, resource_version=rv) as events:
            async for kind, pod in events:
                if kind == "BOOKMARK":
                    continue
                meta = pod["metadata"]
                name = meta["name"]
                if kind == "ADDED":
                    self.created.append(name)
                    self.created_uids[meta["uid"]] = pod["spec"]["containers"][0]["image"]
                if (meta.get("deletionTimestamp") or kind == "DELETED") and name not in self.deleted:
                    self.deleted.append(name)
                finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                if kind == "DELETED" or finished or meta.get("deletionTimestamp"):
                    self._active.discard(name)
                else:
                    self._active.add(name)
                self.max_active = max(self.max_active, len(self._active))
