"""admissionregistration.k8s.io/v1 MutatingWebhookConfiguration and ValidatingWebhookConfiguration: which
admission webhooks the apiserver calls, on what, and how. Defaults and validation are upstream's
(pkg/apis/admissionregistration/v1/defaults.go and validation/validation.go) for the v1 API.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from apiserver.registry import crcel
from apiserver.registry.base import MetaStrategy, setdefault
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


def validate_match_conditions(conditions: Any, path: str) -> list[Cause]:
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
        _, error = crcel.check_expression(expression, CONDITION_VARIABLES)
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
