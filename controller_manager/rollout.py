"""Deployment arithmetic as upstream's deployment/util: surge and unavailability from ints or
percentages, new-ReplicaSet sizes for a rolling update, proportional scaling fractions, and the
complete/progressing/timed-out tests behind the Progressing condition. Pure functions of dicts.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from services.api.conditions import find_condition
from services.api.intstr import scaled_value
from services.api.meta import parse_time

Obj = dict[str, Any]

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
HASH_LABEL = "pod-template-hash"
#: annotations of a Deployment that are not copied to its ReplicaSets
SKIP_ANNOTATIONS = frozenset({
    "kubectl.kubernetes.io/last-applied-configuration", REVISION, REVISION_HISTORY, DESIRED_REPLICAS,
    MAX_REPLICAS, "deprecated.deployment.rollback.to",
})
MAX_INT32 = 2**31 - 1


def replicas_of(obj: Obj | None) -> int:
    if obj is None:
        return 0
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def status_of(obj: Obj | None, field: str) -> int:
    return int(((obj or {}).get("status") or {}).get(field) or 0)


def available_of(rs: Obj | None) -> int:
    """Available pods a ReplicaSet will keep: a scale-down not yet carried out does not count."""
    return min(status_of(rs, "availableReplicas"), replicas_of(rs)) if rs is not None else 0


def rolling_params(deployment: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) resolved like ResolveFenceposts: surge rounds up, unavailable down,
    and both zero becomes unavailable 1 so a rollout can make progress."""
    spec = deployment.get("spec") or {}
    strategy = spec.get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0, 0
    ru = strategy.get("rollingUpdate") or {}
    desired = replicas_of(deployment)
    surge = scaled_value(_defaulted(ru.get("maxSurge")), desired, round_up=True)
    unavailable = scaled_value(_defaulted(ru.get("maxUnavailable")), desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _defaulted(value: int | str | None) -> int | str:
    """The API's default for an unset maxSurge or maxUnavailable of a Deployment."""
    return "25%" if value is None else value


def max_unavailable(deployment: Obj) -> int:
    desired = replicas_of(deployment)
    if desired == 0 or not is_rolling(deployment):
        return 0
    _, unavailable = rolling_params(deployment)
    return min(unavailable, desired)


def max_surge(deployment: Obj) -> int:
    return rolling_params(deployment)[0] if is_rolling(deployment) else 0


def is_rolling(deployment: Obj) -> bool:
    return ((deployment.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"


def new_rs_new_replicas(deployment: Obj, all_rss: list[Obj], new_rs: Obj | None) -> int:
    """How big the new ReplicaSet may be now (NewRSNewReplicas)."""
    desired = replicas_of(deployment)
    if not is_rolling(deployment):
        return desired
    current_new = replicas_of(new_rs) if new_rs is not None else 0
    max_total = desired + max_surge(deployment)
    current = sum(replicas_of(rs) for rs in all_rss)
    if current >= max_total:
        return current_new
    scale_up = min(max_total - current, desired - current_new)
    return current_new + scale_up


def max_scaled_down(deployment: Obj, all_rss: list[Obj], new_rs: Obj | None) -> int:
    """How many old pods may go now without dropping below minAvailable (reconcileOldReplicaSets)."""
    all_pods = sum(replicas_of(rs) for rs in all_rss)
    min_available = replicas_of(deployment) - max_unavailable(deployment)
    new_unavailable = replicas_of(new_rs) - status_of(new_rs, "availableReplicas") if new_rs is not None else 0
    return all_pods - min_available - new_unavailable


def go_round(value: float) -> int:
    """Go's math.Round: halves away from zero."""
    return int(math.floor(abs(value) + 0.5)) * (1 if value >= 0 else -1)


def max_replicas_annotation(rs: Obj) -> int | None:
    raw = ((rs.get("metadata") or {}).get("annotations") or {}).get(MAX_REPLICAS)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def replica_set_fraction(rs: Obj, deployment: Obj) -> int:
    """The change proportional scaling gives one ReplicaSet (getReplicaSetFraction)."""
    desired = replicas_of(deployment)
    if desired == 0:
        return -replicas_of(rs)
    deployment_replicas = desired + max_surge(deployment)
    annotated = max_replicas_annotation(rs)
    if annotated is None or annotated == 0:
        annotated = status_of(deployment, "replicas")
    if annotated == 0:
        return 0
    return go_round(replicas_of(rs) * deployment_replicas / annotated) - replicas_of(rs)


def proportion(rs: Obj, deployment: Obj, to_add: int, added: int) -> int:
    if replicas_of(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = replica_set_fraction(rs, deployment)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def proportional_sizes(deployment: Obj, active: list[Obj]) -> dict[str, int]:
    """New sizes for every active ReplicaSet when a deployment is scaled mid-rollout."""
    desired = replicas_of(deployment)
    all_replicas = sum(replicas_of(rs) for rs in active)
    allowed = desired + max_surge(deployment) if desired > 0 else 0
    to_add = allowed - all_replicas
    if to_add > 0:
        ordered = sorted(active, key=lambda rs: (-replicas_of(rs), -_created(rs), rs["metadata"]["name"]))
    else:
        ordered = sorted(active, key=lambda rs: (-replicas_of(rs), _created(rs), rs["metadata"]["name"]))
    sizes: dict[str, int] = {}
    added = 0
    for rs in ordered:
        share = proportion(rs, deployment, to_add, added)
        sizes[rs["metadata"]["name"]] = replicas_of(rs) + share
        added += share
    if ordered and to_add != added:
        first = ordered[0]["metadata"]["name"]
        sizes[first] = max(sizes[first] + to_add - added, 0)
    return sizes


def _created(obj: Obj) -> float:
    parsed = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return parsed.timestamp() if parsed else 0.0


def revision(obj: Obj) -> int:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(REVISION, "0")
    try:
        return int(raw)
    except ValueError:
        return 0


def has_progress_deadline(deployment: Obj) -> bool:
    deadline = (deployment.get("spec") or {}).get("progressDeadlineSeconds")
    return deadline is not None and int(deadline) != MAX_INT32


def complete(deployment: Obj, status: Obj) -> bool:
    desired = replicas_of(deployment)
    return (
        int(status.get("updatedReplicas") or 0) == desired
        and int(status.get("replicas") or 0) == desired
        and int(status.get("availableReplicas") or 0) == desired
        and int(status.get("observedGeneration") or 0) >= int(deployment["metadata"].get("generation") or 0)
    )


def progressing(deployment: Obj, status: Obj) -> bool:
    old = deployment.get("status") or {}
    old_old = int(old.get("replicas") or 0) - int(old.get("updatedReplicas") or 0)
    new_old = int(status.get("replicas") or 0) - int(status.get("updatedReplicas") or 0)
    return (
        int(status.get("updatedReplicas") or 0) > int(old.get("updatedReplicas") or 0)
        or new_old < old_old
        or int(status.get("readyReplicas") or 0) > int(old.get("readyReplicas") or 0)
        or int(status.get("availableReplicas") or 0) > int(old.get("availableReplicas") or 0)
    )


def timed_out(deployment: Obj, status: Obj, now: datetime) -> bool:
    if not has_progress_deadline(deployment):
        return False
    cond = find_condition(status.get("conditions"), "Progressing")
    if cond is None or cond.get("reason") == "NewReplicaSetAvailable":
        return False
    if cond.get("reason") == "ProgressDeadlineExceeded":
        return True
    since = parse_time(cond.get("lastUpdateTime"))
    if since is None:
        return False
    return since.timestamp() + int(deployment["spec"]["progressDeadlineSeconds"]) < now.timestamp()


def set_condition(status: Obj, cond: Obj) -> None:
    """SetDeploymentCondition: same status and reason changes nothing; same status keeps the transition time."""
    current = find_condition(status.get("conditions"), cond["type"])
    if current is not None and current.get("status") == cond["status"] and current.get("reason") == cond["reason"]:
        return
    if current is not None and current.get("status") == cond["status"]:
        cond["lastTransitionTime"] = current.get("lastTransitionTime", cond["lastTransitionTime"])
    remove_condition(status, cond["type"])
    status.setdefault("conditions", []).append(cond)


def remove_condition(status: Obj, kind: str) -> None:
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != kind]
