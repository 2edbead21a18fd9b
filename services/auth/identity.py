"""Who a request is from: the user record and the names every Kubernetes authenticator shares.

The apiserver and the kubelet both authenticate client certificates the same way (user = CN,
groups = O), so the rule lives here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
MASTERS = "system:masters"
ANONYMOUS_USER = "system:anonymous"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """The user as the authentication API's UserInfo shows it."""
        out: dict[str, Any] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


ANONYMOUS = UserInfo(ANONYMOUS_USER, groups=(UNAUTHENTICATED,))


def with_authenticated(groups: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """`groups` plus system:authenticated, which every authenticated user is in."""
    return tuple(dict.fromkeys([*groups, AUTHENTICATED]))


def service_account_parts(username: str) -> tuple[str, str] | None:
    """(namespace, name) of a `system:serviceaccount:<ns>:<name>` user, else None."""
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    namespace, sep, name = username[len(SERVICE_ACCOUNT_PREFIX):].partition(":")
    if not sep or not namespace or not name or ":" in name:
        return None
    return namespace, name


def node_identity(user: UserInfo) -> tuple[str, bool]:
    """(node name, is a node) as upstream's default NodeIdentifier reads it: a `system:node:<name>` user in
    system:nodes is a node; the name may be empty, which the Node authorizer and NodeRestriction refuse."""
    if not user.name.startswith(NODE_USER_PREFIX) or NODES_GROUP not in user.groups:
        return "", False
    return user.name[len(NODE_USER_PREFIX):], True


def certificate_user(peercert: dict[str, Any] | None) -> UserInfo | None:
    """The user a verified client certificate names (the TLS layer already checked it against the CA)."""
    if not peercert:
        return None
    pairs = [pair for rdn in peercert.get("subject") or () for pair in rdn]
    name = next((value for key, value in pairs if key == "commonName"), "")
    if not name:
        return None
    groups = [value for key, value in pairs if key == "organizationName"]
    return UserInfo(name, groups=with_authenticated(groups))
