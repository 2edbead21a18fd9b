"""The kubelet's HTTPS API on --port (10250): logs, exec, attach, port-forward, stats, pods, health, metrics.

A small HTTP/1.1 server on asyncio streams rather than an ASGI stack, because exec and port-forward
take over the socket after the upgrade (WebSocket or SPDY/3.1). One request per connection
(`Connection: close`), which is all the apiserver's proxy needs. Every path but /healthz goes
through the authentication and authorization filter of auth.py first.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import orjson
import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kubelet_agent.cri.logfile import parse_timestamp
from kubelet_agent.server import stats
from kubelet_agent.server.auth import AuthError, KubeletAuth
from kubelet_agent.server.cri_streaming import Container, CRIError, CRIStreaming
from kubelet_agent.server.logs import LogOptions, read_logs
from kubelet_agent.server.streaming import (
    PORTFORWARD_PROTOCOLS,
    PROTOCOL_HEADER,
    SPDY,
    PortForwardTunnel,
    SocketChannel,
    StreamError,
    dial_runtime,
    is_spdy,
    proxy_spdy,
    relay_remote_command,
    serve_channel_port_forward,
    stream_protocols,
)
from kubelet_agent.server.ws import EXEC_PROTOCOLS, PORTFORWARD_CHANNELS, PORTFORWARD_TUNNEL, WebSocket, is_websocket
from services.runtime.netns import Dialer
from services.runtime.pki import CertKey, create_ca, issue_serving_cert

log = structlog.get_logger(__name__)
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 500: "Internal Server Error", 501: "Not Implemented"}
STATUS_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
                  500: "InternalError", 501: "NotImplemented"}
OPEN_PATHS = ("/healthz", "/healthz/ping")


class KubeletLike(Protocol):
    """What the server reads from the kubelet: its name, options and the pods it runs."""

    workers: dict[str, Any]

    @property
    def name(self) -> str: ...


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or []


def status_body(status: int, message: str) -> bytes:
    return orjson.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": message, "reason": STATUS_REASONS.get(status, "InternalError"),
                         "code": status})


def serving_cert(cert_dir: Path, hosts: list[str]) -> tuple[Path, Path]:
    """A self-signed serving certificate for this node, made once and reused (upstream's kubelet.crt)."""
    cert, key = cert_dir / "kubelet.crt", cert_dir / "kubelet.key"
    with contextlib.suppress(OSError, ValueError):
        CertKey.load(cert, key)
        return cert, key
    cert_dir.mkdir(parents=True, exist_ok=True)
    ca = create_ca(f"{hosts[0]}-ca@{int(time.time())}")
    issue_serving_cert(ca, hosts).write(cert, key, chain=[ca.cert])
    return cert, key


def _flag(query: dict[str, list[str]], *names: str) -> bool:
    for name in names:
        if name in query:
            return query[name][-1].lower() in ("1", "true", "")
    return False


class Request:
    def __init__(self, method: str, target: str, headers: list[tuple[str, str]], head: bytes = b"") -> None:
        self.head = head
        self.method = method
        self.target = target
        parts = urllib.parse.urlsplit(target)
        self.path = urllib.parse.unquote(parts.path)
        self.query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        self.headers = headers

    def header(self, name: str) -> str:
        return next((v for k, v in self.headers if k.lower() == name.lower()), "")

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None


class KubeletServer:
    def __init__(self, kubelet: KubeletLike, *, address: str = "0.0.0.0", port: int = 10250,  # noqa: S104
                 runtime_endpoint: str | None = None, node_netns: str | None = None,
                 cert_file: str | None = None, key_file: str | None = None, cert_dir: str | None = None,
                 client_ca_file: str | None = None, hosts: list[str] | None = None,
                 auth: KubeletAuth | None = None) -> None:
        """`auth` None serves everyone (embedding, tests); the kubelet command always passes one."""
        self.kubelet = kubelet
        self.auth = auth
        self.address = address
        self.port = port
        self.cri = CRIStreaming(runtime_endpoint) if runtime_endpoint else None
        self.node_netns = node_netns
        self.cert_file, self.key_file = cert_file, key_file
        self.cert_dir = Path(cert_dir or "/var/lib/kubelet/pki")
        self.client_ca_file = client_ca_file
        self.hosts = hosts or []
        self.started = time.time()
        self._server: asyncio.Server | None = None
        self._dialer = Dialer(node_netns or None)
        self._stats = stats.StatsCollector()
        # Its own collector, so scrapes of /metrics/resource do not move the rates /stats/summary reports.
        self._resource_stats = stats.StatsCollector()
        self._ssl: ssl.SSLContext | None = None

    def ssl_context(self) -> ssl.SSLContext:
        cert, key = self.cert_file, self.key_file
        if not cert or not key:
            hosts = [h for h in [self.kubelet.name, *self.hosts, "localhost", "127.0.0.1"] if h]
            c, k = serving_cert(self.cert_dir, list(dict.fromkeys(hosts)))
            cert, key = str(c), str(k)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        if self.client_ca_file:
            # Optional: clients without a certificate may still present a bearer token.
            ctx.load_verify_locations(self.client_ca_file)
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    def use_certificate(self, cert_file: Path, key_file: Path) -> None:
        """Serve this certificate from the next handshake on (a rotated one; connections open keep theirs)."""
        if self._ssl is not None:
            self._ssl.load_cert_chain(str(cert_file), str(key_file))
            log.info("kubelet API serving a new certificate", path=str(cert_file))

    async def start(self, tls: bool = True, sock: socket.socket | None = None) -> None:
        """Serve on address:port, or on `sock` when given (bound elsewhere, e.g. in the node's namespace)."""
        ctx = await asyncio.to_thread(self.ssl_context) if tls else None
        self._ssl = ctx
        if sock is None:
            self._server = await asyncio.start_server(self._serve, self.address, self.port, ssl=ctx, limit=1 << 20)
        else:
            self._server = await asyncio.start_server(self._serve, sock=sock, ssl=ctx, limit=1 << 20)
        self.address, self.port = self._server.sockets[0].getsockname()[:2]
        log.info("kubelet API serving", address=f"{self.address}:{self.port}", tls=tls)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
        if self.cri is not None:
            await self.cri.close()
        self._dialer.close()

    # -- HTTP plumbing -------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(30):
                head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
            headers = [(k.strip(), v.strip()) for k, _, v in (h.partition(":") for h in lines[1:] if h)]
            request = Request(method, target, headers, head)
            length = int(request.header("content-length") or 0)
            if length:
                await reader.readexactly(length)
            if self.auth is not None and request.path not in OPEN_PATHS:
                await self.auth.check(method, request.path, headers, writer.get_extra_info("peercert"))
            await self._dispatch(request, reader, writer)
        except AuthError as exc:
            await self._respond(writer, exc.status, str(exc).encode(), "text/plain; charset=utf-8")
        except HTTPError as exc:
            await self._respond(writer, exc.status, status_body(exc.status, str(exc)), "application/json",
                                exc.headers)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError, ssl.SSLError):
            pass
        except Exception as exc:  # noqa: BLE001 - every failure still answers
            log.exception("kubelet API request failed")
            with contextlib.suppress(Exception):
                await self._respond(writer, 500, status_body(500, str(exc)), "application/json")
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str,
                       headers: list[tuple[str, str]] | None = None) -> None:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers or [])
        head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: {content_type}\r\n"
                f"{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
        writer.write(head.encode() + body)
        await writer.drain()

    @staticmethod
    async def _stream(writer: asyncio.StreamWriter, chunks: AsyncIterator[bytes], content_type: str) -> None:
        writer.write((f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n"
                      "Connection: close\r\n\r\n").encode())
        await writer.drain()
        async for chunk in chunks:
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _dispatch(self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parts = [p for p in request.path.split("/") if p]
        head = parts[0] if parts else ""
        if request.path in ("/healthz", "/healthz/ping"):
            await self._respond(writer, 200, b"ok", "text/plain; charset=utf-8")
        elif request.path == "/metrics":
            await self._respond(writer, 200, generate_latest(), CONTENT_TYPE_LATEST)
        elif request.path == "/pods":
            items = [w.pod for w in list(self.kubelet.workers.values())]
            body = orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
            await self._respond(writer, 200, body, "application/json")
        elif request.path == "/metrics/resource":
            now = time.time()
            summary = await self._resource_stats.summary(self.kubelet, self.cri) if self.cri is not None \
                else stats.configured_summary(self.kubelet, now)
            await self._respond(writer, 200, stats.resource_metrics(summary, now), "text/plain; version=0.0.4")
        elif request.path == "/stats/summary":
            summary = await self._stats.summary(self.kubelet, self.cri)
            await self._respond(writer, 200, orjson.dumps(summary), "application/json")
        elif head == "containerLogs" and len(parts) == 4:
            await self._logs(request, parts[1], parts[2], parts[3], writer)
        elif head in ("exec", "attach") and len(parts) in (4, 5):
            await self._remote_command(head, request, parts[1], parts[2], parts[-1], reader, writer)
        elif head == "portForward" and len(parts) in (3, 4):
            await self._port_forward(request, parts[1], parts[2], reader, writer)
        else:
            raise HTTPError(404, f"the server could not find the requested resource: {request.path}")

    # -- pods and containers ---------------------------------------------------------------------------

    def _pod(self, namespace: str, name: str) -> dict[str, Any]:
        for worker in list(self.kubelet.workers.values()):
            meta = worker.pod.get("metadata") or {}
            if meta.get("namespace") == namespace and meta.get("name") == name:
                return worker.pod
        raise HTTPError(404, f'pod "{name}" in namespace "{namespace}" not found on this node')

    def _runtime(self) -> CRIStreaming:
        if self.cri is None:
            raise HTTPError(501, "this node has no container runtime to stream from")
        return self.cri

    async def _container(self, namespace: str, pod_name: str, name: str, *, previous: bool = False,
                         running: bool = False) -> Container:
        pod = self._pod(namespace, pod_name)
        try:
            found = await self._runtime().containers(pod["metadata"]["uid"], name)
        except CRIError as exc:
            raise HTTPError(500, str(exc)) from exc
        if previous:
            if len(found) < 2:
                raise HTTPError(400, f'previous terminated container "{name}" in pod "{pod_name}" not found')
            return found[1]
        if not found or (running and not found[0].running):
            raise HTTPError(400 if found else 404, f'container "{name}" in pod "{pod_name}" is not '
                            + ("running" if found else "available"))
        return found[0]

    # -- logs ------------------------------------------------------------------------------------------

    async def _logs(self, request: Request, namespace: str, pod: str, name: str, writer: asyncio.StreamWriter) -> None:
        options = LogOptions(follow=_flag(request.query, "follow"), timestamps=_flag(request.query, "timestamps"))
        try:
            if (tail := request.param("tailLines")) not in (None, ""):
                options.tail_lines = int(tail) if int(tail) >= 0 else None
            if (limit := request.param("limitBytes")) not in (None, ""):
                options.limit_bytes = int(limit)
            if (since := request.param("sinceSeconds")) not in (None, ""):
                options.since_ns = time.time_ns() - int(since) * 1_000_000_000
            elif (since_time := request.param("sinceTime")) not in (None, ""):
                options.since_ns = parse_timestamp(since_time)
        except ValueError as exc:
            raise HTTPError(400, f"invalid log options: {exc}") from exc
        container = await self._container(namespace, pod, name, previous=_flag(request.query, "previous"))
        cri = self._runtime()
        try:
            status = await cri.status(container.id)
        except CRIError as exc:
            raise HTTPError(500, str(exc)) from exc
        if not status.log_path:
            raise HTTPError(500, f'container "{name}" has no log file')

        async def running() -> bool:
            try:
                return (await cri.status(container.id)).running
            except CRIError:
                return False

        await self._stream(writer, read_logs(status.log_path, options, running), "text/plain")

    # -- exec / attach ---------------------------------------------------------------------------------

    async def _remote_command(self, verb: str, request: Request, namespace: str, pod: str, name: str,
                              reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        q = request.query
        stdin = _flag(q, "input", "stdin")
        stdout = _flag(q, "output", "stdout")
        stderr = _flag(q, "error", "stderr")
        tty = _flag(q, "tty")
        command = q.get("command", [])
        if verb == "exec" and not command:
            raise HTTPError(400, "you must specify at least 1 command")
        if not (stdin or stdout or stderr):
            raise HTTPError(400, "you must specify at least 1 of stdin, stdout, stderr")
        container = await self._container(namespace, pod, name, running=True)
        spdy_upgrade = is_spdy(request.headers)
        if not spdy_upgrade and not is_websocket(request.headers):
            raise HTTPError(400, "Upgrade request required")
        cri = self._runtime()
        try:
            if verb == "exec":
                url = await cri.exec_url(container.id, command, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr)
            else:
                url = await cri.attach_url(container.id, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr)
            if spdy_upgrade:
                await proxy_spdy(url, request.headers, reader, writer, self._connect)
                return
            session = await dial_runtime(url, self._connect)
        except (CRIError, StreamError, OSError, asyncio.IncompleteReadError) as exc:
            raise HTTPError(500, f"unable to start {verb} in container {name}: {exc}") from exc
        ws = await WebSocket.accept(reader, writer, request.head, EXEC_PROTOCOLS)
        if ws is None:
            await session.close()
            return
        await relay_remote_command(ws, session, stdin=stdin, stdout=stdout, stderr=stderr, tty=tty)

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await self._dialer.connect(host, port, 10.0)

    # -- port-forward ----------------------------------------------------------------------------------

    async def _port_forward(self, request: Request, namespace: str, pod_name: str,
                            reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pod = self._pod(namespace, pod_name)
        try:
            pid = await self._runtime().sandbox_pid(pod["metadata"]["uid"])
        except CRIError as exc:
            raise HTTPError(500, f"unable to port-forward to pod {pod_name}: {exc}") from exc
        spdy_upgrade = is_spdy(request.headers)
        if not spdy_upgrade and not is_websocket(request.headers):
            raise HTTPError(400, "Upgrade request required")
        protocol = self._negotiate_spdy(request, PORTFORWARD_PROTOCOLS) if spdy_upgrade else ""
        try:
            ports = [int(p) for p in request.query.get("port", [])]
        except ValueError as exc:
            raise HTTPError(400, f"invalid port: {exc}") from exc
        dialer = Dialer(f"/proc/{pid}/ns/net")

        async def connect(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await dialer.connect(host, port, 10.0)

        try:
            if spdy_upgrade:
                writer.write((f"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: {SPDY}\r\n"
                              f"{PROTOCOL_HEADER}: {protocol}\r\n\r\n").encode())
                await writer.drain()
                await PortForwardTunnel(SocketChannel(reader, writer), connect, f"{namespace}/{pod_name}").serve()
                return
            ws = await WebSocket.accept(reader, writer, request.head, [PORTFORWARD_TUNNEL, *PORTFORWARD_CHANNELS])
            if ws is None:
                return
            if ws.subprotocol == PORTFORWARD_TUNNEL:
                await PortForwardTunnel(ws, connect, f"{namespace}/{pod_name}").serve()
            elif not ports:
                await ws.close(1008, "port-forward over channels needs at least one port")
            else:
                await serve_channel_port_forward(ws, connect, ports, f"{namespace}/{pod_name}")
        finally:
            dialer.close()

    @staticmethod
    def _negotiate_spdy(request: Request, supported: list[str]) -> str:
        """The first protocol the client offers that we serve, as upstream's httpstream handshake picks."""
        offered = stream_protocols(request.headers)
        if not offered:
            raise HTTPError(400, f"unable to upgrade: {PROTOCOL_HEADER} is required")
        chosen = next((p for p in offered if p in supported), "")
        if not chosen:
            raise HTTPError(403, f"unable to upgrade: unable to negotiate protocol: client supports "
                            f"[{' '.join(offered)}], server accepts [{' '.join(supported)}]",
                            [("X-Accepted-Stream-Protocol-Versions", p) for p in supported])
        return chosen
