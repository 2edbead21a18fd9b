"""SPDY/3.1 framing as Kubernetes streaming uses it (moby/spdystream on the other end).

kubectl tunnels port-forward as SPDY inside a WebSocket, and containerd's streaming server speaks
SPDY for exec and attach. Only what those peers use is here: SYN_STREAM/SYN_REPLY with zlib
header blocks (one compression context per direction, seeded with the spec's dictionary), DATA
with FIN, RST_STREAM, PING echo and GOAWAY. Neither peer does flow control, so windows are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Awaitable, Callable

SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
RST_CANCEL = 5
MAX_DATA = 32 * 1024

_WORDS = [*(
    "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age "
    "allow authorization cache-control connection content-base content-encoding content-language content-length "
    "content-location content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
    "proxy-authenticate proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
    "user-agent vary via warning www-authenticate method get status"
).split(), "200 OK", *"version HTTP/1.1 url public set-cookie keep-alive origin".split()]
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)


def _dictionary() -> bytes:
    """The SPDY/3 header compression dictionary (draft 3, section 2.6.10.1): length-prefixed names, then text."""
    return b"".join(struct.pack(">I", len(w)) + w.encode() for w in _WORDS) + _TAIL.encode()


DICTIONARY = _dictionary()

Reader = Callable[[], Awaitable[bytes]]
Writer = Callable[[bytes], Awaitable[None]]


def encode_headers(headers: dict[str, str]) -> bytes:
    out = [struct.pack(">I", len(headers))]
    for name, value in headers.items():
        n, v = name.lower().encode(), value.encode()
        out.append(struct.pack(">I", len(n)) + n + struct.pack(">I", len(v)) + v)
    return b"".join(out)


def decode_headers(block: bytes) -> dict[str, str]:
    (count,) = struct.unpack_from(">I", block, 0)
    pos, out = 4, {}
    for _ in range(count):
        (n,) = struct.unpack_from(">I", block, pos)
        name = block[pos + 4:pos + 4 + n].decode()
        pos += 4 + n
        (v,) = struct.unpack_from(">I", block, pos)
        value = block[pos + 4:pos + 4 + v].decode(errors="replace")
        pos += 4 + v
        out[name] = value.split("\0", 1)[0]
    return out


def control_frame(kind: int, flags: int, body: bytes) -> bytes:
    return struct.pack(">HHI", 0x8003, kind, (flags << 24) | len(body)) + body


def data_frame(stream_id: int, flags: int, data: bytes) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(data)) + data


class Stream:
    """One SPDY stream: a byte pipe each way; `read()` returns b"" once the peer sent FIN or RST."""

    def __init__(self, session: Session, stream_id: int, headers: dict[str, str]) -> None:
        self.session = session
        self.id = stream_id
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.replied = asyncio.Event()
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.remote_closed = False
        self.local_closed = False
        self.reset_by_peer = False

    @property
    def kind(self) -> str:
        return self.headers.get("streamtype", "")

    def _feed(self, data: bytes, fin: bool) -> None:
        if data:
            self._queue.put_nowait(data)
        if fin and not self.remote_closed:
            self.remote_closed = True
            self._queue.put_nowait(b"")
        self._forget_if_done()

    def _forget_if_done(self) -> None:
        """Drop a finished stream from the session so long port-forwards do not accumulate them."""
        if self.remote_closed and (self.local_closed or self.reset_by_peer):
            self.session.streams.pop(self.id, None)

    async def read(self) -> bytes:
        data = await self._queue.get()
        if not data:
            self._queue.put_nowait(b"")
        return data

    async def read_all(self) -> bytes:
        chunks = []
        while chunk := await self.read():
            chunks.append(chunk)
        return b"".join(chunks)

    async def write(self, data: bytes) -> None:
        if self.local_closed or self.reset_by_peer:
            return
        for i in range(0, len(data), MAX_DATA):
            await self.session.send(data_frame(self.id, 0, data[i:i + MAX_DATA]))

    async def close(self) -> None:
        """Half-close: no more data from this side."""
        if not self.local_closed and not self.reset_by_peer:
            self.local_closed = True
            await self.session.send(data_frame(self.id, FLAG_FIN, b""))
        self._forget_if_done()

    async def reset(self) -> None:
        if not self.reset_by_peer:
            self.local_closed = True
            await self.session.send(control_frame(RST_STREAM, 0, struct.pack(">II", self.id, RST_CANCEL)))
        self._feed(b"", True)


class Session:
    """A SPDY connection over any byte transport; the server side hands each new stream to `on_stream`."""

    def __init__(self, read: Reader, write: Writer, *, client: bool,
                 on_stream: Callable[[Stream], Awaitable[None]] | None = None,
                 on_close: Callable[[], None] | None = None) -> None:
        self._read = read
        self._write = write
        self.client = client
        self.on_stream = on_stream
        self.streams: dict[int, Stream] = {}
        self._next_id = 1 if client else 2
        self._deflate = zlib.compressobj(9, zdict=DICTIONARY)
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self.on_close = on_close
        self._buf = bytearray()
        self._runner: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.Event()

    def start(self) -> None:
        """Read frames in the background (for the side that only opens streams)."""
        self._runner = asyncio.create_task(self.run())

    def _headers(self, headers: dict[str, str]) -> bytes:
        return self._deflate.compress(encode_headers(headers)) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    async def send(self, frame: bytes) -> None:
        if self.closed.is_set():
            return
        async with self._lock:
            try:
                await self._write(frame)
            except (OSError, ConnectionError, RuntimeError):
                self._shutdown()

    async def open_stream(self, headers: dict[str, str], wait: float = 30.0) -> Stream:
        """Create a stream and wait for the peer's SYN_REPLY, as spdystream clients do."""
        async with self._lock:
            stream_id = self._next_id
            self._next_id += 2
            stream = Stream(self, stream_id, headers)
            self.streams[stream_id] = stream
            body = struct.pack(">IIBB", stream_id, 0, 0, 0) + self._headers(headers)
            await self._write(control_frame(SYN_STREAM, 0, body))
        async with asyncio.timeout(wait):
            await stream.replied.wait()
        return stream

    async def _fill(self, n: int) -> bool:
        while len(self._buf) < n:
            chunk = await self._read()
            if not chunk:
                return False
            self._buf += chunk
        return True

    async def run(self) -> None:
        """Read frames until the transport ends; every stream then sees EOF."""
        try:
            while await self._fill(8):
                head = bytes(self._buf[:8])
                word, flags_len = struct.unpack(">II", head)
                length = flags_len & 0xFFFFFF
                flags = flags_len >> 24
                if not await self._fill(8 + length):
                    break
                body = bytes(self._buf[8:8 + length])
                del self._buf[:8 + length]
                if word & 0x80000000:
                    await self._control((word & 0xFFFF), flags, body)
                else:
                    stream = self.streams.get(word & 0x7FFFFFFF)
                    if stream is not None:
                        stream._feed(body, bool(flags & FLAG_FIN))
        except (OSError, ConnectionError, zlib.error, struct.error, asyncio.IncompleteReadError):
            pass
        finally:
            self._shutdown()

    async def _control(self, kind: int, flags: int, body: bytes) -> None:
        if kind == SYN_STREAM:
            stream_id = struct.unpack_from(">I", body)[0] & 0x7FFFFFFF
            headers = decode_headers(self._inflate.decompress(body[10:]))
            stream = Stream(self, stream_id, headers)
            stream.replied.set()
            self.streams[stream_id] = stream
            if flags & FLAG_FIN:
                stream._feed(b"", True)
            reply = struct.pack(">I", stream_id) + self._headers({})
            await self.send(control_frame(SYN_REPLY, 0, reply))
            if self.on_stream is not None:
                task = asyncio.create_task(self.on_stream(stream))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        elif kind in (SYN_REPLY, HEADERS):
            stream_id = struct.unpack_from(">I", body)[0] & 0x7FFFFFFF
            self._inflate.decompress(body[4:])
            stream = self.streams.get(stream_id)
            if stream is not None:
                stream.replied.set()
                if flags & FLAG_FIN:
                    stream._feed(b"", True)
        elif kind == RST_STREAM:
            stream = self.streams.get(struct.unpack_from(">I", body)[0] & 0x7FFFFFFF)
            if stream is not None:
                stream.reset_by_peer = True
                stream.replied.set()
                stream._feed(b"", True)
        elif kind == PING:
            await self.send(control_frame(PING, 0, body))
        elif kind == GOAWAY:
            self._shutdown()

    def _shutdown(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for stream in list(self.streams.values()):
            stream.replied.set()
            stream._feed(b"", True)
        if self.on_close is not None:
            self.on_close()

    async def close(self) -> None:
        self._shutdown()
        tasks = list(self._tasks) + ([self._runner] if self._runner is not None else [])
        for task in (t for t in tasks if t is not asyncio.current_task()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
