"""The audit.k8s.io/v1 Policy: its rules, checked as upstream's validation does, and which rule a request
matches (the first one, in order; a request no rule matches is not audited)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from apiserver.auth.authz import Attributes

NONE, METADATA, REQUEST, REQUEST_RESPONSE = "None", "Metadata", "Request", "RequestResponse"
LEVELS = (NONE, METADATA, REQUEST, REQUEST_RESPONSE)
STAGES = ("RequestReceived", "ResponseStarted", "ResponseComplete", "Panic")
API_VERSIONS = ("audit.k8s.io/v1",)


class PolicyError(ValueError):
    """A policy file that cannot be read or breaks upstream's validation."""


@dataclass(frozen=True)
class GroupResources:
    group: str = ""
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    level: str
    users: tuple[str, ...] = ()
    user_groups: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resources: tuple[GroupResources, ...] = ()
    namespaces: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool | None = None


@dataclass(frozen=True)
class Decision:
    """What the matching rule asks of one request."""

    level: str
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool = False


NOT_AUDITED = Decision(NONE)


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    omit_stages: frozenset[str] = field(default_factory=frozenset)
    omit_managed_fields: bool = False

    def decide(self, attrs: Attributes) -> Decision:
        for rule in self.rules:
            if _matches(rule, attrs):
                if rule.level == NONE:
                    return NOT_AUDITED
                omit = rule.omit_managed_fields if rule.omit_managed_fields is not None else self.omit_managed_fields
                return Decision(rule.level, self.omit_stages | rule.omit_stages, omit)
        return NOT_AUDITED


def _matches(rule: Rule, attrs: Attributes) -> bool:
    user = attrs.user
    if rule.users and user.name not in rule.users:
        return False
    if rule.user_groups and not any(g in rule.user_groups for g in user.groups):
        return False
    if rule.verbs and attrs.verb not in rule.verbs:
        return False
    if rule.namespaces or rule.resources:
        return _matches_resource(rule, attrs)
    if rule.non_resource_urls:
        return not attrs.resource_request and any(_path_matches(attrs.path, spec) for spec in rule.non_resource_urls)
    return True


def _path_matches(path: str, spec: str) -> bool:
    return spec == "*" or spec == path or (spec.endswith("*") and path.startswith(spec.rstrip("*")))


def _matches_resource(rule: Rule, attrs: Attributes) -> bool:
    if not attrs.resource_request:
        return False
    if rule.namespaces and attrs.namespace not in rule.namespaces:  # cluster-scoped resources match ""
        return False
    if not rule.resources:
        return True
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    for gr in rule.resources:
        if gr.group != attrs.api_group:
            continue
        if not gr.resources:
            return True
        if gr.resource_names and attrs.name not in gr.resource_names:
            continue
        for res in gr.resources:
            if res in (combined, "*"):
                return True
            if attrs.subresource and res.startswith("*/") and res[2:] == attrs.subresource:
                return True
            if res.endswith("/*") and res[:-2] == attrs.resource:
                return True
    return False


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"{where}: must be a list of strings")
    return tuple(value)


def _stages(value: Any, where: str) -> frozenset[str]:
    stages = _strings(value, where)
    for i, stage in enumerate(stages):
        if stage not in STAGES:
            raise PolicyError(f'{where}[{i}]: Unsupported value: "{stage}": supported values: '
                              + ", ".join(f'"{s}"' for s in STAGES))
    return frozenset(stages)


def _bool(value: Any, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise PolicyError(f"{where}: must be a boolean")


def _group_resources(value: Any, where: str) -> GroupResources:
    if not isinstance(value, dict):
        raise PolicyError(f"{where}: must be an object")
    group = value.get("group") or ""
    if not isinstance(group, str):
        raise PolicyError(f"{where}.group: must be a string")
    resources = _strings(value.get("resources"), f"{where}.resources")
    names = _strings(value.get("resourceNames"), f"{where}.resourceNames")
    if names and not resources:
        raise PolicyError(f"{where}.resourceNames: Invalid value: {list(names)}: using resourceNames requires "
                          "at least one resource")
    for i, res in enumerate(resources):
        if res.count("/") > 1 or res.startswith("/") or res.endswith("/"):
            raise PolicyError(f'{where}.resources[{i}]: Invalid value: "{res}": must be "resource", '
                              '"resource/subresource", "*/subresource" or "resource/*"')
        if names and "*" in res:
            raise PolicyError(f'{where}.resources[{i}]: Invalid value: "{res}": using resourceNames requires '
                              "resources without a wildcard")
    return GroupResources(group, resources, names)


def _rule(value: Any, where: str) -> Rule:
    if not isinstance(value, dict):
        raise PolicyError(f"{where}: must be an object")
    level = value.get("level")
    if not level:
        raise PolicyError(f"{where}.level: Required value")
    if level not in LEVELS:
        raise PolicyError(f'{where}.level: Unsupported value: "{level}": supported values: '
                          + ", ".join(f'"{lv}"' for lv in LEVELS))
    resources_value = value.get("resources")
    if resources_value is not None and not isinstance(resources_value, list):
        raise PolicyError(f"{where}.resources: must be a list")
    resources = tuple(_group_resources(gr, f"{where}.resources[{i}]") for i, gr in enumerate(resources_value or []))
    namespaces = _strings(value.get("namespaces"), f"{where}.namespaces")
    urls = _strings(value.get("nonResourceURLs"), f"{where}.nonResourceURLs")
    if urls and (resources or namespaces):
        raise PolicyError(f"{where}.nonResourceURLs: Invalid value: {list(urls)}: rules cannot apply to both "
                          "regular resources and non-resource URLs")
    for i, url in enumerate(urls):
        if url != "*" and not url.startswith("/"):
            raise PolicyError(f'{where}.nonResourceURLs[{i}]: Invalid value: "{url}": non-resource URL rules '
                              'must begin with a "/" character')
        if "*" in url[:-1]:
            raise PolicyError(f'{where}.nonResourceURLs[{i}]: Invalid value: "{url}": non-resource URL '
                              "wildcards (\"*\") must be the final character of the rule")
    return Rule(
        level=level,
        users=_strings(value.get("users"), f"{where}.users"),
        user_groups=_strings(value.get("userGroups"), f"{where}.userGroups"),
        verbs=_strings(value.get("verbs"), f"{where}.verbs"),
        resources=resources,
        namespaces=namespaces,
        non_resource_urls=urls,
        omit_stages=_stages(value.get("omitStages"), f"{where}.omitStages"),
        omit_managed_fields=_bool(value.get("omitManagedFields"), f"{where}.omitManagedFields"),
    )


def parse_policy(doc: Any) -> Policy:
    """A Policy from its decoded document; PolicyError names the first field that is wrong."""
    if not isinstance(doc, dict):
        raise PolicyError("not an audit.k8s.io/v1 Policy object")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if kind != "Policy" or api_version not in API_VERSIONS:
        raise PolicyError(f'unknown group version kind "{api_version}, Kind={kind}": want audit.k8s.io/v1 Policy')
    rules_value = doc.get("rules")
    if rules_value is not None and not isinstance(rules_value, list):
        raise PolicyError("rules: must be a list")
    rules = tuple(_rule(r, f"rules[{i}]") for i, r in enumerate(rules_value or []))
    if not rules:
        raise PolicyError("loaded illegal policy with 0 rules")
    return Policy(rules, _stages(doc.get("omitStages"), "omitStages"),
                  bool(_bool(doc.get("omitManagedFields"), "omitManagedFields")))


def load_policy(path: str) -> Policy:
    """The policy in a YAML or JSON file."""
    try:
        doc = yaml.safe_load(Path(path).read_bytes())
    except OSError as exc:
        raise PolicyError(f"failed to read file path {path!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"failed decoding file {path!r}: {exc}".replace("\n", " ")) from None
    try:
        return parse_policy(doc)
    except PolicyError as exc:
        raise PolicyError(f"{path}: {exc}") from None
