"""Connections and requests that would exhaust the apiserver: header and idle deadlines, the header size
cap, and the max-in-flight limits, on a real apiserver serving TLS."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.runtime import pki
from tests.conftest import APIServerProcess, eventually, free_port, start_apiserver

TOKENS = {"jane": "exhaustion-jane", "admin": "exhaustion-admin"}
HEADER_TIMEOUT = 1.0


@dataclass
class Server:
    process: APIServerProcess
    host: str
    port: int
    ca: Path

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def connect(self) -> ssl.SSLSocket:
        """A TLS connection with its handshake done."""
        raw = socket.create_connection((self.host, self.port), timeout=30)
        return self.tls().wrap_socket(raw, server_hostname="localhost")

    def client(self, user: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=f"https://localhost:{self.port}", verify=self.tls(), timeout=30,
                                 headers={"authorization": f"Bearer {TOKENS[user]}"})


@pytest.fixture(scope="module")
def server(etcd_server: str, workdir: Path) -> Iterator[Server]:
    root = workdir / "exhaustion"
    root.mkdir(parents=True, exist_ok=True)
    ca = pki.create_ca("exhaustion-test-ca")
    ca.write(root / "ca.crt", root / "ca.key")
    pki.issue_serving_cert(ca, ["localhost", "127.0.0.1"]).write(root / "apiserver.crt", root / "apiserver.key")
    tokens = root / "tokens.csv"
    tokens.write_text(f"{TOKENS['jane']},jane,1001\n{TOKENS['admin']},admin,1002,system:masters\n")
    port = free_port()
    process = start_apiserver(
        [etcd_server], root, "--secure-port", str(port), "--tls-cert-file", str(root / "apiserver.crt"),
        "--tls-private-key-file", str(root / "apiserver.key"), "--token-auth-file", str(tokens),
        "--cert-dir", str(root / "certs"), "--etcd-prefix", f"/exhaustion-{uuid.uuid4().hex[:8]}",
        "--read-header-timeout", f"{HEADER_TIMEOUT}s", "--idle-timeout", "2s",
        "--max-requests-inflight", "2", "--max-mutating-requests-inflight", "2",
    )
    yield Server(process, "127.0.0.1", port, root / "ca.crt")
    process.stop()


def _closed_after(conn: ssl.SSLSocket, keep_sending: bytes = b"", every: float = 0.2, limit: float = 15.0) -> float:
    """Seconds until the server ends the connection, sending `keep_sending` every `every` seconds meanwhile."""
    start = time.monotonic()
    conn.settimeout(every)
    while time.monotonic() - start < limit:
        try:
            if conn.recv(65536) == b"":
                return time.monotonic() - start
        except TimeoutError:
            pass
        except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
            return time.monotonic() - start
        if keep_sending:
            try:
                conn.sendall(keep_sending)
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
                return time.monotonic() - start
    raise AssertionError(f"the server kept the connection open for {limit}s")


def test_silent_connection_after_handshake_is_closed_at_the_header_deadline(server: Server) -> None:
    with server.connect() as conn:
        elapsed = _closed_after(conn)
    assert HEADER_TIMEOUT * 0.8 <= elapsed < HEADER_TIMEOUT + 5


def test_header_trickle_is_cut_off(server: Server) -> None:
    with server.connect() as conn:
        conn.sendall(b"GET /version HTTP/1.1\r\nHost: localhost\r\n")
        elapsed = _closed_after(conn, keep_sending=b"X-Trickle: 1\r\n")
    assert elapsed < HEADER_TIMEOUT + 5


def test_idle_keep_alive_connection_is_closed_and_a_slow_body_is_not(server: Server) -> None:
    with server.connect() as conn:
        conn.sendall(b"GET /version HTTP/1.1\r\nHost: localhost\r\n\r\n")
        conn.settimeout(10)
        assert conn.recv(65536).startswith(b"HTTP/1.1 200")
        assert _closed_after(conn) < 2 + 5
    # The deadline is the header's: a body may take longer, as with upstream (no ReadTimeout).
    with server.connect() as conn:
        body = json.dumps({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": f"slow-{uuid.uuid4().hex[:6]}"}}).encode()
        conn.sendall(b"POST /api/v1/namespaces HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n"
                     + f"authorization: Bearer {TOKENS['admin']}\r\ncontent-length: {len(body)}\r\n\r\n".encode())
        conn.settimeout(HEADER_TIMEOUT * 2.5)
        with pytest.raises(TimeoutError):
            conn.recv(65536)
        conn.sendall(body)
        conn.settimeout(10)
        assert conn.recv(65536).startswith(b"HTTP/1.1 201")


def test_header_over_one_mebibyte_is_refused(server: Server) -> None:
    with server.connect() as conn:
        conn.sendall(b"GET /version HTTP/1.1\r\nHost: localhost\r\n")
        for _ in range(20):
            try:
                conn.sendall(b"X-Big: " + b"a" * 100_000 + b"\r\n")
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
                break
        conn.settimeout(10)
        try:
            answer = conn.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            answer = b""
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]


async def _withheld_post(server: Server, user: str, namespace: str) -> tuple[asyncio.StreamReader,
                                                                          asyncio.StreamWriter]:
    """A create whose body never comes: the request is being served, waiting for it, for as long as we like."""
    reader, writer = await asyncio.open_connection(server.host, server.port, ssl=server.tls(),
                                                   server_hostname="localhost")
    writer.write(f"POST /api/v1/namespaces/{namespace}/configmaps HTTP/1.1\r\nHost: localhost\r\n"
                 f"authorization: Bearer {TOKENS[user]}\r\ncontent-type: application/json\r\n"
                 "content-length: 1000\r\n\r\n".encode())
    await writer.drain()
    return reader, writer


def _configmap() -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{uuid.uuid4().hex[:8]}"}}


async def test_mutating_requests_past_the_limit_get_429_and_masters_are_served(server: Server) -> None:
    held = [await _withheld_post(server, "jane", "default") for _ in range(2)]
    try:
        async with server.client("jane") as jane, server.client("admin") as admin:
            async def refused() -> httpx.Response | None:
                r = await jane.post("/api/v1/namespaces/default/configmaps", json=_configmap())
                return r if r.status_code == 429 else None

            r = await eventually(refused, limit=30, what="a create past the mutating limit to get 429")
            assert r.headers["retry-after"] == "1"
            assert r.text == "Too many requests, please try again later.\n"
            assert r.headers["content-type"].startswith("text/plain")
            # system:masters is always served (upstream's max-in-flight exemption)
            assert (await admin.post("/api/v1/namespaces/default/configmaps", json=_configmap())).status_code == 201
            # reads have their own limit
            assert (await jane.get("/api/v1/namespaces/default/configmaps")).status_code == 200
    finally:
        for _, writer in held:
            writer.close()
    async with server.client("jane") as jane:
        async def served() -> bool:
            r = await jane.post("/api/v1/namespaces/default/configmaps", json=_configmap())
            return r.status_code == 201

        await eventually(served, limit=30, what="creates to be served once the held ones are gone")


async def test_read_only_requests_past_the_limit_get_429_and_watches_are_not_counted(server: Server) -> None:
    async with server.client("jane") as jane:
        watches = []
        for _ in range(3):
            watch = jane.stream("GET", "/api/v1/namespaces/default/configmaps", params={"watch": "1"})
            response = await watch.__aenter__()
            assert response.status_code == 200
            watches.append(watch)
        try:
            # three watches are open and the read-only limit is 2: reads are still served
            assert (await jane.get("/api/v1/namespaces/default/configmaps")).status_code == 200
            # a list at a revision the server has not reached waits 3 s for it: six at once pass the limit
            far = {"resourceVersion": str(10**12)}
            answers = await asyncio.gather(*(jane.get("/api/v1/namespaces/default/configmaps", params=far)
                                             for _ in range(6)))
        finally:
            for watch in watches:
                await watch.__aexit__(None, None, None)
    codes = sorted(r.status_code for r in answers)
    assert codes.count(429) >= 1, codes
    assert len([c for c in codes if c != 429]) <= 2, codes
    refused = next(r for r in answers if r.status_code == 429)
    assert refused.headers["retry-after"] == "1"
