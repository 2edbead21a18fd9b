"""The HTTP/2 gRPC client against a real etcd (flow control both ways, statuses, many calls at once, a
bidirectional stream) and against TCP peers that misbehave (no answer, no ping answer, a closed socket)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlparse

import hpack
import pytest
from aetcd import rpc

from apiserver.storage.etcd import EtcdStore
from apiserver.storage.grpc_wire import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    MAX_STREAM_ID,
    PREFACE,
    SETTINGS,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    Connection,
    GrpcError,
    StatusCode,
    frame,
)

TXN = "/etcdserverpb.KV/Txn"
RANGE = "/etcdserverpb.KV/Range"
WATCH = "/etcdserverpb.Watch/Watch"


@pytest.fixture
async def conn(etcd_server: str) -> AsyncIterator[Connection]:
    url = urlparse(etcd_server)
    c = await Connection.open(url.hostname or "127.0.0.1", url.port or 2379)
    yield c
    c.close()


def put(key: bytes, value: bytes) -> bytes:
    return rpc.TxnRequest(success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))]
                          ).SerializeToString()


async def get(conn: Connection, key: bytes, end: bytes = b"") -> rpc.RangeResponse:
    raw = await conn.unary(RANGE, rpc.RangeRequest(key=key, range_end=end).SerializeToString(), 5)
    return rpc.RangeResponse.FromString(raw)


async def test_values_larger_than_the_windows_go_both_ways(conn: Connection) -> None:
    # etcd's initial stream window is 64 KiB: a 1.2 MiB put waits for WINDOW_UPDATEs, a 6 MiB range
    # needs ours.
    prefix = f"/wire-{time.time_ns()}/".encode()
    big = bytes(range(256)) * (1200 * 4)
    resp = rpc.TxnResponse.FromString(await conn.unary(TXN, put(prefix + b"big", big), 5))
    assert resp.succeeded
    await asyncio.gather(*(conn.unary(TXN, put(prefix + b"k%d" % i, big[: 1200 * 1024 // 4]), 5) for i in range(20)))
    assert (await get(conn, prefix + b"big")).kvs[0].value == big
    listed = await get(conn, prefix, prefix[:-1] + b"0")
    assert len(listed.kvs) == 21
    assert sum(len(kv.value) for kv in listed.kvs) > 6 * 1024 * 1024


async def test_many_calls_at_once_each_get_their_own_answer(conn: Connection) -> None:
    prefix = f"/wire-{time.time_ns()}/".encode()
    await asyncio.gather(*(conn.unary(TXN, put(prefix + b"%03d" % i, b"v%d" % i), 5) for i in range(300)))
    answers = await asyncio.gather(*(get(conn, prefix + b"%03d" % i) for i in range(300)))
    assert [a.kvs[0].value for a in answers] == [b"v%d" % i for i in range(300)]


async def test_statuses_come_back_as_grpc_errors(conn: Connection) -> None:
    with pytest.raises(GrpcError) as err:
        await conn.unary("/etcdserverpb.KV/NoSuchMethod", b"", 5)
    assert err.value.code == StatusCode.UNIMPLEMENTED
    with pytest.raises(GrpcError) as err:
        await conn.unary(RANGE, rpc.RangeRequest(key=b"/x", revision=10**12).SerializeToString(), 5)
    assert err.value.code == StatusCode.OUT_OF_RANGE
    assert "future revision" in err.value.details
    # the connection is fine after errors
    assert (await get(conn, b"/no-such-key")).count == 0


async def test_a_stream_delivers_messages_until_cancelled(conn: Connection) -> None:
    prefix = f"/wire-{time.time_ns()}/".encode()
    stream = await conn.stream(WATCH, rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
        key=prefix, range_end=prefix[:-1] + b"0")).SerializeToString())
    created = rpc.WatchResponse.FromString(await stream.read() or b"")
    assert created.created
    for i in range(50):
        await conn.unary(TXN, put(prefix + b"%d" % i, b"x"), 5)
    seen: list[bytes] = []
    async with asyncio.timeout(10):
        while len(seen) < 50:
            seen += [ev.kv.key for ev in rpc.WatchResponse.FromString(await stream.read() or b"").events]
    assert seen == [prefix + b"%d" % i for i in range(50)]
    stream.cancel()
    with pytest.raises(GrpcError) as err:
        await stream.read()
    assert err.value.code == StatusCode.CANCELLED
    assert (await get(conn, prefix + b"0")).count == 1


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def peer(handler: Handler) -> AsyncIterator[tuple[str, int]]:
    """A TCP server on a free local port that runs `handler` for each connection."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    try:
        yield host, port
    finally:
        server.close()


@pytest.fixture
async def silent_peer() -> AsyncIterator[tuple[str, int, list[bytes]]]:
    """A TCP server that reads everything and answers nothing."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            received.append(data)
        writer.close()

    async with peer(serve) as (host, port):
        yield host, port, received


async def test_an_unanswered_call_ends_at_its_deadline(silent_peer: tuple[str, int, list[bytes]]) -> None:
    host, port, received = silent_peer
    c = await Connection.open(host, port)
    started = time.monotonic()
    with pytest.raises(GrpcError) as err:
        await c.unary(RANGE, b"", 0.3)
    assert err.value.code == StatusCode.DEADLINE_EXCEEDED
    assert 0.3 <= time.monotonic() - started < 2
    assert b"".join(received).startswith(PREFACE)
    c.close()


async def test_a_peer_that_stops_answering_pings_is_dropped(silent_peer: tuple[str, int, list[bytes]]) -> None:
    host, port, _ = silent_peer
    loop = asyncio.get_running_loop()
    _, c = await loop.create_connection(lambda: Connection(f"{host}:{port}", keepalive=0.2, keepalive_timeout=0.2),
                                        host, port)
    with pytest.raises(GrpcError) as err:
        await c.unary(RANGE, b"", 30)
    assert err.value.code == StatusCode.UNAVAILABLE
    assert "keepalive" in err.value.details
    assert not c.usable


async def test_nobody_listening_is_an_os_error() -> None:
    async with peer(lambda r, w: asyncio.sleep(0)) as (host, port):
        pass
    with pytest.raises(OSError):
        await Connection.open(host, port)


async def test_a_store_moves_on_from_a_connection_out_of_stream_ids(etcd_server: str) -> None:
    store = EtcdStore([etcd_server])
    try:
        await store.current_revision()
        first = store._client
        assert first is not None
        first._next_id = MAX_STREAM_ID  # one id left
        await store.current_revision()
        assert not first.usable
        await store.create(f"/wire-{time.time_ns()}", b"x")
        assert store._client is not first and store._client is not None and store._client.usable
    finally:
        await store.close()


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(100)
    writer.close()


async def go_away(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(65536)
    writer.write(frame(GOAWAY, 0, 0, (0).to_bytes(4, "big") + (0).to_bytes(4, "big") + b"shutting down"))
    await writer.drain()
    await reader.read(65536)
    writer.close()


@pytest.mark.parametrize(("handler", "why"), [(hang_up, "closed by peer"), (go_away, "shutting down")])
async def test_a_peer_that_leaves_fails_open_calls_and_later_ones(handler: Handler, why: str) -> None:
    async with peer(handler) as (host, port):
        c = await Connection.open(host, port)
        with pytest.raises(GrpcError) as err:
            await c.unary(RANGE, b"", 5)
        assert err.value.code == StatusCode.UNAVAILABLE
        assert why in err.value.details
        assert not c.usable
        with pytest.raises(GrpcError):
            await c.unary(RANGE, b"", 5)
        c.close()


class FakeGrpcServer:
    """Answers every call by echoing its message after `delay`, one stream at a time as its SETTINGS say,
    with the response headers split over HEADERS and CONTINUATION frames; records how many calls it
    saw open at once."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.open_now = 0
        self.most_open = 0
        self.encoder = hpack.Encoder()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(len(PREFACE))
        writer.write(frame(SETTINGS, 0, 0, struct.pack(">HI", SETTINGS_MAX_CONCURRENT_STREAMS, 1)))
        bodies: dict[int, bytes] = {}
        try:
            while True:
                head = await reader.readexactly(9)
                length = int.from_bytes(head[:3], "big")
                kind, flags, sid = head[3], head[4], int.from_bytes(head[5:9], "big")
                payload = await reader.readexactly(length)
                if kind == HEADERS:
                    self.open_now += 1
                    self.most_open = max(self.most_open, self.open_now)
                elif kind == DATA:
                    bodies[sid] = bodies.get(sid, b"") + payload
                    if flags & END_STREAM:
                        asyncio.ensure_future(self.answer(writer, sid, bodies.pop(sid)))
        except asyncio.IncompleteReadError:
            writer.close()

    async def answer(self, writer: asyncio.StreamWriter, sid: int, body: bytes) -> None:
        await asyncio.sleep(self.delay)
        block = self.encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
        trailers = self.encoder.encode([("grpc-status", "0")])
        self.open_now -= 1
        writer.write(frame(HEADERS, 0, sid, block[:1]) + frame(CONTINUATION, END_HEADERS, sid, block[1:])
                     + frame(DATA, 0, sid, body) + frame(HEADERS, END_HEADERS | END_STREAM, sid, trailers))


async def test_the_peers_stream_limit_is_kept_and_continuations_are_joined() -> None:
    fake = FakeGrpcServer(delay=0.05)
    async with peer(fake.serve) as (host, port):
        c = await Connection.open(host, port)
        await asyncio.sleep(0.1)  # the server's SETTINGS arrive
        answers = await asyncio.gather(*(c.unary("/echo", b"m%d" % i, 5) for i in range(6)))
        assert answers == [b"m%d" % i for i in range(6)]
        assert fake.most_open == 1
        c.close()
