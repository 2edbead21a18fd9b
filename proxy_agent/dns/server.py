"""The DNS server: UDP and TCP on asyncio, answers for the cluster zone from an in-memory cache
that is dropped whenever the zone changes, and forwarding of every other name to the upstream
resolvers named in a resolv.conf.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from pathlib import Path

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


class DNSServer:
    """Answers queries; the cache maps (RD flag, question bytes) to a reply without its ID."""

    def __init__(self, zone: ClusterZone, upstreams: list[tuple[str, int]], timeout: float = 2.0) -> None:
        self.zone = zone
        self.upstreams = upstreams
        self.timeout = timeout
        self._cache: dict[bytes, bytes] = {}
        self._generation = -1
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self.port = 0

    # -- answering -----------------------------------------------------------------------------

    def answer_local(self, data: bytes, max_size: int) -> bytes | None:
        """The reply from the zone, or None when the name must be forwarded."""
        if self._generation != self.zone.generation:
            self._cache.clear()
            self._generation = self.zone.generation
        q = parse_question(data)
        key = bytes((data[2] & 0x01, max_size > UDP_MAX)) + data[12 : q.end]
        cached = self._cache.get(key)
        if cached is not None:
            return data[:2] + cached
        answer = self.zone.lookup(q.name, q.qtype)
        if answer is None:
            return None
        reply = build_response(
            data, q, answer.rcode, answer.answers, answer.authority, answer.additional, max_size=max_size
        )
        if len(self._cache) < CACHE_MAX:
            self._cache[key] = reply[2:]
        RESPONSES.labels(str(answer.rcode)).inc()
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
            REQUESTS.labels(proto, self.zone.domain).inc()
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
            REQUESTS.labels("udp", server.zone.domain).inc()
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
