"""The HTTPS client that posts AdmissionReviews to webhooks.

One pooled httpx client per CA bundle (connections stay open between requests, which is what keeps a
webhook's cost to a millisecond or two), the server certificate checked against the webhook's
`caBundle` or the system roots. Each call is bounded by the webhook's timeoutSeconds, capped at 30 s,
over the whole exchange (connect, send, every byte of the answer), so a webhook that stalls never
holds a request longer.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ssl
from typing import Any

import httpx
import orjson

from apiserver.admission.webhook.resolver import Location

MAX_TIMEOUT = 30
#: upstream caps a webhook's answer at 3 MiB more than the largest request body
MAX_RESPONSE_BYTES = 6 * 1024 * 1024


class CallError(Exception):
    """The webhook could not be called or answered nonsense; its failurePolicy decides."""


def _ssl_context(ca_bundle: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if ca_bundle:
        try:
            pem = base64.b64decode(ca_bundle).decode()
            ctx = ssl.create_default_context(cadata=pem)
        except (ValueError, ssl.SSLError) as exc:
            raise CallError(f"could not get REST client: unable to load root certificates: {exc}") from exc
    return ctx


class WebhookClient:
    """Posts AdmissionReview JSON and returns the decoded answer."""

    def __init__(self) -> None:
        self._clients: dict[str, httpx.AsyncClient] = {}

    def _client(self, ca_bundle: str) -> httpx.AsyncClient:
        key = hashlib.sha256(ca_bundle.encode()).hexdigest()
        client = self._clients.get(key)
        if client is None:
            client = httpx.AsyncClient(verify=_ssl_context(ca_bundle), timeout=MAX_TIMEOUT, trust_env=False,
                                       limits=httpx.Limits(max_keepalive_connections=32, keepalive_expiry=30))
            self._clients[key] = client
        return client

    async def post(self, where: Location, ca_bundle: str, body: bytes, seconds: int) -> Any:
        """The webhook's decoded JSON answer; CallError (upstream's wording) for anything else."""
        client = self._client(ca_bundle)
        seconds = max(1, min(seconds, MAX_TIMEOUT))
        headers = {"content-type": "application/json", "accept": "application/json"}
        extensions: dict[str, Any] = {}
        if where.server_name:
            extensions["sni_hostname"] = where.server_name
            headers["host"] = urlhost(where.shown)
        try:
            async with asyncio.timeout(seconds):
                response = await client.post(where.url, content=body, headers=headers, extensions=extensions,
                                             timeout=seconds)
        except TimeoutError as exc:
            raise CallError(f'failed to call webhook: Post "{where.shown}": context deadline exceeded') from exc
        except httpx.TimeoutException as exc:
            raise CallError(f'failed to call webhook: Post "{where.shown}": context deadline exceeded') from exc
        except httpx.HTTPError as exc:
            raise CallError(f'failed to call webhook: Post "{where.shown}": {_describe(exc, where)}') from exc
        if len(response.content) > MAX_RESPONSE_BYTES:
            raise CallError("failed to call webhook: response body too large")
        if response.status_code != 200:
            raise CallError(f"failed to call webhook: an error on the server "
                            f"({response.text[:256]!s}) has prevented the request from succeeding")
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise CallError(f"failed to call webhook: {exc}") from exc

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


def urlhost(url: str) -> str:
    """The host[:port] part of a URL."""
    rest = url.split("://", 1)[-1]
    return rest.split("/", 1)[0]


def _describe(exc: httpx.HTTPError, where: Location) -> str:
    """What went wrong, in the words of Go's net/http where pyk8s can tell (Go's are what users search for)."""
    cause = exc.__cause__ or exc.__context__
    text = str(exc) or (str(cause) if cause is not None else "") or type(exc).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text or isinstance(cause, ssl.SSLCertVerificationError):
        return f"tls: failed to verify certificate: {text}"
    if isinstance(exc, httpx.ConnectError) and ("refused" in text.lower() or "connection attempts failed" in text):
        return f"dial tcp {urlhost(where.url)}: connect: connection refused"
    return text
