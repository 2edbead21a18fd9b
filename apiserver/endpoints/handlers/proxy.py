"""Proxying pods/log, pods/exec, pods/attach, pods/portforward and nodes/proxy to the node's kubelet.

The apiserver validates the request against the pod (container names, options), then forwards it to
the kubelet API at the node's address: log bodies stream through as they arrive; WebSocket upgrades
(exec/attach over `v5.channel.k8s.io`, v4, `channel.k8s.io` and their base64 forms, port-forward
`SPDY/3.1+portforward.k8s.io`) are accepted with the subprotocol the kubelet chose and their messages
relayed both ways untouched; a WebSocket for pods/log is served here, from the kubelet's HTTP body. The server must
run uvicorn with `ws="wsproto"`: the `websockets` implementation refuses the port-forward subprotocol.
SPDY/3.1 upgrades (kubectl with WebSockets off, older clients) are passed to the kubelet and, once it
answers 101, the two connections are spliced byte for byte, as upstream's upgrade-aware proxy does.
These are ASGI-level functions so the caller can hand over `http` and `websocket` scopes alike.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import posixpath
import random
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import structlog
from wsproto import ConnectionType, WSConnection
from wsproto import events as wsevents
from wsproto.connection import ConnectionState
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from services.api import errors
from services.client.dialerrors import dial_error

log = structlog.get_logger(__name__)

Scope = dict[str, Any]
SPDY = b"spdy/3.1"
STREAM_PROTOCOL = b"x-stream-protocol-version"
HIGH_WATER = 1 << 20
#: Headers that belong to one connection (RFC 9110 7.6.1), never copied across a proxy.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                         "te", "trailer", "transfer-encoding", "upgrade"})
_NOT_FORWARDED = _HOP_BY_HOP | {"host", "authorization"}
#: the subprotocols pods/log streams over a WebSocket with, and whether each sends base64 text
LOG_PROTOCOLS = {"": False, "binary.k8s.io": False, "base64.binary.k8s.io": True}
LOG_PARAMS = ("follow", "previous", "timestamps", "sinceSeconds", "sinceTime", "tailLines", "limitBytes")


@dataclass
class KubeletClientConfig:
    """Upstream's --kubelet-preferred-address-types, --kubelet-certificate-authority and client cert flags."""

    preferred_address_types: list[str] = field(
        default_factory=lambda: ["InternalIP", "ExternalIP", "Hostname", "InternalDNS", "ExternalDNS"])
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    timeout: float = 30.0
    _ssl: ssl.SSLContext | None = field(default=None, init=False, repr=False)

    def ssl_context(self) -> ssl.SSLContext:
        """Verify the kubelet only when a CA is configured, as upstream does without the flag."""
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else \
                ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            if not self.ca_file:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if self.client_cert and self.client_key:
                ctx.load_cert_chain(self.client_cert, self.client_key)
            self._ssl = ctx
        return self._ssl


DEFAULT_CONFIG = KubeletClientConfig()


def kubelet_address(node: dict[str, Any], config: KubeletClientConfig = DEFAULT_CONFIG) -> tuple[str, int]:
    status = node.get("status") or {}
    addresses = status.get("addresses") or []
    port = int(((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 10250)
    for kind in config.preferred_address_types:
        for address in addresses:
            if address.get("type") == kind and address.get("address"):
                return address["address"], port
    known = ", ".join(f"{a.get('type')}={a.get('address')}" for a in addresses)
    raise errors.internal(f"no preferred addresses found; known addresses: [{known}]")


def kubelet_base(node: dict[str, Any], config: KubeletClientConfig = DEFAULT_CONFIG) -> str:
    host, port = kubelet_address(node, config)
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def _query(scope: Scope) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def _true(query: dict[str, list[str]], name: str) -> bool:
    return (_one(query, name) or "").lower() in ("true", "1")


def pick_container(pod: dict[str, Any], requested: str | None, *, ephemeral: bool = True) -> str:
    """The container a request means, with the apiserver's messages when it is missing or unknown."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    containers = [c["name"] for c in spec.get("containers") or []]
    init = [c["name"] for c in spec.get("initContainers") or []]
    eph = [c["name"] for c in spec.get("ephemeralContainers") or []] if ephemeral else []
    if not requested:
        if len(containers) == 1:
            return containers[0]
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
        if init:
            message += f" or one of the init containers: [{' '.join(init)}]"
        if eph:
            message += f" or one of the ephemeral containers: [{' '.join(eph)}]"
        raise errors.bad_request(message)
    if requested not in containers + init + eph:
        raise errors.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def kubelet_path(pod: dict[str, Any], subresource: str, query: dict[str, list[str]]) -> str:
    """The kubelet URL path and query for a pod subresource request (after validation)."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    quote = urllib.parse.quote
    if subresource == "log":
        container = pick_container(pod, _one(query, "container"))
        params = []
        for key in LOG_PARAMS:
            value = _one(query, key)
            if value not in (None, ""):
                params.append((key, value))
        if _one(query, "tailLines") not in (None, "") and int(_one(query, "tailLines") or 0) < 0:
            raise errors.bad_request("tailLines: Invalid value: must be greater than or equal to 0")
        qs = urllib.parse.urlencode(params)
        return f"/containerLogs/{quote(ns)}/{quote(name)}/{quote(container)}" + (f"?{qs}" if qs else "")
    if subresource in ("exec", "attach"):
        container = pick_container(pod, _one(query, "container"))
        stdin, stdout, stderr, tty = (_true(query, k) for k in ("stdin", "stdout", "stderr", "tty"))
        if not (stdin or stdout or stderr):
            raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
        if tty and stderr and subresource == "exec":
            stderr = False
        params = [("command", c) for c in query.get("command", [])] if subresource == "exec" else []
        if subresource == "exec" and not params:
            raise errors.bad_request("you must specify at least 1 command")
        params += [(k, "1") for k, on in (("input", stdin), ("output", stdout), ("error", stderr), ("tty", tty))
                   if on]
        return f"/{subresource}/{quote(ns)}/{quote(name)}/{quote(container)}?{urllib.parse.urlencode(params)}"
    if subresource == "portforward":
        ports = [p for values in query.get("ports", []) for p in values.split(",") if p]
        for p in ports:
            if not p.isdigit() or not 0 < int(p) < 65536:
                raise errors.bad_request(f"invalid port {p!r}")
        qs = urllib.parse.urlencode([("port", p) for p in ports])
        return f"/portForward/{quote(ns)}/{quote(name)}" + (f"?{qs}" if qs else "")
    raise errors.not_found("pods", "", f"{name}/{subresource}")


async def _send_status(scope: Scope, send: Any, exc: errors.StatusError) -> None:
    body = orjson.dumps(exc.to_status())
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if scope["type"] == "websocket":
        if "websocket.http.response" in (scope.get("extensions") or {}):
            await send({"type": "websocket.http.response.start", "status": exc.code, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1011, "reason": exc.message[:120]})
        return
    await send({"type": "http.response.start", "status": exc.code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _status_from_kubelet(code: int, body: bytes) -> errors.StatusError:
    with contextlib.suppress(ValueError, AttributeError):
        status = orjson.loads(body)
        if isinstance(status, dict) and status.get("kind") == "Status":
            return errors.StatusError.from_status(status, code)
    text = body.decode(errors="replace").strip() or f"kubelet answered {code}"
    reason = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}.get(code, "InternalError")
    return errors.StatusError(code if code >= 400 else 500, reason, text)


async def proxy_pod_subresource(scope: Scope, receive: Any, send: Any, pod: dict[str, Any],
                                node: dict[str, Any] | None, subresource: str,
                                config: KubeletClientConfig = DEFAULT_CONFIG) -> None:
    """Serve pods/{log,exec,attach,portforward} for `pod` (already fetched and authorized) via its node.

    `node` is None when the pod is not bound yet: logs are then empty, as upstream, and streaming fails.
    """
    try:
        path = kubelet_path(pod, subresource, _query(scope))
        if node is None and subresource == "log":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b""})
            return
        if node is None:
            raise errors.bad_request(f"pod {pod['metadata']['name']} does not have a host assigned")
        base = kubelet_base(node, config)
    except errors.StatusError as exc:
        await _send_status(scope, send, exc)
        return
    except ValueError as exc:
        await _send_status(scope, send, errors.bad_request(str(exc)))
        return
    if scope["type"] == "websocket" and subresource == "log":
        await _log_websocket(scope, receive, send, base + path, config)
    elif scope["type"] == "websocket":
        await _relay_websocket(scope, receive, send, base.replace("https://", "wss://", 1) + path, config)
    elif is_spdy_upgrade(scope):
        await _relay_spdy(scope, receive, send, base + path, config)
    else:
        await _forward_http(scope, receive, send, base + path, config)


async def proxy_node(scope: Scope, receive: Any, send: Any, node: dict[str, Any], path: str,
                     config: KubeletClientConfig = DEFAULT_CONFIG) -> None:
    """Serve /api/v1/nodes/{name}/proxy/{path}: any method, forwarded to the kubelet API."""
    try:
        base = kubelet_base(node, config)
    except errors.StatusError as exc:
        await _send_status(scope, send, exc)
        return
    qs = scope.get("query_string", b"").decode("latin-1")
    target = base + "/" + path.lstrip("/") + (f"?{qs}" if qs else "")
    if scope["type"] == "websocket":
        await _relay_websocket(scope, receive, send, target.replace("https://", "wss://", 1), config)
    elif is_spdy_upgrade(scope):
        await _relay_spdy(scope, receive, send, target, config)
    else:
        await _forward_http(scope, receive, send, target, config, raw=True, all_headers=True)


# -- services/proxy and pods/proxy ---------------------------------------------------------------------

Getter = Callable[[str, str], Awaitable[dict[str, Any]]]
_SCHEMES = ("", "http", "https")


def split_scheme_name_port(ident: str) -> tuple[str, str, str] | None:
    """`name`, `name:port` or `scheme:name:port` as upstream's SplitSchemeNamePort reads them; None if invalid."""
    parts = ident.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, (name, port) = "", parts
    elif len(parts) == 3:
        scheme, name, port = parts
    else:
        return None
    return (scheme, name, port) if name and scheme in _SCHEMES else None


def _join_host(ip: str, port: str | int) -> str:
    host = f"[{ip}]" if ":" in ip else ip
    return f"{host}:{port}" if port != "" else host


async def service_location(namespace: str, ident: str, services: Getter, endpoints: Getter, pods: Getter) -> str:
    """`scheme://ip:port` of one ready endpoint behind the service port `ident` names, picked at random as
    upstream does; each candidate must still be the IP of the pod its targetRef names."""
    split = split_scheme_name_port(ident)
    if split is None:
        raise errors.bad_request(f'invalid service request "{ident}"')
    scheme, name, port = split
    if port.isdigit():
        service = await services(namespace, name)
        named = [p.get("name") or "" for p in (service.get("spec") or {}).get("ports") or []
                 if p.get("port") == int(port)]
        if not named:
            raise _unavailable(f'no service port {int(port)} found for service "{name}"')
        port = named[0]
    eps = await endpoints(namespace, name)
    subsets = eps.get("subsets") or []
    if not subsets:
        raise _unavailable(f'no endpoints available for service "{name}"')
    start = random.randrange(len(subsets))
    for i in range(len(subsets)):
        subset = subsets[(start + i) % len(subsets)]
        addresses = subset.get("addresses") or []
        if not addresses:
            continue
        for sport in subset.get("ports") or []:
            if (sport.get("name") or "") != port:
                continue
            first = random.randrange(len(addresses))
            for j in range(len(addresses)):
                address = addresses[(first + j) % len(addresses)]
                if await _is_valid_address(namespace, address, pods):
                    return f"{scheme or 'http'}://{_join_host(address['ip'], sport['port'])}"
    raise _unavailable(f'no endpoints available for service "{ident}"')


def _unavailable(message: str) -> errors.StatusError:
    return errors.StatusError(503, "ServiceUnavailable", message)


async def _is_valid_address(namespace: str, address: dict[str, Any], pods: Getter) -> bool:
    """Upstream only proxies to an address whose targetRef pod still has that IP."""
    ref = address.get("targetRef") or {}
    if not ref or ref.get("namespace") != namespace or not ref.get("name"):
        log.warning("endpoint address skipped: no target ref in this namespace", address=address.get("ip"))
        return False
    try:
        pod = await pods(namespace, ref["name"])
    except errors.StatusError:
        return False
    status = pod.get("status") or {}
    ips = [p.get("ip") for p in status.get("podIPs") or []] or [status.get("podIP")]
    return address.get("ip") in ips


def _global_unicast(value: str) -> bool:
    """Go's net.IP.IsGlobalUnicast: private ranges count, loopback, link-local, multicast and broadcast not."""
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return False
    return not (ip.is_unspecified or ip.is_loopback or ip.is_multicast or ip.is_link_local
                or ip == ipaddress.IPv4Address("255.255.255.255"))


async def pod_location(namespace: str, ident: str, pods: Getter) -> str:
    """`scheme://podIP[:port]`; without a port, the first container port the pod declares, as upstream."""
    split = split_scheme_name_port(ident)
    if split is None:
        raise errors.bad_request(f'invalid pod request "{ident}"')
    scheme, name, port = split
    pod = await pods(namespace, name)
    if not port:
        port = next((str(c["ports"][0].get("containerPort")) for c in (pod.get("spec") or {}).get("containers") or []
                     if c.get("ports")), "")
    status = pod.get("status") or {}
    pod_ip = ((status.get("podIPs") or [{}])[0].get("ip") or status.get("podIP") or "")
    if not _global_unicast(pod_ip):
        raise errors.bad_request("address not allowed")
    return f"{scheme or 'http'}://{_join_host(pod_ip, port)}"


_INSECURE = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
_INSECURE.check_hostname = False
_INSECURE.verify_mode = ssl.CERT_NONE


async def proxy_to(scope: Scope, receive: Any, send: Any, locate: Callable[[], Awaitable[str]], path: str | None,
                   config: KubeletClientConfig = DEFAULT_CONFIG) -> None:
    """Serve a services/proxy or pods/proxy request: any method, headers and bodies streamed both ways.

    `path` is what follows `/proxy` (None when nothing does: upstream then redirects to `/proxy/`).
    `https:` targets are not verified, as upstream's proxy transport does not.
    """
    try:
        base = await locate()
    except errors.StatusError as exc:
        await _send_status(scope, send, exc)
        return
    qs = scope.get("query_string", b"").decode("latin-1")
    if path is None and scope["type"] == "websocket":
        path = "/"
    if path is None:
        location = scope.get("raw_path", scope["path"].encode()).split(b"?", 1)[0] + b"/" + \
            (b"?" + qs.encode("latin-1") if qs else b"")
        await send({"type": "http.response.start", "status": 301,
                    "headers": [(b"location", location), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return
    target = base + "/" + path.lstrip("/") + (f"?{qs}" if qs else "")
    if scope["type"] == "websocket":
        await _relay_websocket(scope, receive, send, target.replace("http", "ws", 1), config, _INSECURE)
        return
    raw_path = scope.get("raw_path", scope["path"].encode()).split(b"?", 1)[0].decode("latin-1")
    prefix = raw_path[:len(raw_path) - len(path)] if path else raw_path
    backend = urllib.parse.urlsplit(base).netloc
    await _forward_http(scope, receive, send, target, config, raw=True, verify=_INSECURE,
                        target="service", all_headers=True,
                        rewrite_location=lambda loc: rewrite_location(loc, backend, prefix))


def rewrite_location(location: str, backend: str, prefix: str) -> str:
    """A backend's redirect as the client must follow it: through the proxy path, as upstream's proxy
    transport rewrites it. Relative ones and those to other hosts are left alone."""
    parts = urllib.parse.urlsplit(location)
    if (parts.netloc and parts.netloc != backend) or not parts.path.startswith("/"):
        return location
    new_path = parts.path
    if not new_path.startswith(prefix):
        new_path = posixpath.normpath(prefix.rstrip("/") + "/" + new_path.lstrip("/"))
        if parts.path.endswith("/") and not new_path.endswith("/"):
            new_path += "/"
    return urllib.parse.urlunsplit(("", "", new_path, parts.query, parts.fragment))


async def _read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def body_stream(receive: Any) -> AsyncIterator[bytes]:
    """The client's request body chunk by chunk, so an upload is never held whole in memory."""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        if chunk := message.get("body", b""):
            yield chunk
        if not message.get("more_body"):
            return


def _forwarded_headers(scope: Scope) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop ones and the credentials the apiserver consumed, as upstream's
    authentication and impersonation filters drop them before proxying; X-Forwarded-For names the client."""
    headers = []
    for key, value in scope.get("headers", []):
        name = key.decode("latin-1").lower()
        if name in _NOT_FORWARDED or name.startswith("impersonate-"):
            continue
        headers.append((name, value.decode("latin-1")))
    return with_forwarded_for(headers, scope)


def with_forwarded_for(headers: list[tuple[str, str]], scope: Scope) -> list[tuple[str, str]]:
    """`headers` with the client's address appended to X-Forwarded-For, as upstream's proxies do."""
    client = scope.get("client")
    if not client:
        return headers
    prior = next((v for k, v in headers if k == "x-forwarded-for"), None)
    return [*((k, v) for k, v in headers if k != "x-forwarded-for"),
            ("x-forwarded-for", f"{prior}, {client[0]}" if prior else client[0])]


async def _forward_http(scope: Scope, receive: Any, send: Any, url: str, config: KubeletClientConfig, *,
                        raw: bool = False, verify: ssl.SSLContext | None = None, target: str = "the kubelet",
                        all_headers: bool = False, rewrite_location: Callable[[str], str] | None = None) -> None:
    """Stream the answer of `url` back as it comes.

    `raw` passes error answers through instead of making them Status; `all_headers` forwards every
    end-to-end header both ways (the generic proxies) rather than just the content negotiation ones;
    `rewrite_location` maps a redirect's Location header.
    """
    method = scope.get("method", "GET")
    if all_headers:
        headers = _forwarded_headers(scope)
        has_body = method not in ("GET", "HEAD") or any(k in ("content-length", "transfer-encoding")
                                                        for k, _ in headers)
        content: Any = body_stream(receive) if has_body else None
    else:
        passed = {"accept", "content-type"}
        headers = [(k.decode(), v.decode()) for k, v in scope.get("headers", []) if k.decode().lower() in passed]
        content = (await _read_body(receive) or None) if method not in ("GET", "HEAD") else None
    timeout = httpx.Timeout(config.timeout, read=None)
    async with httpx.AsyncClient(verify=verify or config.ssl_context(), timeout=timeout) as client:
        try:
            request = client.build_request(method, url, content=content, headers=headers)
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            parts = urllib.parse.urlsplit(url)
            reason = dial_error(exc, parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
            message = f"error trying to reach {target}: {reason or exc}"
            # A plain error upstream's proxies turn into a reason-less 500, not an InternalError.
            await _send_status(scope, send, errors.StatusError(500, "", message) if all_headers and raw
                               else errors.internal(message))
            return
        try:
            if response.status_code >= 400 and not raw:
                await _send_status(scope, send, _status_from_kubelet(response.status_code, await response.aread()))
                return
            if all_headers:
                out_headers = [(k.lower(), v) for k, v in response.headers.raw
                               if k.decode("latin-1").lower() not in _HOP_BY_HOP]
                if rewrite_location is not None:
                    out_headers = [(k, rewrite_location(v.decode("latin-1")).encode("latin-1") if k == b"location"
                                    else v) for k, v in out_headers]
            else:
                out_headers = [(b"content-type", response.headers.get("content-type", "text/plain").encode())]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out_headers})
            if method != "HEAD":
                with contextlib.suppress(httpx.HTTPError):
                    async for chunk in response.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()


class KubeletRefused(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"kubelet refused the upgrade with {status}")
        self.status = status
        self.body = body


class KubeletSocket:
    """A WebSocket client to the kubelet on wsproto.

    wsproto, unlike `websockets`, accepts subprotocols that are not RFC 6455 tokens, such as the
    `SPDY/3.1+portforward.k8s.io` kubectl offers for port-forward.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: WSConnection) -> None:
        self.reader, self.writer, self.conn = reader, writer, conn
        self.subprotocol: str | None = None
        self.close_code = 1000
        self._parts: list[bytes | str] = []
        self._queue: list[bytes | str | None] = []

    @classmethod
    async def open(cls, url: str, subprotocols: list[str], ctx: ssl.SSLContext | None, limit: float) -> KubeletSocket:
        parts = urllib.parse.urlsplit(url)
        secure = parts.scheme == "wss"
        async with asyncio.timeout(limit):
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port or (443 if secure else 80),
                                                           ssl=ctx if secure else None,
                                                           server_hostname=parts.hostname if secure else None)
            conn = WSConnection(ConnectionType.CLIENT)
            sock = cls(reader, writer, conn)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            await sock._write(conn.send(wsevents.Request(host=parts.netloc, target=target,
                                                         subprotocols=subprotocols)))
            status, body = 0, b""
            while True:
                data = await reader.read(65536)
                conn.receive_data(data or None)
                for event in conn.events():
                    if isinstance(event, wsevents.AcceptConnection):
                        sock.subprotocol = event.subprotocol
                        return sock
                    if isinstance(event, wsevents.RejectConnection):
                        status = event.status_code
                        if not event.has_body:
                            raise KubeletRefused(status, body)
                    elif isinstance(event, wsevents.RejectData):
                        body += event.data
                        if event.body_finished:
                            raise KubeletRefused(status, body)
                if not data:
                    raise KubeletRefused(status or 502, body)

    async def _write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self) -> bytes | str | None:
        """The next whole message; None once the kubelet closed the connection."""
        # Frames that arrived together with the handshake are already buffered: hand them out before
        # reading again, or a command that finishes at once loses its output.
        await self._process_events()
        while not self._queue:
            data = await self.reader.read(65536)
            try:
                self.conn.receive_data(data or None)
            except LocalProtocolError:
                return None
            await self._process_events()
            if not data and not self._queue:
                self._queue.append(None)
        return self._queue.pop(0)

    async def _process_events(self) -> None:
        for event in self.conn.events():
            if isinstance(event, (wsevents.BytesMessage, wsevents.TextMessage)):
                self._parts.append(event.data)
                if event.message_finished:
                    joined = b"".join(self._parts) if isinstance(event.data, bytes) else "".join(self._parts)
                    self._queue.append(joined)  # type: ignore[arg-type]
                    self._parts = []
            elif isinstance(event, wsevents.Ping):
                await self._write(self.conn.send(event.response()))
            elif isinstance(event, wsevents.CloseConnection):
                self.close_code = event.code
                with contextlib.suppress(LocalProtocolError, OSError):
                    await self._write(self.conn.send(event.response()))
                self._queue.append(None)

    async def send(self, data: bytes | str) -> None:
        if self.conn.state == ConnectionState.OPEN:
            await self._write(self.conn.send(wsevents.Message(data=data)))

    async def close(self) -> None:
        with contextlib.suppress(LocalProtocolError, OSError, ConnectionError):
            if self.conn.state == ConnectionState.OPEN:
                await self._write(self.conn.send(wsevents.CloseConnection(code=1000)))
        self.writer.close()


async def _relay_websocket(scope: Scope, receive: Any, send: Any, url: str, config: KubeletClientConfig,
                           ctx: ssl.SSLContext | None = None) -> None:
    first = await receive()
    if first["type"] != "websocket.connect":
        return
    try:
        upstream = await KubeletSocket.open(url, list(scope.get("subprotocols") or []), ctx or config.ssl_context(),
                                            config.timeout)
    except KubeletRefused as exc:
        await _send_status(scope, send, _status_from_kubelet(exc.status, exc.body))
        return
    except (OSError, TimeoutError, RemoteProtocolError) as exc:
        await _send_status(scope, send, errors.internal(f"error dialing the kubelet: {exc}"))
        return
    await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
    to_kubelet = asyncio.create_task(_client_to_kubelet(receive, upstream))
    to_client = asyncio.create_task(_kubelet_to_client(upstream, send))
    try:
        await asyncio.wait({to_kubelet, to_client}, return_when=asyncio.FIRST_COMPLETED)
        if to_client.done():
            # The kubelet finished; give the client's close handshake a moment, then stop reading it.
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(to_kubelet), 1)
    finally:
        for task in (to_kubelet, to_client):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await upstream.close()


async def _client_to_kubelet(receive: Any, upstream: KubeletSocket) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            await upstream.close()
            return
        if message["type"] == "websocket.receive":
            data = message.get("bytes")
            await upstream.send(data if data is not None else message.get("text") or "")


async def _kubelet_to_client(upstream: KubeletSocket, send: Any) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while (data := await upstream.recv()) is not None:
            if isinstance(data, bytes):
                await send({"type": "websocket.send", "bytes": data})
            else:
                await send({"type": "websocket.send", "text": data})
    code = upstream.close_code
    with contextlib.suppress(Exception):
        await send({"type": "websocket.close", "code": 1000 if code in (1005, 1006) else code})


async def _log_websocket(scope: Scope, receive: Any, send: Any, url: str, config: KubeletClientConfig) -> None:
    """pods/log over a WebSocket, as upstream's wsstream.Reader serves a stream: the kubelet's log body
    read over HTTP, each chunk one message, binary (no subprotocol or `binary.k8s.io`) or base64 text
    (`base64.binary.k8s.io`); the socket closes when the log ends or the client goes."""
    first = await receive()
    if first["type"] != "websocket.connect":
        return
    offered = list(scope.get("subprotocols") or []) or [""]
    chosen = next((p for p in offered if p in LOG_PROTOCOLS), None)
    if chosen is None:
        # upstream's handshake refuses it with a bare 403
        await _send_status(scope, send, errors.StatusError(403, "Forbidden", (
            f"requested protocol(s) are not supported: [{' '.join(offered)}]; supports "
            f"[{' '.join(LOG_PROTOCOLS)}]")))
        return
    text = LOG_PROTOCOLS[chosen]
    async with httpx.AsyncClient(verify=config.ssl_context(), timeout=httpx.Timeout(config.timeout, read=None)) \
            as client:
        try:
            response = await client.send(client.build_request("GET", url), stream=True)
        except httpx.HTTPError as exc:
            parts = urllib.parse.urlsplit(url)
            reason = dial_error(exc, parts.hostname or "", parts.port or 443)
            await _send_status(scope, send, errors.internal(f"error trying to reach the kubelet: {reason or exc}"))
            return
        try:
            if response.status_code >= 400:
                await _send_status(scope, send, _status_from_kubelet(response.status_code, await response.aread()))
                return
            await send({"type": "websocket.accept", "subprotocol": chosen or None})

            async def relay() -> None:
                with contextlib.suppress(httpx.HTTPError):
                    async for chunk in response.aiter_raw():
                        if chunk:
                            await send({"type": "websocket.send", "text": base64.b64encode(chunk).decode("ascii")}
                                       if text else {"type": "websocket.send", "bytes": chunk})
                await send({"type": "websocket.close", "code": 1000})

            async def client_gone() -> None:
                while (await receive())["type"] != "websocket.disconnect":
                    continue

            tasks = {asyncio.create_task(relay()), asyncio.create_task(client_gone())}
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        finally:
            await response.aclose()


# -- SPDY upgrades -------------------------------------------------------------------------------------


def is_spdy_upgrade(scope: Scope) -> bool:
    """`Connection: Upgrade` with `Upgrade: SPDY/3.1`, which uvicorn leaves to the application as plain HTTP."""
    headers = scope.get("headers") or []
    connection = [t.strip().lower() for k, v in headers if k.lower() == b"connection" for t in v.split(b",")]
    upgrade = next((v.strip().lower() for k, v in headers if k.lower() == b"upgrade"), b"")
    return scope["type"] == "http" and b"upgrade" in connection and upgrade == SPDY


def _connection_of(receive: Any) -> asyncio.Transport | None:
    """The client's connection under an ASGI request, when the server is uvicorn (its receive is bound to
    the request cycle, which holds the transport); None elsewhere."""
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    return transport if transport is not None and hasattr(transport, "set_protocol") else None


async def _relay_spdy(scope: Scope, receive: Any, send: Any, url: str, config: KubeletClientConfig) -> None:
    transport = _connection_of(receive)
    if transport is None:
        await _send_status(scope, send, errors.bad_request("this server cannot hand over connections for SPDY "
                                                           "upgrades; use WebSockets"))
        return
    parts = urllib.parse.urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    offers = b"".join(b"X-Stream-Protocol-Version: " + v + b"\r\n" for k, v in scope.get("headers") or []
                      if k.lower() == STREAM_PROTOCOL)
    request = (f"{scope.get('method', 'POST')} {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
               "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n").encode() + offers + b"Content-Length: 0\r\n\r\n"
    try:
        async with asyncio.timeout(config.timeout):
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 443, ssl=config.ssl_context(),
                                                           server_hostname=parts.hostname, limit=HIGH_WATER)
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
    except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        await _send_status(scope, send, errors.internal(f"error dialing the kubelet: {exc}"))
        return
    status = head.split(b"\r\n", 1)[0].split(b" ", 2)
    code = int(status[1]) if len(status) > 1 and status[1].isdigit() else 502
    if code != 101:
        body = b""
        with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            async with asyncio.timeout(config.timeout):
                body = await reader.read(HIGH_WATER)
        writer.close()
        await _send_status(scope, send, _status_from_kubelet(code, body))
        return
    await _splice(transport, head, reader, writer)


class _Spliced(asyncio.Protocol):
    """The client's connection after the upgrade: what it sends goes to the kubelet as it comes.

    When the connection ends, the HTTP protocol it was taken from hears of it too, so the server's
    own bookkeeping (open connections, the request cycle) closes as for any request.
    """

    def __init__(self, transport: asyncio.Transport, upstream: asyncio.StreamWriter,
                 previous: asyncio.BaseProtocol) -> None:
        self.transport = transport
        self.upstream = upstream
        self.previous = previous
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.writable = asyncio.Event()
        self.writable.set()
        self._draining: asyncio.Task[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.upstream.write(data)
        if self._draining is None and self.upstream.transport.get_write_buffer_size() > HIGH_WATER:
            self.transport.pause_reading()
            self._draining = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            await self.upstream.drain()
        self._draining = None
        if not self.transport.is_closing():
            self.transport.resume_reading()

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.writable.set()
        if not self.closed.done():
            self.closed.set_result(None)
        self.previous.connection_lost(exc)

    def stop(self) -> None:
        if self._draining is not None:
            self._draining.cancel()


async def _splice(transport: asyncio.Transport, head: bytes, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> None:
    """Take the client's connection over from the HTTP server, answer with the kubelet's 101 and copy bytes
    both ways until either side closes."""
    spliced = _Spliced(transport, writer, transport.get_protocol())
    transport.set_protocol(spliced)
    transport.write(head)
    transport.resume_reading()

    async def to_client() -> None:
        with contextlib.suppress(OSError, ConnectionError, ssl.SSLError):
            while data := await reader.read(65536):
                await spliced.writable.wait()
                if transport.is_closing():
                    return
                transport.write(data)

    down = asyncio.create_task(to_client())
    try:
        await asyncio.wait({down, spliced.closed}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        down.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await down
        spliced.stop()
        writer.close()
        transport.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(spliced.closed), 5)
