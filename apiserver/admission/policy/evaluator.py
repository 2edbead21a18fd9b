"""Evaluating one ValidatingAdmissionPolicy for one request and one param, as upstream's validator does:
variables in order (each seeing the ones before it), then every validation, its message (messageExpression
first, then message, then the failed expression) and reason, then the audit annotations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

from apiserver.admission.policy.source import Expression, Policy, Validation
from apiserver.registry import crcel


@dataclass(frozen=True, slots=True)
class Failure:
    """A validation that came out false: enforced by the binding's validationActions."""

    message: str
    reason: str
    index: int


@dataclass
class Outcome:
    failures: list[Failure] = field(default_factory=list)
    #: what could not be evaluated: the policy's failurePolicy decides
    errors: list[str] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)


def _run(expr: Expression, activation: dict[str, Any]) -> tuple[Any, str | None]:
    if expr.program is None:
        return None, f"compilation error: {expr.error}"
    return crcel.evaluate(expr.program, activation)


def _cel(value: Any) -> Any:
    return celtypes.BoolType(value) if isinstance(value, bool) else value


def _message(v: Validation, activation: dict[str, Any]) -> str:
    if v.message_expression is not None:
        value, error = _run(v.message_expression, activation)
        if error is None and isinstance(value, str) and value.strip() and "\n" not in value:
            return str(value)
    return v.message or f"failed expression: {v.expression.text.strip()}"


def evaluate(policy: Policy, activation: dict[str, Any]) -> Outcome:
    """`activation` holds object, oldObject, request, params and namespaceObject as CEL values."""
    out = Outcome()
    values: dict[Any, Any] = {}
    activation = {**activation, "variables": celtypes.MapType(values)}
    for name, expr in policy.variables:
        value, error = _run(expr, activation)
        values[celtypes.StringType(name)] = CELEvalError(error) if error is not None else _cel(value)
        activation["variables"] = celtypes.MapType(values)
    for index, v in enumerate(policy.validations):
        value, error = _run(v.expression, activation)
        if error is not None:
            out.errors.append(f"expression '{v.expression.text.strip()}' resulted in error: {error}")
        elif value is not True:
            out.failures.append(Failure(_message(v, activation), v.reason, index))
    for key, expr in policy.audit_annotations:
        value, error = _run(expr, activation)
        if error is not None:
            out.errors.append(f"expression '{expr.text.strip()}' resulted in error: {error}")
        elif isinstance(value, str) and value:
            out.annotations[f"{policy.name}/{key}"] = str(value)[:10 * 1024]
    return out
