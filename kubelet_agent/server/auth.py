"""Who may use the kubelet API, decided as upstream's kubelet does.

Authentication: a client certificate the --client-ca-file CA signed (user = CN, groups = O), else a
bearer token the apiserver vouches for through a TokenReview (--authentication-token-webhook),
else system:anonymous when --anonymous-auth allows it. A token the apiserver does not know is a
401 even with anonymous auth on, as upstream's fail-on-error union of authenticators does.

Authorization: every authenticated request is allowed (--authorization-mode=AlwaysAllow) or put
to the apiserver as a SubjectAccessReview on the node (Webhook): resource `nodes`, a subresource
chosen by path, a verb from the HTTP method. Answers are cached briefly, as upstream's webhooks do.
"""

from __future__ import annotations

import base64
import hashlib
import time
from typing import Any, Protocol

import httpx

from services.auth.identity import ANONYMOUS, AUTHENTICATED, UserInfo, certificate_user
from services.client.errors import ApiError

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
WS_TOKEN_PREFIX = "base64url.bearer.authorization.k8s.io."
VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# Paths whose own subresource upstream authorizes; everything else (exec, attach, portForward,
# containerLogs, pods, run, ...) is nodes/proxy.
SUBRESOURCES = (("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log"), ("/spec", "spec"),
                ("/checkpoint", "checkpoint"))
CACHE_LIMIT = 4096


class APIClient(Protocol):
    """The part of services.client.Client the webhooks use."""

    async def request(self, method: str, path: str, *, body: Any = None) -> Any: ...


class AuthError(Exception):
    """An answer instead of the request: 401, 403 or 500 with upstream's plain-text message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _subpath(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def request_attributes(method: str, path: str) -> tuple[str, str]:
    """(verb, subresource) of a kubelet API request, as upstream's node authorizer attributes."""
    subresource = next((sub for prefix, sub in SUBRESOURCES if _subpath(path, prefix)), "proxy")
    return VERBS.get(method.upper(), ""), subresource


def bearer_token(headers: list[tuple[str, str]]) -> str:
    """The token of `Authorization: Bearer`, or of the WebSocket subprotocol browsers must use instead."""
    for name, value in headers:
        lower = name.lower()
        if lower == "authorization" and value[:7].lower() == "bearer ":
            return value[7:].strip()
        if lower == "sec-websocket-protocol":
            for offered in (p.strip() for p in value.split(",")):
                if offered.startswith(WS_TOKEN_PREFIX):
                    encoded = offered[len(WS_TOKEN_PREFIX):]
                    try:
                        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
                    except (ValueError, UnicodeDecodeError):
                        return ""
    return ""


class TTLCache:
    """Answers kept for a while; the oldest go first once the cache is full."""

    def __init__(self, limit: int = CACHE_LIMIT) -> None:
        self.limit = limit
        self._items: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any) -> tuple[bool, Any]:
        hit = self._items.get(key)
        if hit is None:
            return False, None
        if hit[0] < time.monotonic():
            del self._items[key]
            return False, None
        return True, hit[1]

    def put(self, key: Any, value: Any, ttl: float) -> None:
        if ttl <= 0:
            return
        if len(self._items) >= self.limit:
            self._items.pop(next(iter(self._items)))
        self._items[key] = (time.monotonic() + ttl, value)


class TokenWebhook:
    """Bearer tokens checked by a TokenReview against the apiserver."""

    def __init__(self, client: APIClient, ttl: float = 120.0, failure_ttl: float = 10.0) -> None:
        self.client = client
        self.ttl = ttl
        self.failure_ttl = failure_ttl
        self._cache = TTLCache()

    async def authenticate(self, token: str) -> UserInfo | None:
        key = hashlib.sha256(token.encode()).digest()
        found, user = self._cache.get(key)
        if found:
            return user
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        try:
            answer = await self.client.request("POST", TOKEN_REVIEWS, body=review)
        except (ApiError, httpx.HTTPError, OSError) as exc:
            raise AuthError(401, "Unauthorized") from exc
        status = (answer or {}).get("status") or {}
        user = None
        if status.get("authenticated"):
            info = status.get("user") or {}
            groups = tuple(dict.fromkeys([*(info.get("groups") or []), AUTHENTICATED]))
            user = UserInfo(info.get("username", ""), info.get("uid", ""), groups, dict(info.get("extra") or {}))
        self._cache.put(key, user, self.ttl if user else self.failure_ttl)
        return user


class AccessWebhook:
    """Decisions asked of the apiserver with a SubjectAccessReview on this node."""

    def __init__(self, client: APIClient, node_name: str, allowed_ttl: float = 300.0,
                 denied_ttl: float = 30.0) -> None:
        self.client = client
        self.node_name = node_name
        self.allowed_ttl = allowed_ttl
        self.denied_ttl = denied_ttl
        self._cache = TTLCache()

    async def allowed(self, user: UserInfo, verb: str, subresource: str) -> bool:
        key = (user.name, user.uid, user.groups, tuple(sorted((k, tuple(v)) for k, v in user.extra.items())),
               verb, subresource)
        found, decision = self._cache.get(key)
        if found:
            return bool(decision)
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups),
                                "resourceAttributes": {"verb": verb, "group": "", "version": "v1",
                                                       "resource": "nodes", "subresource": subresource,
                                                       "name": self.node_name}}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        answer = await self.client.request("POST", ACCESS_REVIEWS, body=review)
        decision = bool(((answer or {}).get("status") or {}).get("allowed"))
        self._cache.put(key, decision, self.allowed_ttl if decision else self.denied_ttl)
        return decision


class KubeletAuth:
    """The whole filter: call `check` before serving any path but /healthz."""

    def __init__(self, *, anonymous: bool = False, tokens: TokenWebhook | None = None,
                 access: AccessWebhook | None = None) -> None:
        self.anonymous = anonymous
        self.tokens = tokens
        self.access = access

    async def authenticate(self, headers: list[tuple[str, str]], peercert: dict[str, Any] | None) -> UserInfo:
        user = certificate_user(peercert)
        if user is not None:
            return user
        token = bearer_token(headers)
        if token and self.tokens is not None:
            user = await self.tokens.authenticate(token)
            if user is None:
                raise AuthError(401, "Unauthorized")
            return user
        if not self.anonymous:
            raise AuthError(401, "Unauthorized")
        return ANONYMOUS

    async def check(self, method: str, path: str, headers: list[tuple[str, str]],
                    peercert: dict[str, Any] | None) -> UserInfo:
        """The request's user, once it may do what it asks; AuthError otherwise."""
        user = await self.authenticate(headers, peercert)
        if self.access is None:
            return user
        verb, subresource = request_attributes(method, path)
        attrs = f"user={user.name}, verb={verb}, resource=nodes, subresource={subresource}"
        try:
            allowed = await self.access.allowed(user, verb, subresource)
        except (ApiError, httpx.HTTPError, OSError) as exc:
            raise AuthError(500, f"Authorization error ({attrs})") from exc
        if not allowed:
            raise AuthError(403, f"Forbidden ({attrs})")
        return user
