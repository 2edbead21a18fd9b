"""Server-side WebSocket on an asyncio stream pair, with the `websockets` sans-I/O protocol for framing.

The kubelet's HTTP server owns the socket (it also serves chunked log streams and SPDY upgrades),
so the handshake and frames go through `websockets.server.ServerProtocol` rather than its server.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
from dataclasses import dataclass

from websockets.frames import Opcode
from websockets.http11 import Request
from websockets.server import ServerProtocol

# Channel numbers of the Kubernetes remote-command protocols (channel.k8s.io and its successors).
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


@dataclass(frozen=True)
class ChannelProtocol:
    """How one remote-command subprotocol frames its channels, as upstream's wsstream.Conn does.

    Binary ones prefix each binary message with the channel byte; base64 ones send text messages of
    the channel as an ASCII digit and the data base64-encoded. From v4 on the error channel carries
    a JSON Status, success included; before, only a failure's message. v5 adds the CLOSE channel."""

    base64: bool = False
    status_json: bool = True
    close_channel: bool = False

    def encode(self, channel: int, data: bytes) -> bytes | str:
        if self.base64:
            return chr(ord("0") + channel) + base64.b64encode(data).decode("ascii")
        return bytes([channel]) + data

    def decode(self, message: bytes) -> tuple[int, bytes] | None:
        """(channel, data) of a client's message; None for one that says nothing or does not decode."""
        if not message:
            return None
        if not self.base64:
            return message[0], message[1:]
        try:
            return message[0] - ord("0"), base64.b64decode(message[1:], validate=True)
        except binascii.Error:
            return None


#: the subprotocols exec and attach speak, preferred first; "" is a client that offers none (binary, v1)
CHANNEL_PROTOCOLS: dict[str, ChannelProtocol] = {
    "v5.channel.k8s.io": ChannelProtocol(close_channel=True),
    "v4.channel.k8s.io": ChannelProtocol(),
    "v4.base64.channel.k8s.io": ChannelProtocol(base64=True),
    "channel.k8s.io": ChannelProtocol(status_json=False),
    "base64.channel.k8s.io": ChannelProtocol(base64=True, status_json=False),
    "": ChannelProtocol(status_json=False),
}
EXEC_PROTOCOLS = [p for p in CHANNEL_PROTOCOLS if p]
PORTFORWARD_TUNNEL = "SPDY/3.1+portforward.k8s.io"
PORTFORWARD_CHANNELS = ["v4.channel.k8s.io", "portforward.k8s.io"]


def is_websocket(headers: list[tuple[str, str]]) -> bool:
    return any(k.lower() == "upgrade" and v.lower() == "websocket" for k, v in headers)


def _negotiate(head: bytes, supported: list[str]) -> tuple[str, bytes]:
    """Pick the subprotocol ourselves and drop the header from what `websockets` parses.

    kubectl's tunnelled port-forward offers `SPDY/3.1+portforward.k8s.io`, which is not an RFC 6455
    token, so the library would refuse the whole handshake.
    """
    lines = head.split(b"\r\n")
    offered: list[str] = []
    kept = []
    for line in lines:
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"sec-websocket-protocol":
            offered += [p.strip() for p in value.decode("latin-1").split(",") if p.strip()]
        else:
            kept.append(line)
    chosen = next((p for p in supported if p in offered), "")
    return chosen, b"\r\n".join(kept)


class WebSocket:
    """Whole messages in and out; `recv()` returns None once the peer closed or went away."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, protocol: ServerProtocol) -> None:
        self.reader = reader
        self.writer = writer
        self.protocol = protocol
        self.subprotocol = ""
        self._messages: collections.deque[bytes] = collections.deque()
        self._partial: bytearray | None = None
        self._closed = False
        self._lock = asyncio.Lock()

    @classmethod
    async def accept(cls, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes,
                     subprotocols: list[str]) -> WebSocket | None:
        """Answer the upgrade request whose raw head is `head`; None (after an HTTP error) if refused."""
        chosen, head = _negotiate(head, subprotocols)
        protocol = ServerProtocol(max_size=None)
        protocol.receive_data(head)
        requests = [e for e in protocol.events_received() if isinstance(e, Request)]
        if not requests:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            writer.close()
            return None
        response = protocol.accept(requests[0])
        if response.status_code == 101 and chosen:
            response.headers["Sec-WebSocket-Protocol"] = chosen
        protocol.send_response(response)
        ws = cls(reader, writer, protocol)
        await ws._flush()
        if response.status_code != 101:
            writer.close()
            return None
        ws.subprotocol = chosen
        return ws

    async def _flush(self) -> None:
        for chunk in self.protocol.data_to_send():
            if chunk:
                self.writer.write(chunk)
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()

    async def recv(self) -> bytes | None:
        while not self._messages:
            if self._closed:
                return None
            try:
                data = await self.reader.read(65536)
            except (ConnectionError, OSError):
                data = b""
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
                self._closed = True
            for frame in self.protocol.events_received():
                if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
                    self._partial = bytearray(frame.data)
                elif frame.opcode == Opcode.CONT and self._partial is not None:
                    self._partial += frame.data
                elif frame.opcode == Opcode.CLOSE:
                    self._closed = True
                    continue
                else:
                    continue
                if frame.fin and self._partial is not None:
                    self._messages.append(bytes(self._partial))
                    self._partial = None
            async with self._lock:
                await self._flush()
        return self._messages.popleft()

    async def send(self, data: bytes | str) -> None:
        """A binary message, or a text one for a str."""
        async with self._lock:
            if self._closed and self.protocol.close_sent is not None:
                return
            with contextlib.suppress(Exception):
                if isinstance(data, str):
                    self.protocol.send_text(data.encode())
                else:
                    self.protocol.send_binary(data)
                await self._flush()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        async with self._lock:
            with contextlib.suppress(Exception):
                self.protocol.send_close(code, reason)
                await self._flush()
        self._closed = True
        with contextlib.suppress(Exception):
            self.writer.close()
