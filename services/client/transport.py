"""An httpx transport over plain asyncio streams: HTTP/1.1 keep-alive with a LIFO pool per origin.

httpcore's pool rescans every connection on each request and detects its async library per call;
with dozens of busy connections that costs more CPU than the apiserver spends answering. This
transport does the minimum HTTP/1.1 a Kubernetes client needs: bytes bodies, Content-Length,
chunked and read-to-close responses (chunked ones streamed, so watches work through
`Response.aiter_lines`), TLS with the caller's `ssl.SSLContext` and SNI, and httpx's timeouts.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable
from types import TracebackType

import httpx

# Bodies up to this size (with Content-Length) are read before the response is returned, so the
# connection goes back to the pool at once; larger ones are streamed.
EAGER_BODY_LIMIT = 256 * 1024
STREAM_READ_SIZE = 64 * 1024
STREAM_LIMIT = 1024 * 1024
# Below uvicorn's default keep-alive timeout (5 s): a connection the server may be closing right now
# is dropped instead of being reused.
DEFAULT_KEEPALIVE_EXPIRY = 4.0
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
NO_BODY_STATUS = frozenset({204, 304})

Origin = tuple[str, str, int]


class _NoResponse(Exception):
    """The server closed or reset the connection before sending a single byte of the response."""


class _Connection:
    __slots__ = ("origin", "reader", "writer", "idle_since")

    def __init__(self, origin: Origin, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.origin = origin
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self) -> bool:
        """False once the server has closed its side (seen as EOF) or the socket broke."""
        return not (self.writer.transport.is_closing() or self.reader.at_eof() or self.reader.exception())

    def close(self) -> None:
        """Abort rather than close: unread response bytes may be pending, and nobody waits for a FIN."""
        self.writer.transport.abort()


class AsyncTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 transport for httpx; `max_connections` caps requests in flight, and so open connections."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None = None,
        *,
        max_connections: int = 512,
        max_idle: int = 64,
        keepalive_expiry: float = DEFAULT_KEEPALIVE_EXPIRY,
    ) -> None:
        self._ssl = ssl_context
        self._slots = asyncio.Semaphore(max_connections)
        self._max_idle = max_idle
        self._expiry = keepalive_expiry
        self._idle: dict[Origin, list[_Connection]] = {}
        self._closed = False

    async def __aenter__(self) -> AsyncTransport:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    def close_idle(self) -> None:
        """Close the pooled connections, so the next requests handshake again (with a new client cert)."""
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    def idle_connections(self) -> int:
        return sum(len(conns) for conns in self._idle.values())

    # -- pool --------------------------------------------------------------------------------------

    def _take_idle(self, origin: Origin) -> _Connection | None:
        conns = self._idle.get(origin)
        if not conns:
            return None
        fresh_after = time.monotonic() - self._expiry
        while conns:
            conn = conns.pop()
            if conn.idle_since >= fresh_after and conn.usable():
                return conn
            conn.close()
        return None

    def _release(self, conn: _Connection, reusable: bool) -> None:
        """Give the request's slot back; keep the connection only if its exchange ended cleanly."""
        self._slots.release()
        if not reusable or self._closed:
            conn.close()
            return
        conns = self._idle.setdefault(conn.origin, [])
        if len(conns) >= self._max_idle:
            conns.pop(0).close()
        conn.idle_since = time.monotonic()
        conns.append(conn)

    async def _connect(
        self, request: httpx.Request | None, origin: Origin, connect_timeout: float | None, sni: str | None = None
    ) -> _Connection:
        scheme, host, port = origin
        context: ssl.SSLContext | None = None
        server_hostname: str | None = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
            if request is not None:
                ext = request.extensions.get("sni_hostname")
                sni = ext.decode() if isinstance(ext, bytes) else ext
            server_hostname = sni or host
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=context, server_hostname=server_hostname, limit=STREAM_LIMIT
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"timed out connecting to {host}:{port}", request=request) from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}", request=request) from exc
        return _Connection(origin, reader, writer)

    # -- one exchange ------------------------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        origin = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        timeouts = request.extensions.get("timeout") or {}
        payload = await _encode(request)
        close = request.headers.get("connection", "").lower() == "close"
        conn, head = await self._exchange_pooled(origin, payload, request.method, timeouts, request, None, close)
        return await self._response(conn, request, head, timeouts.get("read"))

    async def send_raw(
        self,
        origin: Origin,
        payload: bytes,
        method: str,
        timeouts: dict[str, float | None],
        sni: str | None = None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """One exchange of an already encoded request, the whole body read: (status, headers, body).

        The fast path for small API calls: no httpx.Request or Response is built. Failures raise
        httpx's exceptions (without a request attached), as `handle_async_request` would.
        """
        conn, head = await self._exchange_pooled(origin, payload, method, timeouts, None, sni, False)
        if method == "HEAD" or head.status in NO_BODY_STATUS or (head.length == 0 and not head.chunked):
            self._release(conn, head.keep_alive)
            return head.status, head.headers, b""
        keep_alive = head.keep_alive
        try:
            async with asyncio.timeout(timeouts.get("read")):
                if head.chunked:
                    parts = [part async for part in _read_chunks(conn.reader)]
                    body = b"".join(parts)
                elif head.length is not None:
                    body = await conn.reader.readexactly(head.length)
                else:
                    body = await conn.reader.read()
                    keep_alive = False
        except BaseException as exc:
            self._release(conn, False)
            err = _read_error(exc, None)
            if err is exc:
                raise
            raise err from exc
        self._release(conn, keep_alive)
        return head.status, head.headers, body

    async def stream_raw(
        self,
        origin: Origin,
        payload: bytes,
        method: str,
        timeouts: dict[str, float | None],
        sni: str | None = None,
    ) -> tuple[int, list[tuple[bytes, bytes]], httpx.AsyncByteStream]:
        """Like `send_raw`, but the body comes as a stream of byte chunks (watches); `aclose` it."""
        conn, head = await self._exchange_pooled(origin, payload, method, timeouts, None, sni, False)
        if method == "HEAD" or head.status in NO_BODY_STATUS or (head.length == 0 and not head.chunked):
            self._release(conn, head.keep_alive)
            return head.status, head.headers, httpx.ByteStream(b"")
        keep_alive = head.keep_alive
        if head.chunked:
            mode = _CHUNKED
        elif head.length is not None:
            mode = _LENGTH
        else:
            mode, keep_alive = _TO_CLOSE, False
        stream = _BodyStream(self, conn, None, mode, head.length or 0, keep_alive, timeouts.get("read"))
        return head.status, head.headers, stream

    async def _exchange_pooled(
        self,
        origin: Origin,
        payload: bytes,
        method: str,
        timeouts: dict[str, float | None],
        request: httpx.Request | None,
        sni: str | None,
        close: bool,
    ) -> tuple[_Connection, _Head]:
        """Take a slot and a connection, send, read the head; the caller owns the slot afterwards."""
        slots = self._slots
        if slots.locked():
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    await slots.acquire()
            except TimeoutError as exc:
                raise httpx.PoolTimeout("no free connection slot", request=request) from exc
        else:
            await slots.acquire()
        conn: _Connection | None = None
        try:
            conn = self._take_idle(origin)
            reused = conn is not None
            while True:
                if conn is None:
                    conn = await self._connect(request, origin, timeouts.get("connect"), sni)
                try:
                    head = await _exchange(conn, payload, request, timeouts, close)
                    break
                except _NoResponse:
                    conn.close()
                    conn = None
                    if not reused or method not in IDEMPOTENT:
                        raise httpx.RemoteProtocolError(
                            "server disconnected without sending a response", request=request
                        ) from None
                    reused = False
        except BaseException:
            if conn is not None:
                conn.close()
            self._slots.release()
            raise
        return conn, head

    async def _response(
        self, conn: _Connection, request: httpx.Request, head: _Head, read_timeout: float | None
    ) -> httpx.Response:
        """Frame the body; from here on the slot is released by `_release`, exactly once."""
        length, keep_alive = head.length, head.keep_alive
        extensions = {"http_version": head.version, "reason_phrase": head.reason}
        if request.method == "HEAD" or head.status in NO_BODY_STATUS or (length == 0 and not head.chunked):
            self._release(conn, keep_alive)
            return httpx.Response(
                head.status, headers=head.headers, stream=httpx.ByteStream(b""), extensions=extensions
            )
        if length is not None and not head.chunked and length <= EAGER_BODY_LIMIT:
            try:
                async with asyncio.timeout(read_timeout):
                    body = await conn.reader.readexactly(length)
            except BaseException as exc:
                self._release(conn, False)
                err = _read_error(exc, request)
                if err is exc:
                    raise
                raise err from exc
            self._release(conn, keep_alive)
            return httpx.Response(
                head.status, headers=head.headers, stream=httpx.ByteStream(body), extensions=extensions
            )
        if head.chunked:
            mode = _CHUNKED
        elif length is not None:
            mode = _LENGTH
        else:
            mode, keep_alive = _TO_CLOSE, False
        stream = _BodyStream(self, conn, request, mode, length or 0, keep_alive, read_timeout)
        return httpx.Response(head.status, headers=head.headers, stream=stream, extensions=extensions)


class _Head:
    """A parsed response head and the body framing it announces."""

    __slots__ = ("status", "reason", "version", "headers", "length", "chunked", "keep_alive")

    def __init__(self, raw: bytes, request: httpx.Request | None, close_requested: bool = False) -> None:
        lines = raw[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:80]!r}", request=request)
        self.status = int(parts[1])
        self.reason = parts[2] if len(parts) > 2 else b""
        self.version = parts[0]
        self.headers: list[tuple[bytes, bytes]] = []
        self.length: int | None = None
        self.chunked = False
        keep_alive = self.version == b"HTTP/1.1"
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}", request=request)
            value = value.strip()
            self.headers.append((name, value))
            lname = name.lower()
            if lname == b"content-length":
                if not value.isdigit():
                    raise httpx.RemoteProtocolError(f"bad Content-Length {value[:40]!r}", request=request)
                self.length = int(value)
            elif lname == b"transfer-encoding":
                self.chunked = value.lower().endswith(b"chunked")
            elif lname == b"connection":
                token = value.lower()
                if b"close" in token:
                    keep_alive = False
                elif b"keep-alive" in token:
                    keep_alive = True
        self.keep_alive = keep_alive and not close_requested


async def _encode(request: httpx.Request) -> bytes:
    """Request line, headers and body as one buffer: one write, one syscall for a small request."""
    try:
        body = request.content
    except httpx.RequestNotRead:
        body = await request.aread()
        if request.headers.get("transfer-encoding", "").lower() == "chunked":
            body = (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)) if body else b"0\r\n\r\n"
    head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), request.url.raw_path)]
    head.extend(b"%s: %s\r\n" % pair for pair in request.headers.raw)
    head.append(b"\r\n")
    head.append(body)
    return b"".join(head)


async def _exchange(
    conn: _Connection,
    payload: bytes,
    request: httpx.Request | None,
    timeouts: dict[str, float | None],
    close_requested: bool = False,
) -> _Head:
    """Send the request and read the response head (skipping 1xx); raises _NoResponse on a dead peer."""
    writer = conn.writer
    writer.write(payload)
    if writer.transport.get_write_buffer_size():
        try:
            async with asyncio.timeout(timeouts.get("write")):
                await writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("timed out sending the request", request=request) from exc
        except OSError as exc:
            raise _NoResponse() from exc
    reader = conn.reader
    first = True
    try:
        async with asyncio.timeout(timeouts.get("read")):
            while True:
                try:
                    raw = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError as exc:
                    if first and not exc.partial:
                        raise _NoResponse() from exc
                    raise httpx.RemoteProtocolError("incomplete response head", request=request) from exc
                except (ConnectionResetError, BrokenPipeError) as exc:
                    if first:
                        raise _NoResponse() from exc
                    raise
                first = False
                head = _Head(raw, request, close_requested)
                if head.status >= 200 or head.status == 101:
                    return head
    except BaseException as exc:
        err = _read_error(exc, request)
        if err is exc:
            raise
        raise err from exc


def _read_error(exc: BaseException, request: httpx.Request | None) -> BaseException:
    """Map asyncio/socket failures while reading to httpx's exceptions; others pass through."""
    if isinstance(exc, httpx.HTTPError | _NoResponse | asyncio.CancelledError):
        return exc
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout("timed out reading the response", request=request)
    if isinstance(exc, asyncio.IncompleteReadError):
        return httpx.RemoteProtocolError("peer closed the connection mid-response", request=request)
    if isinstance(exc, asyncio.LimitOverrunError | ValueError):
        return httpx.RemoteProtocolError(f"malformed response: {exc}", request=request)
    if isinstance(exc, OSError):
        return httpx.ReadError(f"reading the response failed: {exc}", request=request)
    return exc


async def _read_chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body's chunks, the trailer skipped (the caller bounds the time)."""
    while True:
        line = await reader.readuntil(b"\n")
        size = int(line.split(b";", 1)[0], 16)
        if size == 0:
            while await reader.readuntil(b"\n") not in (b"\r\n", b"\n"):
                pass
            return
        data = await reader.readexactly(size + 2)
        yield data[:-2]


_LENGTH, _CHUNKED, _TO_CLOSE = 0, 1, 2


class _BodyStream(httpx.AsyncByteStream):
    """A response body read as the caller iterates; the connection is pooled again only once it ends."""

    def __init__(
        self,
        transport: AsyncTransport,
        conn: _Connection,
        request: httpx.Request | None,
        mode: int,
        length: int,
        keep_alive: bool,
        read_timeout: float | None,
    ) -> None:
        self._transport = transport
        self._conn: _Connection | None = conn
        self._request = request
        self._mode = mode
        self._length = length
        self._keep_alive = keep_alive
        self._timeout = read_timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        try:
            if self._mode == _CHUNKED:
                parts = self._chunks(conn.reader)
            elif self._mode == _LENGTH:
                parts = self._sized(conn.reader)
            else:
                parts = self._to_close(conn.reader)
            async for part in parts:
                yield part
        except BaseException as exc:
            self._finish(False)
            err = _read_error(exc, self._request)
            if err is exc:
                raise
            raise err from exc
        self._finish(self._keep_alive)

    async def _read(self, call: Awaitable[bytes]) -> bytes:
        async with asyncio.timeout(self._timeout):
            return await call

    async def _sized(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        left = self._length
        while left:
            data = await self._read(reader.read(min(left, STREAM_READ_SIZE)))
            if not data:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(data)
            yield data

    async def _chunks(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while True:
            line = await self._read(reader.readuntil(b"\n"))
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                while await self._read(reader.readuntil(b"\n")) not in (b"\r\n", b"\n"):
                    pass
                return
            data = await self._read(reader.readexactly(size + 2))
            yield data[:-2]

    async def _to_close(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while data := await self._read(reader.read(STREAM_READ_SIZE)):
            yield data

    def _finish(self, reusable: bool) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            self._transport._release(conn, reusable)

    async def aclose(self) -> None:
        """Closing before the end leaves unread bytes on the socket, so the connection is dropped."""
        self._finish(False)
