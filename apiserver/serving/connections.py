"""Deadlines and size caps on every HTTP connection, as upstream's secure server sets them on Go's http.Server.

uvicorn only times out a keep-alive connection after a response: a client that completes the TLS
handshake and sends nothing, or trickles a header line every few seconds, would hold its descriptor
for good. This protocol gives every request's header a deadline from the moment the server waits for
it (upstream's ReadHeaderTimeout, 32 s) and caps its size (MaxHeaderBytes, 1 MiB, then 431); idle
keep-alive connections close after IdleTimeout (90 s), which uvicorn's `timeout_keep_alive` enforces.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: Go's http.Server allows this much beyond MaxHeaderBytes for the request line and framing.
_HEADER_SLACK = 4096
#: how long a connection closed mid-body waits before it closes (Go's closeWriteAndWait)
_LINGER_SECONDS = 0.5

_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
              b"connection: close\r\n\r\n431 Request Header Fields Too Large")


@dataclass(frozen=True)
class ConnectionLimits:
    """upstream's values (staging/src/k8s.io/apiserver/pkg/server/secure_serving.go)."""

    read_header_timeout: float = 32.0
    idle_timeout: float = 90.0
    max_header_bytes: int = 1 << 20


class _LingeringClose:
    """The transport as uvicorn's request cycle sees it. Closing a connection whose client is still sending
    a body the server refused (a 413 answers with `connection: close`) would reset it at once, and the
    client could lose the answer; as Go's server does, stop writing and reading, give the client a moment to
    read the answer, then close. Nothing more of the body is read."""

    def __init__(self, transport: asyncio.Transport, protocol: Any) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not self._protocol.body_pending or self._transport.is_closing():
            self._transport.close()
            return
        self._protocol.discard_input = True
        if self._transport.can_write_eof():
            self._transport.write_eof()
        self._transport.pause_reading()
        self._protocol.loop.call_later(_LINGER_SECONDS, self._transport.close)


def guarded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with the header deadline and size cap of `limits` (pass it as `http`)."""

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_deadline: asyncio.TimerHandle | None = None
            self._header_bytes = 0
            #: a request's body is still arriving; data after a lingering close is dropped
            self.body_pending = False
            self.discard_input = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.transport = _LingeringClose(transport, self)  # type: ignore[assignment]
            self._await_header()

        def connection_lost(self, exc: Exception | None) -> None:
            self._header_received()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.discard_input:
                return
            if self._header_deadline is not None:
                self._header_bytes += len(data)
                if self._header_bytes > limits.max_header_bytes + _HEADER_SLACK:
                    self._header_received()
                    self.transport.write(_TOO_LARGE)
                    self.transport.close()
                    return
            super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._await_header()

        def on_headers_complete(self) -> None:
            self._header_received()
            self.body_pending = True
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self.body_pending = False
            super().on_message_complete()

        def handle_websocket_upgrade(self) -> None:
            """A WebSocket owns the bare transport: its close is its own closing handshake."""
            self.body_pending = False
            self.transport = self.transport._transport  # type: ignore[attr-defined]
            super().handle_websocket_upgrade()

        def _await_header(self) -> None:
            """Start the clock for a request's header: when the connection opens, then from the first byte
            of each later request (an idle connection has uvicorn's keep-alive timer until then)."""
            if self._header_deadline is None:
                self._header_bytes = 0
                self._header_deadline = self.loop.call_later(limits.read_header_timeout, self._header_late)

        def _header_received(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _header_late(self) -> None:
            """Go closes such a connection without an answer; abort so the descriptor goes at once, not
            after a TLS close handshake the client may never answer."""
            self._header_deadline = None
            if not self.transport.is_closing():
                self.transport.abort()

    return GuardedHttpToolsProtocol
