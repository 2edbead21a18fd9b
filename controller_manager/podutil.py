"""Pod and ownership helpers the workload controllers share: readiness and availability,
controller references, pods from templates, upstream's deletion ranking, slow-start batches,
and adopting/releasing objects by selector (upstream's ControllerRefManager).
"""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from services.api.conditions import get_condition
from services.api.meta import parse_time
from services.api.selectors import LabelSelector

Obj = dict[str, Any]

#: upstream's SlowStartInitialBatchSize
SLOW_START_INITIAL_BATCH = 1
#: requests one batch keeps in flight: beyond this the HTTP connection pool's bookkeeping costs more
#: CPU than the extra parallelism gains
MAX_IN_FLIGHT = 48
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
#: the informer index of index_orphans
ORPHANS_INDEX = "orphansByNamespace"
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def now() -> datetime:
    return datetime.now(UTC)


def _ts(value: str | None) -> float:
    parsed = parse_time(value)
    return parsed.timestamp() if parsed else 0.0


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_active(pod: Obj) -> bool:
    """Counts toward replicas: not finished and not being deleted (upstream's FilterActivePods)."""
    return not is_terminal(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp")


def is_ready(pod: Obj) -> bool:
    cond = get_condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


def ready_since(pod: Obj) -> float:
    """When the pod last turned Ready (epoch seconds), 0 if unknown."""
    cond = get_condition(pod, "Ready")
    return _ts(cond.get("lastTransitionTime")) if cond else 0.0


def is_available(pod: Obj, min_ready_seconds: int, at: datetime | None = None) -> bool:
    """Ready for at least minReadySeconds (upstream's IsPodAvailable)."""
    if not is_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = ready_since(pod)
    moment = (at or now()).timestamp()
    return since > 0 and since + min_ready_seconds <= moment


def restarts(pod: Obj) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return max((s.get("restartCount") or 0 for s in statuses), default=0)


def controller_ref(obj: Obj) -> Obj | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def index_orphans(obj: Obj) -> list[str]:
    """Index function: the namespace of an object no controller owns, the only kind a controller may
    adopt besides its own, so a claim need not scan every pod of the namespace."""
    if controller_ref(obj) is not None:
        return []
    return [(obj.get("metadata") or {}).get("namespace") or ""]


def new_controller_ref(owner: Obj) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_from_template(template: Obj, owner: Obj, prefix: str | None = None) -> Obj:
    """A new pod for `owner` from its pod template (upstream's GetPodFromTemplate)."""
    tmeta = template.get("metadata") or {}
    meta: Obj = {
        "generateName": prefix if prefix is not None else f"{owner['metadata']['name']}-",
        "namespace": owner["metadata"].get("namespace"),
        "ownerReferences": [new_controller_ref(owner)],
    }
    if tmeta.get("labels"):
        meta["labels"] = dict(tmeta["labels"])
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {})}


def deletion_rank_key(pod: Obj, related_on_node: int = 0) -> tuple[Any, ...]:
    """Sort ascending to get the pods upstream deletes first (ActivePodsWithRanks.Less):
    unscheduled, then Pending < Unknown < Running, not ready, lower deletion cost, more related
    pods on the same node, ready for less time, more restarts, newer.
    """
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    ready = is_ready(pod)
    try:
        cost = int((meta.get("annotations") or {}).get(POD_DELETION_COST, 0))
    except ValueError:
        cost = 0
    return (
        1 if (pod.get("spec") or {}).get("nodeName") else 0,
        _PHASE_RANK.get(status.get("phase", ""), 0 if not status.get("phase") else 1),
        1 if ready else 0,
        cost,
        -related_on_node,
        -ready_since(pod) if ready else 0.0,
        -restarts(pod),
        -_ts(meta.get("creationTimestamp")),
    )


def pods_to_delete(pods: list[Obj], count: int, related: Iterable[Obj] | None = None) -> list[Obj]:
    """The `count` pods upstream would delete first; `related` (default `pods`) ranks node doubling-up."""
    per_node = Counter(
        (p.get("spec") or {}).get("nodeName") for p in (related if related is not None else pods) if is_active(p)
    )
    ranked = sorted(pods, key=lambda p: deletion_rank_key(p, per_node.get((p.get("spec") or {}).get("nodeName"), 0)
                                                           if (p.get("spec") or {}).get("nodeName") else 0))
    return ranked[:count]


async def slow_start_batch(count: int, initial: int, call: Callable[[], Awaitable[None]]) -> int:
    """Run `call` count times in doubling batches; stop after a batch with any failure.

    A quota or admission failure then costs one request instead of `count` (upstream's slowStartBatch).
    Returns how many calls succeeded; the first error is re-raised after its batch when nothing else can.
    """
    remaining = count
    successes = 0
    batch = min(remaining, initial)
    while batch > 0:
        errors = await _run_batch(batch, call)
        successes += batch - len(errors)
        if errors:
            raise BatchError(successes, errors)
        remaining -= batch
        batch = min(2 * batch, remaining)
    return successes


async def _run_batch(size: int, call: Callable[[], Awaitable[None]]) -> list[Exception]:
    """`size` calls, MAX_IN_FLIGHT at a time: that many runners each take the next call until none is
    left, which costs a task per runner instead of one per call queued on a semaphore."""
    left = size
    errors: list[Exception] = []

    async def runner() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            try:
                await call()
            except Exception as exc:
                errors.append(exc)

    await asyncio.gather(*(runner() for _ in range(min(size, MAX_IN_FLIGHT))))
    return errors


class BatchError(Exception):
    """Some calls of a slow-start batch failed; `successes` went through before it stopped."""

    def __init__(self, successes: int, errors: list[BaseException]) -> None:
        super().__init__(str(errors[0]))
        self.successes = successes
        self.errors = errors


def claim_decision(obj: Obj, owner: Obj, matches: bool) -> str:
    """What a ControllerRefManager does with one candidate: "claim", "adopt", "release" or "ignore"."""
    owner_meta = owner.get("metadata") or {}
    meta = obj.get("metadata") or {}
    ref = controller_ref(obj)
    owner_deleting = bool(owner_meta.get("deletionTimestamp"))
    if ref is not None:
        if ref.get("uid") != owner_meta.get("uid"):
            return "ignore"
        if matches:
            return "claim"
        return "ignore" if owner_deleting else "release"
    if owner_deleting or not matches or meta.get("deletionTimestamp"):
        return "ignore"
    if meta.get("namespace") != owner_meta.get("namespace"):
        return "ignore"
    return "adopt"


def adopt_patch(obj: Obj, owner: Obj, finalizers: tuple[str, ...] = ()) -> Obj:
    """Strategic merge patch adding our controller reference (and the finalizers the owner needs on its
    dependents); the uid pins it to this incarnation."""
    meta: Obj = {"ownerReferences": [new_controller_ref(owner)], "uid": obj["metadata"]["uid"]}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"metadata": meta}


def release_patch(obj: Obj, owner: Obj, finalizers: tuple[str, ...] = ()) -> Obj:
    """Strategic merge patch dropping our controller reference and the finalizers adoption added."""
    meta: Obj = {
        "ownerReferences": [{"$patch": "delete", "uid": owner["metadata"]["uid"]}],
        "uid": obj["metadata"]["uid"],
    }
    if finalizers:
        meta["$deleteFromPrimitiveList/finalizers"] = list(finalizers)
    return {"metadata": meta}


def selector_of(owner: Obj) -> LabelSelector:
    """The pods a workload selects: its metav1.LabelSelector, or a ReplicationController's plain map.

    An invalid selector selects nothing, so a controller whose selector cannot be read leaves every
    pod alone (upstream logs the conversion error and does not sync).
    """
    sel = (owner.get("spec") or {}).get("selector")
    if owner.get("kind") == "ReplicationController":
        return LabelSelector.from_set(sel or {}) if sel else LabelSelector.nothing()
    try:
        return LabelSelector.from_dict(sel)
    except ValueError:
        return LabelSelector.nothing()
