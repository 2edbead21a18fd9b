"""ControllerRevisions for StatefulSets and DaemonSets (upstream's controller history): each
distinct pod template is stored once as `<owner>-<hash>` with an increasing revision number,
hash collisions bump status.collisionCount, and old revisions are pruned to
revisionHistoryLimit.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import orjson

from controller_manager.podutil import controller_ref, new_controller_ref
from controller_manager.resources import CONTROLLER_REVISIONS
from services.client import AlreadyExists, Client, NotFound

REVISION_HASH = "controller-revision-hash"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"

Obj = dict[str, Any]


def _fnv32a(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def safe_encode(text: str) -> str:
    """Upstream's rand.SafeEncodeString: digits become letters no word can be spelt with."""
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in text)


def template_hash(template: Obj, collision_count: int | None = None) -> str:
    """A stable short hash of a pod template (salted by the collision count), as label-safe text."""
    data = orjson.dumps(template, option=orjson.OPT_SORT_KEYS)
    if collision_count:
        data += collision_count.to_bytes(4, "little")
    return safe_encode(str(_fnv32a(data)))


def revision_data(template: Obj) -> Obj:
    """What a revision stores: a strategic patch that replaces the owner's pod template."""
    return {"spec": {"template": {**copy.deepcopy(template), "$patch": "replace"}}}


def template_of(revision: Obj) -> Obj:
    template = dict(((revision.get("data") or {}).get("spec") or {}).get("template") or {})
    template.pop("$patch", None)
    return template


def revision_number(revision: Obj) -> int:
    return int(revision.get("revision") or 0)


def owned_revisions(owner: Obj, revisions: list[Obj]) -> list[Obj]:
    uid = owner["metadata"]["uid"]
    return sorted(
        (r for r in revisions if (controller_ref(r) or {}).get("uid") == uid),
        key=lambda r: (revision_number(r), r["metadata"].get("creationTimestamp") or ""),
    )


def equal_revision(revision: Obj, template: Obj) -> bool:
    return template_of(revision) == template


async def ensure_revision(
    client: Client,
    owner: Obj,
    revisions: list[Obj],
    template: Obj,
    labels: dict[str, str],
) -> tuple[Obj, int]:
    """The revision for `template` (reused, renumbered to newest, or created) and the collision count."""
    collision = int((owner.get("status") or {}).get("collisionCount") or 0)
    newest = max((revision_number(r) for r in revisions), default=0)
    equal = [r for r in revisions if equal_revision(r, template)]
    if equal:
        found = equal[-1]
        if revisions and found is revisions[-1]:
            return found, collision
        patched = await client.patch(
            CONTROLLER_REVISIONS,
            found["metadata"]["name"],
            {"revision": newest + 1},
            found["metadata"]["namespace"],
        )
        return patched, collision
    namespace = owner["metadata"]["namespace"]
    while True:
        digest = template_hash(template, collision)
        body = {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": f"{owner['metadata']['name']}-{digest}",
                "namespace": namespace,
                "labels": {**labels, REVISION_HASH: digest},
                "ownerReferences": [new_controller_ref(owner)],
            },
            "data": revision_data(template),
            "revision": newest + 1,
        }
        try:
            return await client.create(CONTROLLER_REVISIONS, body, namespace), collision
        except AlreadyExists:
            existing = await client.get(CONTROLLER_REVISIONS, body["metadata"]["name"], namespace)
            if (controller_ref(existing) or {}).get("uid") == owner["metadata"]["uid"] and equal_revision(
                existing, template
            ):
                return existing, collision
            collision += 1


async def truncate_history(client: Client, owner: Obj, revisions: list[Obj], live: set[str]) -> None:
    """Delete the oldest revisions not in `live` beyond spec.revisionHistoryLimit."""
    limit = int((owner.get("spec") or {}).get("revisionHistoryLimit") or 10)
    history = [r for r in revisions if r["metadata"]["name"] not in live]
    doomed = history[: max(len(history) - limit, 0)]

    async def drop(rev: Obj) -> None:
        try:
            await client.delete(CONTROLLER_REVISIONS, rev["metadata"]["name"], rev["metadata"]["namespace"])
        except NotFound:
            pass

    await asyncio.gather(*(drop(r) for r in doomed))
