"""The async REST client every pyk8s component talks to the apiserver through.

Objects are plain dicts (orjson in and out). Paths come from the resource catalog, so
built-in and custom resources use the same calls.
"""

from __future__ import annotations

import asyncio
import base64
import random
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import quote, urlencode

import httpx
import orjson

from services.client.config import ClientConfig
from services.client.errors import (
    ApiError,
    Gone,
    ServerError,
    TooManyRequests,
    error_from_response,
    error_from_status,
)
from services.client.ratelimit import TokenBucket
from services.client.transport import AsyncTransport

# Characters left as they are in a request path written by the fast path (RFC 3986 pchar and "/").
PATH_SAFE = "/:@!$&'()*+,;=~%"


class ResourceType(Protocol):
    """What the client needs of a resource; `services.api.catalog.Resource` fits."""

    group: str
    version: str
    plural: str
    namespaced: bool


@dataclass(frozen=True)
class GVR:
    """An ad-hoc resource for paths the catalog does not know (e.g. a freshly created CRD)."""

    group: str
    version: str
    plural: str
    namespaced: bool = True


def gvr(api_version: str, plural: str, namespaced: bool = True) -> GVR:
    group, _, version = api_version.rpartition("/")
    return GVR(group, version, plural, namespaced)


PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD"})
# Requests in flight (watches included) per client; beyond it a request waits for a free slot.
MAX_CONNECTIONS = 512
MAX_IDLE_CONNECTIONS = 64


def resource_path(
    resource: ResourceType,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """`/api/v1/namespaces/ns/pods/name/status`; no namespace on a namespaced resource means all of them."""
    parts = ["/api/v1"] if not resource.group else [f"/apis/{resource.group}/{resource.version}"]
    if resource.group == "" and resource.version != "v1":
        parts = [f"/api/{resource.version}"]
    if resource.namespaced and namespace:
        parts.append(f"namespaces/{namespace}")
    parts.append(resource.plural)
    if name:
        parts.append(name)
        if subresource:
            parts.append(subresource)
    return "/".join(parts)


def _selector(value: str | Mapping[str, str] | None) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    return ",".join(f"{k}={v}" for k, v in value.items()) or None


def _clean(params: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        if value is None or value == "":
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


class Watch:
    """An async iterator of (type, object) over one watch request; close it to end the request."""

    def __init__(self, events: AsyncIterator[tuple[str, dict[str, Any]]]) -> None:
        self._events = events

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> tuple[str, dict[str, Any]]:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class Client:
    """Generic verbs over any resource, with retries on transient failures and optional QPS limiting."""

    def __init__(
        self,
        config: ClientConfig | str | None = None,
        *,
        max_retries: int = 5,
        backoff_base: float = 0.1,
        backoff_cap: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if isinstance(config, str):
            config = ClientConfig(server=config)
        self.config = config or ClientConfig()
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._bucket = TokenBucket(self.config.qps, self.config.burst or int(max(self.config.qps, 1)))
        verify = self.config.ssl_context()
        self._ssl = verify if isinstance(verify, ssl.SSLContext) else None
        if transport is None:
            transport = AsyncTransport(
                verify if isinstance(verify, ssl.SSLContext) else None,
                max_connections=MAX_CONNECTIONS,
                max_idle=MAX_IDLE_CONNECTIONS,
            )
        auth = self.config.auth()
        self._http = httpx.AsyncClient(
            base_url=self.config.server,
            verify=verify,
            auth=auth,
            headers=self.config.headers(),
            timeout=httpx.Timeout(self.config.timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=MAX_IDLE_CONNECTIONS),
            transport=transport,
        )
        self._extensions = (
            {"sni_hostname": self.config.tls_server_name} if self.config.tls_server_name else {}
        )
        self._raw = _RawRequests.build(self.config, transport, auth)
        self._transport = transport

    def reload_client_certificate(self) -> None:
        """Present the certificate now in the config's cert and key files from the next handshake on, and
        drop idle connections, as client-go does when a rotated certificate lands."""
        if self._ssl is None or not self.config.cert_file:
            return
        self._ssl.load_cert_chain(self.config.cert_file, self.config.key_file or None)
        if isinstance(self._transport, AsyncTransport):
            self._transport.close_idle()

    @property
    def namespace(self) -> str:
        return self.config.namespace

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- transport ---------------------------------------------------------------------------------

    def _delay(self, attempt: int, err: ApiError | None = None) -> float:
        if err is not None and err.retry_after is not None:
            return min(err.retry_after, 30.0)
        base = min(self.backoff_cap, self.backoff_base * (2**attempt))
        return base * (0.5 + random.random() / 2)

    def _retriable(self, method: str, exc: Exception) -> bool:
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
            return True
        if isinstance(exc, httpx.TransportError):
            return method in IDEMPOTENT_METHODS
        if isinstance(exc, TooManyRequests):
            return True
        if isinstance(exc, ServerError):
            return exc.retry_after is not None or method in IDEMPOTENT_METHODS
        return False

    async def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        content: bytes | None,
        headers: Mapping[str, str] | None,
        http_timeout: httpx.Timeout | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        """One logical request: rate limited, retried; raises the typed error for non-2xx answers."""
        request = self._http.build_request(
            method,
            path,
            params=_clean(params or {}),
            content=content,
            headers=headers,
            timeout=http_timeout if http_timeout is not None else httpx.USE_CLIENT_DEFAULT,
            extensions=self._extensions or None,
        )
        attempt = 0
        while True:
            await self._bucket.acquire()
            try:
                response = await self._http.send(request, stream=stream)
                if response.status_code >= 400:
                    body = await response.aread()
                    await response.aclose()
                    raise error_from_response(response.status_code, body, response.headers)
                return response
            except (httpx.TransportError, ApiError) as exc:
                if attempt >= self.max_retries or not self._retriable(method, exc):
                    raise
                await asyncio.sleep(self._delay(attempt, exc if isinstance(exc, ApiError) else None))
                attempt += 1

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Send a request and decode the JSON answer (None for an empty body)."""
        content = None
        if body is not None:
            content = body if isinstance(body, bytes) else orjson.dumps(body)
        if self._raw is not None and not headers:
            return await self._request_raw(method, path, params, content, content_type)
        all_headers = dict(headers or {})
        if content is not None:
            all_headers["Content-Type"] = content_type
        response = await self._send(method, path, params, content, all_headers)
        if not response.content:
            return None
        if "json" not in response.headers.get("content-type", "application/json"):
            return response.text
        return orjson.loads(response.content)

    async def _request_raw(
        self, method: str, path: str, params: Mapping[str, Any] | None, content: bytes | None, content_type: str
    ) -> Any:
        """`request` written straight onto the transport: httpx's request building costs more CPU than
        the exchange itself for small API calls. Same rate limiting, retries and errors as `_send`."""
        raw = self._raw
        assert raw is not None
        payload = raw.encode(method, path, params, content, content_type)
        headers, data = await self._exchange_raw(payload, method, raw.timeouts)
        if not data:
            return None
        for name, value in headers:
            if name.lower() == b"content-type" and b"json" not in value:
                return data.decode("utf-8", "replace")
        return orjson.loads(data)

    async def _exchange_raw(
        self, payload: bytes, method: str, timeouts: dict[str, float | None]
    ) -> tuple[list[tuple[bytes, bytes]], bytes]:
        raw = self._raw
        assert raw is not None
        attempt = 0
        while True:
            await self._bucket.acquire()
            try:
                status, headers, data = await raw.transport.send_raw(raw.origin, payload, method, timeouts, raw.sni)
                if status >= 400:
                    raise error_from_response(status, data, _header_map(headers))
                return headers, data
            except (httpx.TransportError, ApiError) as exc:
                if attempt >= self.max_retries or not self._retriable(method, exc):
                    raise
                await asyncio.sleep(self._delay(attempt, exc if isinstance(exc, ApiError) else None))
                attempt += 1

    async def _open_watch_raw(self, path: str, params: dict[str, Any], read_timeout: float | None) -> Any:
        """The watch response's body stream, opened with `_send`'s rate limiting and retries."""
        raw = self._raw
        assert raw is not None
        payload = raw.encode("GET", path, params, None, "")
        timeouts = {**raw.timeouts, "read": read_timeout}
        attempt = 0
        while True:
            await self._bucket.acquire()
            try:
                status, headers, body = await raw.transport.stream_raw(raw.origin, payload, "GET", timeouts, raw.sni)
                if status >= 400:
                    data = b"".join([part async for part in body])
                    await body.aclose()
                    raise error_from_response(status, data, _header_map(headers))
                return body
            except (httpx.TransportError, ApiError) as exc:
                if attempt >= self.max_retries or not self._retriable("GET", exc):
                    raise
                await asyncio.sleep(self._delay(attempt, exc if isinstance(exc, ApiError) else None))
                attempt += 1

    # -- verbs -------------------------------------------------------------------------------------

    def _ns(
        self, resource: ResourceType, namespace: str | None, body: Mapping[str, Any] | None = None
    ) -> str | None:
        if not resource.namespaced:
            return None
        if namespace:
            return namespace
        if body is not None:
            return (body.get("metadata") or {}).get("namespace") or self.namespace
        return self.namespace

    async def get(
        self,
        resource: ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        path = resource_path(resource, self._ns(resource, namespace), name, subresource)
        return await self.request("GET", path, params={"resourceVersion": resource_version})

    async def list(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | Mapping[str, str] | None = None,
        field_selector: str | Mapping[str, str] | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        timeout_seconds: int | None = None,
    ) -> dict[str, Any]:
        """One list request; `namespace=None` on a namespaced resource lists all namespaces."""
        params = {
            "labelSelector": _selector(label_selector),
            "fieldSelector": _selector(field_selector),
            "limit": limit,
            "continue": continue_,
            "resourceVersion": resource_version,
            "resourceVersionMatch": resource_version_match,
            "timeoutSeconds": timeout_seconds,
        }
        return await self.request("GET", resource_path(resource, namespace), params=params)

    async def list_pages(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        page_size: int = 500,
        label_selector: str | Mapping[str, str] | None = None,
        field_selector: str | Mapping[str, str] | None = None,
        resource_version: str | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield each page of a paginated list, following `continue` tokens (an expired one raises Gone)."""
        token: str | None = None
        while True:
            page = await self.list(
                resource,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_=token,
                resource_version=None if token else resource_version,
            )
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    async def list_all(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        page_size: int = 500,
        label_selector: str | Mapping[str, str] | None = None,
        field_selector: str | Mapping[str, str] | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """The whole list as one List object, fetched in pages; resourceVersion is the first page's.

        When a continue token expires mid-way, like client-go's pager, fall back to one
        unpaginated list so the caller still gets a consistent snapshot.
        """
        result: dict[str, Any] | None = None
        try:
            async for page in self.list_pages(
                resource,
                namespace,
                page_size=page_size,
                label_selector=label_selector,
                field_selector=field_selector,
                resource_version=resource_version,
            ):
                if result is None:
                    meta = {k: v for k, v in (page.get("metadata") or {}).items() if k != "continue"}
                    result = {**page, "metadata": meta, "items": list(page.get("items") or [])}
                else:
                    result["items"].extend(page.get("items") or [])
        except Gone:
            if result is None:
                raise
            return await self.list(
                resource, namespace, label_selector=label_selector, field_selector=field_selector
            )
        assert result is not None
        return result

    async def create(
        self,
        resource: ResourceType,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        name: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """POST to the collection, or to `name/subresource` (bindings, evictions, tokens)."""
        path = resource_path(resource, self._ns(resource, namespace, body), name, subresource)
        params = {"dryRun": "All" if dry_run else None, "fieldManager": field_manager}
        return await self.request("POST", path, params=params, body=body)

    async def replace(
        self,
        resource: ResourceType,
        body: Mapping[str, Any],
        name: str | None = None,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """PUT; carries the body's resourceVersion, so a stale write raises Conflict."""
        name = name or body["metadata"]["name"]
        path = resource_path(resource, self._ns(resource, namespace, body), name, subresource)
        params = {"dryRun": "All" if dry_run else None, "fieldManager": field_manager}
        return await self.request("PUT", path, params=params, body=body)

    async def patch(
        self,
        resource: ResourceType,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """PATCH with `merge`, `json`, `strategic` or `apply` (server-side apply needs field_manager)."""
        content_type = PATCH_CONTENT_TYPES.get(patch_type, patch_type)
        if patch_type == "apply" and not field_manager:
            raise ValueError("server-side apply needs a field_manager")
        path = resource_path(resource, self._ns(resource, namespace), name, subresource)
        params = {"fieldManager": field_manager, "force": force, "dryRun": "All" if dry_run else None}
        return await self.request("PATCH", path, params=params, body=patch, content_type=content_type)

    @staticmethod
    def _delete_options(
        propagation_policy: str | None,
        grace_period_seconds: int | None,
        preconditions: Mapping[str, str] | None,
        dry_run: bool,
    ) -> dict[str, Any] | None:
        options: dict[str, Any] = {}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if dry_run:
            options["dryRun"] = ["All"]
        if not options:
            return None
        return {"kind": "DeleteOptions", "apiVersion": "v1", **options}

    async def delete(
        self,
        resource: ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """DELETE; answers the deleted object (or the object marked for deletion) or a Success Status."""
        path = resource_path(resource, self._ns(resource, namespace), name)
        body = self._delete_options(propagation_policy, grace_period_seconds, preconditions, dry_run)
        return await self.request("DELETE", path, body=body)

    async def delete_collection(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | Mapping[str, str] | None = None,
        field_selector: str | Mapping[str, str] | None = None,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        path = resource_path(resource, self._ns(resource, namespace))
        params = {"labelSelector": _selector(label_selector), "fieldSelector": _selector(field_selector)}
        body = self._delete_options(propagation_policy, grace_period_seconds, None, dry_run)
        return await self.request("DELETE", path, params=params, body=body)

    async def get_status(
        self, resource: ResourceType, name: str, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.get(resource, name, namespace, subresource="status")

    async def replace_status(
        self, resource: ResourceType, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.replace(resource, body, namespace=namespace, subresource="status")

    async def patch_status(
        self,
        resource: ResourceType,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
    ) -> dict[str, Any]:
        return await self.patch(resource, name, patch, namespace, patch_type=patch_type, subresource="status")

    async def get_scale(
        self, resource: ResourceType, name: str, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.get(resource, name, namespace, subresource="scale")

    async def replace_scale(
        self, resource: ResourceType, name: str, replicas: int, namespace: str | None = None
    ) -> dict[str, Any]:
        """Set spec.replicas through the autoscaling/v1 Scale subresource."""
        ns = self._ns(resource, namespace)
        body = {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas},
        }
        return await self.replace(resource, body, name, ns, subresource="scale")

    async def patch_scale(
        self,
        resource: ResourceType,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
    ) -> dict[str, Any]:
        return await self.patch(resource, name, patch, namespace, patch_type=patch_type, subresource="scale")

    # -- watch -------------------------------------------------------------------------------------

    def watch(
        self,
        resource: ResourceType,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
        field_selector: str | Mapping[str, str] | None = None,
        timeout_seconds: int | None = None,
        allow_watch_bookmarks: bool = True,
        send_initial_events: bool | None = None,
        resource_version_match: str | None = None,
        name: str | None = None,
    ) -> Watch:
        """Stream (type, object) events: ADDED, MODIFIED, DELETED and BOOKMARK.

        An ERROR event raises its typed error (410 Gone when the resourceVersion is too old).
        The iterator ends when the server closes the stream (e.g. at timeoutSeconds).
        """
        params = {
            "watch": True,
            "resourceVersion": resource_version,
            "labelSelector": _selector(label_selector),
            "fieldSelector": _selector(field_selector) if not name else f"metadata.name={name}",
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": allow_watch_bookmarks or None,
            "sendInitialEvents": send_initial_events,
            "resourceVersionMatch": resource_version_match,
        }
        path = resource_path(resource, namespace)
        return Watch(self._watch_events(path, params, timeout_seconds))

    async def _watch_events(
        self, path: str, params: dict[str, Any], timeout_seconds: int | None
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        read_timeout = None if timeout_seconds is None else timeout_seconds + 30.0
        if self._raw is not None:
            body = await self._open_watch_raw(path, params, read_timeout)
            try:
                async for line in _lines(body):
                    yield _watch_event(line)
            finally:
                await body.aclose()
            return
        timeout = httpx.Timeout(self.config.timeout, read=read_timeout)
        response = await self._send("GET", path, params, None, None, http_timeout=timeout, stream=True)
        try:
            async for text in response.aiter_lines():
                if text.strip():
                    yield _watch_event(text)
        finally:
            await response.aclose()


def _watch_event(line: str | bytes) -> tuple[str, dict[str, Any]]:
    event = orjson.loads(line)
    kind = event.get("type", "")
    obj = event.get("object") or {}
    if kind == "ERROR":
        raise error_from_status(obj)
    return kind, obj


async def _lines(body: Any) -> AsyncIterator[bytes]:
    """Non-blank lines of a newline-delimited stream, bytes as they came (no text decoding)."""
    pending: list[bytes] = []
    async for chunk in body:
        if b"\n" not in chunk:
            pending.append(chunk)
            continue
        if pending:
            pending.append(chunk)
            chunk = b"".join(pending)
            pending.clear()
        *lines, rest = chunk.split(b"\n")
        if rest:
            pending.append(rest)
        for line in lines:
            if line.strip():
                yield line
    last = b"".join(pending)
    if last.strip():
        yield last

def _header_map(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in headers}


@dataclass(frozen=True)
class _RawRequests:
    """What the fast path needs to write a request itself: the origin and the fixed header lines."""

    transport: AsyncTransport
    origin: tuple[str, str, int]
    base_path: str
    fixed_headers: bytes
    auth: Any
    timeouts: dict[str, float | None]
    sni: str | None

    @classmethod
    def build(
        cls, config: ClientConfig, transport: httpx.AsyncBaseTransport, auth: httpx.Auth | None
    ) -> _RawRequests | None:
        """None when requests must go through httpx: another transport, or an auth it alone knows."""
        if not isinstance(transport, AsyncTransport):
            return None
        fixed = dict(config.headers())
        dynamic = None
        if isinstance(auth, httpx.BasicAuth):
            pair = f"{config.username}:{config.password}".encode()
            fixed["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        elif auth is not None:
            if not callable(getattr(auth, "authorization", None)):
                return None
            dynamic = auth
        url = httpx.URL(config.server)
        if url.scheme not in ("http", "https") or not url.host:
            return None
        default_port = 443 if url.scheme == "https" else 80
        host = url.host if ":" not in url.host else f"[{url.host}]"
        fixed = {"Host": host if url.port in (None, default_port) else f"{host}:{url.port}", **fixed}
        lines = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in fixed.items())
        timeout = config.timeout
        return cls(transport, (url.scheme, url.host, url.port or default_port), url.path.rstrip("/"), lines,
                   dynamic, {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout},
                   config.tls_server_name or None)

    def encode(
        self, method: str, path: str, params: Mapping[str, Any] | None, content: bytes | None, content_type: str
    ) -> bytes:
        target = quote(self.base_path + path, safe=PATH_SAFE)
        query = _clean(params or {})
        if query:
            target += "?" + urlencode(query)
        head = [f"{method} {target} HTTP/1.1\r\n".encode(), self.fixed_headers]
        if self.auth is not None:
            head.append(f"Authorization: {self.auth.authorization()}\r\n".encode("latin-1"))
        if content is not None:
            head.append(f"Content-Type: {content_type}\r\nContent-Length: {len(content)}\r\n\r\n".encode())
            head.append(content)
        elif method in ("POST", "PUT", "PATCH"):
            head.append(b"Content-Length: 0\r\n\r\n")
        else:
            head.append(b"\r\n")
        return b"".join(head)
