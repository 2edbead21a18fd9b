"""Pod Security Standards levels, policy versions and the namespace labels that choose them, as
upstream's k8s.io/pod-security-admission/api; and the plugin's PodSecurityConfiguration (the
cluster's defaults and exemptions)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from apiserver.admission.config import AdmissionConfigError
from services.api import validation as v

PRIVILEGED = "privileged"
BASELINE = "baseline"
RESTRICTED = "restricted"
LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)

LABEL_PREFIX = "pod-security.kubernetes.io/"
MODES = ("enforce", "audit", "warn")
ENFORCE_POLICY_ANNOTATION = f"{LABEL_PREFIX}enforce-policy"
AUDIT_VIOLATIONS_ANNOTATION = f"{LABEL_PREFIX}audit-violations"
CONFIG_API_VERSIONS = tuple(f"pod-security.admission.config.k8s.io/{version}" for version in ("v1", "v1beta1"))

_VERSION = re.compile(r"^v1\.(0|[1-9][0-9]*)$")


@dataclass(frozen=True, order=True)
class Version:
    """A policy version: v1.N, or latest (newer than any numbered one)."""

    minor: int
    latest: bool = False

    def __str__(self) -> str:
        return "latest" if self.latest else f"v1.{self.minor}"

    def older(self, other: Version) -> bool:
        if self.latest:
            return False
        return other.latest or self.minor < other.minor


LATEST = Version(0, latest=True)


def parse_level(text: str) -> tuple[str, str]:
    """(level, error): an unknown level evaluates as restricted, as upstream fails closed."""
    if text in LEVELS:
        return text, ""
    return RESTRICTED, f"must be one of {', '.join(LEVELS)}"


def parse_version(text: str) -> tuple[Version, str]:
    """(version, error): an unparseable version evaluates as latest."""
    if text == "latest":
        return LATEST, ""
    match = _VERSION.match(text)
    if match is None:
        return LATEST, 'must be "latest" or "v1.x"'
    return Version(int(match.group(1))), ""


@dataclass(frozen=True)
class LevelVersion:
    level: str
    version: Version

    def __str__(self) -> str:
        return f"{self.level}:{self.version}"


PRIVILEGED_LATEST = LevelVersion(PRIVILEGED, LATEST)


def compare_levels(a: str, b: str) -> int:
    """-1, 0 or 1 as `a` is less, as or more strict than `b`."""
    return (LEVELS.index(a) > LEVELS.index(b)) - (LEVELS.index(a) < LEVELS.index(b))


@dataclass(frozen=True)
class Policy:
    enforce: LevelVersion = PRIVILEGED_LATEST
    audit: LevelVersion = PRIVILEGED_LATEST
    warn: LevelVersion = PRIVILEGED_LATEST

    @property
    def fully_privileged(self) -> bool:
        return all(lv.level == PRIVILEGED for lv in (self.enforce, self.audit, self.warn))


def policy_to_evaluate(labels: dict[str, str] | None, defaults: Policy) -> tuple[Policy, list[dict[str, str]]]:
    """The namespace's policy from its labels over the cluster defaults, and a cause per bad label.

    A bad enforce level fails closed (restricted); bad audit and warn levels fail open. A warn level
    left unset follows an explicitly stricter enforce level (and its version, unless one is set)."""
    if not labels:
        return defaults, []
    causes: list[dict[str, str]] = []
    chosen: dict[str, LevelVersion] = {}
    for mode in MODES:
        current: LevelVersion = getattr(defaults, mode)
        level, version = current.level, current.version
        level_label, version_label = f"{LABEL_PREFIX}{mode}", f"{LABEL_PREFIX}{mode}-version"
        if level_label in labels:
            level, problem = parse_level(labels[level_label])
            if problem:
                causes.append(_bad_label(level_label, labels[level_label], problem))
                if mode != "enforce":
                    level = PRIVILEGED
        if version_label in labels:
            version, problem = parse_version(labels[version_label])
            if problem:
                causes.append(_bad_label(version_label, labels[version_label], problem))
        chosen[mode] = LevelVersion(level, version)
    enforce_label = f"{LABEL_PREFIX}enforce"
    enforce_set = enforce_label in labels and labels[enforce_label] in LEVELS
    if f"{LABEL_PREFIX}warn" not in labels and enforce_set and \
            compare_levels(chosen["enforce"].level, chosen["warn"].level) > 0:
        version = chosen["warn"].version if f"{LABEL_PREFIX}warn-version" in labels else chosen["enforce"].version
        chosen["warn"] = LevelVersion(chosen["enforce"].level, version)
    return Policy(**chosen), causes


def _bad_label(label: str, value: str, problem: str) -> dict[str, str]:
    return v.invalid(f"metadata.labels[{label}]", value, problem)


@dataclass(frozen=True)
class Configuration:
    """PodSecurityConfiguration: the policy of unlabeled namespaces, and who and what is never checked."""

    defaults: Policy = field(default_factory=Policy)
    usernames: frozenset[str] = frozenset()
    runtime_classes: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()


class ConfigurationError(AdmissionConfigError):
    """The plugin's configuration is unusable; the message says where."""


def load_configuration(raw: Any) -> Configuration:
    """A PodSecurityConfiguration object (as decoded from the admission config file) checked as
    upstream's ValidatePodSecurityConfiguration; None is the built-in default (all privileged)."""
    if raw is None:
        return Configuration()
    if not isinstance(raw, dict):
        raise ConfigurationError("PodSecurity configuration must be an object")
    kind, api_version = raw.get("kind"), raw.get("apiVersion")
    if kind != "PodSecurityConfiguration" or api_version not in CONFIG_API_VERSIONS:
        raise ConfigurationError(f"PodSecurity configuration is {api_version}/{kind}, want "
                                 f"{CONFIG_API_VERSIONS[0]}/PodSecurityConfiguration")
    problems: list[str] = []
    defaults = raw.get("defaults") or {}
    modes: dict[str, LevelVersion] = {}
    for mode in MODES:
        level, problem = parse_level(str(defaults.get(mode, PRIVILEGED)))
        if problem:
            problems.append(f"defaults.{mode}: Invalid value: {defaults.get(mode)!r}: {problem}")
        version, problem = parse_version(str(defaults.get(f"{mode}-version", "latest")))
        if problem:
            problems.append(f"defaults.{mode}-version: Invalid value: {defaults.get(f'{mode}-version')!r}: {problem}")
        modes[mode] = LevelVersion(level, version)
    exemptions = raw.get("exemptions") or {}
    lists: dict[str, frozenset[str]] = {}
    for key in ("usernames", "runtimeClasses", "namespaces"):
        items = exemptions.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
            problems.append(f"exemptions.{key}: Invalid value: must be a list of non-empty names")
            items = []
        seen: set[str] = set()
        for i, item in enumerate(items):
            if item in seen:
                problems.append(f'exemptions.{key}[{i}]: Duplicate value: "{item}"')
            seen.add(item)
        lists[key] = frozenset(items)
    if problems:
        raise ConfigurationError("; ".join(problems))
    return Configuration(Policy(**modes), lists["usernames"], lists["runtimeClasses"], lists["namespaces"])
