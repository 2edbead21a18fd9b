"""Apiserver benchmark: create and get throughput and latency, list from cache, watch fan-out, RSS.

Starts its own etcd and apiserver (or uses --server URL) and prints one line per figure.
Run: python bench/apiserver.py [--pods 10000] [--clients 64] [--watchers 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import start_apiserver, start_etcd_cluster  # noqa: E402


def pod(name: str) -> bytes:
    return orjson.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench", "shard": name[-1]}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"],
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
    })


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


class RawClient:
    """A minimal keep-alive HTTP/1.1 client, so the load generator does not eat the cores it measures."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
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
        payload = await self.reader.readexactly(length)
        return int(status_line.split()[1]), payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def creates(url: str, ns: str, total: int, clients: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    counter = iter(range(total))
    parsed = httpx.URL(url)

    async def worker() -> None:
        client = RawClient(parsed.host, parsed.port or 80)
        try:
            for i in counter:
                body = pod(f"p-{i:06d}")
                t0 = time.perf_counter()
                status, payload = await client.request("POST", f"/api/v1/namespaces/{ns}/pods", body)
                latencies.append(time.perf_counter() - t0)
                if status != 201:
                    raise RuntimeError(f"create failed: {status} {payload[:200]!r}")
        finally:
            await client.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    elapsed = time.perf_counter() - start
    return total / elapsed, latencies


async def gets(url: str, ns: str, total: int, clients: int) -> tuple[float, list[float]]:
    """GETs of the created pods (without resourceVersion: each a consistent read from etcd)."""
    latencies: list[float] = []
    counter = iter(range(total))
    parsed = httpx.URL(url)

    async def worker() -> None:
        client = RawClient(parsed.host, parsed.port or 80)
        try:
            for i in counter:
                t0 = time.perf_counter()
                status, payload = await client.request("GET", f"/api/v1/namespaces/{ns}/pods/p-{i:06d}")
                latencies.append(time.perf_counter() - t0)
                if status != 200:
                    raise RuntimeError(f"get failed: {status} {payload[:200]!r}")
        finally:
            await client.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return total / (time.perf_counter() - start), latencies


async def list_latency(url: str, ns: str, runs: int = 5) -> list[float]:
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for _ in range(runs):
            t0 = time.perf_counter()
            r = await client.get(f"/api/v1/namespaces/{ns}/pods", params={"resourceVersion": "0"})
            body = r.content
            out.append(time.perf_counter() - t0)
            assert r.status_code == 200 and len(body) > 0
    return out


async def watch_fanout(url: str, ns: str, watchers: int, writes: int = 20) -> list[float]:
    """Each of `watchers` streams sees each of `writes` changes; returns delivery latencies."""
    sent: dict[str, float] = {}
    latencies: list[float] = []
    ready = asyncio.Event()
    started = 0
    limits = httpx.Limits(max_connections=watchers + 4)
    async with httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as client:
        r = await client.get(f"/api/v1/namespaces/{ns}/configmaps")
        rv = r.json()["metadata"]["resourceVersion"]

        async def watch() -> None:
            nonlocal started
            params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "60"}
            seen = 0
            async with client.stream("GET", f"/api/v1/namespaces/{ns}/configmaps", params=params) as resp:
                started += 1
                if started == watchers:
                    ready.set()
                async for line in resp.aiter_lines():
                    if not line:
                        continue
                    ev = orjson.loads(line)
                    name = ev["object"]["metadata"].get("name", "")
                    if name in sent:
                        latencies.append(time.perf_counter() - sent[name])
                        seen += 1
                        if seen == writes:
                            return

        tasks = [asyncio.create_task(watch()) for _ in range(watchers)]
        await asyncio.wait_for(ready.wait(), 30)
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(base_url=url, timeout=30) as writer:
            for i in range(writes):
                name = f"w-{i}"
                sent[name] = time.perf_counter()
                await writer.post(f"/api/v1/namespaces/{ns}/configmaps",
                                  json={"metadata": {"name": name}, "data": {"i": str(i)}})
                await asyncio.sleep(0.05)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    return latencies


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--watchers", type=int, default=100)
    ap.add_argument("--server", help="use a running apiserver (URL) and its --pid instead of starting one")
    ap.add_argument("--pid", type=int, default=0)
    args = ap.parse_args()
    members = []
    server = None
    startup = 0.0
    if args.server:
        url, pid = args.server, args.pid
    else:
        work = Path(tempfile.mkdtemp(prefix="pyk8s-bench-"))
        members = start_etcd_cluster(1, work)
        t0 = time.perf_counter()
        server = start_apiserver([members[0].client_url], work)
        startup = time.perf_counter() - t0
        url, pid = server.url, server.proc.pid
    try:
        ns = f"bench-{int(time.time())}"
        async with httpx.AsyncClient(base_url=url) as c:
            await c.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
        rate, lat = await creates(url, ns, args.pods, args.clients)
        print(f"pod creates: {args.pods} with {args.clients} clients: {rate:.0f}/s, "
              f"p50 {pct(lat, 0.5) * 1000:.1f} ms, p99 {pct(lat, 0.99) * 1000:.1f} ms")
        rate, lat = await gets(url, ns, args.pods, args.clients)
        print(f"pod gets: {args.pods} with {args.clients} clients: {rate:.0f}/s, "
              f"p50 {pct(lat, 0.5) * 1000:.1f} ms, p99 {pct(lat, 0.99) * 1000:.1f} ms")
        lists = await list_latency(url, ns)
        print(f"LIST {args.pods} pods from cache (resourceVersion=0): median {statistics.median(lists) * 1000:.0f} ms")
        if pid:
            print(f"RSS with {args.pods} pods cached: {rss_mib(pid):.0f} MiB")
        wl = await watch_fanout(url, ns, args.watchers)
        print(f"watch fan-out: {args.watchers} watchers x 20 writes: p50 {pct(wl, 0.5) * 1000:.1f} ms, "
              f"p99 {pct(wl, 0.99) * 1000:.1f} ms")
        if server is not None:
            print(f"apiserver start to ready (process spawn included): {startup:.2f} s")
    finally:
        if server is not None:
            server.stop()
        for m in members:
            m.kill()


if __name__ == "__main__":
    asyncio.run(main())
