"""gRPC over HTTP/2 (cleartext or TLS), just enough to talk to etcd: unary calls and bidirectional streams.

grpcio's asyncio stack costs about 120 µs of CPU per call in this process (a poller thread, a
completion queue, a task per call); the apiserver makes two etcd calls per written object, so that
was a third of its CPU under load. Here a call is one write of two pre-encoded frames and a future
resolved from `data_received`, about a quarter of that.

What it implements of HTTP/2 (RFC 9113): prior-knowledge connections (cleartext, or TLS with ALPN
`h2` for an `https://` etcd with client certificates), both directions of flow
control, SETTINGS, PING (answered, and sent as keepalive while calls are open), GOAWAY, RST_STREAM,
CONTINUATION. Request headers are encoded once per method without the dynamic table; response
headers go through `hpack`'s decoder. Messages are protobuf bytes; callers serialize them.
"""

from __future__ import annotations

import asyncio
import enum
import ssl
import struct
from collections import deque
from typing import Any, cast
from urllib.parse import unquote

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# frame types
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 5, 6, 7, 8, 9
# flags
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
# settings
SETTINGS_ENABLE_PUSH, SETTINGS_MAX_CONCURRENT_STREAMS = 2, 3
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 4, 5
# error codes
NO_ERROR, REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0, 7, 8, 11

MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535
#: received bytes after which the window is given back to the peer
WINDOW_REFILL = 1 << 20
MAX_STREAM_ID = 2**31 - 1
_HEADER = struct.Struct(">BHBBI")  # 24-bit length split as byte + short, type, flags, stream id


class StatusCode(enum.IntEnum):
    """gRPC status codes (the subset etcd and this client give)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class GrpcError(Exception):
    """A call ended with a non-OK gRPC status (or the connection under it broke: UNAVAILABLE)."""

    def __init__(self, code: StatusCode, details: str = "") -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


_RST_STATUS = {REFUSED_STREAM: StatusCode.UNAVAILABLE, CANCEL: StatusCode.CANCELLED,
               ENHANCE_YOUR_CALM: StatusCode.RESOURCE_EXHAUSTED}


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return _HEADER.pack(n >> 16, n & 0xFFFF, kind, flags, stream_id) + payload


def _hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name_index: int, value: str) -> bytes:
    """A header field "literal without indexing" with an indexed name and a raw (not Huffman) value."""
    raw = value.encode()
    return _hpack_int(name_index, 4, 0x00) + _hpack_int(len(raw), 7, 0x00) + raw


def _literal_name(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return b"\x00" + _hpack_int(len(n), 7, 0) + n + _hpack_int(len(v), 7, 0) + v


def request_headers(path: str, authority: str) -> bytes:
    """The header block of a gRPC request: POST, http, path, authority, content-type, te (RFC 7541 static
    table indices 3, 6, 4, 1, 31)."""
    return (b"\x83\x86" + _literal(4, path) + _literal(1, authority) + _literal(31, "application/grpc")
            + _literal_name("te", "trailers"))


class _Stream:
    __slots__ = ("id", "send_window", "pending", "pending_end", "headers", "data", "messages", "done", "waiter",
                 "error", "unacked")

    def __init__(self, stream_id: int, send_window: int) -> None:
        self.id = stream_id
        self.send_window = send_window
        self.pending = bytearray()  # DATA payload waiting for window, and whether it ends the stream
        self.pending_end = False
        self.headers: dict[str, str] | None = None
        self.data = bytearray()
        self.messages: deque[bytes] = deque()
        self.done = False
        self.waiter: asyncio.Future[None] | None = None
        self.error: GrpcError | None = None
        self.unacked = 0

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class Connection(asyncio.Protocol):
    """One HTTP/2 connection to one server; calls on it fail with UNAVAILABLE once it is gone."""

    def __init__(self, authority: str, keepalive: float = 10.0, keepalive_timeout: float = 5.0) -> None:
        self._authority = authority
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._streams: dict[int, _Stream] = {}
        self._next_id = 1
        self._send_window = DEFAULT_WINDOW
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_max_frame = 16384
        self._max_streams = 2**31
        self._blocked: list[_Stream] = []
        self._unacked = 0
        self._decoder = hpack.Decoder()
        self._indexed_only: dict[bytes, list[tuple[str, str]]] = {}
        self._headers_cache: dict[str, bytes] = {}
        self._closed: GrpcError | None = None
        self._keepalive = keepalive
        self._keepalive_timeout = keepalive_timeout
        self._ping_timer: asyncio.TimerHandle | None = None
        self._ping_outstanding = False
        self._received = False
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        #: frames written during this turn of the event loop, sent together at its end: one system call
        #: for all the calls that concurrent requests started meanwhile
        self._out: list[bytes] = []
        #: a header block still waiting for its CONTINUATION frames (never interleaved with other frames)
        self._block = bytearray()
        self._block_stream = 0
        self._block_ends_stream = False

    # -- lifecycle -------------------------------------------------------------------------------

    @classmethod
    async def open(cls, host: str, port: int, connect_seconds: float = 5.0,
                   tls: ssl.SSLContext | None = None) -> Connection:
        """Connect in cleartext, or over TLS with `tls` (which must offer ALPN `h2`), verifying `host`."""
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {} if tls is None else {"ssl": tls, "server_hostname": host,
                                                         "ssl_handshake_timeout": connect_seconds}
        _, conn = await asyncio.wait_for(loop.create_connection(lambda: cls(f"{host}:{port}"), host, port, **extra),
                                         connect_seconds)
        if tls is not None:
            transport = conn._transport
            protocol = transport.get_extra_info("ssl_object").selected_alpn_protocol() if transport else None
            if protocol != "h2":
                conn.close()
                raise GrpcError(StatusCode.UNAVAILABLE, f"{host}:{port} did not agree to HTTP/2 (ALPN {protocol})")
        return conn

    @classmethod
    async def open_unix(cls, path: str, connect_seconds: float = 5.0) -> Connection:
        """Connect in cleartext to a unix socket (a KMS plugin's), as gRPC does with authority `localhost`."""
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(loop.create_unix_connection(lambda: cls("localhost"), path), connect_seconds)
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses
        self._transport = transport
        settings = struct.pack(">HIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW)
        transport.write(PREFACE + frame(SETTINGS, 0, 0, settings)
                        + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW)))
        self._ping_timer = self._loop.call_later(self._keepalive, self._keepalive_tick)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(GrpcError(StatusCode.UNAVAILABLE, f"connection lost: {exc or 'closed by peer'}"))

    def _send(self, data: bytes) -> None:
        if not self._out:
            self._loop.call_soon(self._write_out)
        self._out.append(data)

    def _write_out(self) -> None:
        out, self._out = self._out, []
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(out) if len(out) > 1 else out[0])

    @property
    def usable(self) -> bool:
        return self._closed is None and self._next_id <= MAX_STREAM_ID

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            if self._closed is None:
                self._send(frame(GOAWAY, 0, 0, struct.pack(">II", 0, NO_ERROR)))
                self._write_out()
            self._transport.close()
        self._fail_all(GrpcError(StatusCode.UNAVAILABLE, "connection closed"))

    def _fail_all(self, error: GrpcError) -> None:
        if self._closed is None:
            self._closed = error
        if self._ping_timer is not None:
            self._ping_timer.cancel()
            self._ping_timer = None
        streams, self._streams = self._streams, {}
        for s in streams.values():
            self._end(s, error)
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # it finds the connection closed

    def _abort(self, reason: str) -> None:
        self._fail_all(GrpcError(StatusCode.UNAVAILABLE, reason))
        if self._transport is not None:
            self._transport.abort()

    def _keepalive_tick(self) -> None:
        """Ping when calls are open and nothing came for a while; no answer in time means a dead peer."""
        if self._closed is not None or self._transport is None:
            return
        if self._ping_outstanding and not self._received:
            self._abort("keepalive ping not answered")
            return
        delay = self._keepalive
        if self._streams and not self._received:
            self._send(frame(PING, 0, 0, b"pyk8s-ka"))
            self._ping_outstanding = True
            delay = self._keepalive_timeout
        else:
            self._ping_outstanding = False
        self._received = False
        self._ping_timer = self._loop.call_later(delay, self._keepalive_tick)

    # -- calls -----------------------------------------------------------------------------------

    def _headers_for(self, path: str) -> bytes:
        block = self._headers_cache.get(path)
        if block is None:
            block = self._headers_cache[path] = request_headers(path, self._authority)
        return block

    async def _open_stream(self) -> _Stream:
        if self._closed is not None:
            raise self._closed
        if self._next_id > MAX_STREAM_ID:
            raise GrpcError(StatusCode.UNAVAILABLE, "stream ids exhausted")
        while len(self._streams) >= self._max_streams:
            waiter = self._loop.create_future()
            self._slot_waiters.append(waiter)
            await waiter
            if self._closed is not None:
                raise self._closed
        s = _Stream(self._next_id, self._peer_initial_window)
        self._next_id += 2
        self._streams[s.id] = s
        return s

    def _start(self, s: _Stream, path: str, message: bytes, end: bool) -> None:
        """HEADERS and the first message, in one write when the peer's windows allow."""
        assert self._transport is not None
        header = frame(HEADERS, END_HEADERS, s.id, self._headers_for(path))
        body = struct.pack(">BI", 0, len(message)) + message
        if len(body) <= min(self._send_window, s.send_window, self._peer_max_frame):
            self._send_window -= len(body)
            s.send_window -= len(body)
            self._send(header + frame(DATA, END_STREAM if end else 0, s.id, body))
            return
        self._send(header)
        self._queue_data(s, body, end)

    def _queue_data(self, s: _Stream, body: bytes, end: bool) -> None:
        s.pending += body
        s.pending_end = end
        if s not in self._blocked:
            self._blocked.append(s)
        self._flush()

    def _flush(self) -> None:
        """Send what flow control allows of the DATA waiting on blocked streams."""
        if self._transport is None or self._closed is not None:
            return
        still: list[_Stream] = []
        for s in self._blocked:
            if s.id not in self._streams:
                continue
            while s.pending:
                n = min(len(s.pending), self._send_window, s.send_window, self._peer_max_frame)
                if n <= 0:
                    break
                chunk = bytes(s.pending[:n])
                del s.pending[:n]
                self._send_window -= n
                s.send_window -= n
                last = not s.pending and s.pending_end
                self._send(frame(DATA, END_STREAM if last else 0, s.id, chunk))
            if s.pending:
                still.append(s)
        self._blocked = still

    def _cancel(self, s: _Stream, code: int = CANCEL) -> None:
        if self._streams.pop(s.id, None) is not None and self._transport is not None and self._closed is None:
            self._send(frame(RST_STREAM, 0, s.id, struct.pack(">I", code)))
            self._slot_freed()

    def _slot_freed(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def unary(self, path: str, request: bytes, deadline: float) -> bytes:
        """One request message, one response message; raises GrpcError for any other status."""
        s = await self._open_stream()
        s.waiter = self._loop.create_future()
        timer = self._loop.call_later(deadline, self._expire, s)
        try:
            self._start(s, path, request, True)
            await s.waiter
        except asyncio.CancelledError:
            self._cancel(s)
            raise
        finally:
            timer.cancel()
        if s.error is not None:
            raise s.error
        if not s.messages:
            raise GrpcError(StatusCode.INTERNAL, "no response message")
        return s.messages[0]

    def _expire(self, s: _Stream) -> None:
        if not s.done:
            self._cancel(s)
            self._end(s, GrpcError(StatusCode.DEADLINE_EXCEEDED, "deadline exceeded"))

    async def stream(self, path: str, first: bytes) -> BidiStream:
        """A bidirectional stream opened with its first request message."""
        s = await self._open_stream()
        self._start(s, path, first, False)
        return BidiStream(self, s)

    def _send_message(self, s: _Stream, message: bytes) -> None:
        if s.done:
            raise s.error or GrpcError(StatusCode.CANCELLED, "stream ended")
        self._queue_data(s, struct.pack(">BI", 0, len(message)) + message, False)

    # -- receiving -------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._received = True
        buf = self._buf
        buf += data
        pos, size = 0, len(buf)
        try:
            while size - pos >= 9:
                hi, lo, kind, flags, sid = _HEADER.unpack_from(buf, pos)
                length = (hi << 16) | lo
                end = pos + 9 + length
                if end > size:
                    break
                payload = bytes(buf[pos + 9:end])
                pos = end
                self._on_frame(kind, flags, sid & 0x7FFFFFFF, payload)
        except _ProtocolError as exc:
            self._abort(f"protocol error from etcd: {exc}")
            return
        del buf[:pos]

    def _on_frame(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        if kind == DATA:
            self._on_data(flags, sid, payload)
        elif kind == HEADERS or kind == CONTINUATION:
            self._on_headers(kind, flags, sid, payload)
        elif kind == WINDOW_UPDATE:
            (inc,) = struct.unpack(">I", payload)
            inc &= 0x7FFFFFFF
            if sid == 0:
                self._send_window += inc
            elif (s := self._streams.get(sid)) is not None:
                s.send_window += inc
            if self._blocked:
                self._flush()
        elif kind == SETTINGS:
            if not flags & ACK:
                self._on_settings(payload)
        elif kind == PING:
            if flags & ACK:
                self._ping_outstanding = False
            elif self._transport is not None:
                self._send(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            s = self._streams.pop(sid, None)
            if s is not None:
                (code,) = struct.unpack(">I", payload)
                status = _RST_STATUS.get(code, StatusCode.INTERNAL)
                self._end(s, GrpcError(status, f"stream reset by etcd (HTTP/2 error {code})"))
                self._slot_freed()
        elif kind == GOAWAY:
            last, code = struct.unpack_from(">II", payload)
            reason = payload[8:].decode(errors="replace")
            error = GrpcError(StatusCode.UNAVAILABLE, f"etcd closed the connection (HTTP/2 {code} {reason})".strip())
            if self._closed is None:
                self._closed = error
            for stream_id in [i for i in self._streams if i > (last & 0x7FFFFFFF)]:
                self._end(self._streams.pop(stream_id), error)
        elif kind == PUSH_PROMISE:
            raise _ProtocolError("push promise although push is disabled")

    def _on_settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - len(payload) % 6, 6):
            ident, value = struct.unpack_from(">HI", payload, i)
            if ident == SETTINGS_INITIAL_WINDOW_SIZE:
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for s in self._streams.values():
                    s.send_window += delta
            elif ident == SETTINGS_MAX_FRAME_SIZE:
                self._peer_max_frame = value
            elif ident == SETTINGS_MAX_CONCURRENT_STREAMS:
                self._max_streams = value
        assert self._transport is not None
        self._send(frame(SETTINGS, ACK, 0))
        if self._blocked:
            self._flush()

    def _on_data(self, flags: int, sid: int, payload: bytes) -> None:
        n = len(payload)
        self._unacked += n
        if self._unacked >= WINDOW_REFILL and self._transport is not None:
            self._send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self._unacked)))
            self._unacked = 0
        s = self._streams.get(sid)
        if s is None:
            return
        if flags & PADDED:
            payload = payload[1:len(payload) - payload[0]]
        s.data += payload
        data = s.data
        while len(data) >= 5:
            compressed, size = struct.unpack_from(">BI", data)
            if len(data) < 5 + size:
                break
            if compressed:
                raise _ProtocolError("compressed message although none was asked for")
            s.messages.append(bytes(data[5:5 + size]))
            del data[:5 + size]
        if flags & END_STREAM:
            self._finish(s, GrpcError(StatusCode.INTERNAL, "stream ended without a grpc-status"))
            return
        s.unacked += n
        if s.unacked >= WINDOW_REFILL and self._transport is not None:
            self._send(frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", s.unacked)))
            s.unacked = 0
        if s.messages:
            s.wake()

    def _on_headers(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        if kind == HEADERS:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            if flags & PRIORITY:
                payload = payload[5:]
            self._block[:] = payload
            self._block_stream, self._block_ends_stream = sid, bool(flags & END_STREAM)
        elif sid != self._block_stream:
            raise _ProtocolError("CONTINUATION for another stream")
        else:
            self._block += payload
        if not flags & END_HEADERS:
            return
        # Decoded even for a stream already gone: the dynamic table must follow every block.
        fields = self._decode(bytes(self._block))
        self._block_stream = 0
        s = self._streams.get(sid)
        if s is None:
            return
        headers = dict(fields)
        if s.headers is None and ":status" in headers:
            if headers[":status"] != "200":
                self._finish(s, GrpcError(StatusCode.UNAVAILABLE, f"HTTP status {headers[':status']} from etcd"))
                return
            s.headers = headers
        if "grpc-status" in headers or self._block_ends_stream:
            self._finish(s, self._status_of(headers))

    def _decode(self, block: bytes) -> list[tuple[str, str]]:
        """Decode a header block; blocks made only of one-byte table references do not change the
        dynamic table, so their meaning is remembered until a block that does change it."""
        if all(b & 0x80 and b != 0xFF for b in block):
            fields = self._indexed_only.get(block)
            if fields is None:
                fields = self._indexed_only[block] = self._decode_raw(block)
            return fields
        self._indexed_only.clear()
        return self._decode_raw(block)

    def _decode_raw(self, block: bytes) -> list[tuple[str, str]]:
        try:
            return [(str(k), str(v)) for k, v in self._decoder.decode(block)]
        except hpack.HPACKError as exc:
            raise _ProtocolError(f"bad header block: {exc}") from exc

    @staticmethod
    def _status_of(headers: dict[str, str]) -> GrpcError | None:
        raw = headers.get("grpc-status")
        if raw is None:
            return GrpcError(StatusCode.INTERNAL, "stream ended without a grpc-status")
        try:
            code = StatusCode(int(raw))
        except ValueError:
            code = StatusCode.UNKNOWN
        if code == StatusCode.OK:
            return None
        return GrpcError(code, unquote(headers.get("grpc-message", "")))

    def _finish(self, s: _Stream, error: GrpcError | None) -> None:
        if self._streams.pop(s.id, None) is not None:
            self._slot_freed()
        self._end(s, error)

    def _end(self, s: _Stream, error: GrpcError | None) -> None:
        """The first outcome of a stream is its outcome."""
        if not s.done:
            s.error = error
            s.done = True
        s.wake()


class _ProtocolError(Exception):
    pass


def client_tls(cafile: str = "", certfile: str = "", keyfile: str = "") -> ssl.SSLContext:
    """The TLS settings of a gRPC client: the server verified against `cafile` (the system's CAs when
    empty), our certificate presented when given, HTTP/2 offered by ALPN as gRPC requires."""
    ctx = ssl.create_default_context(cafile=cafile or None)
    if certfile:
        ctx.load_cert_chain(certfile, keyfile or None)
    ctx.set_alpn_protocols(["h2"])
    return ctx


class BidiStream:
    """The client's end of a bidirectional gRPC stream."""

    def __init__(self, conn: Connection, stream: _Stream) -> None:
        self._conn = conn
        self._s = stream

    def write(self, message: bytes) -> None:
        self._conn._send_message(self._s, message)

    async def read(self) -> bytes | None:
        """The next message; None when the server ended the stream with OK; GrpcError otherwise."""
        s = self._s
        while not s.messages:
            if s.done:
                if s.error is not None:
                    raise s.error
                return None
            s.waiter = self._conn._loop.create_future()
            await s.waiter
        return s.messages.popleft()

    def cancel(self) -> None:
        if not self._s.done:
            self._conn._cancel(self._s)
            self._conn._end(self._s, GrpcError(StatusCode.CANCELLED, "cancelled"))

    def __aiter__(self) -> BidiStream:
        return self

    async def __anext__(self) -> Any:
        message = await self.read()
        if message is None:
            raise StopAsyncIteration
        return message
