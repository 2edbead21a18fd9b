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

from typing import Any

import httpx

from services.auth.delegated import (
    AccessReviewer,
    APIClient,
    AuthError,
    TokenWebhook,
    bearer_token,
)
from services.auth.identity import ANONYMOUS, UserInfo, certificate_user
from services.client.errors import ApiError

__all__ = ["AccessWebhook", "AuthError", "KubeletAuth", "TokenWebhook", "bearer_token", "request_attributes"]

VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# Paths whose own subresource upstream authorizes; everything else (exec, attach, portForward,
# containerLogs, pods, run, ...) is nodes/proxy.
SUBRESOURCES = (("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log"), ("/spec", "spec"),
                ("/checkpoint", "checkpoint"))


def _subpath(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def request_attributes(method: str, path: str) -> tuple[str, str]:
    """(verb, subresource) of a kubelet API request, as upstream's node authorizer attributes."""
    subresource = next((sub for prefix, sub in SUBRESOURCES if _subpath(path, prefix)), "proxy")
    return VERBS.get(method.upper(), ""), subresource


class AccessWebhook:
    """Decisions asked of the apiserver with a SubjectAccessReview on this node."""

    def __init__(self, client: APIClient, node_name: str, allowed_ttl: float = 300.0,
                 denied_ttl: float = 30.0) -> None:
        self.node_name = node_name
        self.reviewer = AccessReviewer(client, allowed_ttl, denied_ttl)

    async def allowed(self, user: UserInfo, verb: str, subresource: str) -> bool:
        return await self.reviewer.allowed(user, {"verb": verb, "group": "", "version": "v1", "resource": "nodes",
                                                  "subresource": subresource, "name": self.node_name})


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
