"""Claiming pods for a controller by its selector (upstream's PodControllerRefManager.ClaimPods):
adopt matching orphans, release owned pods that stopped matching, keep the rest. Adoption is
checked once against a fresh read of the owner, so an owner being deleted never adopts. Owners
that need finalizers on their pods (the Job's tracking finalizer) add them with the adoption and
drop them with the release, in the same patch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
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
    matches = selector.matches
    claimed: list[Obj] = []
    release: list[Obj] = []
    for pod in owned:
        decision = claim_decision(pod, owner, matches(pod["metadata"].get("labels")))
        if decision == "claim":
            claimed.append(pod)
        elif decision == "release":
            release.append(pod)
    adopt = [p for p in orphans if claim_decision(p, owner, matches(p["metadata"].get("labels"))) == "adopt"]
    if adopt and await can_adopt(client, resource, owner):
        results = await asyncio.gather(
            *(_patch(client, p, adopt_patch(p, owner, finalizers)) for p in adopt), return_exceptions=True
        )
        claimed.extend(r for r in results if isinstance(r, dict) and (keep_inactive or is_active(r)))
    if release:
        await asyncio.gather(
            *(_patch(client, p, release_patch(p, owner, finalizers)) for p in release), return_exceptions=True
        )
    return claimed


async def _patch(client: Any, pod: Obj, patch: Obj) -> Obj:
    meta = pod["metadata"]
    result: Obj = await client.patch(PODS, meta["name"], patch, meta["namespace"], patch_type="strategic")
    return result
