"""The ValidatingAdmissionPolicy status controller: type-checks each policy's validations against the
schemas of the kinds its matchConstraints name (and its paramKind's), and records the warnings and the
generation checked in `status`, as upstream's validatingadmissionpolicy-status-controller does.

Upstream runs it in the controller-manager with the apiserver's CEL library; pyk8s's CEL checker lives
in the apiserver, so the loop runs there, writing through the status subresource like any client.
Rules with wildcards name no kind to check against; their expressions are checked untyped.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from apiserver.registry import crcel
from apiserver.registry.admissionregistration import POLICY_VARIABLES
from apiserver.registry.store import RESTStore, WriteOptions
from services.api import errors
from services.api.catalog import Catalog, Resource
from services.api.definitions import structural_schema

log = structlog.get_logger("admissionpolicy-status")

Obj = dict[str, Any]
RESYNC_SECONDS = 1.0


def _schema(res: Resource) -> dict[str, Any] | None:
    if res.custom:
        return res.schema
    return structural_schema(res.api_version, res.kind)


def _gvk(res: Resource) -> str:
    """schema.GroupVersionKind.String()."""
    return f"{res.group}/{res.version}, Kind={res.kind}"


def kinds_to_check(spec: Obj, catalog: Catalog) -> list[Resource]:
    """The served kinds the policy's resourceRules name without wildcards, in rule order."""
    found: list[Resource] = []
    for rule in (spec.get("matchConstraints") or {}).get("resourceRules") or []:
        if not isinstance(rule, dict):
            continue
        for group in rule.get("apiGroups") or []:
            for version in rule.get("apiVersions") or []:
                for plural in rule.get("resources") or []:
                    if "*" in (group, version) or "*" in plural or "/" in plural:
                        continue
                    res = catalog.get(group, version, plural)
                    if res is not None and res not in found:
                        found.append(res)
    return found


def type_check(spec: Obj, catalog: Catalog) -> list[Obj]:
    """The expressionWarnings of a policy spec."""
    kinds = kinds_to_check(spec, catalog)
    params: dict[str, Any] | None = None
    param_kind = spec.get("paramKind")
    if isinstance(param_kind, dict):
        param_res = catalog.by_kind(param_kind.get("apiVersion") or "", param_kind.get("kind") or "")
        params = _schema(param_res) if param_res is not None else None
    targets: list[tuple[str, dict[str, Any] | None]] = [(_gvk(r), _schema(r)) for r in kinds] or [("", None)]
    warnings: list[Obj] = []
    for i, validation in enumerate(spec.get("validations") or []):
        if not isinstance(validation, dict):
            continue
        for field, want in (("expression", "bool"), ("messageExpression", "string")):
            text = validation.get(field)
            if not isinstance(text, str) or not text:
                continue
            lines = []
            for shown, schema in targets:
                variables: dict[str, dict[str, Any] | None] = dict.fromkeys(POLICY_VARIABLES)
                variables.update(object=schema, oldObject=schema, params=params)
                problem = crcel.type_check(text, variables, want)
                if problem is not None:
                    lines.append(f"{shown}: {problem}" if shown else problem)
            if lines:
                warnings.append({"fieldRef": f"spec.validations[{i}].{field}", "warning": "\n".join(lines)})
    return warnings


async def update_policy_statuses(policies: RESTStore, catalog: Catalog) -> None:
    """Type-check every policy whose generation the status does not show yet."""
    for entry in list(policies.cache.entries.values()):
        policy = entry.obj
        generation = (policy.get("metadata") or {}).get("generation") or 0
        if (policy.get("status") or {}).get("observedGeneration") == generation:
            continue
        warnings = type_check(policy.get("spec") or {}, catalog)

        def record(obj: Obj, generation: int = generation, warnings: list[Obj] = warnings) -> Obj:
            if (obj.get("metadata") or {}).get("generation") != generation:
                return obj
            status = obj["status"] = dict(obj.get("status") or {})
            status["observedGeneration"] = generation
            status["typeChecking"] = {"expressionWarnings": warnings} if warnings else {}
            return obj

        try:
            await policies.mutate(None, policy["metadata"]["name"], record, WriteOptions(), "status")
        except errors.StatusError as exc:
            if exc.code != 404:
                raise


async def status_loop(policies: RESTStore, catalog: Catalog) -> None:
    """Keep every policy's type-checking status current; runs for the apiserver's life."""
    while True:
        try:
            await update_policy_statuses(policies, catalog)
        except Exception:  # noqa: BLE001 - retried next round; one bad policy must not stop the others
            log.exception("validatingadmissionpolicy status update failed")
        await asyncio.sleep(RESYNC_SECONDS)
