"""Shared pieces of the per-resource strategies: object-meta validation wired to the
resource's name rules, and small helpers for nested dict access."""

from __future__ import annotations

import copy
from typing import Any

from apiserver.registry.strategy import Cause, Obj, Strategy
from services.api import validation as v


class MetaStrategy(Strategy):
    """A strategy whose validation always covers metadata the way upstream's ValidateObjectMeta does."""

    #: name rule for metadata.name (and generateName): most resources use DNS-1123 subdomains.
    name_fn: v.NameValidator = staticmethod(v.name_is_dns_subdomain)

    def validate(self, obj: Obj) -> list[Cause]:
        return v.validate_object_meta(obj.get("metadata"), self.resource.namespaced, self.name_fn) + self.validate_spec(
            obj
        )

    def validate_spec(self, obj: Obj) -> list[Cause]:
        """Everything below metadata; the part a resource overrides."""
        return []

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        return v.validate_object_meta_update(new.get("metadata"), old.get("metadata")) + self.validate_spec_update(
            new, old
        )

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        """Update rules below metadata; by default the new object must simply be valid."""
        return self.validate_spec(new)


class GenerationStrategy(MetaStrategy):
    """Spec-carrying resources whose controllers report observedGeneration."""

    uses_generation = True
    #: status a new object starts with: the fields upstream serializes even when zero.
    initial_status: dict[str, Any] = {}

    def prepare_for_create(self, obj: Obj) -> None:
        if self.resource.has_status:
            obj["status"] = copy.deepcopy(self.initial_status)


def child(obj: Obj, *keys: str) -> Obj:
    """The dict at obj[k1][k2]..., created on the way when missing (or null)."""
    for key in keys:
        value = obj.get(key)
        if not isinstance(value, dict):
            value = {}
            obj[key] = value
        obj = value
    return obj


def get(obj: Any, *keys: str, default: Any = None) -> Any:
    """obj[k1][k2]... or default when any step is missing."""
    for key in keys:
        if not isinstance(obj, dict) or key not in obj or obj[key] is None:
            return default
        obj = obj[key]
    return obj


def setdefault(obj: Obj, key: str, value: Any) -> None:
    """Set obj[key] when it is missing or null (JSON null means unset, like a Go nil pointer)."""
    if obj.get(key) is None:
        obj[key] = value
