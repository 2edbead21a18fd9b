"""Scheduler benchmark, shaped like upstream's scheduler_perf: Node objects through the API, no kubelets.

Two figures per size:
  alone       pods created while the scheduler is stopped, then bindings/s once it starts
  end-to-end  scheduler running; from the first pod create to the last binding seen by a watch
plus the scheduler's RSS. Starts its own etcd and apiserver unless --server is given.
Run: python bench/scheduler.py --nodes 1000 --pods 3000 [--nodes 5000 --pods 10000 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.client import Client, gvr  # noqa: E402
from tests.conftest import REPO, free_port, start_apiserver, start_etcd_cluster  # noqa: E402

PODS = gvr("v1", "pods")


def node_body(i: int, zones: int) -> bytes:
    alloc = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    return orjson.dumps({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": f"node-{i:05d}", "labels": {"kubernetes.io/hostname": f"node-{i:05d}",
                                                          "topology.kubernetes.io/zone": f"zone-{i % zones}"}},
        "spec": {}, "status": {"capacity": alloc, "allocatable": alloc,
                               "conditions": [{"type": "Ready", "status": "True"}]},
    })


def pod_body(name: str, variant: str) -> bytes:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}
    labels = {"app": "bench", "color": name[-1]}
    if variant == "anti-affinity":
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"color": name[-1]}}, "topologyKey": "kubernetes.io/hostname"}]}}
    elif variant == "spread":
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                              "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": {"matchLabels": {"app": "bench"}}}]
    return orjson.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                         "spec": spec})


class RawClient:
    """Keep-alive HTTP/1.1 POSTs, cheap enough that the load generator leaves the cores to the cluster."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await self.reader.readexactly(length)
        return int(status_line.split()[1])

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def post_all(url: str, path: str, bodies: list[bytes], clients: int) -> float:
    parsed = httpx.URL(url)
    it = iter(bodies)
    t0 = time.perf_counter()

    async def worker() -> None:
        c = RawClient(parsed.host, parsed.port or 80)
        try:
            for body in it:
                status = await c.post(path, body)
                if status >= 300:
                    raise RuntimeError(f"POST {path} answered {status}")
        finally:
            await c.close()

    await asyncio.gather(*(worker() for _ in range(clients)))
    return time.perf_counter() - t0


class BindingWatch:
    """Counts pods of a namespace that got a node, and when the first and last did."""

    def __init__(self, client: Client, namespace: str, expected: int) -> None:
        self.client, self.namespace, self.expected = client, namespace, expected
        self.bound: set[str] = set()
        self.first = 0.0
        self.last = 0.0
        self.done = asyncio.Event()
        self.ready = asyncio.Event()

    async def run(self) -> None:
        listed = await self.client.list(PODS, self.namespace)
        rv = listed["metadata"]["resourceVersion"]
        for p in listed["items"]:
            self._see(p)
        self.ready.set()
        while not self.done.is_set():
            async with self.client.watch(PODS, self.namespace, resource_version=rv, timeout_seconds=600) as w:
                async for kind, obj in w:
                    if kind == "BOOKMARK":
                        rv = obj["metadata"]["resourceVersion"]
                        continue
                    rv = obj["metadata"]["resourceVersion"]
                    self._see(obj)
                    if self.done.is_set():
                        return

    def _see(self, pod: dict[str, Any]) -> None:
        if pod["spec"].get("nodeName") and pod["metadata"]["name"] not in self.bound:
            now = time.perf_counter()
            if not self.bound:
                self.first = now
            self.bound.add(pod["metadata"]["name"])
            self.last = now
            if len(self.bound) >= self.expected:
                self.done.set()


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """user + system CPU time a process used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_scheduler(url: str, log: Path, extra: list[str], profile_to: Path | None) -> subprocess.Popen[bytes]:
    prefix = ["-m", "cProfile", "-o", str(profile_to)] if profile_to else []
    return subprocess.Popen(
        [sys.executable, *prefix, "-m", "scheduler", "--master", url, "--leader-elect=false", "--secure-port",
         str(free_port()), "--bind-address", "127.0.0.1", *extra],
        cwd=REPO, stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


async def make_namespace(client: Client, name: str) -> None:
    await client.create(gvr("v1", "namespaces", namespaced=False),
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


async def run_size(url: str, api_pid: int, work: Path, nodes: int, pods: int, clients: int, variant: str, zones: int,
                   sched_args: list[str], profile: bool, alone_only: bool = False, etcd_pid: int = 0) -> None:
    client = Client(url)
    try:
        t = await post_all(url, "/api/v1/nodes", [node_body(i, zones) for i in range(nodes)], clients)
        print(f"[{nodes} nodes] created in {t:.1f}s ({nodes / t:.0f}/s)", flush=True)

        # -- scheduler alone ------------------------------------------------------------------------
        ns = f"alone-{nodes}-{pods}-{variant}"
        await make_namespace(client, ns)
        t = await post_all(url, f"/api/v1/namespaces/{ns}/pods",
                           [pod_body(f"p-{i:06d}", variant) for i in range(pods)], clients)
        print(f"[{nodes}n/{pods}p {variant}] pods created (scheduler stopped) in {t:.1f}s ({pods / t:.0f}/s)",
              flush=True)
        watch = BindingWatch(client, ns, pods)
        wt = asyncio.create_task(watch.run())
        await watch.ready.wait()
        others = {name: pid for name, pid in (("apiserver", api_pid), ("etcd", etcd_pid)) if pid}
        others_before = {name: cpu_seconds(pid) for name, pid in others.items()}
        started = time.perf_counter()
        proc = start_scheduler(url, work / f"sched-{nodes}.log", sched_args,
                               work / f"sched-{nodes}-{pods}.prof" if profile else None)
        peak = 0.0
        while not watch.done.is_set():
            await asyncio.sleep(0.5)
            if proc.poll() is not None:
                raise RuntimeError(f"scheduler exited with {proc.returncode}")
            peak = max(peak, rss_mib(proc.pid))
        wt.cancel()
        cpu_alone = cpu_seconds(proc.pid)
        others_used = {name: cpu_seconds(pid) - others_before[name] for name, pid in others.items()}
        span = watch.last - watch.first
        print(f"[{nodes}n/{pods}p {variant}] ALONE: {pods} bindings in {span:.2f}s after the first = "
              f"{pods / span:.0f} pods/s; from process start {watch.last - started:.2f}s = "
              f"{pods / (watch.last - started):.0f} pods/s; scheduler RSS {rss_mib(proc.pid):.0f} MiB "
              f"(peak {peak:.0f}); scheduler CPU {cpu_alone:.1f}s ({cpu_alone / pods * 1e3:.2f} ms/pod incl. start-up)"
              + "".join(f", {name} CPU {used:.1f}s ({used / pods * 1e3:.2f} ms/pod)"
                        for name, used in others_used.items()),
              flush=True)

        if alone_only:
            stop(proc)
            return
        # -- end to end (same scheduler, now idle and synced) --------------------------------------
        ns2 = f"e2e-{nodes}-{pods}-{variant}"
        await make_namespace(client, ns2)
        watch2 = BindingWatch(client, ns2, pods)
        wt2 = asyncio.create_task(watch2.run())
        await watch2.ready.wait()
        t0 = time.perf_counter()
        t_create = await post_all(url, f"/api/v1/namespaces/{ns2}/pods",
                                  [pod_body(f"p-{i:06d}", variant) for i in range(pods)], clients)
        while not watch2.done.is_set():
            await asyncio.sleep(0.2)
            if proc.poll() is not None:
                raise RuntimeError(f"scheduler exited with {proc.returncode}")
            peak = max(peak, rss_mib(proc.pid))
        wt2.cancel()
        cpu_e2e = cpu_seconds(proc.pid) - cpu_alone
        e2e = watch2.last - t0
        print(f"[{nodes}n/{pods}p {variant}] END-TO-END: {pods} pods from first create to last binding "
              f"{e2e:.2f}s = {pods / e2e:.0f} pods/s (creates took {t_create:.2f}s, {clients} clients); "
              f"scheduler RSS {rss_mib(proc.pid):.0f} MiB (peak {peak:.0f}); scheduler CPU {cpu_e2e:.1f}s "
              f"({cpu_e2e / pods * 1e3:.2f} ms/pod)", flush=True)
        stop(proc)
        if profile:
            print(f"profile written to {work / f'sched-{nodes}-{pods}.prof'}", flush=True)
    finally:
        await client.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, action="append", help="node count (repeat with --pods for more sizes)")
    ap.add_argument("--pods", type=int, action="append")
    ap.add_argument("--clients", type=int, default=64, help="concurrent creating clients")
    ap.add_argument("--variant", choices=("plain", "anti-affinity", "spread"), default="plain")
    ap.add_argument("--zones", type=int, default=3)
    ap.add_argument("--server", default=None, help="use this apiserver instead of starting one per size")
    ap.add_argument("--profile", action="store_true", help="run the scheduler under cProfile (alone phase)")
    ap.add_argument("--scheduler-arg", action="append", default=[], help="extra flag for python -m scheduler")
    ap.add_argument("--alone-only", action="store_true", help="skip the end-to-end phase (large sizes)")
    args = ap.parse_args()
    sizes = list(zip(args.nodes or [1000], args.pods or [3000], strict=True))
    for nodes, pods in sizes:
        work = Path(tempfile.mkdtemp(prefix=f"bench-sched-{nodes}-"))
        if args.server:
            await run_size(args.server, 0, work, nodes, pods, args.clients, args.variant, args.zones,
                           args.scheduler_arg, args.profile, args.alone_only)
            continue
        members = start_etcd_cluster(1, work / "etcd")
        server = start_apiserver([members[0].client_url], work / "apiserver")
        try:
            await run_size(server.url, server.proc.pid, work, nodes, pods, args.clients, args.variant, args.zones,
                           args.scheduler_arg, args.profile, args.alone_only,
                           members[0].proc.pid if members[0].proc else 0)
            print(f"[{nodes}n/{pods}p] apiserver RSS {rss_mib(server.proc.pid):.0f} MiB; logs in {work}", flush=True)
        finally:
            server.stop()
            for m in members:
                m.kill()


if __name__ == "__main__":
    asyncio.run(main())
