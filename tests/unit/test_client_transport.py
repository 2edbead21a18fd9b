"""The asyncio HTTP/1.1 transport against small scripted servers: framing, keep-alive, retries, TLS."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest
from cryptography.hazmat.primitives import serialization

from services.client import Client, ClientConfig, gvr
from services.client.transport import EAGER_BODY_LIMIT, AsyncTransport
from services.runtime.pki import CertKey, create_ca, issue_client_cert, issue_serving_cert

Handler = Callable[["Server", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    """One request off the wire (Content-Length or chunked body); None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode().split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = b""
    if headers.get("transfer-encoding") == "chunked":
        while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    return method, target, headers, body


def response(status: int = 200, body: bytes = b"{}", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"{extra}\r\n").encode() + body


class Server:
    """A loopback server that runs `handler` per connection and counts connections and requests."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.connections = 0
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.peers: list[Any] = []
        self.release = asyncio.Event()

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        self.release.set()

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    async def next_request(self, reader: asyncio.StreamReader) -> bool:
        req = await read_request(reader)
        if req is not None:
            self.requests.append(req)
        return req is not None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.peers.append(writer.get_extra_info("peercert"))
        try:
            await self.handler(self, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def ok_forever(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await server.next_request(reader):
        method, target, _, body = server.requests[-1]
        writer.write(response(200, orjson.dumps({"method": method, "path": target, "body": body.decode()})))


@pytest.fixture
async def http() -> AsyncIterator[Callable[..., httpx.AsyncClient]]:
    clients: list[httpx.AsyncClient] = []

    def make(url: str, transport: AsyncTransport | None = None, **kwargs: Any) -> httpx.AsyncClient:
        client = httpx.AsyncClient(base_url=url, transport=transport or AsyncTransport(), **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


async def test_keep_alive_reuses_one_connection(http: Callable[..., httpx.AsyncClient]) -> None:
    async with Server(ok_forever) as server:
        client = http(server.url)
        for i in range(5):
            r = await client.post("/api/v1/x", params={"i": i}, content=b"hello")
            assert r.status_code == 200
            assert r.json() == {"method": "POST", "path": f"/api/v1/x?i={i}", "body": "hello"}
            assert r.http_version == "HTTP/1.1"
        assert server.connections == 1
        assert server.requests[0][2]["host"] == f"127.0.0.1:{server.port}"


async def test_concurrent_requests_use_several_connections_then_pool_them(
    http: Callable[..., httpx.AsyncClient],
) -> None:
    async with Server(ok_forever) as server:
        transport = AsyncTransport(max_idle=3)
        client = http(server.url, transport)
        results = await asyncio.gather(*(client.get(f"/{i}") for i in range(8)))
        assert [r.json()["path"] for r in results] == [f"/{i}" for i in range(8)]
        assert 1 < server.connections <= 8
        assert transport.idle_connections() <= 3
        before = server.connections
        await client.get("/again")
        assert server.connections == before


async def test_connection_close_is_honoured(http: Callable[..., httpx.AsyncClient]) -> None:
    async def once(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        writer.write(response(200, b'{"a":1}', "Connection: close\r\n"))
        await writer.drain()

    async with Server(once) as server:
        client = http(server.url)
        assert (await client.get("/")).json() == {"a": 1}
        assert (await client.get("/")).json() == {"a": 1}
        assert server.connections == 2


async def test_chunked_response_is_streamed_not_buffered(http: Callable[..., httpx.AsyncClient]) -> None:
    second = asyncio.Event()

    async def watch(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await server.next_request(reader):
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for line in (b'{"type":"ADDED"}\n', b'{"type":"MODIFIED"}\n'):
                writer.write(b"%x;ext=1\r\n%s\r\n" % (len(line), line))
                await writer.drain()
                await second.wait()
            writer.write(b"0\r\nX-Trailer: y\r\n\r\n")

    async with Server(watch) as server:
        client = http(server.url)
        async with client.stream("GET", "/watch") as r:
            lines = r.aiter_lines()
            assert orjson.loads(await asyncio.wait_for(anext(lines), 5)) == {"type": "ADDED"}
            second.set()
            assert [orjson.loads(x) async for x in lines] == [{"type": "MODIFIED"}]
        assert (await client.get("/after")).status_code == 200
        assert server.connections == 1, "a fully read chunked body leaves the connection reusable"


async def test_unfinished_stream_is_not_reused(http: Callable[..., httpx.AsyncClient]) -> None:
    async def endless(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await server.next_request(reader):
            if server.requests[-1][1] == "/ok":
                writer.write(response())
                continue
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            await writer.drain()

    async with Server(endless) as server:
        transport = AsyncTransport()
        client = http(server.url, transport)
        async with client.stream("GET", "/watch") as r:
            assert await anext(r.aiter_bytes()) == b"hello"
        assert transport.idle_connections() == 0
        assert (await client.get("/ok")).status_code == 200
        assert server.connections == 2


async def test_large_and_close_delimited_bodies(http: Callable[..., httpx.AsyncClient]) -> None:
    big = bytes(range(256)) * (EAGER_BODY_LIMIT // 128)

    async def serve(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await server.next_request(reader):
            if server.requests[-1][1] == "/big":
                writer.write(response(200, big))
            else:
                writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + b"until-close")
                await writer.drain()
                return

    async with Server(serve) as server:
        client = http(server.url)
        assert (await client.get("/big")).content == big
        assert (await client.get("/big")).content == big
        assert server.connections == 1
        assert (await client.get("/old")).content == b"until-close"
        assert (await client.get("/big")).content == big
        assert server.connections == 2


async def test_head_and_no_content_have_no_body(http: Callable[..., httpx.AsyncClient]) -> None:
    async def serve(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await server.next_request(reader):
            method = server.requests[-1][0]
            if method == "HEAD":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")

    async with Server(serve) as server:
        client = http(server.url)
        r = await client.head("/")
        assert (r.status_code, r.content, r.headers["content-length"]) == (200, b"", "1000")
        r = await client.delete("/")
        assert (r.status_code, r.content, r.reason_phrase) == (204, b"", "No Content")
        assert server.connections == 1


async def test_streamed_request_body_is_sent_chunked(http: Callable[..., httpx.AsyncClient]) -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"abc"
        yield b"def"

    async with Server(ok_forever) as server:
        r = await http(server.url).post("/", content=parts())
        assert r.json()["body"] == "abcdef"
        assert server.requests[0][2]["transfer-encoding"] == "chunked"


async def test_idle_connection_closed_by_server_is_replaced(http: Callable[..., httpx.AsyncClient]) -> None:
    async def answer_once(server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        w.write(response())
        await w.drain()

    async with Server(answer_once) as server:
        client = http(server.url, AsyncTransport(keepalive_expiry=60))
        assert (await client.post("/", content=b"1")).status_code == 200
        await asyncio.sleep(0.1)
        assert (await client.post("/", content=b"2")).status_code == 200
        assert [r[3] for r in server.requests] == [b"1", b"2"]
        assert server.connections == 2


async def test_request_dropped_without_answer_is_retried_only_when_idempotent(
    http: Callable[..., httpx.AsyncClient],
) -> None:
    async def drop_second(server: Server, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        """Answer the first request of a connection; read the second and hang up without a word."""
        await server.next_request(reader)
        w.write(response())
        await server.next_request(reader)

    async with Server(drop_second) as server:
        client = http(server.url, AsyncTransport(keepalive_expiry=60))
        assert (await client.get("/a")).status_code == 200
        assert (await client.get("/b")).status_code == 200
        assert [r[1] for r in server.requests] == ["/a", "/b", "/b"]
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("/c", content=b"x")
        assert [r[1] for r in server.requests] == ["/a", "/b", "/b", "/c"], "a POST must not be replayed"


async def test_timeouts_and_connect_errors(http: Callable[..., httpx.AsyncClient]) -> None:
    async def silent(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        await server.release.wait()

    async with Server(silent) as server:
        client = http(server.url)
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/", timeout=httpx.Timeout(5, read=0.2))
        port = server.port
    with pytest.raises(httpx.ConnectError):
        await http(f"http://127.0.0.1:{port}").get("/")


async def test_read_timeout_applies_between_stream_chunks(http: Callable[..., httpx.AsyncClient]) -> None:
    async def stall(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await server.release.wait()

    async with Server(stall) as server:
        client = http(server.url)
        async with client.stream("GET", "/", timeout=httpx.Timeout(5, read=0.3)) as r:
            chunks = r.aiter_raw()
            assert await anext(chunks) == b"abc"
            with pytest.raises(httpx.ReadTimeout):
                await anext(chunks)


async def test_connection_cap_queues_and_times_out(http: Callable[..., httpx.AsyncClient]) -> None:
    async def serve(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await server.next_request(reader):
            if server.requests[-1][1] == "/watch":
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n\n\r\n")
                await server.release.wait()
                return
            writer.write(response())

    async with Server(serve) as server:
        client = http(server.url, AsyncTransport(max_connections=1))
        async with client.stream("GET", "/watch") as r:
            body = r.aiter_bytes()
            assert await anext(body) == b"\n"
            with pytest.raises(httpx.PoolTimeout):
                await client.get("/", timeout=httpx.Timeout(5, pool=0.2))
            waiting = asyncio.create_task(client.get("/"))
            await asyncio.sleep(0.1)
            assert not waiting.done()
        assert (await asyncio.wait_for(waiting, 5)).status_code == 200


async def test_malformed_response_is_a_protocol_error(http: Callable[..., httpx.AsyncClient]) -> None:
    async def garbage(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        writer.write(b"SPDY/9 what\r\n\r\n")
        await writer.drain()

    async with Server(garbage) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            await http(server.url).get("/")


def pem_key(ck: CertKey) -> str:
    return ck.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def pem_cert(ck: CertKey) -> str:
    return ck.cert.public_bytes(serialization.Encoding.PEM).decode()


def server_context(
    ca: CertKey, hosts: list[str], tmp: Any, client_ca: CertKey | None = None
) -> ssl.SSLContext:
    leaf = issue_serving_cert(ca, hosts)
    cert, key = tmp / "srv.crt", tmp / "srv.key"
    cert.write_text(pem_cert(leaf))
    key.write_text(pem_key(leaf))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cadata=pem_cert(client_ca))
    return ctx


async def test_tls_with_ca_sni_and_client_certificate(tmp_path: Any) -> None:
    ca, users = create_ca("test-ca"), create_ca("users-ca")
    ctx = server_context(ca, ["kube.test"], tmp_path, client_ca=users)
    seen_sni: list[str | None] = []
    ctx.sni_callback = lambda _sock, name, _ctx: seen_sni.append(name)  # type: ignore[assignment,misc]
    user = issue_client_cert(users, "alice", ["devs"])
    async with Server(ok_forever, ctx) as server:
        config = ClientConfig(server=server.url, ca_data=pem_cert(ca), tls_server_name="kube.test",
                              cert_data=pem_cert(user), key_data=pem_key(user))
        async with Client(config) as client:
            got = await client.get(gvr("v1", "pods"), "p", "ns")
        assert got["path"] == "/api/v1/namespaces/ns/pods/p"
        assert seen_sni == ["kube.test"]
        assert ("commonName", "alice") in [rdn[0] for rdn in server.peers[0]["subject"]]

        async with Client(ClientConfig(server=server.url, ca_data=pem_cert(ca)), max_retries=0) as client:
            with pytest.raises(httpx.ConnectError, match="cannot connect"):
                await client.request("GET", "/", headers={})


async def test_tls_verification_and_insecure_skip(tmp_path: Any) -> None:
    ca = create_ca("other-ca")
    async with Server(ok_forever, server_context(ca, ["127.0.0.1"], tmp_path)) as server:
        async with Client(ClientConfig(server=server.url), max_retries=0) as client:
            with pytest.raises(httpx.ConnectError):
                await client.request("GET", "/")
        async with Client(ClientConfig(server=server.url, insecure_skip_tls_verify=True)) as client:
            assert (await client.request("GET", "/x"))["path"] == "/x"
        async with Client(ClientConfig(server=server.url, ca_data=pem_cert(ca))) as client:
            assert (await client.request("POST", "/y", body={"a": 1}))["body"] == '{"a":1}'
        assert server.connections == 2, "one per working client; a failed handshake is no connection"
