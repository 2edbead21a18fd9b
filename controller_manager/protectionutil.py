"""When a protection controller adds or removes its finalizer, as upstream's
pkg/controller/volume/protectionutil: PVC and PV protection share the rule, not each other.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def is_deletion_candidate(obj: Obj, finalizer: str) -> bool:
    """Being deleted and still held by our finalizer: time to decide whether to let it go."""
    meta = obj["metadata"]
    return bool(meta.get("deletionTimestamp")) and finalizer in (meta.get("finalizers") or ())


def needs_finalizer(obj: Obj, finalizer: str) -> bool:
    """Alive and not yet protected by our finalizer (an object created before the admission added it)."""
    meta = obj["metadata"]
    return not meta.get("deletionTimestamp") and finalizer not in (meta.get("finalizers") or ())
