"""admissionregistration.k8s.io/v1 MutatingWebhookConfiguration and ValidatingWebhookConfiguration: which
admission webhooks the apiserver calls, on what, and how; ValidatingAdmissionPolicy and its bindings: CEL
rules the apiserver checks itself. Defaults and validation are upstream's
(pkg/apis/admissionregistration/v1/defaults.go and validation/validation.go) for the v1 API.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from apiserver.registry import crcel
from apiserver.registry.base import GenerationStrategy, MetaStrategy, setdefault
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

#: the AdmissionReview versions the apiserver speaks, preferred first
REVIEW_VERSIONS = ("v1", "v1beta1")
#: what matchConditions may refer to (upstream also offers `authorizer`, which pyk8s does not)
CONDITION_VARIABLES = frozenset({"object", "oldObject", "request"})
MAX_MATCH_CONDITIONS = 64
OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")


def default_webhook(hook: Obj, mutating: bool) -> None:
    """SetDefaults_{Mutating,Validating}Webhook, SetDefaults_Rule and SetDefaults_ServiceReference."""
    setdefault(hook, "failurePolicy", "Fail")
    setdefault(hook, "matchPolicy", "Equivalent")
    setdefault(hook, "namespaceSelector", {})
    setdefault(hook, "objectSelector", {})
    setdefault(hook, "timeoutSeconds", 10)
    if mutating:
        setdefault(hook, "reinvocationPolicy", "Never")
    for rule in hook.get("rules") or []:
        if isinstance(rule, dict):
            setdefault(rule, "scope", "*")
    service = (hook.get("clientConfig") or {}).get("service")
    if isinstance(service, dict):
        setdefault(service, "port", 443)


def _fully_qualified(name: str, path: str) -> list[Cause]:
    """utilvalidation.IsFullyQualifiedName: a DNS subdomain of at least three segments."""
    if not name:
        return [v.required(path)]
    problems = v.is_dns1123_subdomain(name)
    if problems:
        return [v.invalid(path, name, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                          "characters, '-' or '.', and must start and end with an alphanumeric character")]
    if len(name.split(".")) < 3:
        return [v.invalid(path, name, "should be a domain with at least three segments separated by dots")]
    return []


def _string_list(values: Any, path: str, what: str) -> list[Cause]:
    if not values:
        return [v.required(path)]
    causes: list[Cause] = []
    if "*" in values and len(values) > 1:
        causes.append(v.invalid(path, values, f"if '*' is present, must not specify other {what}"))
    return causes


def _validate_resources(resources: Any, path: str) -> list[Cause]:
    """Upstream's validateResources: `*`, `*/x`, `x/*` and `*/*` must not overlap what else is listed."""
    if not resources:
        return [v.required(path)]
    causes: list[Cause] = []
    by_resource: dict[str, set[str]] = {}
    has_double_wildcard = "*/*" in resources
    for i, item in enumerate(resources):
        item = item if isinstance(item, str) else ""
        if not item:
            causes.append(v.required(f"{path}[{i}]"))
            continue
        if has_double_wildcard and item != "*/*":
            causes.append(v.invalid(f"{path}[{i}]", item, "if '*/*' is present, must not specify other resources"))
            continue
        res, _, sub = item.partition("/")
        if "/" in sub:
            causes.append(v.invalid(f"{path}[{i}]", item, "must not contain more than one slash"))
            continue
        by_resource.setdefault(res, set()).add(sub)
    for res, subs in by_resource.items():
        if "*" in subs and len(subs) > 1 and not {"*", ""} >= subs:
            causes.append(v.invalid(path, resources, f"if '{res}/*' is present, must not specify {res}/x"))
    wild = by_resource.get("*", set())
    for res, subs in by_resource.items():
        if res != "*" and subs & wild:
            sub = sorted(subs & wild)[0]
            shown = f"{res}/{sub}" if sub else res
            causes.append(v.invalid(path, resources, f"if '*/{sub}' is present, must not specify {shown}"
                                    if sub else f"if '*' is present, must not specify {shown}"))
    return causes


def _validate_rule(rule: Any, path: str) -> list[Cause]:
    if not isinstance(rule, dict):
        return [v.required(path)]
    causes = _string_list(rule.get("operations"), f"{path}.operations", "operations")
    for i, op in enumerate(rule.get("operations") or []):
        if op not in OPERATIONS:
            causes.append(v.not_supported(f"{path}.operations[{i}]", op, OPERATIONS))
    causes += _string_list(rule.get("apiGroups"), f"{path}.apiGroups", "API groups")
    versions = rule.get("apiVersions")
    causes += _string_list(versions, f"{path}.apiVersions", "API versions")
    for i, version in enumerate(versions or []):
        if version == "":
            causes.append(v.required(f"{path}.apiVersions[{i}]"))
    causes += _validate_resources(rule.get("resources"), f"{path}.resources")
    scope = rule.get("scope")
    if scope is not None and scope not in ("*", "Cluster", "Namespaced"):
        causes.append(v.not_supported(f"{path}.scope", scope, ("*", "Cluster", "Namespaced")))
    return causes


def _validate_url(url: Any, path: str) -> list[Cause]:
    """webhook.ValidateWebhookURL for a URL that must be HTTPS."""
    if not isinstance(url, str) or not url:
        return [v.required(path, "url")]
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return [v.required(path, f"url must be a valid URL: {exc}")]
    causes: list[Cause] = []
    if parts.scheme != "https":
        causes.append(v.invalid(path, parts.scheme, "'https' is the only allowed URL scheme"))
    if not parts.hostname:
        causes.append(v.invalid(path, parts.netloc, "host must be specified"))
    if "@" in parts.netloc:
        causes.append(v.invalid(path, parts.netloc, "user information is not permitted in the URL"))
    if parts.fragment or url.endswith("#"):
        causes.append(v.invalid(path, parts.fragment, "fragments are not permitted in the URL"))
    if parts.query or url.endswith("?"):
        causes.append(v.invalid(path, parts.query, "query parameters are not permitted in the URL"))
    return causes


def _validate_service(service: Obj, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if not service.get("name"):
        causes.append(v.required(f"{path}.name", "service name is required"))
    if not service.get("namespace"):
        causes.append(v.required(f"{path}.namespace", "service namespace is required"))
    port = service.get("port")
    if port is not None and v.is_valid_port_num(port):
        causes.append(v.invalid(f"{path}.port", port, "port is not valid: " + "; ".join(v.is_valid_port_num(port))))
    sub = service.get("path")
    if sub is not None:
        if not isinstance(sub, str) or not sub.startswith("/"):
            causes.append(v.invalid(f"{path}.path", sub, "must start with a '/'"))
        elif "//" in sub:
            causes.append(v.invalid(f"{path}.path", sub, "segment[1] may not be empty"))
    return causes


def _validate_client_config(config: Any, path: str) -> list[Cause]:
    config = config if isinstance(config, dict) else {}
    url, service = config.get("url"), config.get("service")
    if (url is None) == (service is None):
        return [v.required(path, "exactly one of url or service is required")]
    if url is not None:
        return _validate_url(url, f"{path}.url")
    return _validate_service(service if isinstance(service, dict) else {}, f"{path}.service")


def _validate_review_versions(versions: Any, path: str) -> list[Cause]:
    if not versions:
        return [v.required(path, "must specify one of " + ", ".join(REVIEW_VERSIONS))]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, version in enumerate(versions):
        if version in seen:
            causes.append(v.invalid(f"{path}[{i}]", version, "duplicate version"))
        seen.add(version)
        for problem in v.is_dns1035_label(version if isinstance(version, str) else ""):
            causes.append(v.invalid(f"{path}[{i}]", version, problem))
    if not seen & set(REVIEW_VERSIONS):
        causes.append(v.invalid(path, versions, "must include at least one of " + ", ".join(REVIEW_VERSIONS)))
    return causes


def validate_match_conditions(conditions: Any, path: str,
                              variables: frozenset[str] = CONDITION_VARIABLES) -> list[Cause]:
    """Names unique qualified names, expressions that compile to a bool, at most 64 of them."""
    if not conditions:
        return []
    causes: list[Cause] = []
    if len(conditions) > MAX_MATCH_CONDITIONS:
        causes.append(v.cause(path, f"Too many: {len(conditions)}: must have at most {MAX_MATCH_CONDITIONS} items",
                              "FieldValueTooMany"))
    names: set[str] = set()
    for i, cond in enumerate(conditions):
        here = f"{path}[{i}]"
        cond = cond if isinstance(cond, dict) else {}
        name = cond.get("name") or ""
        if not name:
            causes.append(v.required(f"{here}.name"))
        else:
            causes.extend(v.invalid(f"{here}.name", name, m) for m in v.is_qualified_name(name))
            if name in names:
                causes.append(v.duplicate(f"{here}.name", name))
            names.add(name)
        expression = cond.get("expression") or ""
        if not expression:
            causes.append(v.required(f"{here}.expression"))
            continue
        _, error = crcel.check_expression(expression, variables)
        if error is not None:
            causes.append(v.invalid(f"{here}.expression", expression, f"compilation failed: {error}"))
    return causes


def validate_webhook(hook: Any, path: str, mutating: bool) -> list[Cause]:
    hook = hook if isinstance(hook, dict) else {}
    causes = _fully_qualified(hook.get("name") or "", f"{path}.name")
    for i, rule in enumerate(hook.get("rules") or []):
        causes += _validate_rule(rule, f"{path}.rules[{i}]")
    failure = hook.get("failurePolicy")
    if failure is not None and failure not in ("Fail", "Ignore"):
        causes.append(v.not_supported(f"{path}.failurePolicy", failure, ("Fail", "Ignore")))
    match = hook.get("matchPolicy")
    if match is not None and match not in ("Equivalent", "Exact"):
        causes.append(v.not_supported(f"{path}.matchPolicy", match, ("Equivalent", "Exact")))
    side = hook.get("sideEffects")
    if side is None:
        causes.append(v.required(f"{path}.sideEffects", "must specify one of None, NoneOnDryRun"))
    elif side not in ("None", "NoneOnDryRun"):
        causes.append(v.not_supported(f"{path}.sideEffects", side, ("None", "NoneOnDryRun")))
    timeout = hook.get("timeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or not 1 <= timeout <= 30):
        causes.append(v.invalid(f"{path}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 "
                                "seconds"))
    if mutating:
        reinvocation = hook.get("reinvocationPolicy")
        if reinvocation is not None and reinvocation not in ("IfNeeded", "Never"):
            causes.append(v.not_supported(f"{path}.reinvocationPolicy", reinvocation, ("IfNeeded", "Never")))
    for field in ("namespaceSelector", "objectSelector"):
        if hook.get(field) is not None:
            causes += v.validate_label_selector(hook[field], f"{path}.{field}")
    causes += _validate_review_versions(hook.get("admissionReviewVersions"), f"{path}.admissionReviewVersions")
    causes += _validate_client_config(hook.get("clientConfig"), f"{path}.clientConfig")
    causes += validate_match_conditions(hook.get("matchConditions"), f"{path}.matchConditions")
    return causes


class _WebhookConfigurationStrategy(MetaStrategy):
    mutating = False

    def defaults(self, obj: Obj) -> None:
        super().defaults(obj)
        for hook in obj.get("webhooks") or []:
            if isinstance(hook, dict):
                default_webhook(hook, self.mutating)

    def validate_spec(self, obj: Obj) -> list[Cause]:
        causes: list[Cause] = []
        names: set[str] = set()
        for i, hook in enumerate(obj.get("webhooks") or []):
            causes += validate_webhook(hook, f"webhooks[{i}]", self.mutating)
            name = hook.get("name") if isinstance(hook, dict) else None
            if name:
                if name in names:
                    causes.append(v.duplicate(f"webhooks[{i}].name", name))
                names.add(name)
        return causes


class MutatingWebhookConfigurationStrategy(_WebhookConfigurationStrategy):
    mutating = True


class ValidatingWebhookConfigurationStrategy(_WebhookConfigurationStrategy):
    mutating = False


# -- ValidatingAdmissionPolicy and its bindings ------------------------------------------------------------

#: what a policy's expressions may refer to (upstream also offers `authorizer`, which pyk8s does not)
POLICY_VARIABLES = frozenset({"object", "oldObject", "request", "params", "namespaceObject", "variables"})
POLICY_CONDITION_VARIABLES = frozenset({"object", "oldObject", "request", "params", "namespaceObject"})
VALIDATION_REASONS = ("Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge")
VALIDATION_ACTIONS = ("Audit", "Deny", "Warn")
_CEL_IDENTIFIER = re.compile(r"^[_a-zA-Z][_a-zA-Z0-9]*$")


def default_match_resources(match: Any) -> None:
    """SetDefaults_MatchResources, and the rules' scope."""
    if not isinstance(match, dict):
        return
    setdefault(match, "matchPolicy", "Equivalent")
    setdefault(match, "namespaceSelector", {})
    setdefault(match, "objectSelector", {})
    for field in ("resourceRules", "excludeResourceRules"):
        for rule in match.get(field) or []:
            if isinstance(rule, dict):
                setdefault(rule, "scope", "*")


def _compiles(expression: Any, path: str, variables: frozenset[str], want: str = "bool") -> list[Cause]:
    if not isinstance(expression, str) or not expression.strip():
        return [v.required(path)]
    _, error = crcel.check_expression(expression, variables, want)
    return [v.invalid(path, expression, f"compilation failed: {error}")] if error else []


def _validate_match_resources(match: Any, path: str, rules_required: bool) -> list[Cause]:
    if not isinstance(match, dict):
        return [v.required(path)] if rules_required else []
    causes: list[Cause] = []
    policy = match.get("matchPolicy")
    if policy is not None and policy not in ("Equivalent", "Exact"):
        causes.append(v.not_supported(f"{path}.matchPolicy", policy, ("Equivalent", "Exact")))
    for field in ("namespaceSelector", "objectSelector"):
        if match.get(field) is not None:
            causes += v.validate_label_selector(match[field], f"{path}.{field}")
    if rules_required and not match.get("resourceRules"):
        causes.append(v.required(f"{path}.resourceRules"))
    for field in ("resourceRules", "excludeResourceRules"):
        for i, rule in enumerate(match.get(field) or []):
            causes += _validate_rule(rule, f"{path}.{field}[{i}]")
            for j, name in enumerate((rule or {}).get("resourceNames") or [] if isinstance(rule, dict) else []):
                causes.extend(v.invalid(f"{path}.{field}[{i}].resourceNames[{j}]", name, m)
                              for m in v.is_dns1123_subdomain(name if isinstance(name, str) else ""))
    return causes


def _validate_param_kind(kind: Any, path: str) -> list[Cause]:
    if not isinstance(kind, dict):
        return [v.required(path)]
    causes: list[Cause] = []
    api_version = kind.get("apiVersion") or ""
    if not api_version:
        causes.append(v.required(f"{path}.apiVersion"))
    elif api_version.count("/") > 1:
        causes.append(v.invalid(f"{path}.apiVersion", api_version, "must be a valid group/version"))
    if not kind.get("kind"):
        causes.append(v.required(f"{path}.kind"))
    return causes


def _validate_validations(validations: list[Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, rule in enumerate(validations):
        here = f"{path}[{i}]"
        rule = rule if isinstance(rule, dict) else {}
        expression = rule.get("expression")
        causes += _compiles(expression, f"{here}.expression", POLICY_VARIABLES)
        message = rule.get("message")
        if isinstance(message, str):
            if "\n" in message:
                causes.append(v.invalid(f"{here}.message", message, "message must not contain line breaks"))
            elif not message.strip() and message:
                causes.append(v.invalid(f"{here}.message", message, "message must be non-empty if specified"))
        elif isinstance(expression, str) and "\n" in expression:
            causes.append(v.required(f"{here}.message", "message must be specified if expression contains line "
                                     "breaks"))
        if rule.get("messageExpression"):
            causes += _compiles(rule["messageExpression"], f"{here}.messageExpression", POLICY_VARIABLES, "string")
        reason = rule.get("reason")
        if reason is not None and reason not in VALIDATION_REASONS:
            causes.append(v.not_supported(f"{here}.reason", reason, VALIDATION_REASONS))
    return causes


def _validate_policy_spec(spec: Any) -> list[Cause]:
    spec = spec if isinstance(spec, dict) else {}
    causes: list[Cause] = []
    if spec.get("paramKind") is not None:
        causes += _validate_param_kind(spec["paramKind"], "spec.paramKind")
    causes += _validate_match_resources(spec.get("matchConstraints"), "spec.matchConstraints", True)
    validations = spec.get("validations") or []
    audits = spec.get("auditAnnotations") or []
    if not validations and not audits:
        causes.append(v.required("spec.validations", "validations or auditAnnotations must contain at least one "
                                 "item"))
    causes += _validate_validations(validations, "spec.validations")
    failure = spec.get("failurePolicy")
    if failure is not None and failure not in ("Fail", "Ignore"):
        causes.append(v.not_supported("spec.failurePolicy", failure, ("Fail", "Ignore")))
    keys: set[str] = set()
    for i, audit in enumerate(audits):
        audit = audit if isinstance(audit, dict) else {}
        key = audit.get("key") or ""
        if not key:
            causes.append(v.required(f"spec.auditAnnotations[{i}].key"))
        else:
            causes.extend(v.invalid(f"spec.auditAnnotations[{i}].key", key, m) for m in v.is_qualified_name(key))
            if key in keys:
                causes.append(v.duplicate(f"spec.auditAnnotations[{i}].key", key))
            keys.add(key)
        causes += _compiles(audit.get("valueExpression"), f"spec.auditAnnotations[{i}].valueExpression",
                            POLICY_VARIABLES, "string")
    causes += validate_match_conditions(spec.get("matchConditions"), "spec.matchConditions",
                                        POLICY_CONDITION_VARIABLES)
    names: set[str] = set()
    for i, variable in enumerate(spec.get("variables") or []):
        variable = variable if isinstance(variable, dict) else {}
        name = variable.get("name") or ""
        if not name:
            causes.append(v.required(f"spec.variables[{i}].name"))
        elif not _CEL_IDENTIFIER.match(name):
            causes.append(v.invalid(f"spec.variables[{i}].name", name, "name is not a valid CEL identifier"))
        elif name in names:
            causes.append(v.duplicate(f"spec.variables[{i}].name", name))
        names.add(name)
        expression = variable.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            causes.append(v.required(f"spec.variables[{i}].expression"))
        else:
            _, error = crcel.check_expression(expression, POLICY_VARIABLES, "any")
            if error:
                causes.append(v.invalid(f"spec.variables[{i}].expression", expression, f"compilation failed: "
                                        f"{error}"))
    return causes


def _validate_binding_spec(spec: Any) -> list[Cause]:
    spec = spec if isinstance(spec, dict) else {}
    causes: list[Cause] = []
    if not spec.get("policyName"):
        causes.append(v.required("spec.policyName"))
    actions = spec.get("validationActions")
    if not actions:
        causes.append(v.required("spec.validationActions"))
    else:
        seen: set[str] = set()
        for i, action in enumerate(actions):
            if action not in VALIDATION_ACTIONS:
                causes.append(v.not_supported(f"spec.validationActions[{i}]", action, VALIDATION_ACTIONS))
            elif action in seen:
                causes.append(v.duplicate(f"spec.validationActions[{i}]", action))
            seen.add(action)
        if {"Deny", "Warn"} <= seen:
            causes.append(v.invalid("spec.validationActions", actions, "must not contain both Deny and Warn "
                                    "(repeating the same validation failure information in the API response "
                                    "and headers serves no purpose)"))
    ref = spec.get("paramRef")
    if ref is not None:
        ref = ref if isinstance(ref, dict) else {}
        has_name, has_selector = bool(ref.get("name")), ref.get("selector") is not None
        if has_name == has_selector:
            causes.append(v.forbidden("spec.paramRef.name", "name and selector are mutually exclusive") if has_name
                          else v.required("spec.paramRef", "one of name or selector must be specified"))
        if has_name:
            causes.extend(v.invalid("spec.paramRef.name", ref["name"], m)
                          for m in v.is_dns1123_subdomain(str(ref["name"])))
        if has_selector:
            causes += v.validate_label_selector(ref["selector"], "spec.paramRef.selector")
        action = ref.get("parameterNotFoundAction")
        if action is None:
            causes.append(v.required("spec.paramRef.parameterNotFoundAction"))
        elif action not in ("Allow", "Deny"):
            causes.append(v.not_supported("spec.paramRef.parameterNotFoundAction", action, ("Allow", "Deny")))
    causes += _validate_match_resources(spec.get("matchResources"), "spec.matchResources", False)
    return causes


class ValidatingAdmissionPolicyStrategy(GenerationStrategy):
    def defaults(self, obj: Obj) -> None:
        super().defaults(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict):
            setdefault(spec, "failurePolicy", "Fail")
            default_match_resources(spec.get("matchConstraints"))

    def validate_spec(self, obj: Obj) -> list[Cause]:
        return _validate_policy_spec(obj.get("spec"))


class ValidatingAdmissionPolicyBindingStrategy(MetaStrategy):
    uses_generation = True

    def defaults(self, obj: Obj) -> None:
        super().defaults(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict):
            default_match_resources(spec.get("matchResources"))
            ref = spec.get("paramRef")
            if isinstance(ref, dict):
                setdefault(ref, "parameterNotFoundAction", "Deny")

    def validate_spec(self, obj: Obj) -> list[Cause]:
        return _validate_binding_spec(obj.get("spec"))
