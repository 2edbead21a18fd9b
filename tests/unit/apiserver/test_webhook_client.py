"""The webhook client against real TLS servers in the test's loop: the answer framings HTTP/1.1 allows,
kept-alive connections a server closed meanwhile, the CA check, a stall and a refused port."""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from apiserver.admission.webhook.client import CallError, WebhookClient
from apiserver.admission.webhook.resolver import Location
from services.runtime.pki import create_ca, issue_serving_cert
from tests.conftest import free_port

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return await reader.readexactly(length)


async def _serve(tmp_path: Path, handler: Handler) -> tuple[asyncio.Server, Location, str]:
    ca = create_ca("client-test-ca")
    cert = issue_serving_cert(ca, ["webhook.ns.svc"])
    cert.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    where = Location(f"https://127.0.0.1:{port}/hook?timeout=1s", "https://webhook.ns.svc:443/hook?timeout=1s",
                     "webhook.ns.svc")
    return server, where, base64.b64encode(ca.cert_pem()).decode()


async def test_framings_reuse_and_a_closed_idle_connection(tmp_path: Path) -> None:
    connections = 0
    answers = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"n\": 1}   ",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"n\r\n5\r\n\": 2}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"n\": 3}",
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while answers:
            if not await _read_request(reader):
                break
            answer = answers.pop(0)
            writer.write(answer)
            await writer.drain()
            if b"close" in answer:
                break
        writer.close()

    server, where, ca = await _serve(tmp_path, handler)
    client = WebhookClient()
    try:
        assert [await client.post(where, ca, b"{}", 1) for _ in range(3)] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert connections == 1  # one connection, kept alive until the server said close
        answers.append(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"n\": 4}")
        assert await client.post(where, ca, b"{}", 1) == {"n": 4}
        assert connections == 2
        # That server hung up on the idle kept-alive connection: the next call goes out on a fresh one.
        answers.append(b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nboom")
        with pytest.raises(CallError, match=r"an error on the server \(boom\)"):
            await client.post(where, ca, b"{}", 1)
        assert connections == 3
    finally:
        await client.close()
        server.close()


async def test_wrong_ca_stall_and_refused(tmp_path: Path) -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(5)

    server, where, ca = await _serve(tmp_path, stall)
    client = WebhookClient()
    other_ca = base64.b64encode(create_ca("someone-else").cert_pem()).decode()
    try:
        with pytest.raises(CallError, match='Post "https://webhook.ns.svc:443/hook.timeout=1s": tls: failed to '
                                            "verify certificate"):
            await client.post(where, other_ca, b"{}", 1)
        started = time.monotonic()
        with pytest.raises(CallError, match="context deadline exceeded"):
            await client.post(where, ca, b"{}", 1)
        assert time.monotonic() - started < 2
        closed = free_port()
        refused = Location(f"https://127.0.0.1:{closed}/x", f"https://127.0.0.1:{closed}/x")
        with pytest.raises(CallError, match=f"dial tcp 127.0.0.1:{closed}: connect: connection refused"):
            await client.post(refused, ca, b"{}", 1)
    finally:
        await client.close()
        server.close()
