"""Merging an applied configuration into the live object, and pruning what an applier stopped setting."""

from __future__ import annotations

from typing import Any

from services.api.fieldmanager.fieldset import InvalidObject, Node, granular, is_member, item_element
from services.api.fieldmanager.schema import DEDUCED, Type, resolve

_MISSING: Any = object()


def merge(t: Type, live: Any, config: Any) -> Any:
    """Config wins on leaves; maps merge key by key and granular lists item by item.

    Both arguments must be private copies: the result reuses and mutates them.
    """
    if live is _MISSING:
        return config
    rt = resolve(t, config)
    shape = granular(rt, config)
    if shape == "object" and isinstance(live, dict):
        if not live:
            return config
        fields = rt.fields
        for key, value in config.items():
            current = live.get(key, _MISSING)
            if current is not _MISSING:
                value = merge(fields.get(key) or rt.elem or DEDUCED, current, value)
            if value is None:
                live.pop(key, None)
            else:
                live[key] = value
        return live
    if shape == "list" and isinstance(live, list):
        if not live:
            return config
        if not config:
            return live
        return _merge_list(rt, live, config)
    if config is None and live and granular(resolve(t, live), live):
        return live
    return config


def _merge_list(t: Type, live: list[Any], config: list[Any]) -> list[Any]:
    """Upstream's order: shared items follow the configuration's order, live-only items keep their place."""
    elem = t.elem or DEDUCED
    right = [item_element(t, item) for item in config]
    by_right = dict(zip(right, config, strict=True))
    left: list[str] = []
    by_left: dict[str, Any] = {}
    for item in live:
        try:
            element = item_element(t, item)
        except InvalidObject:
            element = f"?{len(left)}"
        left.append(element)
        by_left.setdefault(element, item)
    shared = [element for element in right if element in by_left]
    shared_at = 0
    next_shared = shared[0] if shared else None
    merged_right: set[str] = set()
    out: list[Any] = []
    li = ri = 0
    while li < len(left) or ri < len(right):
        if li < len(left) and ri < len(right):
            element = left[li]
            if element == right[ri]:
                merged_right.add(element)
                out.append(merge(elem, by_left[element], by_right[element]))
                li += 1
                ri += 1
                shared_at += 1
                next_shared = shared[shared_at] if shared_at < len(shared) else None
                continue
            if element in by_right and next_shared is not None and next_shared != element:
                li += 1
                continue
        if li < len(left):
            element = left[li]
            if element not in by_right:
                out.append(live[li])
                li += 1
                continue
            if element in merged_right:
                li += 1
        if ri < len(right):
            element = right[ri]
            merged_right.add(element)
            out.append(merge(elem, by_left.get(element, _MISSING), by_right[element]))
            ri += 1
            if next_shared == element:
                shared_at += 1
                next_shared = shared[shared_at] if shared_at < len(shared) else None
    return out


def prune(t: Type, obj: dict[str, Any], last: Node, owned: Node) -> None:
    """Remove, in place, what the applier set last time and nobody owns now.

    A declared (struct) field counts as owned when anything below it is, as upstream's
    EnsureNamedFieldsAreMembers does; map keys and list items only when they are members themselves.
    """
    fields = t.fields
    for element, last_node in last.items():
        if element[0] != "f":
            continue
        key = element[2:]
        if key not in obj:
            continue
        ft = fields.get(key)
        declared = ft is not None
        owned_node = owned.get(element)
        in_last = declared or is_member(last_node)
        in_owned = owned_node is not None and (declared or is_member(owned_node))
        if in_last and not in_owned:
            del obj[key]
            continue
        if len(last_node) > (1 if "." in last_node else 0):
            value = obj[key]
            rt = resolve(ft or t.elem or DEDUCED, value)
            shape = granular(rt, value)
            if shape == "object" and value:
                prune(rt, value, last_node, owned_node or {})
                if not value:
                    del obj[key]
            elif shape == "list" and value:
                kept = _prune_list(rt, value, last_node, owned_node or {})
                if not kept:
                    del obj[key]
                elif kept is not value:
                    obj[key] = kept


def _prune_list(t: Type, items: list[Any], last: Node, owned: Node) -> list[Any]:
    elem = t.elem or DEDUCED
    out = []
    for item in items:
        try:
            element = item_element(t, item)
        except InvalidObject:
            out.append(item)
            continue
        last_node = last.get(element)
        if last_node is None:
            out.append(item)
            continue
        owned_node = owned.get(element)
        if is_member(last_node) and not (owned_node is not None and is_member(owned_node)):
            continue
        if len(last_node) > (1 if "." in last_node else 0):
            et = resolve(elem, item)
            if granular(et, item) == "object":
                prune(et, item, last_node, owned_node or {})
        out.append(item)
    return out if len(out) != len(items) else items
