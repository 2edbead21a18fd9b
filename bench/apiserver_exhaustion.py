"""Exhaustion benchmark: GET latency and apiserver RSS while thousands of connections hold on.

Starts its own etcd and an apiserver on TLS, measures RSS and GET latency quiet, then opens --idle TLS
connections that complete the handshake and send nothing, plus --tricklers that send one header line
every --trickle-every seconds, posts --bodies request bodies of 10 MiB, and measures again while they
are all open; then waits for the header deadline (32 s) to close them and prints RSS once more.
Run: python bench/apiserver_exhaustion.py [--idle 2000] [--tricklers 200]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import socket
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.runtime import pki  # noqa: E402
from tests.conftest import free_port, start_apiserver, start_etcd_cluster  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def get_latencies(port: int, context: ssl.SSLContext, count: int) -> list[float]:
    """`count` GETs, one after another on one keep-alive TLS connection (in its own thread, so the
    connections held by the event loop do not delay the measurement)."""
    out: list[float] = []
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost") as conn:
        request = b"GET /api/v1/namespaces/default HTTP/1.1\r\nHost: localhost\r\n\r\n"
        for _ in range(count):
            start = time.perf_counter()
            conn.sendall(request)
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            head, _, rest = buf.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            while len(rest) < length:
                rest += conn.recv(65536)
            out.append((time.perf_counter() - start) * 1000)
            assert head.startswith(b"HTTP/1.1 200"), head
    return out


async def measure(port: int, context: ssl.SSLContext, count: int) -> list[float]:
    result: list[list[float]] = []
    thread = threading.Thread(target=lambda: result.append(get_latencies(port, context, count)))
    thread.start()
    await asyncio.to_thread(thread.join)
    return result[0]


class Closings:
    """When the server ended each held connection, in seconds after the first was opened."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.expected = 0
        self.all = asyncio.Event()

    def add(self, seconds: float) -> None:
        self.times.append(seconds)
        if self.expected and len(self.times) >= self.expected:
            self.all.set()


async def hold(port: int, context: ssl.SSLContext, first: bytes, every: float, line: bytes,
               closed: Closings, started: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    except OSError:
        return None

    async def watch() -> None:
        try:
            if first:
                writer.write(first)
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(65536), every if line else None)
                except TimeoutError:
                    writer.write(line)
                    continue
                if not data:
                    break
        except (OSError, ssl.SSLError):
            pass
        closed.add(time.monotonic() - started)

    asyncio.get_running_loop().create_task(watch())
    return reader, writer


async def big_body(port: int, context: ssl.SSLContext, size: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    body = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"x":"' + \
        b"a" * (size - 80) + b'"}}'
    writer.write(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\n"
                 b"content-type: application/json\r\n" + f"content-length: {len(body)}\r\n\r\n".encode())
    try:
        writer.write(body)
        await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    status = (await reader.readline()).decode().strip()
    writer.close()
    return status


async def run(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = Path(tempfile.mkdtemp(prefix="pyk8s-bench-exhaustion-"))
    members = start_etcd_cluster(1, work / "etcd")
    ca = pki.create_ca("bench-ca")
    ca.write(work / "ca.crt", work / "ca.key")
    pki.issue_serving_cert(ca, ["localhost", "127.0.0.1"]).write(work / "tls.crt", work / "tls.key")
    port = free_port()
    server = start_apiserver([members[0].client_url], work, "--secure-port", str(port), "--tls-cert-file",
                             str(work / "tls.crt"), "--tls-private-key-file", str(work / "tls.key"),
                             "--cert-dir", str(work / "certs"))
    context = ssl.create_default_context(cafile=str(work / "ca.crt"))
    pid = server.proc.pid
    try:
        await measure(port, context, 200)
        rss_start = rss_mib(pid)
        quiet = await measure(port, context, args.gets)
        print(f"quiet: GET p50 {pct(quiet, 0.5):.1f} ms, p99 {pct(quiet, 0.99):.1f} ms, RSS {rss_start:.0f} MiB")
        closed = Closings()
        started = time.monotonic()
        held = []
        for i in range(0, args.idle, 100):
            batch = await asyncio.gather(*(hold(port, context, b"", 0, b"", closed, started)
                                           for _ in range(min(100, args.idle - i))))
            held += [h for h in batch if h]
        idle_open = len(held)
        trickle = await asyncio.gather(*(hold(port, context, b"GET /version HTTP/1.1\r\nHost: localhost\r\n",
                                              args.trickle_every, b"X-Trickle: 1\r\n", closed, started)
                                         for _ in range(args.tricklers)))
        held += [h for h in trickle if h]
        opened = time.monotonic() - started
        print(f"held: {idle_open} idle TLS connections and {len(held) - idle_open} header tricklers, "
              f"opened in {opened:.1f} s")
        statuses = [await big_body(port, context, 10 * 1024 * 1024) for _ in range(args.bodies)]
        print(f"{args.bodies} bodies of 10 MiB: {', '.join(sorted(set(statuses)))}")
        loaded = await measure(port, context, args.gets)
        rss_held = rss_mib(pid)
        early = len(closed.times)
        print(f"while held ({time.monotonic() - started:.0f} s after the first): GET p50 {pct(loaded, 0.5):.1f} ms, "
              f"p99 {pct(loaded, 0.99):.1f} ms, RSS {rss_held:.0f} MiB (+{rss_held - rss_start:.0f}); "
              f"{early} closed so far")
        closed.expected = len(held)
        if len(closed.times) < len(held):
            try:
                await asyncio.wait_for(closed.all.wait(), 60)
            except TimeoutError:
                pass
        after = await measure(port, context, args.gets)
        rss_after = rss_mib(pid)
        print(f"closed by the server: {len(closed.times)} of {len(held)}, the last "
              f"{max(closed.times, default=0):.1f} s after "
              f"the first was opened")
        print(f"after: GET p50 {pct(after, 0.5):.1f} ms, p99 {pct(after, 0.99):.1f} ms, RSS {rss_after:.0f} MiB "
              f"(+{rss_after - rss_start:.0f} from the start)")
        for _, writer in held:
            writer.close()
    finally:
        server.stop()
        for m in members:
            m.kill()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--idle", type=int, default=2000)
    p.add_argument("--tricklers", type=int, default=200)
    p.add_argument("--trickle-every", type=float, default=10.0)
    p.add_argument("--bodies", type=int, default=3)
    p.add_argument("--gets", type=int, default=500)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
