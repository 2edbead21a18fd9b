"""Strategic merge patch (`application/strategic-merge-patch+json`) over plain JSON objects.

Semantics follow k8s.io/apimachinery/pkg/util/strategicpatch as upstream's apiserver applies it:
maps merge key by key and null deletes; a list field merges only when its schema says
`x-kubernetes-patch-strategy: merge` (lists of maps element-wise by `x-kubernetes-patch-merge-key`,
lists of scalars as a union), every other list is replaced. The directives `$patch`,
`$retainKeys`, `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>` are honoured.

Patch metadata comes from upstream's OpenAPI definitions shipped by `kubernetes-validate`, compiled
once per kind into a tree of `_Type` nodes, so a request never walks `$ref`s. Values the patch
introduces are stored without nulls and directives, which is what upstream's round trip through
the typed object leaves of them. The result shares nothing with the inputs.

Errors carry upstream's messages. `PatchError.code` is the HTTP status upstream answers with:
400 for a malformed directive list, 422 for lists of lists, and 500 for the errors upstream's
handler does not classify (a missing merge key, an unknown `$patch` value, ...).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import orjson

from services.api import definitions
from services.api.patch import PatchError

_PATCH = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PREFIX = "$deleteFromPrimitiveList"
_ORDER_PREFIX = "$setElementOrder"
_MISSING: Any = object()
_DROP: Any = object()


_UNKNOWN_FORMAT = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)
_BAD_PRIMITIVE_LIST = "invalid patch format of primitive list"
_BAD_RETAIN_KEYS = "invalid patch format of retainKeys"
_BAD_ORDER_LIST = "invalid patch format of setElementOrder list"


class UnsupportedStrategicPatch(Exception):
    """The kind has no built-in schema (a custom resource); upstream refuses the patch type with 415."""

    code = 415

    def __init__(self) -> None:
        super().__init__(_UNKNOWN_FORMAT)
        self.message = _UNKNOWN_FORMAT


# ---------------------------------------------------------------------------------------------
# Schema: upstream definitions reduced to patch metadata


class _Type:
    """One object definition: the patch metadata of each field, or of every key for a plain map."""

    __slots__ = ("name", "fields", "values")

    def __init__(self, name: str) -> None:
        self.name = name
        self.fields: dict[str, _Field] = {}
        self.values: _Field | None = None


class _Field:
    """How a field merges; `type` is the field's object type, or its elements' for a list."""

    __slots__ = ("strategy", "merge_key", "type")

    def __init__(self, strategy: str, merge_key: str, type_: _Type | None) -> None:
        self.strategy = strategy
        self.merge_key = merge_key
        self.type = type_


_PLAIN = _Field("", "", None)


def _lookup(typ: _Type | None, key: str) -> _Field:
    """A field's metadata; fields the schema does not know merge like JSON merge patch."""
    if typ is None:
        return _PLAIN
    return typ.fields.get(key) or typ.values or _PLAIN


class _Schema:
    """Definitions compiled on first use of a kind, cached for the life of the process."""

    def __init__(self, definitions: dict[str, Any]) -> None:
        self._definitions = definitions
        self._types: dict[str, _Type] = {}
        self._kinds: dict[tuple[str, str], str] | None = None

    def root(self, api_version: str, kind: str) -> _Type | None:
        if self._kinds is None:
            kinds: dict[tuple[str, str], str] = {}
            for name, definition in self._definitions.items():
                for gvk in definition.get("x-kubernetes-group-version-kind") or ():
                    group, version = gvk.get("group", ""), gvk.get("version", "")
                    kinds.setdefault((f"{group}/{version}" if group else version, gvk.get("kind", "")), name)
            self._kinds = kinds
        name = self._kinds.get((api_version, kind))
        return None if name is None else self._type(name)

    def _type(self, name: str) -> _Type:
        typ = self._types.get(name)
        if typ is None:
            typ = self._types[name] = _Type(name)
            definition = self._definitions.get(name) or {}
            for prop, schema in (definition.get("properties") or {}).items():
                typ.fields[prop] = self._field(schema)
            extra = definition.get("additionalProperties")
            if isinstance(extra, dict):
                typ.values = self._field(extra)
        return typ

    def _field(self, schema: dict[str, Any]) -> _Field:
        # `retainKeys` only tells clients to send `$retainKeys`; the server honours it wherever sent.
        declared = schema.get("x-kubernetes-patch-strategy", "").split(",")
        strategies = [s for s in declared if s and s != "retainKeys"]
        merge_key = schema.get("x-kubernetes-patch-merge-key", "")
        return _Field(strategies[0] if strategies else "", merge_key, self._shape(schema))

    def _shape(self, schema: dict[str, Any]) -> _Type | None:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self._type(ref.rsplit("/", 1)[-1])
        for part in schema.get("allOf") or ():
            if isinstance(part, dict) and (shape := self._shape(part)) is not None:
                return shape
        items = schema.get("items")
        if isinstance(items, dict):
            return self._shape(items)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            typ = _Type("")
            typ.values = self._field(extra)
            return typ
        return None


@cache
def _schema() -> _Schema:
    """Upstream's definitions reduced to patch metadata, built once per process."""
    return _Schema(definitions.definitions())


# ---------------------------------------------------------------------------------------------
# Upstream's error texts (Go's %v rendering of JSON values)


def _go(value: Any) -> str:
    if value is None:
        return "<nil>"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go(v) for v in value) + "]"
    return str(value)


def _go_type(value: Any) -> str:
    if value is None:
        return "%!s(<nil>)"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    return "map[string]interface {}"


def _json_type(value: Any) -> str:
    """The JSON type name Go's encoding/json puts in its unmarshal errors."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _bad_arg_type(expected: str, actual: Any) -> PatchError:
    return PatchError(f"expected a {expected}, but received a {_go_type(actual)}", 500)


def _no_merge_key(element: dict[str, Any], merge_key: str) -> PatchError:
    return PatchError(f"map: {_go(element)} does not contain declared merge key: {merge_key}", 500)


def _no_merge_strategy(field: _Field) -> PatchError:
    name = field.type.name if field.type else ""
    return PatchError(f"cannot merge lists without merge key for {name}", 500)


def _bad_patch_type(directive: Any, element: dict[str, Any]) -> PatchError:
    return PatchError(f"unknown patch type: {_go(directive)} in map: {_go(element)}", 500)


# ---------------------------------------------------------------------------------------------
# Helpers over JSON values


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) if isinstance(v, (dict, list)) else v for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) if isinstance(v, (dict, list)) else v for v in value]
    return value


def _is_directive(key: str) -> bool:
    if key[:1] != "$":
        return False
    return key in (_PATCH, _RETAIN_KEYS) or key.startswith((_ORDER_PREFIX, _DELETE_PREFIX))


def _clean(value: Any) -> Any:
    """A patch value stored as is: nulls in maps and directives dropped, `_DROP` for a map that carries
    `$patch` (as upstream), except that a `$patch: replace` map keeps its content instead of vanishing."""
    if isinstance(value, dict):
        if _PATCH in value:
            if value[_PATCH] != "replace":
                return _DROP
            value = {k: v for k, v in value.items() if k != _PATCH}
        out = {}
        for k, v in value.items():
            if v is None or _is_directive(k):
                continue
            if isinstance(v, (dict, list)):
                v = _clean(v)
                if v is _DROP:
                    continue
            out[k] = v
        return out
    if isinstance(value, list):
        out_list = []
        for v in value:
            if isinstance(v, (dict, list)):
                v = _clean(v)
                if v is _DROP:
                    continue
            out_list.append(v)
        return out_list
    return value


def _hkey(value: Any) -> Any:
    """A hashable stand-in for a JSON value, equal where Go's interface comparison is."""
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (dict, list)):
        try:
            return ("json", orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
        except orjson.JSONEncodeError:
            return ("repr", repr(value))
    return value


def _directive_target(key: str, prefix: str, message: str) -> str:
    head, sep, rest = key.partition("/")
    if not sep or head != prefix:
        raise PatchError(message, 400)
    return rest


def _elements_are_maps(*lists: list[Any]) -> bool:
    """Whether the elements are maps; like upstream, all elements must share one type."""
    seen: type | None = None
    for items in lists:
        for item in items:
            if item is None:
                continue
            kind = type(item)
            if kind is list:
                raise PatchError("lists of lists are not supported", 422)
            if seen is None:
                seen = kind
            elif kind is not seen:
                raise PatchError(f"list element types are not identical: {_go(list(lists))}", 500)
    return seen is dict


def _interleave(
    server_only: list[Any], patched: list[Any], server_pos: dict[Any, int], key: Any
) -> list[Any]:
    """Upstream's merge of two ordered runs: a server-only item goes first only when the live list
    already had it before the next patched item."""
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) and j < len(patched):
        left = server_pos.get(key(server_only[i]))
        right = server_pos.get(key(patched[j]))
        if left is not None and right is not None and left < right:
            out.append(server_only[i])
            i += 1
        else:
            out.append(patched[j])
            j += 1
    out.extend(server_only[i:])
    out.extend(patched[j:])
    return out


def _unique(items: list[Any], seen: set[Any]) -> list[Any]:
    """The items not seen yet, first occurrence only; marks them seen."""
    out = []
    for item in items:
        key = _hkey(item)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _positions(items: list[Any], key: Any) -> dict[Any, int]:
    pos: dict[Any, int] = {}
    for i, item in enumerate(items):
        pos.setdefault(key(item), i)
    return pos


def _map_key(merge_key: str) -> Any:
    def key(item: Any) -> Any:
        return _hkey(item.get(merge_key)) if isinstance(item, dict) else None

    return key


# ---------------------------------------------------------------------------------------------
# Merging


def strategic_merge_patch(
    api_version: str, kind: str, original: dict[str, Any], patch: dict[str, Any]
) -> dict[str, Any]:
    """Apply a strategic merge patch to an object of a built-in kind.

    Raises UnsupportedStrategicPatch for kinds without a built-in schema (custom resources) and
    PatchError when the patch is malformed. Neither input is modified.
    """
    root = _schema().root(api_version, kind)
    if root is None:
        raise UnsupportedStrategicPatch()
    if patch is None:
        patch = {}
    if not isinstance(patch, dict):
        raise PatchError(
            f"json: cannot unmarshal {_json_type(patch)} into Go value of type map[string]interface {{}}", 400
        )
    return _merge_map(original if isinstance(original, dict) else {}, patch, root)


def _merge_map(original: dict[str, Any], patch: dict[str, Any], typ: _Type | None) -> dict[str, Any]:
    if _PATCH in patch:
        directive = patch[_PATCH]
        if directive == "replace":
            return _clean({k: v for k, v in patch.items() if k != _PATCH})
        if directive == "delete":
            return {}
        raise _bad_patch_type(directive, patch)

    retain: set[str] | None = None
    orders: list[str] = []
    deletions: list[str] = []
    for key in patch:
        if key[:1] == "$":
            if key == _RETAIN_KEYS:
                retain = _retained_keys(patch)
            elif key.startswith(_ORDER_PREFIX):
                orders.append(key)
            elif key.startswith(_DELETE_PREFIX):
                deletions.append(key)

    # Entries the patch touches keep a reference to the original value (merging reads it, never
    # writes it); every other entry is copied so the result shares nothing with the input.
    result: dict[str, Any] = {}
    for key, value in original.items():
        if retain is not None and key not in retain:
            continue
        if isinstance(value, (dict, list)) and (key not in patch or _is_directive(key)):
            value = _copy(value)
        result[key] = value

    ordered: set[str] = set()
    for key in orders:
        ordered.add(_apply_element_order(result, patch, key, typ))

    for key, change in patch.items():
        if key in ordered or (key[:1] == "$" and _is_directive(key)):
            continue
        if change is None:
            result.pop(key, None)
            continue
        current = result.get(key, _MISSING)
        if isinstance(change, dict):
            if isinstance(current, dict):
                field = _lookup(typ, key)
                if field.strategy == "replace":
                    result[key] = _clean(change)
                else:
                    result[key] = _merge_map(current, change, field.type)
                continue
        elif isinstance(change, list):
            if isinstance(current, list):
                result[key] = _merge_list(current, change, _lookup(typ, key))
                continue
        else:
            result[key] = change
            continue
        cleaned = _clean(change)
        if cleaned is _DROP:
            result.pop(key, None)
        else:
            result[key] = cleaned

    for key in deletions:
        name = _directive_target(key, _DELETE_PREFIX, _BAD_PRIMITIVE_LIST)
        change = patch[key]
        if change is None:
            result.pop(name, None)
            continue
        current = result.get(name)
        if isinstance(current, list) and isinstance(change, list):
            result[name] = _delete_from_list(current, change, _lookup(typ, name))
    return result


def _retained_keys(patch: dict[str, Any]) -> set[str]:
    """The `$retainKeys` set; every field the patch sets must be in it."""
    listed = patch[_RETAIN_KEYS]
    if not isinstance(listed, list):
        raise PatchError(_BAD_RETAIN_KEYS, 400)
    keep = {k for k in listed if isinstance(k, str)}
    for key, value in patch.items():
        if value is None or key == _RETAIN_KEYS or key.startswith((_DELETE_PREFIX, _ORDER_PREFIX)):
            continue
        if key not in keep:
            raise PatchError(_BAD_RETAIN_KEYS, 400)
    return keep


def _merge_list(original: list[Any], patch: list[Any], field: _Field) -> list[Any]:
    return _merge_list_and_trace(original, patch, field)[0]


def _merge_list_and_trace(
    original: list[Any], patch: list[Any], field: _Field
) -> tuple[list[Any], list[Any]]:
    """The merged list, and the live order a following `$setElementOrder` falls back on.

    Upstream merges lists of maps inside the live list's own backing array: deletions shift its
    elements left and appended patch items take the freed slots, and the `$setElementOrder` step
    reads that array again. The trace reproduces what it reads there (for the exact-capacity
    slices the apiserver decodes), so new items place the same way relative to server-only ones.
    """
    if field.strategy != "merge":
        return _clean(patch), original
    if not original and not patch:
        return [], original
    if not _elements_are_maps(original, patch):
        seen: set[Any] = set()
        patched = _unique(patch, seen)
        server_only = _unique(original, seen)
        return _interleave(server_only, patched, _positions(original, _hkey), _hkey), original

    merge_key = field.merge_key
    if not merge_key:
        raise _no_merge_strategy(field)
    plain: list[dict[str, Any]] = []
    deleted: set[Any] = set()
    replace = False
    for element in patch:
        if element is None or _PATCH not in element:
            plain.append(element)
            continue
        directive = element[_PATCH]
        if directive == "delete":
            if merge_key not in element:
                raise _no_merge_key(element, merge_key)
            deleted.add(_hkey(element[merge_key]))
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise PatchError("merging lists cannot yet be specified in the patch", 500)
        else:
            raise _bad_patch_type(directive, element)
    if replace:
        for element in plain:
            if not isinstance(element, dict) or merge_key not in element:
                raise _no_merge_key(element or {}, merge_key)
        return _clean(plain), original

    key = _map_key(merge_key)
    live_length = len(original)
    if deleted:
        original = [e for e in original if not (isinstance(e, dict) and merge_key in e and key(e) in deleted)]
    merged: list[Any] = list(original)
    index = _positions(original, key)
    server_pos = dict(index)
    fresh = [False] * len(merged)
    patch_pos: dict[Any, int] = {}
    for element in plain:
        if not isinstance(element, dict) or merge_key not in element:
            raise _no_merge_key(element or {}, merge_key)
        k = key(element)
        patch_pos.setdefault(k, len(patch_pos))
        at = index.get(k)
        if at is None:
            index[k] = len(merged)
            merged.append(_clean(element))
            fresh.append(True)
        else:
            merged[at] = _merge_map(merged[at], element, field.type)
            fresh[at] = True

    patched: list[Any] = []
    server_only: list[Any] = []
    for at, item in enumerate(merged):
        if not isinstance(item, dict) or merge_key not in item:
            raise _no_merge_key(item if isinstance(item, dict) else {}, merge_key)
        if not fresh[at]:
            item = _copy(item)
        (patched if key(item) in patch_pos else server_only).append(item)
    patched.sort(key=lambda item: patch_pos[key(item)])
    return _interleave(server_only, patched, server_pos, key), merged[:live_length]


def _delete_from_list(original: list[Any], values: list[Any], field: _Field) -> list[Any]:
    """`$deleteFromPrimitiveList`: drop every occurrence of the listed values, whatever the strategy."""
    if not original and not values:
        return []
    if _elements_are_maps(original, values):
        if not field.merge_key:
            raise _no_merge_strategy(field)
        return _merge_list(original, values, _Field("merge", field.merge_key, field.type))
    gone = {_hkey(v) for v in values}
    return [v for v in original if _hkey(v) not in gone]


def _apply_element_order(
    result: dict[str, Any], patch: dict[str, Any], directive: str, typ: _Type | None
) -> str:
    """Merge the list `$setElementOrder/<field>` names and put it in the requested order.

    Returns the field name so the main loop leaves the already merged list alone.
    """
    order = patch[directive]
    if not isinstance(order, list):
        raise _bad_arg_type("[]interface {}", order)
    name = _directive_target(directive, _ORDER_PREFIX, _BAD_ORDER_LIST)
    current = result.get(name, _MISSING)
    change = patch.get(name, _MISSING)
    if current is not _MISSING and not isinstance(current, list):
        raise _bad_arg_type("[]interface {}", current)
    if change is not _MISSING and not isinstance(change, list):
        raise _bad_arg_type("[]interface {}", change)
    field = _lookup(typ, name)
    merge_key = field.merge_key
    _check_order(change if change is not _MISSING else [], order, merge_key)
    if current is _MISSING and change is _MISSING:
        return name
    if change is _MISSING:
        merged, live = current, current  # not in the patch, so already a copy
    elif current is _MISSING:
        merged, live = _clean(change), []
    else:
        merged, live = _merge_list_and_trace(current, change, field)

    if merge_key:
        for at, item in enumerate(order):
            if not isinstance(item, dict):
                raise PatchError(f"value for key {at} is not a map", 500)
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
        key = _map_key(merge_key)
        for item in merged:
            if not isinstance(item, dict):
                raise _bad_arg_type("map[string]interface {}", item)
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
    else:
        key = _hkey
    order_pos = _positions(order, key)
    patched = [item for item in merged if key(item) in order_pos]
    server_only = [item for item in merged if key(item) not in order_pos]
    server_pos = _positions(live, key)
    patched.sort(key=lambda item: order_pos[key(item)])
    server_only.sort(key=lambda item: server_pos.get(key(item), len(live)))
    result[name] = _interleave(server_only, patched, server_pos, key)
    return name


def _check_order(patch_list: list[Any], order: list[Any], merge_key: str) -> None:
    """The patch list's items must appear in `$setElementOrder` and in the same relative order."""
    if not order or not patch_list:
        return
    if merge_key:
        items = []
        for element in patch_list:
            if not isinstance(element, dict):
                raise _bad_arg_type("map[string]interface {}", element)
            if element.get(_PATCH) != "delete":
                items.append(element)
    else:
        items = patch_list
    at = seen = 0
    while at < len(items) and seen < len(order):
        item = items[at]
        if isinstance(item, dict) and _PATCH in item:
            at += 1
            continue
        if _same_key(item, order[seen], merge_key):
            at += 1
        seen += 1
    if at < len(items) and seen >= len(order):
        raise PatchError(
            f"The order in patch list:\n{_go(patch_list)}\n doesn't match {_ORDER_PREFIX} list:\n"
            f"{_go(order)}\n",
            500,
        )


def _same_key(left: Any, right: Any, merge_key: str) -> bool:
    if not merge_key:
        return _hkey(left) == _hkey(right)
    for side in (left, right):
        if not isinstance(side, dict):
            raise _bad_arg_type("map[string]interface {}", side)
        if merge_key not in side:
            raise _no_merge_key(side, merge_key)
    return _hkey(left[merge_key]) == _hkey(right[merge_key])
