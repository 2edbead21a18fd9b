"""The read side of the OCI distribution API over the store, as an ASGI app.

Nodes' containerd use it as a mirror of every registry: it sends `?ns=<registry>` with each request, so
`/v2/library/busybox/manifests/latest?ns=docker.io` names `docker.io/library/busybox:latest`. Without
`ns` a name is normalised as docker does. A 404 sends containerd on to the next host, the real
registry. Blobs are streamed in chunks read in a thread, so a large layer never blocks the loop.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import orjson
import structlog
from prometheus_client import Counter, Histogram

from image_registry.store import Descriptor, ImageStore, valid_digest
from services.images import ImageRef, parse_image

log = structlog.get_logger("image_registry")

CHUNK = 256 << 10
API_VERSION = ("docker-distribution-api-version", "registry/2.0")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

REQUESTS = Counter("registry_http_requests_total", "Registry API requests by route, method and code.",
                   ["route", "method", "code"])
BYTES = Counter("registry_blob_bytes_total", "Blob bytes sent.")
LATENCY = Histogram("registry_http_request_duration_seconds", "Time to the end of each registry API response.",
                    ["route"])

_ROUTE = re.compile(r"^/v2/(?P<name>.+)/(?:(?P<kind>manifests|blobs)/(?P<ref>[^/]+)|(?P<tags>tags/list))$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")

_MESSAGES = {
    "NAME_UNKNOWN": "repository name not known to registry",
    "MANIFEST_UNKNOWN": "manifest unknown",
    "BLOB_UNKNOWN": "blob unknown to registry",
    "NAME_INVALID": "invalid repository name",
    "DIGEST_INVALID": "provided digest did not match uploaded content",
    "UNSUPPORTED": "The operation is unsupported.",
}


class Response:
    """What one request answers: status, headers and either a body or a file range to stream."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes = b"",
                 file: tuple[Path, int, int] | None = None) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.file = file


def error(status: int, code: str, detail: Any = None) -> Response:
    """The distribution spec's error body: {"errors": [{"code", "message", "detail"}]}."""
    body = orjson.dumps({"errors": [{"code": code, "message": _MESSAGES[code], "detail": detail}]})
    return Response(status, [("content-type", "application/json"), ("content-length", str(len(body)))], body)


class RegistryApp:
    """An ASGI app; every store call runs in a thread (it reads files)."""

    def __init__(self, store: ImageStore) -> None:
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        started = time.monotonic()
        method = scope["method"]
        path = scope["path"]
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        route, response = await self.handle(method, path, query.get("ns", [""])[0], headers.get("range", ""))
        response.headers.append(API_VERSION)
        await send({"type": "http.response.start", "status": response.status,
                    "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]})
        if method == "HEAD":
            await send({"type": "http.response.body", "body": b""})
        elif response.file is not None:
            await _stream(send, *response.file)
        else:
            await send({"type": "http.response.body", "body": response.body})
        REQUESTS.labels(route, method, str(response.status)).inc()
        LATENCY.labels(route).observe(time.monotonic() - started)
        log.debug("request", method=method, path=path, status=response.status)

    async def handle(self, method: str, path: str, ns: str, range_header: str = "") -> tuple[str, Response]:
        """(route name, response) for one request."""
        if method not in ("GET", "HEAD"):
            return "write", error(405, "UNSUPPORTED", {"method": method})
        if path in ("/v2", "/v2/"):
            return "base", Response(200, [("content-type", "application/json"), ("content-length", "2")], b"{}")
        match = _ROUTE.match(path)
        if match is None:
            return "other", error(404, "NAME_UNKNOWN", {"path": path})
        route = "tags" if match["tags"] else match["kind"]
        try:
            if any(c in match["name"] for c in ":@"):
                raise ValueError("a repository name has no tag or digest")
            repository = parse_image(f"{ns}/{match['name']}" if ns else match["name"]).repository
        except ValueError as exc:
            return route, error(400, "NAME_INVALID", {"name": match["name"], "reason": str(exc)})
        if repository not in await asyncio.to_thread(self.store.repositories):
            log.info("repository not in the store", repository=repository, route=route)
            return route, error(404, "NAME_UNKNOWN", {"name": repository})
        if route == "tags":
            tags = await asyncio.to_thread(self.store.tags, repository)
            body = orjson.dumps({"name": ImageRef(repository).path, "tags": tags})
            return route, Response(200, [("content-type", "application/json"),
                                         ("content-length", str(len(body)))], body)
        if route == "manifests":
            return route, await self._manifest(repository, match["ref"])
        return route, await self._blob(match["ref"], range_header)

    async def _manifest(self, repository: str, reference: str) -> Response:
        by_digest = reference.startswith("sha256:")
        if by_digest and not valid_digest(reference):
            return error(400, "DIGEST_INVALID", {"digest": reference})
        ref = ImageRef(repository, digest=reference) if by_digest else ImageRef(repository, tag=reference)
        desc: Descriptor | None = await asyncio.to_thread(self.store.resolve, ref)
        found = await asyncio.to_thread(self.store.read_manifest, desc.digest) if desc is not None else None
        if desc is None or found is None:
            log.info("manifest not in the store", repository=repository, reference=reference)
            return error(404, "MANIFEST_UNKNOWN", {"name": repository, "reference": reference})
        raw, media_type = found
        return Response(200, [("content-type", media_type), ("content-length", str(len(raw))),
                              ("docker-content-digest", desc.digest), ("etag", f'"{desc.digest}"')], raw)

    async def _blob(self, digest: str, range_header: str) -> Response:
        if not valid_digest(digest):
            return error(400, "DIGEST_INVALID", {"digest": digest})
        path = await asyncio.to_thread(self.store.blob_path, digest)
        size = await asyncio.to_thread(_size, path) if path is not None else None
        if path is None or size is None:
            return error(404, "BLOB_UNKNOWN", {"digest": digest})
        common = [("content-type", "application/octet-stream"), ("docker-content-digest", digest),
                  ("etag", f'"{digest}"'), ("accept-ranges", "bytes")]
        wanted = _RANGE.match(range_header.strip()) if range_header else None
        if wanted is not None:
            start = int(wanted[1])
            end = min(int(wanted[2]), size - 1) if wanted[2] else size - 1
            if start >= size or end < start:
                return Response(416, [*common, ("content-range", f"bytes */{size}"), ("content-length", "0")])
            return Response(206, [*common, ("content-range", f"bytes {start}-{end}/{size}"),
                                  ("content-length", str(end - start + 1))], file=(path, start, end - start + 1))
        return Response(200, [*common, ("content-length", str(size))], file=(path, 0, size))


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


async def _stream(send: Send, path: Path, offset: int, length: int) -> None:
    """Send `length` bytes of `path` from `offset`, one chunk read in a thread at a time."""
    handle = await asyncio.to_thread(open, path, "rb")
    try:
        await asyncio.to_thread(handle.seek, offset)
        left = length
        while left > 0:
            chunk = await asyncio.to_thread(handle.read, min(CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            BYTES.inc(len(chunk))
            await send({"type": "http.response.body", "body": chunk, "more_body": left > 0})
        if left > 0:
            await send({"type": "http.response.body", "body": b""})
    finally:
        await asyncio.to_thread(handle.close)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
