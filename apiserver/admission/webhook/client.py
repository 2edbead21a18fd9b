"""The HTTPS client that posts AdmissionReviews to webhooks.

A small HTTP/1.1 client on asyncio streams, made for this one exchange: one POST of a JSON body, one
JSON answer (Content-Length, chunked, or until close), connections kept open and reused per endpoint,
server name and CA bundle. It costs a fraction of a general-purpose client per call (measured in
bench/webhook_admission.py), which is most of what a webhook adds to a request.

The server certificate is checked against the webhook's `caBundle` (or the system roots) for the name
the webhook is known by (the Service's DNS name, or the URL's host). Each call is bounded by the
webhook's timeoutSeconds, capped at 30 s, over the whole exchange (connect, send, every byte of the
answer), so a webhook that stalls never holds a request longer.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections import defaultdict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from apiserver.admission.webhook.resolver import Location

MAX_TIMEOUT = 30
#: upstream caps a webhook's answer at 3 MiB more than the largest request body
MAX_RESPONSE_BYTES = 6 * 1024 * 1024
#: idle connections kept per endpoint
MAX_IDLE = 16


class CallError(Exception):
    """The webhook could not be called or answered nonsense; its failurePolicy decides."""


class _Closed(Exception):
    """A reused connection turned out closed before any answer came: the request is sent again."""


@dataclass(frozen=True, slots=True)
class _Endpoint:
    host: str
    port: int
    server_name: str
    ca_bundle: str


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.close()


def _ssl_context(ca_bundle: str) -> ssl.SSLContext:
    if not ca_bundle:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cadata=base64.b64decode(ca_bundle).decode())
    except (ValueError, ssl.SSLError) as exc:
        raise CallError(f"could not get REST client: unable to load root certificates: {exc}") from exc


def urlhost(url: str) -> str:
    """The host[:port] part of a URL."""
    return url.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]


class WebhookClient:
    """Posts AdmissionReview JSON and returns the decoded answer."""

    def __init__(self) -> None:
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._idle: defaultdict[_Endpoint, list[_Connection]] = defaultdict(list)

    def _context(self, ca_bundle: str) -> ssl.SSLContext:
        ctx = self._contexts.get(ca_bundle)
        if ctx is None:
            ctx = self._contexts[ca_bundle] = _ssl_context(ca_bundle)
        return ctx

    async def post(self, where: Location, ca_bundle: str, body: bytes, seconds: int) -> Any:
        """The webhook's decoded JSON answer; CallError (upstream's wording) for anything else."""
        parts = urlsplit(where.url)
        host, port = parts.hostname or "", parts.port or 443
        endpoint = _Endpoint(host, port, where.server_name or host, ca_bundle)
        target = parts.path or "/"
        if parts.query:
            target += f"?{parts.query}"
        head = (f"POST {target} HTTP/1.1\r\nHost: {urlhost(where.shown)}\r\nContent-Type: application/json\r\n"
                f"Accept: application/json, */*\r\nContent-Length: {len(body)}\r\n"
                "User-Agent: pyk8s-apiserver\r\n\r\n").encode()
        failed = f'failed to call webhook: Post "{where.shown}"'
        try:
            async with asyncio.timeout(max(1, min(seconds, MAX_TIMEOUT))):
                status, content = await self._exchange(endpoint, head + body)
        except TimeoutError as exc:
            raise CallError(f"{failed}: context deadline exceeded") from exc
        except ssl.SSLCertVerificationError as exc:
            raise CallError(f"{failed}: tls: failed to verify certificate: {exc.verify_message}") from exc
        except ConnectionRefusedError as exc:
            raise CallError(f"{failed}: dial tcp {urlhost(where.url)}: connect: connection refused") from exc
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise CallError(f"{failed}: {exc or type(exc).__name__}") from exc
        if status != 200:
            raise CallError(f"failed to call webhook: an error on the server ({content[:256].decode(errors='replace')}"
                            ") has prevented the request from succeeding")
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError as exc:
            raise CallError(f"failed to call webhook: {exc}") from exc

    async def _exchange(self, endpoint: _Endpoint, request: bytes) -> tuple[int, bytes]:
        idle = self._idle[endpoint]
        while idle:
            conn = idle.pop()
            try:
                return await self._send(endpoint, conn, request)
            except _Closed:
                conn.close()
        reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port,
                                                       ssl=self._context(endpoint.ca_bundle),
                                                       server_hostname=endpoint.server_name)
        try:
            return await self._send(endpoint, _Connection(reader, writer), request)
        except _Closed as exc:
            raise ConnectionResetError("EOF") from exc

    async def _send(self, endpoint: _Endpoint, conn: _Connection, request: bytes) -> tuple[int, bytes]:
        """One request on `conn`; the connection goes back to the pool when the answer leaves it usable."""
        done = False
        try:
            conn.writer.write(request)
            await conn.writer.drain()
            status_line = await conn.reader.readline()
            if not status_line:
                raise _Closed
            status, headers = _parse_head(status_line, await _read_headers(conn.reader))
            content = await _read_body(conn.reader, headers)
            framed = "content-length" in headers or headers.get("transfer-encoding", "").lower() == "chunked"
            done = framed and headers.get("connection", "").lower() != "close"
            return status, content
        except (ConnectionResetError, BrokenPipeError) as exc:
            raise _Closed from exc
        finally:
            if done and len(self._idle[endpoint]) < MAX_IDLE:
                self._idle[endpoint].append(conn)
            else:
                conn.close()

    async def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()


async def _read_headers(reader: asyncio.StreamReader) -> dict[str, str]:
    headers: dict[str, str] = {}
    size = 0
    while True:
        line = await reader.readline()
        size += len(line)
        if size > 64 * 1024:
            raise ValueError("response headers too large")
        if line in (b"\r\n", b"\n", b""):
            return headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


def _parse_head(status_line: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"malformed HTTP response {status_line[:64]!r}")
    return int(parts[1]), headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        total = 0
        while True:
            size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            total += size
            if total > MAX_RESPONSE_BYTES:
                raise ValueError("response body too large")
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    if "content-length" in headers:
        length = int(headers["content-length"])
        if length > MAX_RESPONSE_BYTES:
            raise ValueError("response body too large")
        return await reader.readexactly(length)
    parts: list[bytes] = []
    total = 0
    while chunk := await reader.read(64 * 1024):
        total += len(chunk)
        if total > MAX_RESPONSE_BYTES:
            raise ValueError("response body too large")
        parts.append(chunk)
    return b"".join(parts)
