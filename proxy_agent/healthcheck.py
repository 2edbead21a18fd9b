"""kube-proxy's two HTTP faces besides metrics: /healthz (with lastUpdated/currentTime, as upstream)
and one health-check server per externalTrafficPolicy=Local Service's healthCheckNodePort, which
answers 200 only while this node has local endpoints, so load balancers skip nodes without any.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime

import orjson
import structlog

from services.runtime.netns import Dialer

log = structlog.get_logger("proxy_agent.healthcheck")

Handler = Callable[[str], tuple[int, dict]]


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f %z UTC")


class JSONServer:
    """A minimal HTTP/1.1 server answering every GET with the handler's (status, JSON body)."""

    def __init__(self, host: str, port: int, handler: Handler, dialer: Dialer | None = None) -> None:
        self.host, self.port, self.handler = host, port, handler
        self.dialer = dialer
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Listen here, or in the dialer's network namespace when there is one."""
        if self.dialer is not None and self.dialer.netns:
            sock = await self.dialer.listen(self.host, self.port)
            self._server = await asyncio.start_server(self._serve, sock=sock)
        else:
            self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                line = await reader.readline()
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
            parts = line.decode("latin-1").split()
            if len(parts) < 2:
                return
            status, body = self.handler(parts[1])
            data = orjson.dumps(body)
            writer.write(
                f"HTTP/1.1 {status} {'OK' if status == 200 else 'Service Unavailable'}\r\n"
                f"Content-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class ProxyHealth:
    """Tracks when rules were last written versus when a change was last queued."""

    def __init__(self, sync_period: float) -> None:
        self.sync_period = sync_period
        self.last_updated = time.time()
        self.last_queued = 0.0

    def queued(self) -> None:
        if self.last_queued <= self.last_updated:
            self.last_queued = time.time()

    def updated(self) -> None:
        self.last_updated = time.time()
        self.last_queued = 0.0

    def healthy(self) -> bool:
        """Unhealthy only when a queued change has waited longer than twice the sync period."""
        return not self.last_queued or time.time() - self.last_queued < 2 * self.sync_period

    def handle(self, path: str) -> tuple[int, dict]:
        ok = self.healthy()
        return (200 if ok else 503), {
            "lastUpdated": rfc3339(self.last_updated),
            "currentTime": rfc3339(time.time()),
            "nodeEligible": True,
        }


class ServiceHealthServers:
    """One JSONServer per healthCheckNodePort, reconciled after each sync; in the node's network namespace
    when `dialer` has one, so load balancers reach them on the node's addresses."""

    def __init__(self, host: str, dialer: Dialer | None = None) -> None:
        self.host = host
        self.dialer = dialer
        self._servers: dict[int, JSONServer] = {}
        self._counts: dict[int, tuple[str, int]] = {}

    async def sync(self, wanted: dict[int, tuple[str, int]]) -> None:
        """`wanted`: healthCheckNodePort -> (namespace/name, local endpoint count)."""
        self._counts = dict(wanted)
        for port in [p for p in self._servers if p not in wanted]:
            await self._servers.pop(port).stop()
        for port in wanted:
            if port in self._servers:
                continue
            server = JSONServer(self.host, port, lambda _path, p=port: self._answer(p), self.dialer)
            try:
                await server.start()
            except OSError as exc:
                log.warning("cannot serve health check node port", port=port, error=str(exc))
                continue
            self._servers[port] = server

    def _answer(self, port: int) -> tuple[int, dict]:
        service, count = self._counts.get(port, ("", 0))
        ns, _, name = service.partition("/")
        return (200 if count else 503), {
            "service": {"namespace": ns, "name": name},
            "localEndpoints": count,
            "serviceProxyHealthy": True,
        }

    async def stop(self) -> None:
        for server in self._servers.values():
            await server.stop()
        self._servers.clear()
