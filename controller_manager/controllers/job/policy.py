"""The pure decisions of the Job controller: pod-failure backoff, podFailurePolicy rules,
completed/failed index sets, successPolicy and which condition finishes a job.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from services.api.conditions import true_condition

Obj = dict[str, Any]

#: upstream's DefaultJobPodFailureBackOff and MaxJobPodFailureBackOff
BACKOFF_BASE = 10.0
BACKOFF_MAX = 360.0


def pod_failure_backoff(failures: int) -> float:
    """Seconds to wait before a new pod after `failures` consecutive failures: 10 s doubling, 6 min cap."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_BASE * 2 ** (failures - 1), BACKOFF_MAX)


def parse_indexes(text: str | None, limit: int | None = None) -> set[int]:
    """ "1,3-5" -> {1, 3, 4, 5}; indexes at or beyond `limit` are dropped."""
    out: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            continue
        out.update(i for i in range(first, last + 1) if limit is None or i < limit)
    return out


def format_indexes(indexes: Iterable[int]) -> str:
    """{1, 3, 4, 5} -> "1,3-5", the compressed form of status.completedIndexes."""
    ordered = sorted(set(indexes))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def _container_statuses(pod: Obj) -> list[Obj]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _exit_code_match(rule: Obj, pod: Obj) -> Obj | None:
    """The first terminated container (non-zero exit) the onExitCodes requirement matches."""
    req = rule.get("onExitCodes") or {}
    values = set(req.get("values") or [])
    op = req.get("operator")
    for status in _container_statuses(pod):
        terminated = (status.get("state") or {}).get("terminated")
        if not terminated:
            continue
        if req.get("containerName") and req["containerName"] != status.get("name"):
            continue
        code = int(terminated.get("exitCode") or 0)
        if code == 0:
            continue
        if (op == "In" and code in values) or (op == "NotIn" and code not in values):
            return {"name": status.get("name"), "exitCode": code}
    return None


def _condition_match(rule: Obj, pod: Obj) -> Obj | None:
    conds = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    for pattern in rule.get("onPodConditions") or []:
        if conds.get(pattern.get("type")) == (pattern.get("status") or "True"):
            return pattern  # type: ignore[no-any-return]
    return None


def match_pod_failure_policy(policy: Obj | None, pod: Obj) -> tuple[str | None, str]:
    """(action of the first matching rule or None, message for FailJob), upstream's matchPodFailurePolicy."""
    if not policy:
        return None, ""
    meta = pod.get("metadata") or {}
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes"):
            hit = _exit_code_match(rule, pod)
            if hit:
                msg = (
                    f"Container {hit['name']} for pod {meta.get('namespace')}/{meta.get('name')} failed with "
                    f"exit code {hit['exitCode']} matching {action} rule at index {index}"
                )
                return action, msg
        elif rule.get("onPodConditions"):
            hit = _condition_match(rule, pod)
            if hit:
                msg = (
                    f"Pod {meta.get('namespace')}/{meta.get('name')} has condition {hit.get('type')} "
                    f"matching {action} rule at index {index}"
                )
                return action, msg
    return None, ""


def success_policy_rule(policy: Obj | None, succeeded: set[int]) -> int | None:
    """Index of the first successPolicy rule the succeeded indexes satisfy, if any."""
    if not policy:
        return None
    for index, rule in enumerate(policy.get("rules") or []):
        wanted = rule.get("succeededIndexes")
        count = rule.get("succeededCount")
        if wanted is not None:
            pool = parse_indexes(wanted) & succeeded
            total = len(parse_indexes(wanted))
            if (count is None and len(pool) == total) or (count is not None and len(pool) >= int(count)):
                return index
        elif count is not None and len(succeeded) >= int(count):
            return index
    return None


def wanted_active(spec: Obj, succeeded: int) -> int:
    """NonIndexed: how many pods should run given the successes so far."""
    parallelism = int(spec.get("parallelism") if spec.get("parallelism") is not None else 1)
    completions = spec.get("completions")
    if completions is None:
        return 0 if succeeded > 0 else parallelism
    return max(min(parallelism, int(completions) - succeeded), 0)


def backoff_exceeded(spec: Obj, failed: int, restarts: int) -> bool:
    """More failures (pod failures, plus container restarts under OnFailure) than backoffLimit allows."""
    limit = spec.get("backoffLimit")
    if limit is None or spec.get("backoffLimitPerIndex") is not None:
        return False
    return failed + restarts > int(limit)


def is_finished(job: Obj) -> bool:
    return true_condition(job, "Complete") is not None or true_condition(job, "Failed") is not None
