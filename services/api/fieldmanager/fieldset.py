"""Field sets kept in their wire form (fieldsV1), and the walks that derive them from objects.

A set is a dict of path elements (`f:name`, `k:{...}`, `v:...`, `i:N`) to child nodes. A node is a member of
the set when it has no children (`{}`) or carries the `.` marker; the root is never a member. Sets are never
mutated once built, so unchanged subtrees are shared between the old and the new managedFields.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from services.api.fieldmanager.schema import DEDUCED, Type, resolve

Node = dict[str, Any]

_MISSING: Any = object()
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


class InvalidObject(ValueError):
    """An object that cannot be typed against its schema (list items without keys, duplicate keys)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.detail = message


def go_json(value: Any) -> str:
    """Compact JSON the way Go's encoding/json writes it (HTML-safe escapes)."""
    text = orjson.dumps(value).decode()
    if any(c in text for c in _GO_ESCAPES):
        for char, escaped in _GO_ESCAPES.items():
            text = text.replace(char, escaped)
    return text


def is_member(node: Node) -> bool:
    return not node or "." in node


# ---------------------------------------------------------------------------------------------------------
# Set algebra on trees (exact paths, like fieldpath.Set).


def union(a: Node, b: Node) -> Node:
    """Members of either set (root level)."""
    if not a:
        return b
    if not b or a is b:
        return a
    out = dict(a)
    for key, bv in b.items():
        av = a.get(key)
        out[key] = bv if av is None else _union_node(av, bv)
    return out


def _union_node(x: Node, y: Node) -> Node:
    if x is y:
        return x
    if not x:
        return y if (not y or "." in y) else {**y, ".": {}}
    if not y:
        return x if "." in x else {**x, ".": {}}
    out = dict(x)
    for key, yv in y.items():
        xv = x.get(key)
        out[key] = yv if xv is None else _union_node(xv, yv)
    return out


def difference(a: Node, b: Node) -> Node:
    """Members of `a` that are not members of `b` (root level)."""
    if not a or not b:
        return a
    out: Node = {}
    changed = False
    for key, av in a.items():
        bv = b.get(key)
        if bv is None:
            out[key] = av
            continue
        rest = _difference_node(av, bv)
        changed = True
        if rest is not None:
            out[key] = rest
    return out if changed else a


def _difference_node(x: Node, y: Node) -> Node | None:
    member = is_member(x) and not is_member(y)
    if not x:
        return x if member else None
    out: Node = {}
    for key, xv in x.items():
        if key == ".":
            continue
        yv = y.get(key)
        if yv is None:
            out[key] = xv
            continue
        rest = _difference_node(xv, yv)
        if rest is not None:
            out[key] = rest
    if out and member:
        out["."] = {}
    return out if (out or member) else None


def intersection(a: Node, b: Node) -> Node:
    """Members of both sets (root level)."""
    if not a or not b:
        return {}
    out: Node = {}
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    for key, sv in small.items():
        lv = large.get(key)
        if lv is not None:
            both = _intersection_node(sv, lv)
            if both is not None:
                out[key] = both
    return out


def _intersection_node(x: Node, y: Node) -> Node | None:
    member = is_member(x) and is_member(y)
    out: Node = {}
    if x and y:
        for key, xv in x.items():
            if key == ".":
                continue
            yv = y.get(key)
            if yv is not None:
                both = _intersection_node(xv, yv)
                if both is not None:
                    out[key] = both
    if out and member:
        out["."] = {}
    return out if (out or member) else None


def paths(tree: Node) -> Iterator[tuple[str, ...]]:
    """Every member path, as path element strings, in a stable order."""
    stack: list[tuple[tuple[str, ...], Node]] = [((), tree)]
    while stack:
        prefix, node = stack.pop()
        for key in sorted((k for k in node if k != "."), reverse=True):
            child = node[key]
            path = (*prefix, key)
            if child and "." not in child:
                stack.append((path, child))
            else:
                yield path
                if child:
                    stack.append((path, child))


def _go_value(value: Any) -> str:
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return go_json(value)


def format_path(path: tuple[str, ...]) -> str:
    """A path the way upstream prints it: `.spec.containers[name="c"].image`."""
    parts = []
    for element in path:
        tag, text = element[0], element[2:]
        if tag == "f":
            parts.append("." + text)
        elif tag == "k":
            key = orjson.loads(text)
            parts.append("[" + ",".join(f"{k}={_go_value(v)}" for k, v in key.items()) + "]")
        elif tag == "v":
            parts.append(f"[={_go_value(orjson.loads(text))}]")
        else:
            parts.append(f"[{text}]")
    return "".join(parts)


# ---------------------------------------------------------------------------------------------------------
# Walks over objects.


def item_element(t: Type, item: Any, where: str = "") -> str:
    """The path element of one item of a granular list: its map keys, or its value for a set."""
    if t.list_type == "map":
        if item is None:
            raise InvalidObject(where, "associative list with keys may not have a null element")
        if not isinstance(item, dict):
            raise InvalidObject(where, "associative list with keys may not have non-map elements")
        key = {}
        for name in t.keys:
            if name in item:
                key[name] = item[name]
            elif name in t.key_defaults:
                key[name] = t.key_defaults[name]
        if not key:
            keys = "[" + " ".join(go_json(k) for k in t.keys) + "]"
            raise InvalidObject(where, "associative list with keys has an element that omits all key fields "
                                       f"{keys} (and doesn't have default values for any key fields)")
        return "k:" + go_json(key)
    if isinstance(item, dict):
        raise InvalidObject(where, "associative list without keys has an element that's a map type")
    if isinstance(item, list):
        raise InvalidObject(where, "not supported: associative list with lists as elements")
    if item is None:
        raise InvalidObject(where, "associative list without keys has an element that's an explicit null")
    return "v:" + go_json(item)


def granular(t: Type, value: Any) -> str:
    """`object`, `list`, or `` when the value is a leaf for ownership (scalars, atomics, shape mismatches)."""
    if t.atomic:
        return ""
    if t.kind == "object":
        return "object" if isinstance(value, dict) else ""
    if t.kind == "list":
        return "list" if isinstance(value, list) else ""
    return ""


def to_field_set(t: Type, obj: dict[str, Any]) -> Node:
    """The fields an applied configuration sets (ToFieldSet): leaves, list items, empty or null fields.
    A key a structured type does not declare is an error, as structured-merge-diff's typed conversion."""
    return _object_set(t, obj, "")


def _object_set(t: Type, obj: dict[str, Any], where: str) -> Node:
    out: Node = {}
    fields = t.fields
    for key, value in obj.items():
        ft = fields.get(key)
        declared = ft is not None
        if not declared and t.elem is None and fields:
            raise InvalidObject(f"{where}.{key}", "field not declared in schema")
        ft = resolve(ft if declared else (t.elem or DEDUCED), value)
        shape = granular(ft, value)
        if shape == "object":
            children = _object_set(ft, value, f"{where}.{key}")
            member = not value or not declared
        elif shape == "list":
            children = _list_set(ft, value, f"{where}.{key}")
            member = not declared
        else:
            out["f:" + key] = {}
            continue
        if member:
            if children:
                children["."] = {}
            out["f:" + key] = children
        elif children:
            out["f:" + key] = children
    return out


def _list_set(t: Type, items: list[Any], where: str) -> Node:
    out: Node = {}
    elem = t.elem or DEDUCED
    for index, item in enumerate(items):
        element = item_element(t, item, f"{where}: element {index}")
        if element in out:
            raise InvalidObject(where, f"duplicate entries for key {format_path((element,))}")
        et = resolve(elem, item)
        shape = granular(et, item)
        if shape == "object":
            node = _object_set(et, item, where + format_path((element,)))
        elif shape == "list":
            node = _list_set(et, item, where + format_path((element,)))
        else:
            node = {}
        if node:
            node["."] = {}
        out[element] = node
    return out


def _index(t: Type, items: list[Any]) -> dict[str, list[Any]]:
    index: dict[str, list[Any]] = {}
    for item in items:
        index.setdefault(item_element(t, item), []).append(item)
    return index


def compare(
    t: Type, old: dict[str, Any], new: dict[str, Any], skip: frozenset[str] = frozenset()
) -> tuple[Node, Node]:
    """(changed, removed): paths added or modified from `old` to `new`, and paths removed.

    Structs are taken to exist even when absent, as in upstream's typed objects, so a new nested struct does
    not become a member itself; maps, lists and list items do.
    """
    changed: Node = {}
    removed: Node = {}
    _compare_object(t, old, new, changed, removed, skip)
    return changed, removed


def _struct_exists(parent: Type, key: str, ft: Type | None) -> bool:
    if ft is None:
        return False
    return (ft.kind == "object" and bool(ft.fields) and not ft.atomic) or key in parent.required


def _compare_object(t: Type, old: dict[str, Any], new: dict[str, Any], changed: Node, removed: Node,
                    skip: frozenset[str] = frozenset()) -> None:
    fields = t.fields
    for key, nv in new.items():
        ov = old.get(key, _MISSING)
        if ov is nv or key in skip:
            continue
        ft = fields.get(key)
        if ov is _MISSING:
            node = _added(ft or t.elem or DEDUCED, nv, _struct_exists(t, key, ft))
            if node is not None:
                changed["f:" + key] = node
            continue
        if ov == nv:
            continue
        c, r = _compare_value(ft or t.elem or DEDUCED, ov, nv)
        if c is not None:
            changed["f:" + key] = c
        if r is not None:
            removed["f:" + key] = r
    if len(old) > len(new) or any(key not in new for key in old):
        for key, ov in old.items():
            if key not in new and key not in skip:
                removed["f:" + key] = _full(fields.get(key) or t.elem or DEDUCED, ov)


def _compare_value(t: Type, ov: Any, nv: Any) -> tuple[Node | None, Node | None]:
    rt = resolve(t, nv)
    shape = granular(rt, nv)
    if shape == "object":
        if ov is None:
            ov = {}
        if isinstance(ov, dict) and (ov or nv):
            changed: Node = {}
            removed: Node = {}
            _compare_object(rt, ov, nv, changed, removed)
            return changed or None, removed or None
    elif shape == "list":
        if ov is None:
            ov = []
        if isinstance(ov, list) and (ov or nv):
            return _compare_list(rt, ov, nv)
    elif nv is None and granular(resolve(t, ov), ov):
        return _compare_value(t, ov, type(ov)())
    return {}, None


def _compare_list(t: Type, old: list[Any], new: list[Any]) -> tuple[Node | None, Node | None]:
    elem = t.elem or DEDUCED
    left = _index(t, old)
    right = _index(t, new)
    changed: Node = {}
    removed: Node = {}
    for element, rights in right.items():
        lefts = left.get(element)
        if lefts is None:
            changed[element] = _added(elem, rights[0], False) if len(rights) == 1 else {}
        elif len(lefts) == 1 and len(rights) == 1:
            if lefts[0] != rights[0]:
                c, r = _compare_value(elem, lefts[0], rights[0])
                if c is not None:
                    changed[element] = c
                if r is not None:
                    removed[element] = r
        elif lefts != rights:
            changed[element] = {}
            if len(lefts) >= 2 and len(rights) < 2:
                removed[element] = {}
    for element, lefts in left.items():
        if element not in right:
            removed[element] = _full(elem, lefts[0]) if len(lefts) == 1 else {}
    return changed or None, removed or None


def _added(t: Type, value: Any, exists: bool) -> Node | None:
    """The set of a value that did not exist before; `exists` marks a struct upstream would already hold."""
    rt = resolve(t, value)
    shape = granular(rt, value)
    if shape == "object" and value:
        children: Node = {}
        fields = rt.fields
        for key, cv in value.items():
            ft = fields.get(key)
            node = _added(ft or rt.elem or DEDUCED, cv, exists and _struct_exists(rt, key, ft))
            if node is not None:
                children["f:" + key] = node
    elif shape == "list" and value:
        elem = rt.elem or DEDUCED
        children = {}
        for item in value:
            children[item_element(rt, item)] = _added(elem, item, False) or {}
    else:
        if exists and (value is None or value == {}):
            return None
        return {}
    if exists:
        return children or None
    if children:
        children["."] = {}
    return children


def _full(t: Type, value: Any) -> Node:
    """Every path of a value, each a member: what disappears when the value is removed."""
    rt = resolve(t, value)
    shape = granular(rt, value)
    if shape == "object" and value:
        fields = rt.fields
        out = {"f:" + key: _full(fields.get(key) or rt.elem or DEDUCED, cv) for key, cv in value.items()}
    elif shape == "list" and value:
        elem = rt.elem or DEDUCED
        out = {}
        for item in value:
            try:
                out[item_element(rt, item)] = _full(elem, item)
            except InvalidObject:
                continue
    else:
        return {}
    out["."] = {}
    return out
