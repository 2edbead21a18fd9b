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
from typing import Any
from urllib.parse import unquote

from apiserver.auth.authz import ALLOW, Attributes, forbidden
from apiserver.auth.bootstraptoken import BootstrapTokenAuthenticator
from apiserver.auth.tokens import TokenIssuer
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


class Authenticator:
    """The union of authenticators, with the answers for certificates and tokens cached."""

    def __init__(self, issuer: TokenIssuer, static_tokens: dict[str, UserInfo] | None = None,
                 anonymous: bool = True, accounts: Callable[[], ResourceCache | None] | None = None,
                 root: str = "/registry/", bootstrap: BootstrapTokenAuthenticator | None = None) -> None:
        self.issuer = issuer
        self.bootstrap = bootstrap
        self.static_tokens = static_tokens or {}
        self.anonymous = anonymous
        self.accounts = accounts
        self.root = root
        self._certs: dict[int, tuple[dict[str, Any], UserInfo | None]] = {}
        self._tokens: dict[str, tuple[float, UserInfo | None]] = {}

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

    def token(self, token: str) -> UserInfo | None:
        """The user a bearer token names, or None when no token authenticator accepts it."""
        user = self.static_tokens.get(token)
        if user is None and self.bootstrap is not None:
            user = self.bootstrap.authenticate(token)
        if user is not None:
            return user
        now = time.monotonic()
        hit = self._tokens.get(token)
        if hit is not None and hit[0] > now:
            return hit[1]
        user = self._service_account(token)
        if len(self._tokens) >= CACHE_LIMIT:
            self._tokens.clear()
        self._tokens[token] = (now + TOKEN_CACHE_TTL, user)
        return user

    def _service_account(self, token: str) -> UserInfo | None:
        status = self.issuer.review(token, None)
        if not status.get("authenticated"):
            return None
        info = status["user"]
        if not self._account_exists(info.get("username", ""), info.get("uid", "")):
            return None
        return UserInfo(info.get("username", ""), info.get("uid", ""), with_authenticated(info.get("groups") or []),
                        dict(info.get("extra") or {}))

    def _account_exists(self, username: str, uid: str) -> bool:
        """A token outlives nothing: once its service account is gone (or recreated) it is refused."""
        cache = self.accounts() if self.accounts is not None else None
        parts = service_account_parts(username)
        if cache is None or not cache.ready or parts is None:
            return True
        entry = cache.entries.get(f"{self.root}serviceaccounts/{parts[0]}/{parts[1]}")
        return entry is not None and (not uid or entry.obj.get("metadata", {}).get("uid") == uid)

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
        """TokenReview status: static tokens first, then service-account tokens with their audiences."""
        user = self.static_tokens.get(token)
        if user is not None:
            wanted = audiences or self.issuer.audiences
            matched = [a for a in wanted if a in self.issuer.audiences]
            if not matched:
                return {"authenticated": False, "error": "token audiences " + str(self.issuer.audiences) +
                        " is invalid for the target audiences " + str(wanted)}
            return {"authenticated": True, "user": user.to_dict(), "audiences": matched}
        status = self.issuer.review(token, audiences)
        if status.get("authenticated") and not self._account_exists(status["user"].get("username", ""),
                                                                     status["user"].get("uid", "")):
            return {"authenticated": False, "error": "service account token has been invalidated"}
        return status


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
