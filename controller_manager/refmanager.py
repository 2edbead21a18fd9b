"""Claiming dependents for a controller by its selector (upstream's ControllerRefManager: ClaimPods,
ClaimReplicaSets): adopt matching orphans, release owned objects that stopped matching, keep the
rest. Adoption is checked once against a fresh read of the owner, so an owner being deleted never
adopts. Owners that need finalizers on their pods (the Job's tracking finalizer) add them with the
adoption and drop them with the release, in the same patch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from controller_manager.podutil import adopt_patch, claim_decision, is_active, release_patch
from controller_manager.resources import PODS
from services.api.selectors import LabelSelector
from services.client import NotFound
from services.client.rest import GVR

Obj = dict[str, Any]


async def can_adopt(client: Any, resource: GVR, owner: Obj) -> bool:
    """Re-read the owner past the cache: never adopt for an owner that is gone or going away."""
    meta = owner["metadata"]
    try:
        fresh = await client.get(resource, meta["name"], meta.get("namespace"))
    except NotFound:
        return False
    fresh_meta = fresh.get("metadata") or {}
    return fresh_meta.get("uid") == meta.get("uid") and not fresh_meta.get("deletionTimestamp")


async def claim_pods(
    client: Any,
    resource: GVR,
    owner: Obj,
    selector: LabelSelector,
    owned: Iterable[Obj],
    orphans: Iterable[Obj],
    finalizers: tuple[str, ...] = (),
    keep_inactive: bool = False,
) -> list[Obj]:
    """The owner's pods after the claim: the owned pods that match, plus the orphans adopted.

    `owned` are the pods whose controller reference is the owner, `orphans` pods without one; a
    patch that fails (the pod changed or went away) just leaves that pod out until the next sync.
    Adopted pods that finished are dropped unless `keep_inactive` (the Job counts them).
    """
    return await claim(client, resource, owner, lambda p: selector.matches(p["metadata"].get("labels")), owned,
                       orphans, PODS, finalizers, keep=None if keep_inactive else is_active)


async def claim(
    client: Any,
    resource: GVR,
    owner: Obj,
    matches: Callable[[Obj], bool],
    owned: Iterable[Obj],
    orphans: Iterable[Obj],
    dependents: GVR = PODS,
    finalizers: tuple[str, ...] = (),
    keep: Callable[[Obj], bool] | None = None,
) -> list[Obj]:
    """Claim objects of `dependents` for `owner` (of `resource`) by `matches`; adopted objects are
    kept only if `keep` (when given) accepts them."""
    claimed: list[Obj] = []
    release: list[Obj] = []
    for obj in owned:
        decision = claim_decision(obj, owner, matches(obj))
        if decision == "claim":
            claimed.append(obj)
        elif decision == "release":
            release.append(obj)
    adopt = [o for o in orphans if claim_decision(o, owner, matches(o)) == "adopt"]
    if adopt and await can_adopt(client, resource, owner):
        results = await asyncio.gather(
            *(_patch(client, dependents, o, adopt_patch(o, owner, finalizers)) for o in adopt), return_exceptions=True
        )
        claimed.extend(r for r in results if isinstance(r, dict) and (keep is None or keep(r)))
    if release:
        await asyncio.gather(
            *(_patch(client, dependents, o, release_patch(o, owner, finalizers)) for o in release),
            return_exceptions=True,
        )
    return claimed


async def _patch(client: Any, dependents: GVR, obj: Obj, patch: Obj) -> Obj:
    meta = obj["metadata"]
    result: Obj = await client.patch(dependents, meta["name"], patch, meta["namespace"], patch_type="strategic")
    return result
