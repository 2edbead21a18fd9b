"""The cluster DNS server against the real apiserver, queried over loopback, with a fake upstream."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from proxy_agent.dns.wire import (
    CNAME,
    NXDOMAIN,
    SRV,
    A,
    Message,
    Record,
    build_query,
    build_response,
    parse_message,
    parse_question,
    rdata_a,
)
from tests.conftest import REPO, free_port


class FakeUpstream(asyncio.DatagramProtocol):
    """Answers every query with 192.0.2.7, so forwarding is visible without leaving loopback."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        q = parse_question(data)
        self.transport.sendto(
            build_response(data, q, 0, [Record(q.name, A, 60, rdata_a("192.0.2.7"))], authoritative=False),
            addr,
        )  # type: ignore[attr-defined]


async def query(port: int, name: str, qtype: int = A) -> Message:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes] = loop.create_future()

    class Client(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            if not done.done():
                done.set_result(data)

    transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=("127.0.0.1", port))
    try:
        transport.sendto(build_query(name, qtype, ident=4242))
        async with asyncio.timeout(3):
            return parse_message(await done)
    finally:
        transport.close()


async def eventually(
    port: int, name: str, qtype: int, check: Callable[[Message], object], within: float = 5.0
) -> Message:
    deadline = time.monotonic() + within
    while True:
        msg = await query(port, name, qtype)
        if check(msg) or time.monotonic() > deadline:
            return msg
        await asyncio.sleep(0.05)


@pytest.fixture
async def dns(apiserver: str, workdir: Path) -> AsyncIterator[int]:
    loop = asyncio.get_running_loop()
    upstream, _ = await loop.create_datagram_endpoint(FakeUpstream, local_addr=("127.0.0.1", 0))
    up_port = upstream.get_extra_info("sockname")[1]
    resolv = workdir / "resolv.conf"
    resolv.write_text(f"nameserver 127.0.0.1#{up_port}\n")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy_agent.dns",
        "--master",
        apiserver,
        "--bind-address",
        "127.0.0.1",
        "--port",
        str(port),
        "--resolv-conf",
        str(resolv),
        "--health-port",
        "0",
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                await query(port, "cluster.local", A)
                break
            except (TimeoutError, OSError):
                await asyncio.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        await proc.wait()
        upstream.close()


async def test_dns_answers(dns: int, apiserver: str, unique_ns: str) -> None:
    ns = unique_ns
    async with httpx.AsyncClient(base_url=apiserver, timeout=10) as c:
        web = (
            await c.post(
                f"/api/v1/namespaces/{ns}/services",
                json={"metadata": {"name": "web"}, "spec": {"ports": [{"name": "http", "port": 80}]}},
            )
        ).json()
        await c.post(
            f"/api/v1/namespaces/{ns}/services",
            json={
                "metadata": {"name": "db"},
                "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]},
            },
        )
        await c.post(
            f"/api/v1/namespaces/{ns}/services",
            json={
                "metadata": {"name": "ext"},
                "spec": {"type": "ExternalName", "externalName": "example.org"},
            },
        )
        await c.post(
            f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
            json={
                "metadata": {"name": "db-1", "labels": {"kubernetes.io/service-name": "db"}},
                "addressType": "IPv4",
                "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["10.244.0.5"], "hostname": "db-0", "conditions": {"ready": True}},
                    {"addresses": ["10.244.1.6"], "hostname": "db-1", "conditions": {"ready": True}},
                ],
            },
        )
        cip = web["spec"]["clusterIP"]
        msg = await eventually(dns, f"web.{ns}.svc.cluster.local", A, lambda m: m.values(A))
        assert msg.values(A) == [cip] and msg.id == 4242
        msg = await eventually(dns, f"db.{ns}.svc.cluster.local", A, lambda m: len(m.values(A)) == 2)
        assert sorted(msg.values(A)) == ["10.244.0.5", "10.244.1.6"]
        assert (await query(dns, f"db-0.db.{ns}.svc.cluster.local")).values(A) == ["10.244.0.5"]
        srv = await query(dns, f"_http._tcp.web.{ns}.svc.cluster.local", SRV)
        assert srv.values(SRV) == [(0, 100, 80, f"web.{ns}.svc.cluster.local.")]
        assert (await query(dns, f"ext.{ns}.svc.cluster.local")).values(CNAME) == ["example.org."]
        assert (await query(dns, f"10-1-2-3.{ns}.pod.cluster.local")).values(A) == ["10.1.2.3"]
        nx = await query(dns, f"missing.{ns}.svc.cluster.local")
        assert nx.rcode == NXDOMAIN and nx.authority
        assert (await query(dns, "www.example.com")).values(A) == ["192.0.2.7"]
        # answers follow the API within a second
        await c.delete(f"/api/v1/namespaces/{ns}/services/web")
        start = time.monotonic()
        msg = await eventually(dns, f"web.{ns}.svc.cluster.local", A, lambda m: m.rcode == NXDOMAIN)
        assert msg.rcode == NXDOMAIN and time.monotonic() - start < 1.0
