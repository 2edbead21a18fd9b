"""kube-proxy and cluster DNS benchmarks (issue 7), all inside a scratch network namespace:

- full sync of 10,000 Services x 5 endpoints per mode and iptables flavour (median of --repeat),
- one endpoint change as a partial sync, in process (median of --changes),
- with --api: one EndpointSlice write through a real etcd + apiserver to the rule being in the
  kernel, against a real `python -m proxy_agent` at its default --min-sync-period,
- DNS queries/s with p99.

Run as root: `python bench/proxy.py [--services N] [--api]`. Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy_agent.backends import Backend, Ruleset, run_tool  # noqa: E402
from proxy_agent.backends.iptables import IptablesBackend, sep_chain  # noqa: E402
from proxy_agent.backends.nftables import NftablesBackend  # noqa: E402
from proxy_agent.dns.server import DNSServer  # noqa: E402
from proxy_agent.dns.wire import A, build_query  # noqa: E402
from proxy_agent.dns.zone import ClusterZone  # noqa: E402
from proxy_agent.tracker import (  # noqa: E402
    SERVICE_NAME_LABEL,
    ChangeTracker,
    Endpoint,
    ProxyState,
    ServicePort,
    ServicePortName,
)
from services.client import Client, ClientConfig, gvr  # noqa: E402
from tests.conftest import REPO, free_port, start_apiserver, start_etcd_cluster  # noqa: E402

SERVICES = gvr("v1", "services")
SLICES = gvr("discovery.k8s.io/v1", "endpointslices")
NAMESPACES = gvr("v1", "namespaces", namespaced=False)


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


def _cpu() -> float:
    """CPU seconds of this process and its finished children: wall time on a loaded machine isn't."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def write_wrappers(directory: Path, ns: str, iptables: str) -> None:
    """`iptables*` and `nft` scripts that run the chosen flavour inside the scratch namespace."""
    for tool in ("iptables", "iptables-restore", "iptables-save", "nft"):
        path = directory / tool
        path.write_text(f'#!/bin/sh\nexec ip netns exec {ns} {tool.replace("iptables", iptables)} "$@"\n')
        path.chmod(0o755)


async def bench_mode(backend: Backend, label: str, n: int, eps: int, repeat: int, changes: int) -> None:
    services, slices = objects(n, eps)
    tracker = ChangeTracker()
    for s in services:
        tracker.service_update(None, s)
    for sl in slices:
        tracker.slice_update(sl)
    state = ProxyState(node_name="n1", cluster_cidr="10.244.0.0/16")
    totals, renders, applies, cpus = [], [], [], []
    ruleset: Ruleset | None = None
    for _ in range(repeat):
        cpu0 = _cpu()
        start = time.perf_counter()
        tracker.apply(state, tracker.take())  # as the proxier: all Services the first time, then none
        ruleset = backend.render(state, None)
        rendered = time.perf_counter()
        await backend.apply(ruleset)
        done = time.perf_counter()
        cpus.append(_cpu() - cpu0)
        totals.append(done - start)
        renders.append(rendered - start)
        applies.append(done - rendered)
    assert ruleset is not None
    print(
        f"{label}: full sync {n} services x {eps} endpoints: median {statistics.median(totals):.2f}s "
        f"(render {statistics.median(renders):.2f}s, apply {statistics.median(applies):.2f}s; "
        f"CPU {statistics.median(cpus):.2f}s summed over processes) "
        f"of {repeat}: {', '.join(f'{t:.2f}' for t in totals)} (CPU {', '.join(f'{c:.2f}' for c in cpus)}; "
        f"the first also builds the state from every Service and slice); load {os.getloadavg()[0]:.1f}; "
        f"counts={ruleset.counts}",
        flush=True,
    )
    times, cpus = [], []
    for k in range(changes):
        sl = slices[k * 7 % n]
        sl["endpoints"][0]["addresses"] = [f"10.250.{k // 250}.{k % 250 + 1}"]
        cpu0 = _cpu()
        t0 = time.perf_counter()
        tracker.slice_update(sl)
        changed = tracker.take()
        tracker.apply(state, changed)
        await backend.apply(backend.render(state, changed))
        times.append(time.perf_counter() - t0)
        cpus.append(_cpu() - cpu0)
    print(
        f"{label}: one endpoint change (partial sync, in process): median "
        f"{statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms over {changes}; "
        f"CPU median {statistics.median(cpus) * 1000:.0f} ms",
        flush=True,
    )
    await backend.cleanup()


async def _create_all(client: Client, n: int, eps: int, concurrency: int = 32) -> list[dict]:
    services, slices = objects(n, eps)
    for i in range(50):
        await client.create(NAMESPACES, {"metadata": {"name": f"ns-{i}"}})
    queue: asyncio.Queue[tuple] = asyncio.Queue()
    for i, (svc, sl) in enumerate(zip(services, slices, strict=True)):
        # explicit, unique addresses and ports: the apiserver's allocators are not what is measured
        svc["spec"]["clusterIP"] = f"10.97.{i // 256 % 256}.{i % 256}"
        if svc["spec"]["type"] == "ClusterIP":
            del svc["spec"]["ports"][0]["nodePort"]
        queue.put_nowait((svc, sl))
    created: list[dict] = []

    async def worker() -> None:
        while not queue.empty():
            svc, sl = queue.get_nowait()
            await client.create(SERVICES, svc)
            created.append(await client.create(SLICES, sl))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return created


async def _metric(http: httpx.AsyncClient, url: str, name: str) -> float:
    try:
        text = (await http.get(url)).text
    except httpx.HTTPError:
        return 0.0
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


async def bench_api(mode: str, wrappers: Path, n: int, eps: int, changes: int, work: Path) -> None:
    """EndpointSlice PUT -> apiserver -> watch -> proxy -> kernel, timed by the proxy's
    last-sync timestamp and checked against the kernel's rules."""
    members = start_etcd_cluster(1, work / f"etcd-{mode}")
    api = start_apiserver([members[0].client_url], work / f"apiserver-{mode}")
    proxy: asyncio.subprocess.Process | None = None
    log = None
    try:
        async with Client(ClientConfig(server=api.url, timeout=120)) as client, httpx.AsyncClient() as http:
            t0 = time.perf_counter()
            created = await _create_all(client, n, eps)
            print(f"{mode}: created {n} Services and slices through the API in {time.perf_counter() - t0:.0f}s")
            metrics_port = free_port()
            log = await asyncio.to_thread(open, work / f"proxy-{mode}.log", "wb")
            proxy = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "proxy_agent", "--master", api.url, "--hostname-override", "n1",
                "--proxy-mode", mode, "--cluster-cidr", "10.244.0.0/16",
                "--iptables-binary", str(wrappers / "iptables"), "--nft-binary", str(wrappers / "nft"),
                "--healthz-bind-address", "127.0.0.1:0", "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
                cwd=REPO, stdout=log, stderr=log,
            )  # fmt: skip
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            stamp = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
            t0 = time.time()
            while True:
                if await _metric(http, url, stamp) > 0:
                    break
                await asyncio.sleep(0.2)
            print(f"{mode}: proxy start to first full sync {time.time() - t0:.1f}s", flush=True)
            latencies = []
            for k in range(changes):
                await asyncio.sleep(1.5)  # past --min-sync-period (1 s), so the change is not rate-limited
                sl = created[(k * 7 + 3) % n]
                meta = sl["metadata"]
                new_ip = f"10.251.{k // 250}.{k % 250 + 1}"
                sl["endpoints"][0]["addresses"] = [new_ip]
                sp = ServicePort(ServicePortName(meta["namespace"], sl["metadata"]["labels"][SERVICE_NAME_LABEL],
                                                 "http", "TCP"), "", 80, "TCP")  # fmt: skip
                if mode == "nftables":  # the Service's endpoints are elements of the shared map
                    i = int(meta["labels"][SERVICE_NAME_LABEL].removeprefix("svc-"))
                    keys = ", ".join(f"10.97.{i // 256 % 256}.{i % 256} . tcp . 80 . {j}" for j in range(eps))
                    check = [str(wrappers / "nft"), "get", "element", "ip", "kube-proxy", "service-endpoints",
                             f"{{ {keys} }}"]  # fmt: skip
                else:  # the new endpoint's own chain, written with the Service chain's jump to it
                    check = [str(wrappers / "iptables"), "-w", "-t", "nat", "-S", sep_chain(sp, Endpoint(new_ip, 8080))]
                start = time.time()
                sl.update(await client.replace(SLICES, sl))
                while True:
                    synced = await _metric(http, url, stamp)
                    if synced >= start and new_ip in (await run_tool(check, check=False))[1]:
                        latencies.append(synced - start)
                        break
                    await asyncio.sleep(0.005)
            print(
                f"{mode}: endpoint change through the API to the kernel ({n} services): median "
                f"{statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms over {changes}",
                flush=True,
            )
    finally:
        if proxy is not None:
            proxy.terminate()
            await proxy.wait()
        if log is not None:
            log.close()
        api.stop()
        for m in members:
            m.kill()


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


async def run_modes(args: argparse.Namespace, ns: str, work: Path) -> None:
    modes = args.modes.split(",")
    for flavour in args.iptables.split(",") if "iptables" in modes and not args.api_only else []:
        wrappers = work / flavour
        wrappers.mkdir()
        write_wrappers(wrappers, ns, flavour)
        try:
            async with asyncio.timeout(args.timeout):
                await bench_mode(
                    IptablesBackend(str(wrappers / "iptables")),
                    f"iptables ({flavour})",
                    args.services,
                    args.endpoints,
                    args.repeat,
                    args.changes,
                )
        except TimeoutError:
            print(f"iptables ({flavour}): did not finish within {args.timeout:.0f}s", flush=True)
            await IptablesBackend(str(wrappers / "iptables")).cleanup()
    wrappers = work / "default"
    wrappers.mkdir()
    write_wrappers(wrappers, ns, args.iptables.split(",")[0])
    if "nftables" in modes and not args.api_only:
        backend = NftablesBackend(str(wrappers / "nft"))
        await bench_mode(backend, "nftables", args.services, args.endpoints, args.repeat, args.changes)
    if args.api or args.api_only:
        for mode in modes:
            await bench_api(mode, wrappers, args.services, args.endpoints, args.changes, work)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--services", type=int, default=10_000)
    p.add_argument("--endpoints", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3, help="full syncs per mode; the median is reported")
    p.add_argument("--changes", type=int, default=11, help="endpoint changes per mode")
    p.add_argument("--dns-seconds", type=float, default=5)
    p.add_argument("--dns-concurrency", type=int, default=8)
    p.add_argument(
        "--iptables",
        default="iptables-legacy,iptables-nft",
        help="iptables flavours to measure; the first also serves --api",
    )
    p.add_argument("--timeout", type=float, default=120, help="give up on an iptables flavour after this")
    p.add_argument("--modes", default="iptables,nftables", help="proxy modes to measure")
    p.add_argument("--api", action="store_true", help="also time endpoint changes through a real apiserver")
    p.add_argument("--api-only", action="store_true", help="only the --api measurement")
    p.add_argument("--skip-dns", action="store_true")
    args = p.parse_args()
    ns = f"pyk8s-proxybench-{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix=f"{ns}-"))
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        asyncio.run(run_modes(args, ns, work))
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(work, ignore_errors=True)
    if args.skip_dns:
        return
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
