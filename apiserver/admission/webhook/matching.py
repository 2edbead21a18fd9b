"""Whether a webhook is called for a request, as upstream's webhook matchers decide: its rules
(operations, groups, versions, resources with subresources and `*`, scope), matchPolicy Equivalent
(the same objects served under another group or version), the namespace and object selectors, then
its matchConditions in CEL.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apiserver.admission.interfaces import DELETE, Attributes
from apiserver.admission.webhook.source import Condition
from apiserver.registry import crcel
from services.api.catalog import Catalog, Resource
from services.api.validation import selector_matches

Obj = dict[str, Any]

#: resources no webhook ever sees, so a broken webhook cannot lock its own configuration away
_EXEMPT = frozenset({
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
    ("admissionregistration.k8s.io", "mutatingadmissionpolicies"),
    ("admissionregistration.k8s.io", "mutatingadmissionpolicybindings"),
})


class MatchConditionError(Exception):
    """A matchCondition could not be evaluated; the webhook's failurePolicy decides."""


def exempt(res: Resource) -> bool:
    return (res.group, res.plural) in _EXEMPT


def _one_of(values: Iterable[str] | None, value: str) -> bool:
    return any(v == "*" or v == value for v in values or ())


def _resource_matches(resources: Iterable[str] | None, plural: str, subresource: str) -> bool:
    for item in resources or ():
        res, _, sub = item.partition("/")
        if (res == "*" or res == plural) and (sub == "*" or sub == subresource):
            return True
    return False


def _scope_matches(scope: str | None, res: Resource) -> bool:
    if scope in (None, "*"):
        return True
    return (scope == "Namespaced") == res.namespaced


def rule_matches(rule: Obj, operation: str, res: Resource, subresource: str) -> bool:
    """One RuleWithOperations against a request on `res` (upstream's rules.Matcher)."""
    return (_one_of(rule.get("operations"), operation) and _one_of(rule.get("apiGroups"), res.group)
            and _one_of(rule.get("apiVersions"), res.version)
            and _resource_matches(rule.get("resources"), res.plural, subresource)
            and _scope_matches(rule.get("scope"), res))


def matched_resource(rules: Iterable[Obj], match_policy: str | None, a: Attributes,
                     catalog: Catalog | None) -> Resource | None:
    """The resource a webhook or policy sees the request as: the request's own, an equivalent one its
    rules name (matchPolicy Equivalent), or None when the rules do not match."""
    rules = [r for r in rules if isinstance(r, dict)]
    for rule in rules:
        if rule_matches(rule, a.operation, a.resource, a.subresource):
            return a.resource
    if match_policy == "Exact" or catalog is None:
        return None
    for peer in catalog.storage_peers(a.resource):
        if peer == a.resource or peer.plural != a.resource.plural:
            continue
        if any(rule_matches(rule, a.operation, peer, a.subresource) for rule in rules):
            return peer
    return None


def _labels(obj: Obj | None) -> dict[str, str] | None:
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    return (meta.get("labels") or {}) if isinstance(meta, dict) else None


def object_selected(selector: Obj | None, a: Attributes) -> bool:
    """objectSelector: either the new or the old object's labels match; an absent object never does."""
    if not selector:
        return True
    return any(labels is not None and selector_matches(selector, labels)
               for labels in (_labels(a.obj), _labels(a.old)))


def namespace_labels_needed(selector: Obj | None, a: Attributes) -> str | None:
    """The namespace whose labels the namespaceSelector is matched against, or None when it matches
    without one (an empty selector, or a cluster-scoped object other than a Namespace)."""
    if not selector:
        return None
    if a.resource.group == "" and a.resource.plural == "namespaces":
        return None
    return a.namespace or None


def namespace_selected(selector: Obj | None, a: Attributes, namespace_labels: dict[str, str] | None) -> bool:
    """namespaceSelector: a Namespace is matched on its own labels (the old ones on DELETE), a namespaced
    object on its namespace's, a cluster-scoped object always."""
    if not selector:
        return True
    if a.resource.group == "" and a.resource.plural == "namespaces":
        own = a.old if a.operation == DELETE else a.obj
        return selector_matches(selector, _labels(own) or {})
    if not a.resource.namespaced:
        return True
    return selector_matches(selector, namespace_labels or {})


def conditions_hold(conditions: Iterable[Condition], activation: dict[str, Any]) -> bool:
    """Upstream's order: any false skips the webhook or policy; else any error raises MatchConditionError."""
    error = ""
    for cond in conditions:
        if cond.program is None:
            error = error or f"expression '{cond.name}' resulted in error: {cond.error}"
            continue
        value, problem = crcel.evaluate(cond.program, activation)
        if problem is not None:
            error = error or f"expression '{cond.name}' resulted in error: {problem}"
        elif not isinstance(value, bool):
            error = error or f"expression '{cond.name}' resulted in error: no such overload"
        elif not value:
            return False
    if error:
        raise MatchConditionError(error)
    return True
