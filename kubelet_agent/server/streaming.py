"""exec, attach and port-forward: kubectl's WebSocket or SPDY side relayed to the runtime.

exec/attach over WebSocket: the client speaks `v5.channel.k8s.io` (or v4); the kubelet asks CRI for a
streaming URL and speaks SPDY (`v4.channel.k8s.io`) to containerd's streaming server there, the
way upstream's apiserver translates WebSocket to SPDY. exec/attach over SPDY (kubectl with
WebSockets off, older clients): the upgrade is passed to the runtime's streaming server, which
negotiates the protocol, and the two connections are spliced, as upstream's kubelet proxies it.
port-forward: kubectl speaks SPDY, tunnelled inside a WebSocket or on the upgraded connection
itself; each (error, data) stream pair becomes a TCP connection opened inside the pod's network
namespace, as containerd's own port-forward does.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Protocol

import orjson

from kubelet_agent.server import spdy
from kubelet_agent.server.ws import (
    CHANNEL_PROTOCOLS,
    CLOSE,
    ERROR,
    RESIZE,
    STDERR,
    STDIN,
    STDOUT,
    ChannelProtocol,
    WebSocket,
)

Connect = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
SUCCESS = b'{"metadata":{},"status":"Success"}'
SPDY = "SPDY/3.1"
PROTOCOL_HEADER = "X-Stream-Protocol-Version"
PORTFORWARD_PROTOCOLS = ["portforward.k8s.io"]


class StreamError(Exception):
    """The runtime refused the streaming request; `status` is the HTTP code to answer with."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


def failure_status(message: str) -> bytes:
    return orjson.dumps({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError",
                         "code": 500})


def is_spdy(headers: list[tuple[str, str]]) -> bool:
    """An HTTP/1.1 upgrade to SPDY/3.1, which kubectl uses when WebSockets are off or unsupported."""
    connection = [t.strip().lower() for k, v in headers if k.lower() == "connection" for t in v.split(",")]
    upgrade = next((v.strip() for k, v in headers if k.lower() == "upgrade"), "")
    return "upgrade" in connection and upgrade.lower() == SPDY.lower()


def stream_protocols(headers: list[tuple[str, str]]) -> list[str]:
    """The client's X-Stream-Protocol-Version offers, in its order of preference."""
    return [p.strip() for k, v in headers if k.lower() == PROTOCOL_HEADER.lower() for p in v.split(",") if p.strip()]


async def _runtime_upgrade(url: str, protocols: list[str], connect: Connect) -> tuple[
        asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """Ask the runtime's streaming server at `url` for a SPDY upgrade; its answer's head comes back as is."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http":
        raise StreamError(f"unsupported streaming URL scheme {parts.scheme!r}")
    reader, writer = await connect(parts.hostname or "127.0.0.1", parts.port or 80)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        offers = "".join(f"{PROTOCOL_HEADER}: {p}\r\n" for p in protocols)
        writer.write(f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: Upgrade\r\nUpgrade: {SPDY}\r\n"
                     f"{offers}Content-Length: 0\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
    except BaseException:
        writer.close()
        raise
    return reader, writer, head


def _status_code(head: bytes) -> int:
    parts = head.split(b"\r\n", 1)[0].split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


async def dial_runtime(url: str, connect: Connect) -> spdy.Session:
    """Upgrade to SPDY at the runtime's streaming URL and return the running client session."""
    reader, writer, head = await _runtime_upgrade(url, ["v4.channel.k8s.io"], connect)
    if _status_code(head) != 101:
        writer.close()
        status_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
        raise StreamError(f"runtime streaming server answered {status_line!r}")

    async def read() -> bytes:
        return await reader.read(65536)

    async def write(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    session = spdy.Session(read, write, client=True, on_close=writer.close)
    session.start()
    return session


async def proxy_spdy(url: str, headers: list[tuple[str, str]], reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, connect: Connect) -> None:
    """Hand the client's SPDY upgrade to the runtime's streaming server and splice the two connections.

    The runtime negotiates the protocol and serves the streams (its error stream carries the exit
    code); its answer, 101 or a refusal, goes back to the client unchanged.
    """
    up_reader, up_writer, head = await _runtime_upgrade(url, stream_protocols(headers), connect)
    try:
        writer.write(head)
        if _status_code(head) == 101:
            await splice(reader, writer, up_reader, up_writer)
            return
        length = next((int(v) for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])
                       if k.strip().lower() == b"content-length" and v.strip().isdigit()), 0)
        with contextlib.suppress(asyncio.IncompleteReadError, TimeoutError):
            async with asyncio.timeout(10):
                writer.write(await up_reader.readexactly(min(length, 1 << 20)))
        await writer.drain()
    finally:
        up_writer.close()


async def splice(a_reader: asyncio.StreamReader, a_writer: asyncio.StreamWriter, b_reader: asyncio.StreamReader,
                 b_writer: asyncio.StreamWriter) -> None:
    """Copy bytes both ways until either side closes; then both connections are closed."""

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()

    tasks = {asyncio.create_task(pump(a_reader, b_writer)), asyncio.create_task(pump(b_reader, a_writer))}
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        a_writer.close()
        b_writer.close()


class Channel(Protocol):
    """What the port-forward tunnel reads SPDY frames from: a WebSocket, or the upgraded socket itself."""

    async def recv(self) -> bytes | None: ...

    async def send(self, data: bytes) -> None: ...

    async def close(self) -> None: ...


class SocketChannel:
    """The connection after a SPDY upgrade, as a Channel."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def recv(self) -> bytes | None:
        try:
            return await self.reader.read(65536) or None
        except (ConnectionError, OSError):
            return None

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()


async def relay_remote_command(ws: WebSocket, session: spdy.Session, *, stdin: bool, stdout: bool, stderr: bool,
                               tty: bool) -> None:
    """Relay one exec/attach between the client's channel WebSocket and the runtime's SPDY streams."""
    framing = CHANNEL_PROTOCOLS.get(ws.subprotocol, CHANNEL_PROTOCOLS[""])
    try:
        error = await session.open_stream({"streamType": "error"})
        streams: dict[int, spdy.Stream] = {}
        if stdin:
            streams[STDIN] = await session.open_stream({"streamType": "stdin"})
        if stdout:
            streams[STDOUT] = await session.open_stream({"streamType": "stdout"})
        if stderr and not tty:
            streams[STDERR] = await session.open_stream({"streamType": "stderr"})
        if tty:
            streams[RESIZE] = await session.open_stream({"streamType": "resize"})
    except (TimeoutError, ConnectionError, OSError):
        await _send_status(ws, framing, failure_status("runtime streaming server did not accept the streams"))
        await ws.close()
        return
    await error.close()
    # Upstream's first message, empty, on the lowest channel the client reads: the streams are up.
    await ws.send(framing.encode(next((c for c in (STDOUT, STDERR) if c in streams), ERROR), b""))

    async def pump(stream: spdy.Stream, channel: int) -> None:
        while data := await stream.read():
            await ws.send(framing.encode(channel, data))

    async def from_client() -> None:
        while (msg := await ws.recv()) is not None:
            decoded = framing.decode(msg)
            if decoded is None:
                continue
            channel, data = decoded
            if channel == CLOSE and framing.close_channel and data[:1] == bytes([STDIN]) and STDIN in streams:
                await streams[STDIN].close()
            elif channel in (STDIN, RESIZE) and channel in streams and data:
                await streams[channel].write(data)

    client = asyncio.create_task(from_client())
    output = asyncio.gather(*(pump(streams[c], c) for c in (STDOUT, STDERR) if c in streams), error.read_all())
    try:
        await asyncio.wait({output, client}, return_when=asyncio.FIRST_COMPLETED)
        if output.done() and output.exception() is None:
            await _send_status(ws, framing, output.result()[-1] or SUCCESS)
            await ws.close()
    finally:
        for task in (client, output):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await session.close()


async def _send_status(ws: WebSocket, framing: ChannelProtocol, status: bytes) -> None:
    """The command's outcome on the error channel: the Status itself from v4 on; before, only a
    failure's message (upstream's v1WriteStatusFunc)."""
    if framing.status_json:
        await ws.send(framing.encode(ERROR, status))
        return
    try:
        decoded = orjson.loads(status)
    except orjson.JSONDecodeError:
        decoded = {"status": "Failure", "message": status.decode(errors="replace")}
    if isinstance(decoded, dict) and decoded.get("status") != "Success":
        await ws.send(framing.encode(ERROR, str(decoded.get("message") or "").encode()))


class PortForwardTunnel:
    """Serves kubectl's SPDY port-forward for one pod, tunnelled in a WebSocket or on the upgraded socket."""

    def __init__(self, ws: Channel, connect: Connect, pod: str) -> None:
        self.ws = ws
        self.connect = connect
        self.pod = pod
        self._errors: dict[str, spdy.Stream] = {}

    async def _read(self) -> bytes:
        """The tunnel's next bytes; kubectl sends empty messages too, which must not read as EOF."""
        while (msg := await self.ws.recv()) is not None:
            if msg:
                return msg
        return b""

    async def serve(self) -> None:
        session = spdy.Session(self._read, self.ws.send, client=False, on_stream=self._on_stream)
        try:
            await session.run()
        finally:
            await session.close()
            await self.ws.close()

    async def _on_stream(self, stream: spdy.Stream) -> None:
        request_id = stream.headers.get("requestid", "")
        if stream.kind == "error":
            self._errors[request_id] = stream
            return
        if stream.kind != "data":
            await stream.reset()
            return
        error = self._errors.pop(request_id, None)
        try:
            port = int(stream.headers.get("port", ""))
        except ValueError:
            port = 0
        try:
            if not 0 < port < 65536:
                raise OSError(f"invalid port {stream.headers.get('port')!r}")
            reader, writer = await self.connect("127.0.0.1", port)
        except (OSError, TimeoutError) as exc:
            if error is not None:
                await error.write(f"error forwarding port {port} to pod {self.pod}: failed to connect to "
                                  f"localhost:{port} inside the pod: {exc}".encode())
                await error.close()
            await stream.close()
            return
        await self._pipe(stream, reader, writer)
        if error is not None:
            await error.close()

    @staticmethod
    async def _pipe(stream: spdy.Stream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def upstream() -> None:
            while data := await stream.read():
                writer.write(data)
                await writer.drain()
            with contextlib.suppress(OSError):
                if writer.can_write_eof():
                    writer.write_eof()

        async def downstream() -> None:
            while data := await reader.read(65536):
                await stream.write(data)
            await stream.close()

        up = asyncio.create_task(upstream())
        try:
            with contextlib.suppress(ConnectionError, OSError):
                await downstream()
            with contextlib.suppress(asyncio.TimeoutError, ConnectionError, OSError):
                await asyncio.wait_for(asyncio.shield(up), 5)
        finally:
            up.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await up
            writer.close()


async def serve_channel_port_forward(ws: WebSocket, connect: Connect, ports: list[int], pod: str) -> None:
    """The older WebSocket port-forward (`v4.channel.k8s.io`, `portforward.k8s.io`) the Python client uses.

    Each requested port gets a data channel (2i) and an error channel (2i+1), both opened by sending
    the port as uint16 little-endian; one TCP connection per port lives as long as the WebSocket.
    """
    loop = asyncio.get_running_loop()
    conns: dict[int, asyncio.Future[asyncio.StreamWriter | None]] = {i: loop.create_future() for i in range(len(ports))}

    async def forward(index: int, port: int) -> None:
        try:
            reader, writer = await connect("127.0.0.1", port)
        except (OSError, TimeoutError) as exc:
            conns[index].set_result(None)
            await ws.send(bytes([2 * index + 1]) + f"error forwarding port {port} to pod {pod}: failed to "
                          f"connect to localhost:{port} inside the pod: {exc}".encode())
            return
        conns[index].set_result(writer)
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                await ws.send(bytes([2 * index]) + data)

    for i, port in enumerate(ports):
        prefix = struct.pack("<H", port)
        await ws.send(bytes([2 * i]) + prefix)
        await ws.send(bytes([2 * i + 1]) + prefix)
    everything = asyncio.gather(*(forward(i, port) for i, port in enumerate(ports)))
    client = asyncio.create_task(_channel_input(ws, conns))
    try:
        await asyncio.wait({everything, client}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (client, everything):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for conn in conns.values():
            if conn.done() and (writer := conn.result()) is not None:
                writer.close()
        await ws.close()


async def _channel_input(ws: WebSocket, conns: dict[int, asyncio.Future[asyncio.StreamWriter | None]]) -> None:
    while (msg := await ws.recv()) is not None:
        conn = conns.get(msg[0] // 2) if len(msg) > 1 and msg[0] % 2 == 0 else None
        if conn is not None and (writer := await conn) is not None:
            writer.write(msg[1:])
            with contextlib.suppress(ConnectionError, OSError):
                await writer.drain()
