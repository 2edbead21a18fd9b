"""Authentication: who a request is from, as upstream's union of authenticators decides.

In order: a client certificate the --client-ca-file CA verified (user = CN, groups = O), a bearer
token from the --token-auth-file or signed for a service account, else system:anonymous when
--anonymous-auth allows it. A token nobody accepts is a 401 even with anonymous auth on. On the
plain-HTTP test listener a request without valid credentials is system:unsecured in system:masters,
as upstream's old insecure port treated everything. Impersonation headers then swap the user for
the one asked for, once the authorizer lets the requester impersonate it.
"""

from __future__ import annotations

import base64
import csv
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

import structlog

from apiserver.auth.authz import ALLOW, Attributes, forbidden
from apiserver.auth.bootstraptoken import BootstrapTokenAuthenticator
from apiserver.auth.tokens import Claims, Lookup, TokenError, TokenIssuer, check_live, matching_audiences
from apiserver.storage.cache import ResourceCache
from services.api import errors
from services.auth.identity import (
    ANONYMOUS,
    ANONYMOUS_USER,
    AUTHENTICATED,
    MASTERS,
    UNAUTHENTICATED,
    UserInfo,
    certificate_user,
    service_account_parts,
    with_authenticated,
)

log = structlog.get_logger("authn")

UNSECURED = UserInfo("system:unsecured", groups=(MASTERS, AUTHENTICATED))
WS_TOKEN_PREFIX = "base64url.bearer.authorization.k8s.io."
TOKEN_CACHE_TTL = 10.0
CACHE_LIMIT = 4096
_EXTRA_PREFIX = "impersonate-extra-"


def unauthorized() -> errors.StatusError:
    return errors.StatusError(401, "Unauthorized", "Unauthorized")


def load_token_file(path: str) -> dict[str, UserInfo]:
    """The users of a static token file: CSV lines `token,user,uid,"group1,group2"`, as upstream reads them."""
    users: dict[str, UserInfo] = {}
    with Path(path).open(newline="") as f:
        for number, record in enumerate(csv.reader(f), 1):
            if not record or (len(record) == 1 and not record[0].strip()):
                continue
            if len(record) < 3:
                raise ValueError(f"{path}: token file line {number} has {len(record)} columns, at least 3 required")
            token, name, uid = (x.strip() for x in record[:3])
            if not token or not name:
                continue
            groups = [g.strip() for g in record[3].split(",") if g.strip()] if len(record) > 3 else []
            users[token] = UserInfo(name, uid, with_authenticated(groups))
    return users


@dataclass(slots=True)
class Credentials:
    """What a request presents: its bearer token and any impersonation headers (names lowercased)."""

    token: str = ""
    impersonate: list[tuple[str, str]] = field(default_factory=list)


def read_credentials(headers: list[tuple[bytes, bytes]]) -> Credentials:
    """One pass over the ASGI headers; the WebSocket subprotocol carries the token where browsers cannot."""
    creds = Credentials()
    for name, value in headers:
        if name == b"authorization":
            if value[:7].lower() == b"bearer ":
                creds.token = value[7:].decode("latin-1").strip()
        elif name == b"sec-websocket-protocol" and not creds.token:
            for offered in (p.strip() for p in value.decode("latin-1").split(",")):
                if offered.startswith(WS_TOKEN_PREFIX):
                    encoded = offered[len(WS_TOKEN_PREFIX):]
                    try:
                        creds.token = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
                    except (ValueError, UnicodeDecodeError):
                        creds.token = ""
        elif name.startswith(b"impersonate-"):
            creds.impersonate.append((name.decode("latin-1"), value.decode("latin-1")))
    return creds


def peer_certificate(receive: Any) -> dict[str, Any] | None:
    """The verified client certificate of the connection (uvicorn keeps the transport on the request cycle)."""
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    if transport is None:
        return None
    return transport.get_extra_info("peercert")


class ObjectStore(Protocol):
    """What the authenticator reads bound objects from: a resource's store with its watch cache."""

    cache: ResourceCache

    def key(self, namespace: str | None, name: str) -> str: ...


class Authenticator:
    """The union of authenticators, with the answers for certificates and token signatures cached.

    A service-account token's signature is checked once per TOKEN_CACHE_TTL; the objects it names
    (its account, and the Pod, Secret or Node it is bound to) are looked up in the watch cache on
    every request, so a token stops working the moment they are gone.
    """

    def __init__(self, issuer: TokenIssuer, static_tokens: dict[str, UserInfo] | None = None,
                 anonymous: bool = True, objects: Callable[[str], ObjectStore] | None = None,
                 bootstrap: BootstrapTokenAuthenticator | None = None) -> None:
        self.issuer = issuer
        self.bootstrap = bootstrap
        self.static_tokens = static_tokens or {}
        self.anonymous = anonymous
        self.objects = objects
        self._certs: dict[int, tuple[dict[str, Any], UserInfo | None]] = {}
        self._tokens: dict[str, tuple[float, Claims | None, UserInfo | None]] = {}

    def certificate(self, peer: dict[str, Any] | None) -> UserInfo | None:
        if not peer:
            return None
        hit = self._certs.get(id(peer))
        if hit is not None and hit[0] is peer:
            return hit[1]
        user = certificate_user(peer)
        if len(self._certs) >= CACHE_LIMIT:
            self._certs.clear()
        self._certs[id(peer)] = (peer, user)
        return user

    def lookup(self) -> Lookup | None:
        """Reads of live objects from the watch cache; None until the caches have loaded."""
        if self.objects is None:
            return None
        stores = {plural: self.objects(plural) for plural in ("serviceaccounts", "pods", "secrets", "nodes")}
        if not all(store.cache.ready for store in stores.values()):
            return None

        def get(plural: str, namespace: str, name: str) -> dict[str, Any] | None:
            store = stores[plural]
            entry = store.cache.entries.get(store.key(namespace or None, name))
            return entry.obj if entry is not None else None

        return get

    def token(self, token: str) -> UserInfo | None:
        """The user a bearer token names, or None when no token authenticator accepts it."""
        user = self.static_tokens.get(token)
        if user is None and self.bootstrap is not None:
            user = self.bootstrap.authenticate(token)
        if user is not None:
            return user
        now = time.monotonic()
        hit = self._tokens.get(token)
        if hit is None or hit[0] <= now:
            hit = (now + TOKEN_CACHE_TTL, *self._verify(token))
            if len(self._tokens) >= CACHE_LIMIT:
                self._tokens.clear()
            self._tokens[token] = hit
        _, claims, user = hit
        if claims is None or (claims.expires and time.time() >= claims.expires):
            return None
        lookup = self.lookup()
        if lookup is not None:
            try:
                check_live(claims, token, lookup)
            except TokenError as exc:
                log.info("service account token rejected", user=claims.username, reason=str(exc))
                return None
        return user

    def _verify(self, token: str) -> tuple[Claims | None, UserInfo | None]:
        try:
            claims = self.issuer.verify(token)
            matching_audiences(claims, self.issuer.audiences)
        except TokenError:
            return None, None
        info = claims.user()
        return claims, UserInfo(info["username"], info["uid"], with_authenticated(info["groups"]),
                                dict(info.get("extra") or {}))

    def authenticate(self, creds: Credentials, peer: dict[str, Any] | None, secure: bool) -> UserInfo:
        """The request's user; 401 when it presents a token nobody accepts or nothing at all without anonymous."""
        if secure:
            user = self.certificate(peer)
            if user is not None:
                return user
        if creds.token:
            user = self.token(creds.token)
            if user is not None:
                return user
            if secure:
                raise unauthorized()
        if not secure:
            return UNSECURED
        if self.anonymous:
            return ANONYMOUS
        raise unauthorized()

    def review(self, token: str, audiences: list[str] | None) -> dict[str, Any]:
        """TokenReview status: static and bootstrap tokens first (audience-agnostic, as upstream wraps
        them), then service-account tokens with their audiences."""
        user = self.static_tokens.get(token)
        if user is None and self.bootstrap is not None:
            user = self.bootstrap.authenticate(token)
        if user is not None:
            wanted = audiences or self.issuer.audiences
            matched = [a for a in wanted if a in self.issuer.audiences]
            if not matched:
                return {"authenticated": False, "error": "token audiences " + str(self.issuer.audiences) +
                        " is invalid for the target audiences " + str(wanted)}
            return {"authenticated": True, "user": user.to_dict(), "audiences": matched}
        return self.issuer.review(token, audiences, self.lookup())


def impersonate(requester: UserInfo, headers: list[tuple[str, str]],
                authorize: Callable[[Attributes], tuple[str, str]]) -> UserInfo:
    """The user the Impersonate-* headers ask for, once the requester may impersonate each part of it."""
    wanted_user = next((v for k, v in headers if k == "impersonate-user"), "")
    groups_given = [v for k, v in headers if k == "impersonate-group"]
    uid = next((v for k, v in headers if k == "impersonate-uid"), "")
    extras = [(unquote(k[len(_EXTRA_PREFIX):].lower()), v) for k, v in headers if k.startswith(_EXTRA_PREFIX)]
    if not wanted_user:
        if groups_given or extras or uid:
            asked = [f"{{Group {g}}}" for g in groups_given] + [f"{{UserExtra {k}={v}}}" for k, v in extras]
            asked += [f"{{UID {uid}}}"] if uid else []
            raise errors.internal(f"requested [{' '.join(asked)}] without impersonating a user")
        return requester
    checks: list[Attributes] = []
    sa = service_account_parts(wanted_user)
    groups: list[str] = []
    if sa is not None:
        checks.append(Attributes(requester, "impersonate", True, namespace=sa[0], api_version="v1",
                                 resource="serviceaccounts", name=sa[1]))
        if not groups_given:
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{sa[0]}"]
    else:
        checks.append(Attributes(requester, "impersonate", True, api_version="v1", resource="users",
                                 name=wanted_user))
    for group in groups_given:
        checks.append(Attributes(requester, "impersonate", True, api_version="v1", resource="groups", name=group))
        groups.append(group)
    extra: dict[str, list[str]] = {}
    for key, value in extras:
        checks.append(Attributes(requester, "impersonate", True, api_group="authentication.k8s.io", api_version="v1",
                                 resource="userextras", subresource=key, name=value))
        extra.setdefault(key, []).append(value)
    if uid:
        checks.append(Attributes(requester, "impersonate", True, api_group="authentication.k8s.io", api_version="v1",
                                 resource="uids", name=uid))
    for attrs in checks:
        decision, reason = authorize(attrs)
        if decision != ALLOW:
            raise forbidden(attrs, reason)
    if wanted_user != ANONYMOUS_USER:
        if AUTHENTICATED not in groups and UNAUTHENTICATED not in groups:
            groups.append(AUTHENTICATED)
    elif UNAUTHENTICATED not in groups:
        groups.append(UNAUTHENTICATED)
    return UserInfo(wanted_user, uid, tuple(groups), extra)
