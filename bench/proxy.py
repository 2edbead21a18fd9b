"""kube-proxy and cluster DNS benchmarks: full sync of 10,000 Services x 5 endpoints in iptables and
nftables mode inside a scratch network namespace, one endpoint change, and DNS queries/s with p99.

Run as root: `python bench/proxy.py [--services N]`. Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import subprocess
import time

from proxy_agent.backends import Ruleset
from proxy_agent.backends.iptables import IptablesBackend
from proxy_agent.backends.nftables import NftablesBackend
from proxy_agent.dns.server import DNSServer
from proxy_agent.dns.wire import A, build_query
from proxy_agent.dns.zone import ClusterZone
from proxy_agent.tracker import SERVICE_NAME_LABEL, ChangeTracker, ProxyState


def objects(n: int, eps: int) -> tuple[list[dict], list[dict]]:
    services, slices = [], []
    for i in range(n):
        name = f"svc-{i}"
        services.append(
            {
                "metadata": {"namespace": f"ns-{i % 50}", "name": name},
                "spec": {
                    "clusterIP": f"10.{96 + i // 65536}.{(i // 256) % 256}.{i % 256}",
                    "type": "NodePort" if i % 10 == 0 else "ClusterIP",
                    "ports": [{"name": "http", "port": 80, "nodePort": 30000 + i // 10}],
                },
            }
        )
        slices.append(
            {
                "metadata": {
                    "namespace": f"ns-{i % 50}",
                    "name": f"{name}-a",
                    "labels": {SERVICE_NAME_LABEL: name},
                },
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [
                    {
                        "addresses": [f"10.244.{(i * eps + j) // 250 % 250}.{(i * eps + j) % 250 + 1}"],
                        "conditions": {"ready": True},
                        "nodeName": "n1",
                    }
                    for j in range(eps)
                ],
            }
        )
    return services, slices


async def bench_mode(backend_cls: type, wrapper: str, n: int, eps: int) -> None:
    services, slices = objects(n, eps)
    tracker = ChangeTracker()
    for s in services:
        tracker.service_update(None, s)
    for sl in slices:
        tracker.slice_update(sl)
    state = ProxyState(node_name="n1", cluster_cidr="10.244.0.0/16")
    backend = backend_cls(wrapper)
    start = time.perf_counter()
    tracker.apply(state, None)
    tracker.take()
    ruleset: Ruleset = backend.render(state, None)
    rendered = time.perf_counter()
    await backend.apply(ruleset)
    done = time.perf_counter()
    print(
        f"{backend.mode}: full sync {n} services x {eps} endpoints: {done - start:.2f}s "
        f"(render {rendered - start:.2f}s, apply {done - rendered:.2f}s) counts={ruleset.counts}"
    )
    times = []
    for k in range(5):
        sl = slices[k * 7]
        sl["endpoints"][0]["addresses"] = [f"10.250.{k}.{len(times) + 1}"]
        t0 = time.perf_counter()
        tracker.slice_update(sl)
        changed = tracker.take()
        tracker.apply(state, changed)
        await backend.apply(backend.render(state, changed))
        times.append(time.perf_counter() - t0)
    print(
        f"{backend.mode}: one endpoint change applied: median {statistics.median(times) * 1000:.0f} ms, "
        f"max {max(times) * 1000:.0f} ms"
    )
    await backend.cleanup()


def serve_dns(port: int, n: int) -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass

    async def main() -> None:
        zone = ClusterZone()
        services, slices = objects(n, 5)
        for s in services:
            zone.set_service(s)
        for sl in slices:
            zone.set_slice(sl)
        server = DNSServer(zone, [])
        await server.start("127.0.0.1", port)
        await asyncio.Event().wait()

    asyncio.run(main())


async def bench_dns(port: int, seconds: float, concurrency: int, names: int) -> None:
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    queries = [build_query(f"svc-{i}.ns-{i % 50}.svc.cluster.local", A, ident=i) for i in range(names)]

    async def worker(w: int) -> None:
        sent: dict[int, float] = {}
        waiter: list[asyncio.Future[None]] = []

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                t = sent.pop(int.from_bytes(data[:2], "big"), None)
                if t is not None:
                    latencies.append(time.perf_counter() - t)
                if waiter and not waiter[0].done():
                    waiter[0].set_result(None)

        transport, _ = await loop.create_datagram_endpoint(P, remote_addr=("127.0.0.1", port))
        end = time.perf_counter() + seconds
        i = w
        while time.perf_counter() < end:
            q = queries[i % names]
            waiter[:] = [loop.create_future()]
            sent[int.from_bytes(q[:2], "big")] = time.perf_counter()
            transport.sendto(q)
            try:
                async with asyncio.timeout(1):
                    await waiter[0]
            except TimeoutError:
                pass
            i += concurrency
        transport.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    print(
        f"dns: {len(latencies) / elapsed:.0f} queries/s over {elapsed:.1f}s with {concurrency} in flight; "
        f"p50 {latencies[len(latencies) // 2] * 1000:.2f} ms, p99 {p99:.2f} ms"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--services", type=int, default=10_000)
    p.add_argument("--endpoints", type=int, default=5)
    p.add_argument("--dns-seconds", type=float, default=5)
    p.add_argument("--dns-concurrency", type=int, default=8)
    p.add_argument("--iptables", default="iptables-legacy", help="iptables flavour the wrappers run")
    p.add_argument("--modes", default="iptables,nftables", help="proxy modes to measure")
    args = p.parse_args()
    ns = f"pyk8s-bench-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    wrappers = f"/tmp/{ns}"
    os.makedirs(wrappers)
    for tool in ("iptables", "iptables-restore", "iptables-save", "nft"):
        path = f"{wrappers}/{tool}"
        with open(path, "w") as f:
            real = tool.replace("iptables", args.iptables)
            f.write(f'#!/bin/sh\nexec ip netns exec {ns} {real} "$@"\n')
        os.chmod(path, 0o755)
    try:
        if "iptables" in args.modes:
            asyncio.run(bench_mode(IptablesBackend, f"{wrappers}/iptables", args.services, args.endpoints))
        if "nftables" in args.modes:
            asyncio.run(bench_mode(NftablesBackend, f"{wrappers}/nft", args.services, args.endpoints))
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
        subprocess.run(["rm", "-rf", wrappers], check=False)
    port = 20000 + os.getpid() % 20000
    server = multiprocessing.get_context("spawn").Process(target=serve_dns, args=(port, 1000), daemon=True)
    server.start()
    time.sleep(2)
    try:
        asyncio.run(bench_dns(port, args.dns_seconds, args.dns_concurrency, 1000))
    finally:
        server.terminate()
        server.join()


if __name__ == "__main__":
    main()
