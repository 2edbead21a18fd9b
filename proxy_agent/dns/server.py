"""The DNS server: UDP and TCP on asyncio, answers for the cluster zone from an in-memory cache of
finished replies, and forwarding of every other name to the upstream resolvers named in a resolv.conf.

A cached reply is found from the raw question bytes (no name decoding) and sent with the query's ID.
It is dropped when the Service its name is about changes; replies about no particular Service (the
zone apex, namespaces, pod names) are dropped on any change.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import Counter

from proxy_agent.dns.wire import (
    FORMERR,
    SERVFAIL,
    WireError,
    build_response,
    parse_question,
)
from proxy_agent.dns.zone import ClusterZone

log = structlog.get_logger("proxy_agent.dns")

REQUESTS = Counter(
    "coredns_dns_requests_total",
    "Counter of DNS requests made per zone, protocol and type.",
    ["proto", "zone"],
)
RESPONSES = Counter("coredns_dns_responses_total", "Counter of response status codes.", ["rcode"])
FORWARDS = Counter("coredns_forward_requests_total", "Counter of requests made per upstream.", ["to"])
UDP_MAX = 512
CACHE_MAX = 100_000


def read_resolv_conf(path: str) -> list[tuple[str, int]]:
    """The nameservers of a resolv.conf as (address, port); "address#port" names a port, as dnsmasq does."""
    servers: list[tuple[str, int]] = []
    try:
        text = Path(path).read_text()
    except OSError:
        return servers
    for line in text.splitlines():
        if line.lstrip().startswith(("#", ";")):
            continue
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            host, _, port = parts[1].partition("#")
            servers.append((host, int(port) if port else 53))
    return servers


class _Upstream(asyncio.DatagramProtocol):
    def __init__(self, done: asyncio.Future[bytes], ident: bytes) -> None:
        self.done = done
        self.ident = ident

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if data[:2] == self.ident and not self.done.done():
            self.done.set_result(data)

    def error_received(self, exc: Exception) -> None:
        if not self.done.done():
            self.done.set_exception(exc)


def question_end(data: bytes) -> int:
    """Where the only question of a query ends, walking label lengths without decoding them; -1 when
    its name uses compression (then parse_question must read it)."""
    n = len(data)
    if n < 12 or data[2] & 0x80 or data[4] or data[5] != 1:
        raise WireError("not a single-question query")
    i = 12
    while i < n:
        length = data[i]
        if not length:
            if i + 5 > n:
                raise WireError("short question")
            return i + 5
        if length & 0xC0:
            return -1
        i += length + 1
    raise WireError("name runs past the message")


class DNSServer:
    """Answers queries; the cache maps (opcode and RD bits, UDP or not, question bytes) to a reply
    without its ID and the response counter for its rcode."""

    def __init__(self, zone: ClusterZone, upstreams: list[tuple[str, int]], timeout: float = 2.0) -> None:
        self.zone = zone
        self.upstreams = upstreams
        self.timeout = timeout
        self._cache: dict[bytes, tuple[bytes, Any]] = {}
        self._by_owner: dict[tuple[str, str] | None, list[bytes]] = {}
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self.port = 0
        self._local_requests = {proto: REQUESTS.labels(proto, zone.domain) for proto in ("udp", "tcp")}
        zone.listeners.append(self._invalidate)

    # -- answering -----------------------------------------------------------------------------

    def _invalidate(self, owner: tuple[str, str]) -> None:
        for group in (owner, None):
            for key in self._by_owner.pop(group, ()):
                self._cache.pop(key, None)

    def answer_local(self, data: bytes, max_size: int) -> bytes | None:
        """The reply from the zone, or None when the name must be forwarded."""
        end = question_end(data)
        q = None
        if end < 0:
            q = parse_question(data)
            end = q.end
        key = bytes((data[2] & 0x79, max_size > UDP_MAX)) + data[12:end]
        cached = self._cache.get(key)
        if cached is not None:
            cached[1].inc()
            return data[:2] + cached[0]
        q = q or parse_question(data)
        answer = self.zone.lookup(q.name, q.qtype)
        if answer is None:
            return None
        reply = build_response(
            data, q, answer.rcode, answer.answers, answer.authority, answer.additional, max_size=max_size
        )
        counter = RESPONSES.labels(str(answer.rcode))
        counter.inc()
        if len(self._cache) < CACHE_MAX:
            self._cache[key] = (reply[2:], counter)
            self._by_owner.setdefault(self.zone.owner(q.name.lower()), []).append(key)
        return reply

    async def forward(self, data: bytes) -> bytes:
        """Relay a query to the upstream resolvers in turn; SERVFAIL when none answers."""
        for host, port in self.upstreams:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[bytes] = loop.create_future()
            ident = random.getrandbits(16).to_bytes(2, "big")
            try:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda d=done, i=ident: _Upstream(d, i), remote_addr=(host, port)
                )
            except OSError:
                continue
            try:
                FORWARDS.labels(f"{host}:{port}").inc()
                transport.sendto(ident + data[2:])
                async with asyncio.timeout(self.timeout):
                    reply = await done
                return data[:2] + reply[2:]
            except (TimeoutError, OSError):
                continue
            finally:
                transport.close()
        return self._error(data, SERVFAIL)

    def _error(self, data: bytes, rcode: int) -> bytes:
        flags = 0x8000 | ((data[2] << 8) & 0x0100 if len(data) > 2 else 0) | 0x0080 | rcode
        return data[:2].ljust(2, b"\0") + struct.pack("!HHHHH", flags, 0, 0, 0, 0)

    async def handle(self, data: bytes, proto: str) -> bytes | None:
        try:
            reply = self.answer_local(data, UDP_MAX if proto == "udp" else 65535)
        except WireError:
            return self._error(data, FORMERR) if len(data) >= 2 else None
        if reply is not None:
            self._local_requests[proto].inc()
            return reply
        REQUESTS.labels(proto, ".").inc()
        return await self.forward(data)

    # -- transports ----------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._udp, _ = await loop.create_datagram_endpoint(lambda: _UDPServer(self), local_addr=(host, port))
        self.port = self._udp.get_extra_info("sockname")[1]
        self._tcp = await asyncio.start_server(self._serve_tcp, host, self.port)
        log.info(
            "serving DNS",
            address=f"{host}:{self.port}",
            zone=self.zone.domain,
            upstreams=[f"{h}:{p}" for h, p in self.upstreams],
        )

    async def stop(self) -> None:
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
            await self._tcp.wait_closed()

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                async with asyncio.timeout(30):
                    head = await reader.readexactly(2)
                    data = await reader.readexactly(struct.unpack("!H", head)[0])
                reply = await self.handle(data, "tcp")
                if reply is None:
                    return
                writer.write(struct.pack("!H", len(reply)) + reply)
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class _UDPServer(asyncio.DatagramProtocol):
    def __init__(self, server: DNSServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        server = self.server
        try:
            reply = server.answer_local(data, UDP_MAX)
        except WireError:
            if len(data) >= 2 and self.transport is not None:
                self.transport.sendto(server._error(data, FORMERR), addr)
            return
        if reply is not None:
            server._local_requests["udp"].inc()
            if self.transport is not None:
                self.transport.sendto(reply, addr)
            return
        task = asyncio.get_running_loop().create_task(self._forward(data, addr))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _forward(self, data: bytes, addr: tuple[str, int]) -> None:
        REQUESTS.labels("udp", ".").inc()
        reply = await self.server.forward(data)
        if self.transport is not None:
            self.transport.sendto(reply, addr)
