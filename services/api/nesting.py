"""How deep objects and lists may nest. Upstream's decoders stop at 10000 levels; ours must stay well below
orjson's 254, since a stored object is encoded again inside managedFields, Tables and watch events, each a
few levels deeper."""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 200
TOO_DEEP = f"the object nests deeper than {MAX_DEPTH} levels: exceeded max depth"


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether objects and lists in `value` nest deeper than `limit` (a walk without recursion)."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False
