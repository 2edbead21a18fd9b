"""/healthz, /livez, /readyz and /metrics for components other than the apiserver.

A few lines of HTTP/1.1 on asyncio streams: it needs no framework, installs no signal
handlers of its own, and can serve TLS when given a certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ssl
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

log = structlog.get_logger(__name__)

Check = Callable[[], bool | Awaitable[bool] | None | Awaitable[None]]

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}


class HealthServer:
    """Named checks per endpoint; a check fails by returning False or raising."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        registry: CollectorRegistry = REGISTRY,
        ssl_context: ssl.SSLContext | None = None,
        metrics: bool = True,
    ) -> None:
        self.host = host
        #: False where metrics belong behind authentication elsewhere (the kubelet's 10248 serves only health).
        self.metrics = metrics
        self.port = port
        self.registry = registry
        self.ssl_context = ssl_context
        self._checks: dict[str, dict[str, Check]] = {"livez": {"ping": _ok}, "readyz": {"ping": _ok}}
        self._server: asyncio.Server | None = None

    def add_livez_check(self, name: str, check: Check) -> None:
        self._checks["livez"][name] = check

    def add_readyz_check(self, name: str, check: Check) -> None:
        self._checks["readyz"][name] = check

    def _checks_for(self, endpoint: str) -> dict[str, Check]:
        if endpoint == "healthz":
            return {**self._checks["livez"], **self._checks["readyz"]}
        return self._checks[endpoint]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("serving health and metrics", address=f"{self.host}:{self.port}")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{self.host}:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                request_line = await reader.readline()
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
            parts = request_line.decode("latin-1").split()
            if len(parts) < 2:
                return
            status, content_type, body = await self.handle(parts[0], parts[1])
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if parts[0] == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def handle(self, method: str, target: str) -> tuple[int, str, bytes]:
        """Answer one request: (status, content type, body)."""
        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", b"method not allowed\n"
        url = urlsplit(target)
        query = parse_qs(url.query, keep_blank_values=True)
        path = url.path.rstrip("/") or "/"
        if path == "/metrics" and self.metrics:
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        endpoint, _, single = path.lstrip("/").partition("/")
        if endpoint not in ("healthz", "livez", "readyz"):
            return 404, "text/plain; charset=utf-8", b"404 page not found\n"
        checks = self._checks_for(endpoint)
        if single:
            if single not in checks:
                return 404, "text/plain; charset=utf-8", b"404 page not found\n"
            ok, reason = await _run(checks[single])
            text = "ok" if ok else f"internal server error: {reason}"
            return (200 if ok else 500), "text/plain; charset=utf-8", text.encode()
        excluded = set(query.get("exclude", []))
        lines: list[str] = []
        failed = False
        for name, check in checks.items():
            if name in excluded:
                lines.append(f"[+]{name} excluded: ok")
                continue
            ok, _ = await _run(check)
            failed |= not ok
            lines.append(f"[+]{name} ok" if ok else f"[-]{name} failed: reason withheld")
        verdict = f"{endpoint} check {'failed' if failed else 'passed'}"
        if failed or "verbose" in query:
            text = "\n".join([*lines, verdict]) + "\n"
        else:
            text = "ok"
        return (500 if failed else 200), "text/plain; charset=utf-8", text.encode()


def _ok() -> bool:
    return True


async def _run(check: Check) -> tuple[bool, str]:
    try:
        result: Any = check()
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:
        return False, str(exc)
    return result is not False, ""
