"""Controller-manager benchmark (issue 5): pods created per second by a 10,000-replica ReplicaSet,
a rolling update of a 1,000-replica Deployment across 100 simulated nodes (pods made Ready by the
test kubelet stand-in), and the controller-manager's RSS idle and with every pod cached.

Starts its own etcd, apiserver and controller-manager. Prints one line per figure.
Run: python bench/controllers.py [--replicas 10000] [--deployment-replicas 1000] [--nodes 100]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.client import Client, ClientConfig, gvr  # noqa: E402
from services.informers import Informer  # noqa: E402
from tests.conftest import REPO, start_apiserver, start_etcd_cluster  # noqa: E402
from tests.integration.podstatus import FakeKubelet, create_nodes  # noqa: E402

PODS = gvr("v1", "pods")
NAMESPACES = gvr("v1", "namespaces", namespaced=False)
RSS = gvr("apps/v1", "replicasets")
DEPLOYMENTS = gvr("apps/v1", "deployments")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


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


async def bench_replicaset(client: Client, replicas: int) -> float:
    """Seconds from creating the ReplicaSet until its last pod exists, as seen by a watch."""
    await namespace(client, "bench-rs")
    seen = 0
    done = asyncio.Event()

    def added(_: dict[str, Any]) -> None:
        nonlocal seen
        seen += 1
        if seen >= replicas:
            done.set()

    pods = Informer(client, PODS, namespace="bench-rs")
    pods.add_event_handler(on_add=added)
    pods.start()
    await pods.wait_for_sync()
    start = time.monotonic()
    await client.create(RSS, workload("ReplicaSet", "big", replicas), "bench-rs")
    last = 0
    while not done.is_set():
        await asyncio.sleep(5)
        print(f"  ... {seen} pods after {time.monotonic() - start:.0f} s ({seen - last} in the last 5 s)", flush=True)
        last = seen
    elapsed = time.monotonic() - start
    await pods.stop()
    return elapsed


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


async def bench_rolling_update(client: Client, replicas: int, nodes: int) -> tuple[float, float]:
    """(seconds to first roll out, seconds for a rolling update to a new image)."""
    ns = "bench-deploy"
    await namespace(client, ns)
    names = [f"hollow-{i}" for i in range(nodes)]
    await create_nodes(client, names)
    async with FakeKubelet(client, names, bind=True, namespace=ns):
        start = time.monotonic()
        await client.create(DEPLOYMENTS, workload("Deployment", "web", replicas), ns)
        await wait_done(client, ns, "busybox:1.36")
        first = time.monotonic() - start
        start = time.monotonic()
        await client.patch(DEPLOYMENTS, "web", {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "busybox:1.37"}]}}}}, ns, patch_type="strategic")
        await wait_done(client, ns, "busybox:1.37")
        return first, time.monotonic() - start


async def measure(args: argparse.Namespace, server: str, pid: int) -> None:
    async with Client(ClientConfig(server=server, timeout=120)) as client:
        await asyncio.sleep(5)
        print(f"controller-manager RSS idle: {rss_mib(pid):.1f} MiB", flush=True)
        if args.deployment_replicas:
            first, update = await bench_rolling_update(client, args.deployment_replicas, args.nodes)
            print(f"deployment of {args.deployment_replicas} replicas on {args.nodes} nodes: "
                  f"first rollout {first:.1f} s, rolling update {update:.1f} s", flush=True)
        if args.replicas:
            elapsed = await bench_replicaset(client, args.replicas)
            print(f"replicaset of {args.replicas}: {elapsed:.1f} s, {args.replicas / elapsed:.0f} pods/s", flush=True)
        await asyncio.sleep(5)
        cached = args.replicas + args.deployment_replicas
        print(f"controller-manager RSS with ~{cached} pods cached: {rss_mib(pid):.1f} MiB", flush=True)


def main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="pyk8s-bench-cm-"))
    members = start_etcd_cluster(1, work / "etcd")
    api = start_apiserver([members[0].client_url], work / "apiserver")
    log = open(work / "cm.log", "ab")  # noqa: SIM115 - handed to the child
    cm = subprocess.Popen([sys.executable, "-m", "controller_manager", "--master", api.url, "--leader-elect=false",
                           "--secure-port", "0"], cwd=REPO, stdout=log, stderr=log)
    try:
        asyncio.run(measure(args, api.url, cm.pid))
    finally:
        cm.terminate()
        try:
            cm.wait(15)
        except subprocess.TimeoutExpired:
            cm.kill()
        api.stop()
        for m in members:
            m.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replicas", type=int, default=10000)
    parser.add_argument("--deployment-replicas", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=100)
    main(parser.parse_args())
