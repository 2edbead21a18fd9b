"""Controller-manager benchmark (issue 5) on a cluster of real processes: etcd, the apiserver, the
scheduler, a hollow kubelet running --nodes hollow nodes, and the controller-manager with its
default flags (tests/integration/cluster.py starts all but the last).

Figures, one line each:
  - controller-manager RSS idle (target < 150 MiB);
  - a --deployment-replicas Deployment across the hollow nodes (25% surge and unavailable): its first
    rollout, then a rolling update to a new image, until status reads as `kubectl rollout status`
    wants it (target < 60 s for 1,000 replicas on 100 nodes);
  - a --replicas ReplicaSet: pods created per second by the controller-manager, from creating the
    ReplicaSet to its last pod seen by a watch (target >= 500/s for 10,000), and the time until every
    pod is Ready (scheduler and kubelet included); then the same for a ReplicaSet whose pods name a
    scheduler nobody runs, so the controller-manager shares the machine only with the apiserver and etcd;
  - controller-manager RSS with those pods cached, then with --cached-pods pods in all (the rest are
    pods of a scheduler nobody runs, created by this script, so nothing else works on them).

Each ReplicaSet figure also gives the CPU seconds per pod that every process spent while the pods
were being created, since wall time on a shared machine says little.

Run: python bench/controllers.py [--replicas 10000] [--deployment-replicas 1000] [--nodes 100]
     [--cached-pods 50000] [--replicaset-cases scheduled,unscheduled]
Only the unscheduled 3,000-replica case, quickly:
     python bench/controllers.py --replicas 3000 --deployment-replicas 0 --cached-pods 0 --nodes 10 \
         --replicaset-cases unscheduled
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.client import Client, ClientConfig, gvr  # noqa: E402
from services.informers import Informer  # noqa: E402
from tests.integration.cluster import Cluster, Proc, start_cluster  # noqa: E402

PODS = gvr("v1", "pods")
NAMESPACES = gvr("v1", "namespaces", namespaced=False)
RSS = gvr("apps/v1", "replicasets")
DEPLOYMENTS = gvr("apps/v1", "deployments")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def component_pids(cluster: Cluster, cm: Proc) -> dict[str, int]:
    """The processes whose CPU time a figure reports; the apiserver is the child running `-m apiserver`."""
    pids = {"controller-manager": cm.pid, "scheduler": cluster.scheduler.pid, "kubelet": cluster.kubelet.pid}
    pids.update({f"etcd-{m.name}": m.proc.pid for m in cluster.etcd if m.proc is not None})
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if b"apiserver" in argv and (entry / "stat").read_text().rpartition(")")[2].split()[1] == \
                        str(os.getpid()):
                    pids["apiserver"] = int(entry.name)
    return pids


class CpuMeter:
    """CPU seconds each component spends between start() and per_pod()."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.before: dict[str, float] = {}

    def start(self) -> None:
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def per_pod(self, pods: int) -> str:
        spent = {name: cpu_seconds(pid) - self.before[name] for name, pid in self.pids.items()}
        return ", ".join(f"{name} {1000 * cpu / pods:.2f} ms" for name, cpu in spent.items())


def workload(kind: str, name: str, replicas: int, image: str = "busybox:1.36") -> dict[str, Any]:
    labels = {"app": name}
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels},
                     "spec": {"containers": [{"name": "c", "image": image}], "terminationGracePeriodSeconds": 0}},
    }
    if kind == "Deployment":
        spec["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


async def namespace(client: Client, name: str) -> None:
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


async def bench_replicaset(client: Client, ns: str, replicas: int, meter: CpuMeter,
                           scheduler: str | None = None) -> tuple[float, float, str]:
    """(seconds until the last pod exists, seconds until every pod is Ready, both from the create;
    CPU time per pod of each process until the last pod exists).

    With `scheduler` naming one nobody runs, the pods stay unbound and only the creation is timed.
    """
    await namespace(client, ns)
    seen: set[str] = set()
    ready: set[str] = set()
    created = asyncio.Event()
    all_ready = asyncio.Event()

    def update(pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        seen.add(uid)
        if len(seen) >= replicas:
            created.set()
        if is_ready(pod):
            ready.add(uid)
            if len(ready) >= replicas:
                all_ready.set()

    pods = Informer(client, PODS, namespace=ns)
    pods.add_event_handler(on_add=update, on_update=lambda _old, new: update(new))
    pods.start()
    await pods.wait_for_sync()
    body = workload("ReplicaSet", "big", replicas)
    if scheduler:
        body["spec"]["template"]["spec"]["schedulerName"] = scheduler
    meter.start()
    start = time.monotonic()
    await client.create(RSS, body, ns)
    last = 0
    while not created.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(created.wait(), 5)
        print(f"  ... {len(seen)} pods after {time.monotonic() - start:.0f} s ({len(seen) - last} in the last 5 s), "
              f"{len(ready)} ready", flush=True)
        last = len(seen)
    created_after = time.monotonic() - start
    cpu = meter.per_pod(replicas)
    while not scheduler and not all_ready.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_ready.wait(), 10)
        print(f"  ... {len(ready)} ready after {time.monotonic() - start:.0f} s", flush=True)
    ready_after = time.monotonic() - start
    await pods.stop()
    return created_after, ready_after, cpu


async def deployment_done(client: Client, ns: str, name: str, image: str) -> bool:
    d = await client.get(DEPLOYMENTS, name, ns)
    st = d.get("status") or {}
    want = d["spec"]["replicas"]
    return (d["spec"]["template"]["spec"]["containers"][0]["image"] == image
            and st.get("observedGeneration") == d["metadata"]["generation"]
            and st.get("updatedReplicas") == want and st.get("replicas") == want
            and st.get("availableReplicas") == want)


async def wait_done(client: Client, ns: str, image: str) -> None:
    while True:
        if await deployment_done(client, ns, "web", image):
            return
        await asyncio.sleep(0.5)


async def bench_rolling_update(client: Client, replicas: int) -> tuple[float, float]:
    """(seconds to the first rollout, seconds for a rolling update to a new image)."""
    ns = "bench-deploy"
    await namespace(client, ns)
    start = time.monotonic()
    await client.create(DEPLOYMENTS, workload("Deployment", "web", replicas), ns)
    await wait_done(client, ns, "busybox:1.36")
    first = time.monotonic() - start
    start = time.monotonic()
    await client.patch(DEPLOYMENTS, "web", {"spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "busybox:1.37"}]}}}}, ns, patch_type="strategic")
    await wait_done(client, ns, "busybox:1.37")
    return first, time.monotonic() - start


async def pad_pods(client: Client, count: int) -> None:
    """`count` pods no scheduler or kubelet acts on, only so that the controller-manager caches them."""
    ns = "bench-cached"
    await namespace(client, ns)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "cached-", "labels": {"app": "cached"}},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox:1.36"}]}}
    todo = iter(range(count))

    async def worker() -> None:
        for _ in todo:
            await client.create(PODS, body, ns)

    await asyncio.gather(*(worker() for _ in range(32)))


async def measure(args: argparse.Namespace, cluster: Cluster, cm: Proc) -> None:
    async with Client(ClientConfig(server=cluster.url, timeout=120)) as client:
        await asyncio.sleep(10)
        print(f"controller-manager RSS idle: {rss_mib(cm.pid):.1f} MiB", flush=True)
        if args.deployment_replicas:
            first, update = await bench_rolling_update(client, args.deployment_replicas)
            print(f"deployment of {args.deployment_replicas} replicas on {args.nodes} hollow nodes: "
                  f"first rollout {first:.1f} s, rolling update {update:.1f} s", flush=True)
        cached = args.deployment_replicas
        meter = CpuMeter(component_pids(cluster, cm))
        print("pids: " + ", ".join(f"{name} {pid}" for name, pid in meter.pids.items()), flush=True)
        cases = set(args.replicaset_cases.split(","))
        if args.replicas and "scheduled" in cases:
            created, ready, cpu = await bench_replicaset(client, "bench-rs", args.replicas, meter)
            print(f"replicaset of {args.replicas} on {args.nodes} hollow nodes: all pods created in {created:.1f} s "
                  f"({args.replicas / created:.0f} pods/s), all Ready in {ready:.1f} s", flush=True)
            print(f"  CPU per pod while creating: {cpu}", flush=True)
            cached += args.replicas
            await asyncio.sleep(10)
        if args.replicas and "unscheduled" in cases:
            created, _, cpu = await bench_replicaset(client, "bench-rs-unscheduled", args.replicas, meter,
                                                     scheduler="nobody")
            print(f"replicaset of {args.replicas} whose pods nothing schedules or runs: all pods created in "
                  f"{created:.1f} s ({args.replicas / created:.0f} pods/s)", flush=True)
            print(f"  CPU per pod while creating: {cpu}", flush=True)
            cached += args.replicas
        await asyncio.sleep(10)
        print(f"controller-manager RSS with {cached} pods cached: {rss_mib(cm.pid):.1f} MiB", flush=True)
        if args.cached_pods > cached:
            start = time.monotonic()
            await pad_pods(client, args.cached_pods - cached)
            print(f"  ({args.cached_pods - cached} more pods created in {time.monotonic() - start:.0f} s)", flush=True)
            await asyncio.sleep(15)
            print(f"controller-manager RSS with {args.cached_pods} pods cached: {rss_mib(cm.pid):.1f} MiB",
                  flush=True)


def main(args: argparse.Namespace) -> None:
    cluster = start_cluster(Path(tempfile.mkdtemp(prefix="pyk8s-bench-cm-")), nodes=args.nodes,
                            max_pods=(args.replicas + args.deployment_replicas * 2) // args.nodes + 110)
    try:
        cm = Proc([sys.executable, "-m", "controller_manager", "--master", cluster.url, "--leader-elect=false",
                   "--secure-port", "0"], cluster.workdir / "cm.log")
        cluster.procs.append(cm)
        asyncio.run(measure(args, cluster, cm))
    finally:
        cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=10000)
    parser.add_argument("--deployment-replicas", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--cached-pods", type=int, default=50000)
    parser.add_argument("--replicaset-cases", default="scheduled,unscheduled",
                        help="which --replicas ReplicaSets to time: scheduled, unscheduled or both (comma-separated)")
    main(parser.parse_args())
