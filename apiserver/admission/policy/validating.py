"""The ValidatingAdmissionPolicy admission plugin: every binding whose policy's matchConstraints (and the
binding's own matchResources) take the request evaluates the policy's CEL validations, once per param
the binding selects, and enforces what fails by the binding's validationActions: Deny refuses with
upstream's Status, Warn adds a `Warning`, Audit an audit annotation. What cannot be evaluated (a missing
param, an expression error) obeys the policy's failurePolicy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from apiserver.admission import request
from apiserver.admission.interfaces import (
    CONNECT,
    CREATE,
    DELETE,
    UPDATE,
    Attributes,
    Obj,
    PluginConfig,
    ValidationInterface,
)
from apiserver.admission.lookup import namespace_object
from apiserver.admission.policy.evaluator import evaluate
from apiserver.admission.policy.source import Policy, PolicySource
from apiserver.admission.webhook import matching, review
from apiserver.registry import crcel
from services.api import errors
from services.api.catalog import Resource
from services.api.validation import selector_matches

log = structlog.get_logger("admission.policy")

NAME = "ValidatingAdmissionPolicy"
AUDIT_KEY = "validation.policy.admission.k8s.io/validation_failure"
_POLICY_RESOURCES = frozenset({"validatingadmissionpolicies", "validatingadmissionpolicybindings"})
_CODES = {"Unauthorized": 401, "Forbidden": 403, "RequestEntityTooLarge": 413, "Invalid": 422}


class _Misconfigured(Exception):
    """The binding cannot be evaluated as written (its params are missing, its paramKind unknown)."""


class _NoParamsAllowed(Exception):
    """No param matched and the binding's parameterNotFoundAction is Allow."""


@dataclass(frozen=True, slots=True)
class _Decision:
    policy: str
    binding: str
    message: str
    reason: str
    index: int
    actions: tuple[str, ...]


def _named_rules(rules: list[Obj], a: Attributes) -> list[Obj]:
    """The rules whose resourceNames (when they list any) include the request's object."""
    return [r for r in rules if isinstance(r, dict) and (not r.get("resourceNames") or a.name in r["resourceNames"])]


class ValidatingAdmissionPolicy(ValidationInterface):
    name = NAME
    operations = frozenset({CREATE, UPDATE, DELETE, CONNECT})
    subresources = None

    def __init__(self, config: PluginConfig) -> None:
        super().__init__(config)
        self.source = PolicySource(config.cache, config.root)

    def handles(self, res: Resource) -> bool:
        return not (res.group == "admissionregistration.k8s.io" and res.plural in _POLICY_RESOURCES)

    async def _matches(self, match: Obj | None, a: Attributes, rules_required: bool) -> Resource | None:
        """The resource the request is seen as when MatchResources take it, else None."""
        match = match or {}
        if not matching.object_selected(match.get("objectSelector"), a):
            return None
        selector = match.get("namespaceSelector")
        namespace = matching.namespace_labels_needed(selector, a)
        labels = None
        if namespace is not None:
            ns = await namespace_object(self.config, namespace)
            labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
        if not matching.namespace_selected(selector, a, labels):
            return None
        policy = match.get("matchPolicy")
        excluded = _named_rules(match.get("excludeResourceRules") or [], a)
        if excluded and matching.matched_resource(excluded, policy, a, self.config.catalog) is not None:
            return None
        rules = match.get("resourceRules") or []
        if not rules:
            return a.resource if not rules_required else None
        return matching.matched_resource(_named_rules(rules, a), policy, a, self.config.catalog)

    def _params(self, policy: Policy, binding: Obj, a: Attributes) -> list[Obj | None]:
        kind = policy.spec.get("paramKind")
        ref = (binding.get("spec") or {}).get("paramRef")
        if not kind or ref is None:
            return [None]
        api_version, kind_name = kind.get("apiVersion") or "", kind.get("kind") or ""
        res = self.config.catalog.by_kind(api_version, kind_name) if self.config.catalog is not None else None
        if res is None:
            raise _Misconfigured(f"failed to configure policy: failed to find resource referenced by paramKind: "
                                 f"'{api_version}, Kind={kind_name}'")
        store = self.config.cache.resources.get(f"{self.config.root}{res.etcd_prefix}/")
        entries = store.entries if store is not None else {}
        namespace = ref.get("namespace") or ""
        if res.namespaced and not namespace:
            namespace = a.namespace
            if not namespace:
                raise _Misconfigured("failed to configure binding: cannot use a namespaced paramRef in a policy "
                                     "binding that matches a cluster-scoped resource")
        prefix = f"{self.config.root}{res.etcd_prefix}/" + (f"{namespace}/" if res.namespaced else "")
        found: list[Obj | None]
        if ref.get("name"):
            entry = entries.get(prefix + ref["name"])
            found = [entry.obj] if entry is not None else []
        else:
            found = [e.obj for key, e in sorted(entries.items()) if key.startswith(prefix)
                     and selector_matches(ref.get("selector") or {}, (e.obj.get("metadata") or {}).get("labels"))]
        if not found:
            if ref.get("parameterNotFoundAction") == "Allow":
                raise _NoParamsAllowed
            raise _Misconfigured("failed to configure binding: no params found for policy binding with `Deny` "
                                 "parameterNotFoundAction")
        return found

    async def validate(self, a: Attributes) -> None:
        bindings, policies = self.source.current()
        if not bindings:
            return
        ctx = request.current()
        decisions: list[_Decision] = []
        base: dict[str, Any] | None = None
        for binding in bindings:
            spec = binding.get("spec") or {}
            policy = policies.get(spec.get("policyName") or "")
            if policy is None:
                continue
            seen_as = await self._matches(policy.spec.get("matchConstraints"), a, True)
            if seen_as is None or (spec.get("matchResources") and await self._matches(
                    spec["matchResources"], a, False) is None):
                continue
            actions = tuple(sorted(set(spec.get("validationActions") or ())))
            bname = binding["metadata"]["name"]
            if base is None:
                base = await self._activation(a, seen_as, ctx.user)
            try:
                params = self._params(policy, binding, a)
            except _NoParamsAllowed:
                continue
            except _Misconfigured as exc:
                self._policy_error(policy, bname, actions, str(exc), decisions)
                continue
            for param in params:
                activation = {**base, "params": crcel.admission_value(param)}
                try:
                    if policy.conditions and not matching.conditions_hold(policy.conditions, activation):
                        continue
                except matching.MatchConditionError as exc:
                    self._policy_error(policy, bname, actions, str(exc), decisions)
                    continue
                outcome = evaluate(policy, activation)
                for failure in outcome.failures:
                    decisions.append(_Decision(policy.name, bname, failure.message, failure.reason, failure.index,
                                               actions))
                for problem in outcome.errors:
                    self._policy_error(policy, bname, actions, problem, decisions)
                for key, value in outcome.annotations.items():
                    ctx.annotate(key, value)
        self._enforce(decisions, a, ctx)

    @staticmethod
    def _policy_error(policy: Policy, binding: str, actions: tuple[str, ...], message: str,
                      decisions: list[_Decision]) -> None:
        if policy.failure_policy == "Ignore":
            log.warning("policy failed, failing open", policy=policy.name, binding=binding, error=message)
            return
        decisions.append(_Decision(policy.name, binding, message, "Invalid", -1, actions))

    async def _activation(self, a: Attributes, seen_as: Resource, user: Any) -> dict[str, Any]:
        body = review.request(a, seen_as, user, catalog=self.config.catalog)
        namespace = await namespace_object(self.config, a.namespace) if a.namespace and a.resource.namespaced \
            else None
        return {"object": crcel.admission_value(body["request"]["object"]),
                "oldObject": crcel.admission_value(body["request"]["oldObject"]),
                "request": crcel.admission_value(review.cel_request(body)),
                "namespaceObject": crcel.admission_value(namespace)}

    @staticmethod
    def _enforce(decisions: list[_Decision], a: Attributes, ctx: request.Request) -> None:
        audited = []
        for d in decisions:
            if "Warn" in d.actions:
                ctx.warn(f"Validation failed for ValidatingAdmissionPolicy '{d.policy}' with binding "
                         f"'{d.binding}': {d.message}")
            if "Audit" in d.actions:
                audited.append({"message": d.message, "policy": d.policy, "binding": d.binding,
                                "expressionIndex": d.index, "validationActions": list(d.actions)})
        if audited:
            ctx.annotate(AUDIT_KEY, orjson.dumps(audited).decode())
        denied = next((d for d in decisions if "Deny" in d.actions), None)
        if denied is not None:
            raise _denial(denied, a)


def _denial(d: _Decision, a: Attributes) -> errors.StatusError:
    """Upstream's admission.NewForbidden, with the validation's reason and its code."""
    message = f"ValidatingAdmissionPolicy '{d.policy}' with binding '{d.binding}' denied request: {d.message}"
    res = a.resource
    details: dict[str, Any] = {"name": a.name, "group": res.group, "kind": res.plural,
                               "causes": [{"message": message}]}
    details = {k: v for k, v in details.items() if v}
    return errors.StatusError(_CODES.get(d.reason, 422), d.reason,
                              f'{res.qualified()} "{a.name}" is forbidden: {message}', details)
