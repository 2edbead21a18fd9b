"""The RBAC authorizer: Roles, ClusterRoles and their bindings, read from the apiserver's watch cache.

Bindings are indexed by subject (user, group, service account) and the index is rebuilt only when
one of the four RBAC caches changed, so a check looks at the bindings naming the user, never at
all of them. Evaluation, reasons and the privilege-escalation rules follow upstream's
plugin/pkg/auth/authorizer/rbac and pkg/registry/rbac/validation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from apiserver.auth.authz import ALLOW, NO_OPINION, Attributes
from apiserver.storage.cache import ResourceCache
from services.api import errors
from services.auth.identity import MASTERS, UserInfo, service_account_parts

Obj = dict[str, Any]
SubjectKey = tuple[str, ...]
RBAC_GROUP = "rbac.authorization.k8s.io"
FULL_AUTHORITY = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}, {"verbs": ["*"], "nonResourceURLs": ["*"]}]


@dataclass(slots=True)
class _Bound:
    """One binding as the index keeps it: its position (upstream's visiting order) and where it lives."""

    order: int
    binding: Obj
    namespace: str


def _subject_key(subject: Obj, namespace: str) -> SubjectKey | None:
    kind = subject.get("kind")
    name = subject.get("name") or ""
    if kind in ("User", "Group"):
        return (kind, name)
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return ("ServiceAccount", sa_namespace, name) if sa_namespace else None
    return None


def _user_keys(user: UserInfo) -> list[SubjectKey]:
    keys: list[SubjectKey] = [("User", user.name)]
    keys += [("Group", g) for g in user.groups]
    sa = service_account_parts(user.name)
    if sa is not None:
        keys.append(("ServiceAccount", *sa))
    return keys


def _describe_subject(subject: Obj, namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{subject.get("name", "")}/{subject.get("namespace") or namespace}"'
    return f'{subject.get("kind", "")} "{subject.get("name", "")}"'


def _describe(bound: _Bound, subject: Obj) -> str:
    meta = bound.binding.get("metadata") or {}
    ref = bound.binding.get("roleRef") or {}
    who = _describe_subject(subject, bound.namespace)
    if bound.namespace:
        return (f'RoleBinding "{meta.get("name", "")}/{bound.namespace}" of {ref.get("kind", "")} '
                f'"{ref.get("name", "")}" to {who}')
    return f'ClusterRoleBinding "{meta.get("name", "")}" of {ref.get("kind", "")} "{ref.get("name", "")}" to {who}'


def _applies(subject: Obj, user: UserInfo, namespace: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return subject.get("name") == user.name
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.name == f"system:serviceaccount:{sa_namespace}:{subject.get('name', '')}"
    return False


def _has(values: list[str] | None, wanted: str) -> bool:
    if not values:
        return False
    return wanted in values or "*" in values


def rule_allows(attrs: Attributes, rule: Obj) -> bool:
    """Whether one PolicyRule covers the request, with upstream's wildcard and subresource matching."""
    if not _has(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.resource_request:
        path = attrs.path
        for url in rule.get("nonResourceURLs") or ():
            if url == "*" or url == path or (url.endswith("*") and path.startswith(url.rstrip("*"))):
                return True
        return False
    if not _has(rule.get("apiGroups"), attrs.api_group):
        return False
    sub = attrs.subresource
    combined = f"{attrs.resource}/{sub}" if sub else attrs.resource
    resources = rule.get("resources") or ()
    if not any(r == "*" or r == combined or (sub and r == f"*/{sub}") for r in resources):
        return False
    names = rule.get("resourceNames")
    return not names or attrs.name in names


def _not_found(kind: str, name: str) -> str:
    return f'{kind.lower()}.{RBAC_GROUP} "{name}" not found'


def _aggregate(problems: list[str]) -> str:
    """Errors joined the way upstream's utilerrors.NewAggregate prints them."""
    return problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"


class RBACAuthorizer:
    """Answers from the RBAC objects in the watch cache."""

    def __init__(self, roles: ResourceCache, cluster_roles: ResourceCache, role_bindings: ResourceCache,
                 cluster_role_bindings: ResourceCache) -> None:
        self.caches = (roles, cluster_roles, role_bindings, cluster_role_bindings)
        self._signature: tuple[Any, ...] = ()
        self._roles: dict[tuple[str, str], Obj] = {}
        self._cluster_roles: dict[str, Obj] = {}
        self._cluster_bindings: dict[SubjectKey, list[_Bound]] = {}
        self._bindings: dict[tuple[str, SubjectKey], list[_Bound]] = {}

    # -- the index ------------------------------------------------------------------
    def _current_signature(self) -> tuple[Any, ...]:
        return tuple((id(c.entries), len(c.entries), c.history_start, c.history[-1].revision if c.history else 0)
                     for c in self.caches)

    def _refresh(self) -> None:
        signature = self._current_signature()
        if signature == self._signature:
            return
        roles, cluster_roles, role_bindings, cluster_role_bindings = self.caches
        self._roles = {}
        for entry in roles.entries.values():
            meta = entry.obj.get("metadata") or {}
            self._roles[(meta.get("namespace", ""), meta.get("name", ""))] = entry.obj
        self._cluster_roles = {(e.obj.get("metadata") or {}).get("name", ""): e.obj
                               for e in cluster_roles.entries.values()}
        self._cluster_bindings = {}
        for order, entry in enumerate(cluster_role_bindings.entries.values()):
            bound = _Bound(order, entry.obj, "")
            for key in {k for s in entry.obj.get("subjects") or () if (k := _subject_key(s, "")) is not None}:
                self._cluster_bindings.setdefault(key, []).append(bound)
        self._bindings = {}
        for order, entry in enumerate(role_bindings.entries.values()):
            namespace = (entry.obj.get("metadata") or {}).get("namespace", "")
            bound = _Bound(order, entry.obj, namespace)
            for key in {k for s in entry.obj.get("subjects") or () if (k := _subject_key(s, namespace)) is not None}:
                self._bindings.setdefault((namespace, key), []).append(bound)
        self._signature = signature

    def _role_rules(self, ref: Obj, namespace: str) -> tuple[list[Obj], str]:
        """The rules a roleRef grants, or an error when the role does not exist."""
        kind, name = ref.get("kind", ""), ref.get("name", "")
        if kind == "ClusterRole":
            role = self._cluster_roles.get(name)
        elif kind == "Role" and namespace:
            role = self._roles.get((namespace, name))
        else:
            return [], f"unknown roleRef kind {kind!r}"
        if role is None:
            return [], _not_found(kind, name)
        return list(role.get("rules") or ()), ""

    def _visit(self, user: UserInfo, namespace: str) -> Iterator[tuple[_Bound, Obj, list[Obj], str]]:
        """(binding, matching subject, rules, error) for every binding that applies, in upstream's order."""
        self._refresh()
        keys = _user_keys(user)
        scopes: list[tuple[str, dict[Any, list[_Bound]], Any]] = [("", self._cluster_bindings, lambda k: k)]
        if namespace:
            scopes.append((namespace, self._bindings, lambda k: (namespace, k)))
        for scope_ns, index, key_of in scopes:
            found: dict[int, _Bound] = {}
            for key in keys:
                for bound in index.get(key_of(key), ()):
                    found[bound.order] = bound
            for order in sorted(found):
                bound = found[order]
                subject = next((s for s in bound.binding.get("subjects") or () if _applies(s, user, scope_ns)), None)
                if subject is None:
                    continue
                rules, error = self._role_rules(bound.binding.get("roleRef") or {}, scope_ns)
                yield bound, subject, rules, error

    # -- the authorizer -------------------------------------------------------------
    def authorize(self, attrs: Attributes) -> tuple[str, str]:
        problems: list[str] = []
        for bound, subject, rules, error in self._visit(attrs.user, attrs.namespace):
            if error:
                problems.append(error)
                continue
            for rule in rules:
                if rule_allows(attrs, rule):
                    return ALLOW, f"RBAC: allowed by {_describe(bound, subject)}"
        return NO_OPINION, f"RBAC: {_aggregate(problems)}" if problems else ""

    def user_rules(self, user: UserInfo, namespace: str) -> tuple[list[Obj], list[str]]:
        """Every rule the user holds in `namespace` (cluster-wide ones included) and the lookup errors."""
        rules: list[Obj] = []
        problems: list[str] = []
        for _, _, granted, error in self._visit(user, namespace):
            if error:
                problems.append(error)
            rules += granted
        return rules, problems

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[Obj], list[Obj], bool, str]:
        rules, problems = self.user_rules(user, namespace)
        resource = []
        non_resource = []
        for rule in rules:
            if rule.get("nonResourceURLs"):
                non_resource.append({"verbs": list(rule.get("verbs") or ()),
                                     "nonResourceURLs": list(rule["nonResourceURLs"])})
                continue
            out = {"verbs": list(rule.get("verbs") or ()), "apiGroups": list(rule.get("apiGroups") or ()),
                   "resources": list(rule.get("resources") or ())}
            if rule.get("resourceNames"):
                out["resourceNames"] = list(rule["resourceNames"])
            resource.append(out)
        return resource, non_resource, bool(problems), _aggregate(problems) if problems else ""

    # -- escalation -----------------------------------------------------------------
    def escalation_refusal(self, allowed: Callable[[Attributes], bool], user: UserInfo, kind: str, namespace: str,
                           name: str, obj: Obj, current: Obj | None) -> str:
        """Why writing `obj` (a Role, ClusterRole or binding) would grant more than `user` holds; empty when it may.

        Upstream's rules: roles need the user to hold every rule or `escalate` on the role; bindings need the
        referenced role's rules or `bind` on it. Writes that leave the grants alone are never checked.
        """
        if kind in ("Role", "ClusterRole"):
            if current is not None and all(obj.get(k) == current.get(k) for k in ("rules", "aggregationRule")):
                return ""
            if allowed(Attributes(user, "escalate", True, namespace=namespace, api_group=RBAC_GROUP, api_version="v1",
                                  resource="roles" if kind == "Role" else "clusterroles", name=name)):
                return ""
            rules = [r for r in obj.get("rules") or () if isinstance(r, dict)]
            refusal = self.confirm_no_escalation(user, namespace, rules)
            if not refusal and kind == "ClusterRole" and obj.get("aggregationRule") and \
                    self.confirm_no_escalation(user, "", FULL_AUTHORITY):
                return "must have cluster-admin privileges to use the aggregationRule"
            return refusal
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            return ""
        if current is not None and all(obj.get(k) == current.get(k) for k in ("roleRef", "subjects")):
            return ""
        ref = obj.get("roleRef")
        if not isinstance(ref, dict):
            return ""
        if allowed(Attributes(user, "bind", True, namespace=namespace, api_group=str(ref.get("apiGroup") or ""),
                              resource="roles" if ref.get("kind") == "Role" else "clusterroles",
                              name=str(ref.get("name") or ""))):
            return ""
        granted, problem = self.role_ref_rules(ref, namespace)
        if problem:
            # Upstream hands on its lister's error: a 404 naming the role in the singular.
            raise errors.not_found(str(ref.get("kind") or "").lower(), RBAC_GROUP, str(ref.get("name") or ""))
        return self.confirm_no_escalation(user, namespace, granted)

    def role_ref_rules(self, ref: Obj, namespace: str) -> tuple[list[Obj], str]:
        """The rules a binding in `namespace` would grant (an error when its role is missing)."""
        self._refresh()
        return self._role_rules(ref, namespace if ref.get("kind") == "Role" else "")

    def confirm_no_escalation(self, user: UserInfo, namespace: str, rules: list[Obj]) -> str:
        """Empty when the user already holds every rule; upstream's refusal otherwise."""
        owned, problems = self.user_rules(user, namespace)
        missing = [piece for rule in rules for piece in breakdown(rule)
                   if not any(rule_covers(own, piece) for own in owned)]
        if not missing:
            return ""
        lines = sorted({compact_string(r) for r in compact_rules(missing)})
        groups = "[" + " ".join(f'"{g}"' for g in user.groups) + "]"
        message = (f'user "{user.name}" (groups={groups}) is attempting to grant RBAC permissions not currently '
                   "held:\n" + "\n".join(lines))
        if problems:
            message += f"; resolution errors: [{' '.join(problems)}]"
        return message


def escalation_allowed(user: UserInfo) -> bool:
    """system:masters may grant anything: the apiserver's own loopback clients are in it."""
    return MASTERS in user.groups


def breakdown(rule: Obj) -> list[Obj]:
    """One rule per (group, resource, name, verb) or (url, verb), as upstream compares them."""
    verbs = list(rule.get("verbs") or ())
    out: list[Obj] = []
    for group in rule.get("apiGroups") or ():
        for resource in rule.get("resources") or ():
            names = rule.get("resourceNames") or ()
            for verb in verbs:
                if names:
                    out += [{"apiGroups": [group], "resources": [resource], "resourceNames": [n], "verbs": [verb]}
                            for n in names]
                else:
                    out.append({"apiGroups": [group], "resources": [resource], "verbs": [verb]})
    for url in rule.get("nonResourceURLs") or ():
        out += [{"nonResourceURLs": [url], "verbs": [verb]} for verb in verbs]
    return out


def _has_all(have: list[str], wanted: list[str]) -> bool:
    return all(w in have for w in wanted)


def _resources_cover(have: list[str], wanted: list[str]) -> bool:
    if "*" in have or _has_all(have, wanted):
        return True
    for resource in wanted:
        if resource in have:
            continue
        if "/" not in resource or "*/" + resource.split("/", 1)[1] not in have:
            return False
    return True


def _urls_cover(have: list[str], wanted: list[str]) -> bool:
    return all(any(own == url or (own.endswith("*") and url.startswith(own[:-1])) for own in have)
               for url in wanted)


def rule_covers(own: Obj, sub: Obj) -> bool:
    """Whether holding `own` includes everything `sub` grants (upstream's ruleCovers)."""
    own_verbs, own_groups = own.get("verbs") or [], own.get("apiGroups") or []
    own_names, sub_names = own.get("resourceNames") or [], sub.get("resourceNames") or []
    return (("*" in own_verbs or _has_all(own_verbs, sub.get("verbs") or []))
            and ("*" in own_groups or _has_all(own_groups, sub.get("apiGroups") or []))
            and _resources_cover(own.get("resources") or [], sub.get("resources") or [])
            and _urls_cover(own.get("nonResourceURLs") or [], sub.get("nonResourceURLs") or [])
            and (not own_names if not sub_names else (not own_names or _has_all(own_names, sub_names))))


def compact_rules(rules: list[Obj]) -> list[Obj]:
    """Simple one-group, one-resource rules merged into one rule per resource, as upstream's CompactRules."""
    merged: dict[tuple[str, str, tuple[str, ...]], Obj] = {}
    out: list[Obj] = []
    for rule in rules:
        groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
        names = tuple(rule.get("resourceNames") or ())
        if len(groups) == 1 and len(resources) == 1 and len(names) <= 1 and not rule.get("nonResourceURLs"):
            key = (groups[0], resources[0], names)
            if key in merged:
                merged[key]["verbs"] += [v for v in rule.get("verbs") or () if v not in merged[key]["verbs"]]
                continue
            merged[key] = {"apiGroups": list(groups), "resources": list(resources), "verbs": list(rule["verbs"])}
            if names:
                merged[key]["resourceNames"] = list(names)
            out.append(merged[key])
        else:
            out.append(rule)
    return out


def compact_string(rule: Obj) -> str:
    """A rule as upstream's CompactString prints it, e.g. {APIGroups:[""], Resources:["pods"], Verbs:["get"]}."""
    parts = []
    for label, key in (("APIGroups", "apiGroups"), ("Resources", "resources"), ("NonResourceURLs", "nonResourceURLs"),
                       ("ResourceNames", "resourceNames"), ("Verbs", "verbs")):
        if rule.get(key):
            parts.append(f"{label}:[" + " ".join(f'"{v}"' for v in rule[key]) + "]")
    return "{" + ", ".join(parts) + "}"
