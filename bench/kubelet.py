"""Kubelet benchmarks: pod startup latency on one real containerd node, and how many hollow nodes
one process holds (RSS and CPU in steady state, with heartbeats and pods).

    /tmp/venv/bin/python bench/kubelet.py [--pods 30] [--hollow-nodes 1000] [--pods-per-node 30] [--steady 60]
        [--skip-real] [--skip-hollow] [--kubelet-arg=--max-parallel-pod-starts=N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from services.client import Client, gvr  # noqa: E402
from tests.conftest import start_apiserver, start_etcd_cluster  # noqa: E402

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def pod(name: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                                        "imagePullPolicy": "IfNotPresent",
                                                        "command": ["sleep", "3600"]}]}}


def is_ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


async def wait_nodes(client: Client, count: int, limit: float) -> None:
    """Wait for `count` Ready nodes: a registered node still setting up its pod network is not one."""
    deadline = time.monotonic() + limit
    ready = 0
    while time.monotonic() < deadline:
        ready = sum(is_ready(n) for n in (await client.list(NODES)).get("items") or [])
        if ready >= count:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"only {ready} of {count} nodes Ready")


async def create_and_watch(client: Client, ns: str, bodies: list[dict], concurrency: int = 32,
                           pace: float = 0.0) -> list[float]:
    """Create pods (all at once, or `pace` a second) and return create->Running latencies seen by a watch."""
    rv = (await client.list(PODS, ns))["metadata"]["resourceVersion"]
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    done = asyncio.Event()

    async def watch() -> None:
        async with client.watch(PODS, ns, resource_version=rv) as events:
            async for kind, obj in events:
                if kind not in ("ADDED", "MODIFIED"):
                    continue
                name = obj["metadata"]["name"]
                if (obj.get("status") or {}).get("phase") == "Running" and name not in running:
                    running[name] = time.monotonic()
                    if len(running) == len(bodies):
                        done.set()
                        return

    watcher = asyncio.create_task(watch())
    sem = asyncio.Semaphore(concurrency)
    start = time.monotonic()

    async def one(i: int, body: dict) -> None:
        if pace > 0:
            await asyncio.sleep(max(0.0, start + i / pace - time.monotonic()))
        async with sem:
            created[body["metadata"]["name"]] = time.monotonic()
            await client.create(PODS, body, ns)

    await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))
    await asyncio.wait_for(done.wait(), 180)
    watcher.cancel()
    return [running[n] - created[n] for n in created]


def proc_usage(pid: int) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def cpuacct_group(pid: int, name: str) -> Path | None:
    """A cgroup v1 cpuacct group holding containerd and all it starts from then on (shims, the OCI runtime, CNI
    plugins; containers themselves move to their pods' cgroups), to give the node's runtime CPU per pod."""
    if not CPUACCT.is_dir():
        return None
    group = CPUACCT / name
    group.mkdir(exist_ok=True)
    (group / "cgroup.procs").write_text(str(pid))
    return group


def cpuacct_seconds(group: Path | None) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9 if group else 0.0


async def real_node(client: Client, kubeconfig: Path, base: Path, pods: int, kubelet_args: list[str],
                    pace: float) -> dict:
    from tests.e2e.containerd_fixture import oci_runtime, start_containerd, stop_containerd

    c = await asyncio.to_thread(start_containerd, base / "ctrd", f"pyk8s-bkl-{os.getpid()}")
    group = cpuacct_group(c.proc.pid, f"pyk8s-bkl-{os.getpid()}")
    log = open(base / "kubelet-real.log", "ab")  # noqa: SIM115, ASYNC230
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-m", "kubelet_agent", "--kubeconfig", str(kubeconfig), "--hostname-override", "bench-real",
         "--container-runtime-endpoint", c.endpoint, "--cni-conf-dir", str(c.cni_conf_dir), "--node-netns",
         c.netns_path, "--node-ip", c.node_ip, "--root-dir", str(base / "kubelet"), "--healthz-port", "0",
         *kubelet_args],
        cwd=REPO, stdout=log, stderr=log)
    try:
        await wait_nodes(client, 1, 60)
        await client.create(gvr("v1", "namespaces", namespaced=False),
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench-real"}})
        runtime_cpu, kubelet_cpu = cpuacct_seconds(group), proc_usage(proc.pid)[0]
        latencies = await create_and_watch(client, "bench-real", [pod(f"p{i}", "bench-real") for i in range(pods)], 8,
                                           pace)
        runtime_cpu, kubelet_cpu = cpuacct_seconds(group) - runtime_cpu, proc_usage(proc.pid)[0] - kubelet_cpu
        return {"pods": pods, "pace_per_s": pace or "all at once",
                "p50_s": round(pct(latencies, 50), 3), "p99_s": round(pct(latencies, 99), 3),
                "max_s": round(max(latencies), 3), "oci_runtime": Path(oci_runtime()).name,
                "containerd_cpu_ms_per_pod": round(runtime_cpu / pods * 1000, 1) if group else None,
                "kubelet_cpu_ms_per_pod": round(kubelet_cpu / pods * 1000, 1)}
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 30)
        await asyncio.to_thread(stop_containerd, c)
        if group:
            with contextlib.suppress(OSError):
                group.rmdir()


async def hollow(client: Client, kubeconfig: Path, base: Path, nodes: int, per_node: int, steady: float) -> dict:
    log = open(base / "kubelet-hollow.log", "ab")  # noqa: SIM115, ASYNC230
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-m", "kubelet_agent", "--kubeconfig", str(kubeconfig), "--hollow-nodes", str(nodes),
         "--hostname-override", "hollow", "--healthz-port", "0"], cwd=REPO, stdout=log, stderr=log)
    try:
        start = time.monotonic()
        await wait_nodes(client, nodes, 600)
        registered = time.monotonic() - start
        await client.create(gvr("v1", "namespaces", namespaced=False),
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench-hollow"}})
        bodies = [pod(f"h{n}-{i}", f"hollow-{n}") for n in range(nodes) for i in range(per_node)]
        start = time.monotonic()
        latencies = await create_and_watch(client, "bench-hollow", bodies, 64)
        all_running = time.monotonic() - start
        cpu0, _ = proc_usage(proc.pid)
        await asyncio.sleep(steady)
        cpu1, rss = proc_usage(proc.pid)
        return {"nodes": nodes, "pods": len(bodies), "register_s": round(registered, 1),
                "all_running_s": round(all_running, 1), "pod_p50_s": round(pct(latencies, 50), 3),
                "pod_p99_s": round(pct(latencies, 99), 3), "steady_cpu_cores": round((cpu1 - cpu0) / steady, 3),
                "rss_mib": round(rss / 2**20, 1)}
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 60)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=30)
    ap.add_argument("--hollow-nodes", type=int, default=1000)
    ap.add_argument("--pods-per-node", type=int, default=30)
    ap.add_argument("--steady", type=float, default=60.0)
    ap.add_argument("--pace", type=float, default=0.0,
                    help="create the real node's pods this many a second (default: all at once)")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-hollow", action="store_true")
    ap.add_argument("--kubelet-arg", action="append", default=[],
                    help="extra flag for the real node's kubelet, e.g. --kubelet-arg=--max-parallel-pod-starts=4")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pyk8s-bench-kubelet-"))
    members = await asyncio.to_thread(start_etcd_cluster, 1, base / "etcd")
    api = await asyncio.to_thread(start_apiserver, [members[0].client_url], base / "api")
    kubeconfig = base / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "b",
        "clusters": [{"name": "b", "cluster": {"server": api.url}}], "users": [{"name": "b", "user": {"token": "b"}}],
        "contexts": [{"name": "b", "context": {"cluster": "b", "user": "b"}}]}))
    client = Client(api.url)
    results: dict = {}
    try:
        if not args.skip_real and os.geteuid() == 0:
            results["real_node_startup"] = await real_node(client, kubeconfig, base, args.pods, args.kubelet_arg,
                                                             args.pace)
            print(json.dumps({"real_node_startup": results["real_node_startup"]}), flush=True)
        if not args.skip_hollow:
            results["hollow"] = await hollow(client, kubeconfig, base, args.hollow_nodes, args.pods_per_node,
                                             args.steady)
            print(json.dumps({"hollow": results["hollow"]}), flush=True)
    finally:
        await client.close()
        await asyncio.to_thread(api.stop)
        for m in members:
            await asyncio.to_thread(m.kill)
        await asyncio.to_thread(shutil.rmtree, base, True)


if __name__ == "__main__":
    asyncio.run(main())
