"""The ValidatingAdmissionPolicies and their bindings admission evaluates, read from the apiserver's watch
cache and compiled once per change (every expression parsed, defaults applied), as upstream's policy
source keeps them compiled per generation."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from apiserver.admission.webhook.source import Condition, fingerprint
from apiserver.registry import crcel
from apiserver.registry.admissionregistration import (
    POLICY_CONDITION_VARIABLES,
    POLICY_VARIABLES,
    default_match_resources,
)
from apiserver.storage.cache import WatchCache

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Expression:
    text: str
    program: crcel.Program | None
    error: str | None


def _expression(text: Any, want: str = "bool", variables: frozenset[str] = POLICY_VARIABLES) -> Expression:
    text = str(text or "")
    program, error = crcel.check_expression(text, variables, want)
    return Expression(text, program, error)


@dataclass(frozen=True, slots=True)
class Validation:
    expression: Expression
    message: str
    message_expression: Expression | None
    reason: str


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    spec: Obj
    conditions: tuple[Condition, ...]
    variables: tuple[tuple[str, Expression], ...]
    validations: tuple[Validation, ...]
    audit_annotations: tuple[tuple[str, Expression], ...]

    @property
    def failure_policy(self) -> str:
        return self.spec.get("failurePolicy") or "Fail"


def compile_policy(obj: Obj) -> Policy:
    spec = copy.deepcopy(obj.get("spec") or {})
    spec.setdefault("failurePolicy", "Fail")
    default_match_resources(spec.get("matchConstraints"))
    conditions = tuple(Condition(str(c.get("name") or ""), *crcel.check_expression(
        str(c.get("expression") or ""), POLICY_CONDITION_VARIABLES)) for c in spec.get("matchConditions") or [])
    variables = tuple((str(v.get("name") or ""), _expression(v.get("expression"), "any"))
                      for v in spec.get("variables") or [])
    validations = tuple(Validation(
        _expression(v.get("expression")), str(v.get("message") or ""),
        _expression(v["messageExpression"], "string") if v.get("messageExpression") else None,
        str(v.get("reason") or "Invalid")) for v in spec.get("validations") or [])
    audits = tuple((str(a.get("key") or ""), _expression(a.get("valueExpression"), "string"))
                   for a in spec.get("auditAnnotations") or [])
    return Policy(obj["metadata"]["name"], spec, conditions, variables, validations, audits)


class PolicySource:
    """Every policy by name and every binding in name order, kept compiled."""

    def __init__(self, cache: WatchCache, root: str) -> None:
        self._cache = cache
        self.policy_prefix = f"{root}validatingadmissionpolicies/"
        self.binding_prefix = f"{root}validatingadmissionpolicybindings/"
        self._seen: tuple[Any, ...] | None = None
        self._policies: dict[str, Policy] = {}
        self._bindings: tuple[Obj, ...] = ()

    def current(self) -> tuple[tuple[Obj, ...], dict[str, Policy]]:
        """(bindings, policies by name); cheap when nothing changed, empty when there are no bindings."""
        bindings = self._cache.resources.get(self.binding_prefix)
        policies = self._cache.resources.get(self.policy_prefix)
        if bindings is None or policies is None or not bindings.entries:
            return (), {}
        seen = (fingerprint(bindings), fingerprint(policies))
        if seen != self._seen:
            self._policies = {e.obj["metadata"]["name"]: compile_policy(e.obj) for e in policies.entries.values()}
            found = sorted((copy.deepcopy(e.obj) for e in bindings.entries.values()),
                           key=lambda o: o["metadata"]["name"])
            for binding in found:
                default_match_resources((binding.get("spec") or {}).get("matchResources"))
            self._bindings = tuple(found)
            self._seen = seen
        return self._bindings, self._policies
