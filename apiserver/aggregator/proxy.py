"""Proxying a request for an aggregated group/version to its extension apiserver.

The apiserver has already authenticated and authorized the request; the extension apiserver learns who
sent it from X-Remote-User, X-Remote-Group and X-Remote-Extra-<key> headers, which it trusts because the
connection carries the front-proxy client certificate. Whatever request headers of those names the
client sent are dropped, as are its credentials. Bodies stream both ways, so watches stay open.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from typing import Any

import httpx
import orjson

from apiserver.aggregator.transport import ProxyClientConfig, server_name
from apiserver.endpoints.handlers.proxy import body_stream, with_forwarded_for
from services.api import errors
from services.auth.identity import UserInfo
from services.client.dialerrors import dial_error

Scope = dict[str, Any]
USER_HEADER, GROUP_HEADER, EXTRA_PREFIX = "x-remote-user", "x-remote-group", "x-remote-extra-"
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                         "te", "trailer", "transfer-encoding", "upgrade", "host", "authorization"})


def identity_headers(user: UserInfo) -> list[tuple[str, str]]:
    """The front-proxy headers naming `user`; extra keys are percent-encoded as upstream does."""
    headers = [(USER_HEADER, user.name)]
    headers += [(GROUP_HEADER, g) for g in user.groups]
    for key, values in user.extra.items():
        headers += [(EXTRA_PREFIX + urllib.parse.quote(key, safe=""), v) for v in values]
    return headers


def _forwarded(scope: Scope, user: UserInfo) -> list[tuple[str, str]]:
    headers = []
    for raw_key, raw_value in scope.get("headers", []):
        key = raw_key.decode("latin-1").lower()
        if key in _HOP_BY_HOP or key.startswith(("impersonate-", EXTRA_PREFIX)) or key in (USER_HEADER, GROUP_HEADER):
            continue
        headers.append((key, raw_value.decode("latin-1")))
    return with_forwarded_for(headers, scope) + identity_headers(user)


async def send_status(send: Any, exc: errors.StatusError) -> None:
    body = orjson.dumps(exc.to_status())
    await send({"type": "http.response.start", "status": exc.code,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def forward(scope: Scope, receive: Any, send: Any, apiservice: dict[str, Any], host: str, user: UserInfo,
                  config: ProxyClientConfig) -> None:
    """Relay one HTTP request to `https://host` and stream the answer back as it arrives."""
    method = scope.get("method", "GET")
    raw_path = (scope.get("raw_path") or scope["path"].encode()).split(b"?", 1)[0].decode("latin-1")
    qs = scope.get("query_string", b"").decode("latin-1")
    url = f"https://{host}{raw_path}" + (f"?{qs}" if qs else "")
    headers = _forwarded(scope, user)
    has_body = method not in ("GET", "HEAD", "DELETE") or any(
        k in ("content-length", "transfer-encoding") for k, _ in headers)
    client = config.client(apiservice)
    request = client.build_request(method, url, headers=headers, content=body_stream(receive) if has_body else None,
                                   extensions={"sni_hostname": server_name(apiservice)})
    try:
        response = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        parts = urllib.parse.urlsplit(url)
        reason = dial_error(exc, parts.hostname or "", parts.port or 443) or str(exc) or type(exc).__name__
        await send_status(send, errors.StatusError(503, "ServiceUnavailable", f"error trying to reach service: "
                                                                              f"{reason}"))
        return
    relay = asyncio.ensure_future(_relay(response, send, method))
    # A client that goes away (a watch it stops) must not leave the extension apiserver's stream open.
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({relay, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (relay, gone):
            task.cancel()
        await asyncio.gather(relay, gone, return_exceptions=True)
        await response.aclose()


async def _relay(response: httpx.Response, send: Any, method: str) -> None:
    out = [(k.lower(), v) for k, v in response.headers.raw if k.decode("latin-1").lower() not in _HOP_BY_HOP]
    await send({"type": "http.response.start", "status": response.status_code, "headers": out})
    if method != "HEAD":
        with contextlib.suppress(httpx.HTTPError):
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _disconnected(receive: Any) -> None:
    """Returns once the client has disconnected (the request body was already read by then)."""
    while (await receive())["type"] != "http.disconnect":
        continue
