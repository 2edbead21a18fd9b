"""The client's fast path (requests written straight onto AsyncTransport) against a scripted HTTP/1.1 server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import orjson
import pytest

from services.client import Client, ClientConfig, Gone, NotFound, gvr

PODS = gvr("v1", "pods")

Handler = Callable[[bytes, bytes], list[bytes]]


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[tuple[str, list[bytes]]]:
    """Answers each request with the raw writes `handler(head, body)` returns; records the heads."""
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                heads.append(head + body)
                for part in handler(head, body):
                    writer.write(part)
                    await writer.drain()
                    await asyncio.sleep(0.01)
        except (asyncio.IncompleteReadError, ConnectionResetError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", heads
    finally:
        srv.close()
        await srv.wait_closed()


def response(status: int, body: bytes, *extra: str) -> list[bytes]:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return [(head + "".join(f"{h}\r\n" for h in extra) + "\r\n").encode() + body]


async def test_post_carries_token_query_and_body_and_decodes_the_answer() -> None:
    def handler(head: bytes, body: bytes) -> list[bytes]:
        return response(201, orjson.dumps({"echo": orjson.loads(body)}))

    async with server(handler) as (url, heads):
        async with Client(ClientConfig(server=url, token="s3cret", user_agent="ua/1")) as client:
            out = await client.create(PODS, {"metadata": {"name": "p"}}, "ns a", field_manager="m x")
            assert out == {"echo": {"metadata": {"name": "p"}}}
    sent = heads[0].decode()
    assert sent.startswith("POST /api/v1/namespaces/ns%20a/pods?fieldManager=m+x HTTP/1.1\r\n")
    assert "Authorization: Bearer s3cret\r\n" in sent
    assert "User-Agent: ua/1\r\n" in sent
    assert "Content-Type: application/json\r\n" in sent
    assert f"Host: {url.removeprefix('http://')}\r\n" in sent
    assert sent.endswith('\r\n\r\n{"metadata":{"name":"p"}}')


async def test_throttled_write_is_retried_and_errors_are_typed() -> None:
    answers = [response(429, b"", "Retry-After: 0"), response(201, b'{"ok":true}'),
               response(404, orjson.dumps({"kind": "Status", "code": 404, "reason": "NotFound",
                                           "message": 'pods "x" not found'}))]

    async with server(lambda head, body: answers.pop(0)) as (url, heads):
        async with Client(ClientConfig(server=url), backoff_base=0.001) as client:
            assert await client.create(PODS, {"metadata": {"name": "p"}}, "ns") == {"ok": True}
            with pytest.raises(NotFound, match='pods "x" not found'):
                await client.get(PODS, "x", "ns")
    assert len(heads) == 3


async def test_watch_lines_split_across_chunks() -> None:
    first = orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}) + b"\n"
    second = orjson.dumps({"type": "MODIFIED", "object": {"metadata": {"name": "b"}}}) + b"\n"
    error = orjson.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                     "message": "too old resource version"}}) + b"\n"

    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    def handler(head: bytes, body: bytes) -> list[bytes]:
        assert b"watch=true" in head
        return [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                chunk(first[:10]), chunk(first[10:] + second[:5]), chunk(second[5:] + b"\n"), chunk(error),
                b"0\r\n\r\n"]

    async with server(handler) as (url, _):
        async with Client(ClientConfig(server=url), max_retries=0) as client:
            seen = []
            with pytest.raises(Gone):
                async with client.watch(PODS, "ns", resource_version="5") as events:
                    async for kind, obj in events:
                        seen.append((kind, obj["metadata"]["name"]))
            assert seen == [("ADDED", "a"), ("MODIFIED", "b")]
