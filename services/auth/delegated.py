"""Authentication and authorization delegated to the apiserver, as upstream's kubelet and extension
apiservers do it: a bearer token is checked with a TokenReview, a request with a SubjectAccessReview;
answers are cached briefly, as upstream's webhooks cache them."""

from __future__ import annotations

import base64
import hashlib
import time
from typing import Any, Protocol

import httpx

from services.auth.identity import AUTHENTICATED, UserInfo
from services.client.errors import ApiError

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
WS_TOKEN_PREFIX = "base64url.bearer.authorization.k8s.io."
CACHE_LIMIT = 4096


class APIClient(Protocol):
    """The part of services.client.Client the webhooks use."""

    async def request(self, method: str, path: str, *, body: Any = None) -> Any: ...


class AuthError(Exception):
    """An answer instead of the request: 401, 403 or 500 with upstream's plain-text message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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


class AccessReviewer:
    """Decisions asked of the apiserver with a SubjectAccessReview, cached per user and attributes."""

    def __init__(self, client: APIClient, allowed_ttl: float = 300.0, denied_ttl: float = 30.0) -> None:
        self.client = client
        self.allowed_ttl = allowed_ttl
        self.denied_ttl = denied_ttl
        self._cache = TTLCache()

    async def allowed(self, user: UserInfo, attributes: dict[str, str], non_resource: bool = False) -> bool:
        """`attributes` are resourceAttributes (verb, group, version, resource, ...) or, with
        `non_resource`, nonResourceAttributes (verb, path)."""
        key = (user.name, user.uid, user.groups, tuple(sorted((k, tuple(v)) for k, v in user.extra.items())),
               non_resource, tuple(sorted(attributes.items())))
        found, decision = self._cache.get(key)
        if found:
            return bool(decision)
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups),
                                "nonResourceAttributes" if non_resource else "resourceAttributes": attributes}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        answer = await self.client.request("POST", ACCESS_REVIEWS, body=review)
        decision = bool(((answer or {}).get("status") or {}).get("allowed"))
        self._cache.put(key, decision, self.allowed_ttl if decision else self.denied_ttl)
        return decision
