"""Status conditions as apimachinery's meta helpers treat them: find one by type, test it, and set
one so that lastTransitionTime moves only when the status does (meta.SetStatusCondition).

Every controller reads conditions of pods, nodes, jobs and budgets; kind-specific rules (e.g. a
Deployment's, which keeps the condition when only the reason is the same) stay with their kind.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]


def find_condition(conditions: Iterable[Obj] | None, kind: str) -> Obj | None:
    """The condition of type `kind` in a conditions list (meta.FindStatusCondition)."""
    for cond in conditions or ():
        if cond.get("type") == kind:
            return cond
    return None


def get_condition(obj: Obj, kind: str) -> Obj | None:
    """The condition of type `kind` in an object's status.conditions."""
    return find_condition((obj.get("status") or {}).get("conditions"), kind)


def true_condition(obj: Obj, kind: str) -> Obj | None:
    """The object's `kind` condition when its status is True, else None."""
    cond = get_condition(obj, kind)
    return cond if cond is not None and cond.get("status") == "True" else None


def set_status_condition(status: Obj, new: Obj, now: str) -> None:
    """Put `new` into status.conditions (a copy of the list): an existing condition of its type keeps
    its lastTransitionTime unless the status changes, and takes the new reason, message and
    observedGeneration."""
    conditions = [dict(c) for c in status.get("conditions") or []]
    current = find_condition(conditions, new["type"])
    if current is None:
        conditions.append({**new, "lastTransitionTime": now})
    else:
        if current.get("status") != new["status"]:
            current["lastTransitionTime"] = now
        current.update({k: new[k] for k in ("status", "reason", "message", "observedGeneration") if k in new})
    status["conditions"] = conditions
