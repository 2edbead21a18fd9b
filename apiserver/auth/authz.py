"""Authorization: the attributes of a request, as upstream's RequestInfo resolves them, and the mode chain.

`--authorization-mode` names the authorizers in order; the first that allows or denies decides and
a request nobody allows is forbidden. Members of system:masters are allowed before any of them is
asked, as upstream's privileged-group authorizer does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote

from services.api import errors
from services.auth.identity import MASTERS, UserInfo

ALLOW = "allow"
DENY = "deny"
NO_OPINION = "no-opinion"
MODES = ("AlwaysAllow", "AlwaysDeny", "Node", "RBAC")

_METHOD_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
                 "DELETE": "delete"}
_SPECIAL_VERBS = ("proxy", "watch")
_NAMESPACE_SUBRESOURCES = ("status", "finalize")

Rules = tuple[list[dict[str, Any]], list[dict[str, Any]], bool, str]


@dataclass(slots=True)
class Attributes:
    """What a request asks to do, the input of every authorizer."""

    user: UserInfo
    verb: str
    resource_request: bool = False
    path: str = ""
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    #: the list or watch's fieldSelector as sent, which the Node authorizer scopes pod reads by
    field_selector: str = ""


def split_path(raw_path: str) -> list[str]:
    """The segments of a still percent-encoded URL path, each decoded on its own: an encoded slash is part
    of its segment (a name), never a separator."""
    return [unquote(p) for p in raw_path.split("/") if p]


def request_attributes(user: UserInfo, method: str, path: str, query: bytes | str = b"",
                       raw_path: str | None = None) -> Attributes:
    """The attributes of one HTTP request, resolved the way upstream's RequestInfoFactory does; `raw_path`
    is the path as sent, which the segments come from when given."""
    parts = split_path(raw_path) if raw_path is not None else [p for p in path.split("/") if p]
    non_resource = Attributes(user, method.lower(), False, path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    legacy = parts[0] == "api"
    rest = parts[1:]
    group = ""
    if not legacy:
        if len(rest) < 3:
            return non_resource
        group, rest = rest[0], rest[1:]
    attrs = Attributes(user, "", True, path, api_group=group, api_version=rest[0])
    rest = rest[1:]
    if rest[0] in _SPECIAL_VERBS:
        if len(rest) < 2:
            return non_resource
        attrs.verb, rest = rest[0], rest[1:]
    else:
        attrs.verb = _METHOD_VERBS.get(method.upper(), "")
    if rest[0] == "namespaces":
        if len(rest) > 1:
            attrs.namespace = rest[1]
            if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
                rest = rest[2:]
    attrs.resource = rest[0]
    if len(rest) >= 2:
        attrs.name = rest[1]
    if len(rest) >= 3:
        attrs.subresource = rest[2]
    if not attrs.name and attrs.verb == "get":
        params = parse_qs(query.decode("latin-1") if isinstance(query, bytes) else query)
        attrs.verb = "watch" if (params.get("watch") or [""])[0].lower() in ("true", "1") else "list"
        attrs.field_selector = (params.get("fieldSelector") or [""])[0]
        attrs.name = _name_from_field_selector(attrs.field_selector)
    elif not attrs.name and attrs.verb == "delete":
        attrs.verb = "deletecollection"
    return attrs


def _name_from_field_selector(selector: str) -> str:
    """A list or watch of one object by `metadata.name=` is authorized as that object, like upstream."""
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        if sep and key.strip() == "metadata.name":
            return value.lstrip("=").strip()
    return ""


class Authorizer(Protocol):
    def authorize(self, attrs: Attributes) -> tuple[str, str]: ...

    def rules_for(self, user: UserInfo, namespace: str) -> Rules:
        """(resource rules, non-resource rules, incomplete, evaluation error) the user holds in `namespace`."""
        ...


class AlwaysAllow:
    def authorize(self, attrs: Attributes) -> tuple[str, str]:
        return ALLOW, ""

    def rules_for(self, user: UserInfo, namespace: str) -> Rules:
        return ([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                [{"verbs": ["*"], "nonResourceURLs": ["*"]}], False, "")


class AlwaysDeny:
    def authorize(self, attrs: Attributes) -> tuple[str, str]:
        return DENY, "Everything is forbidden."

    def rules_for(self, user: UserInfo, namespace: str) -> Rules:
        return [], [], False, ""


class Chain:
    """The configured authorizers in order, behind the system:masters short-circuit."""

    def __init__(self, authorizers: list[Any]) -> None:
        self.authorizers = authorizers
        #: The first authorizer allows everything: no request needs its attributes resolved.
        self.always_allow = bool(authorizers) and isinstance(authorizers[0], AlwaysAllow)

    def authorize(self, attrs: Attributes) -> tuple[str, str]:
        if MASTERS in attrs.user.groups:
            return ALLOW, ""
        reasons = []
        for authorizer in self.authorizers:
            decision, reason = authorizer.authorize(attrs)
            if decision != NO_OPINION:
                return decision, reason
            if reason:
                reasons.append(reason)
        return NO_OPINION, "\n".join(reasons)

    def allowed(self, attrs: Attributes) -> bool:
        return self.authorize(attrs)[0] == ALLOW

    def rules_for(self, user: UserInfo, namespace: str) -> Rules:
        resource: list[dict[str, Any]] = []
        non_resource: list[dict[str, Any]] = []
        incomplete = False
        problems = []
        for authorizer in self.authorizers:
            res, non, partial, problem = authorizer.rules_for(user, namespace)
            resource += res
            non_resource += non
            incomplete = incomplete or partial
            if problem:
                problems.append(problem)
        return resource, non_resource, incomplete, "\n".join(problems)


def forbidden_message(attrs: Attributes) -> str:
    """Upstream's description of what the user may not do."""
    name = attrs.user.name
    if not attrs.resource_request:
        return f'User "{name}" cannot {attrs.verb} path "{attrs.path}"'
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return f'User "{name}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}" {where}'


def forbidden(attrs: Attributes, reason: str = "") -> errors.StatusError:
    """The 403 Status upstream answers a denied request with."""
    why = forbidden_message(attrs) + (f": {reason}" if reason else "")
    if not attrs.resource_request or not attrs.resource:
        return errors.StatusError(403, "Forbidden", f"forbidden: {why}", {})
    return errors.forbidden(attrs.resource, attrs.api_group, attrs.name, why)
