"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) over plain JSON values.

Both return a fresh document that shares nothing with their inputs, so callers may mutate the result
(stamp metadata, default fields) without touching a cached object. Error messages follow the
evanphx/json-patch library upstream's apiserver uses, so clients see familiar text.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson


class PatchError(ValueError):
    """A patch that cannot be applied; `code` is the HTTP status upstream answers with.

    400 when the patch document itself is malformed (not a list of operation objects),
    422 when a well-formed patch does not apply to the target.
    """

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


_MISSING = object()
_INVALID_INDEX = "invalid index referenced"
_INDEX_RE = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_BAD_ESCAPE_RE = re.compile(r"~(?![01])")


def _missing(message: str) -> PatchError:
    """evanphx/json-patch wraps its ErrMissing cause, so its messages end in ": missing value"."""
    return PatchError(f"{message}: missing value")


def _copy(value: Any) -> Any:
    """Deep copy of a JSON value; much cheaper than copy.deepcopy for dict/list trees."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _go_json_type(value: Any) -> str:
    """The JSON type name Go's encoding/json puts in its unmarshal errors."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def json_equal(a: Any, b: Any) -> bool:
    """Structural JSON equality: 1 == 1.0, but true is not 1 and key order does not matter."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)):
        return isinstance(b, (int, float)) and a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and len(a) == len(b)
            and all(k in b and json_equal(v, b[k]) for k, v in a.items())
        )
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        return all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# ---------------------------------------------------------------------------------------------
# RFC 7386


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def json_merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch: objects merge key by key, null deletes, anything else replaces.

    Like evanphx/json-patch (upstream's implementation), a non-object patch value that lands where
    the target holds no object also loses the null members of objects nested in its lists.
    """
    if not isinstance(patch, dict):
        return _copy(patch) if isinstance(target, dict) else _without_nulls(patch)
    result: dict[str, Any] = {}
    if isinstance(target, dict):
        for key, value in target.items():
            if key not in patch:
                result[key] = _copy(value)
                continue
            change = patch[key]
            if change is not None:
                result[key] = json_merge_patch(value, change)
    for key, change in patch.items():
        if change is not None and key not in result:
            result[key] = json_merge_patch(None, change)
    return result


def create_merge_patch(original: Any, modified: Any) -> Any:
    """The merge patch that turns `original` into `modified` (what `kubectl apply` style diffs send).

    Nulls inside `modified` cannot be expressed by a merge patch; RFC 7386 reads them as deletions.
    """
    if not isinstance(original, dict) or not isinstance(modified, dict):
        return _copy(modified)
    patch: dict[str, Any] = {}
    for key, value in original.items():
        if key not in modified:
            patch[key] = None
        elif not json_equal(value, modified[key]):
            patch[key] = create_merge_patch(value, modified[key])
    for key, value in modified.items():
        if key not in original:
            patch[key] = _copy(value)
    return patch


# ---------------------------------------------------------------------------------------------
# RFC 6902, with the behaviour of evanphx/json-patch v4 (what upstream's apiserver runs) where the
# RFC leaves room or v4 is more lenient in ways clients rely on: `replace` of a missing object key
# adds it, a missing `value` means null, and list indices may be negative (counted from the end),
# signed or zero-padded. Where v4 would silently do the wrong thing (a pointer without a leading
# `/`, an unknown `~` escape) we refuse, and `add`/`replace` at the root replace the document as
# RFC 6902 says.

_PATH_DECODE_KEEPS_CAUSE = frozenset({"replace", "move", "test"})


class _InnerError(Exception):
    """A container-level failure worded like v4's inner error; each operation wraps it as v4 does."""


def _pointer(op: dict[str, Any], kind: str, field: str) -> tuple[str, list[str]]:
    """Read and decode the JSON pointer (RFC 6901) in `op[field]`."""
    text = op.get(field)
    if not isinstance(text, str):
        if text is None:
            cause = (
                "operation missing path field: missing value"
                if field == "path"
                else "operation, missing from field: missing value"
            )
        else:
            cause = f"json: cannot unmarshal {_go_json_type(text)} into Go value of type string"
        if field == "path" and kind not in _PATH_DECODE_KEEPS_CAUSE:
            cause = "missing value"
        raise PatchError(f"{kind} operation failed to decode {field}: {cause}")
    if text == "":
        return text, []
    if text[0] != "/":
        raise PatchError(
            f'{kind} operation failed to decode {field}: invalid JSON pointer "{text}": '
            "a pointer must be empty or start with '/'"
        )
    tokens = text[1:].split("/")
    if "~" in text:
        if _BAD_ESCAPE_RE.search(text):
            raise PatchError(
                f'{kind} operation failed to decode {field}: invalid JSON pointer "{text}": '
                "'~' must be followed by '0' or '1'"
            )
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in tokens]
    return text, tokens


def _atoi(token: str) -> int:
    if not _INDEX_RE.fullmatch(token):
        raise _InnerError(f"strconv.Atoi: parsing {json.dumps(token)}: invalid syntax")
    value = int(token)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _InnerError(f"strconv.Atoi: parsing {json.dumps(token)}: value out of range")
    return value


def _position(token: str, length: int) -> int:
    """The existing element `token` names in a list of `length`."""
    idx = _atoi(token)
    if idx < -length or idx >= length:
        raise _InnerError(f"Unable to access invalid index: {idx}: {_INVALID_INDEX}")
    return idx + length if idx < 0 else idx


def _insertion_point(token: str, length: int) -> int:
    """Where `token` inserts into a list of `length`; `-` appends."""
    if token == "-":
        return length
    try:
        idx = _atoi(token)
    except _InnerError as exc:
        raise _InnerError(f"value was not a proper array index: '{token}': {exc}") from None
    size = length + 1
    if idx < -size or idx >= size:
        raise _InnerError(f"Unable to access invalid index: {idx}: {_INVALID_INDEX}")
    return idx + size if idx < 0 else idx


def _walk(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            node = node.get(token, _MISSING)
        elif isinstance(node, list):
            try:
                node = node[_position(token, len(node))]
            except _InnerError:
                return _MISSING
        else:
            return _MISSING
        if node is _MISSING:
            return _MISSING
    return node


def _parent(doc: Any, tokens: list[str]) -> Any:
    """The object or list holding the last token, or _MISSING (v4's "doc is missing path")."""
    if not tokens:
        return _MISSING
    parent = _walk(doc, tokens[:-1])
    return parent if isinstance(parent, (dict, list)) else _MISSING


def _get(parent: dict[str, Any] | list[Any], key: str) -> Any:
    """v4's container get: a missing object key reads as null, a bad list index is an error."""
    if isinstance(parent, dict):
        return parent.get(key)
    return parent[_position(key, len(parent))]


def _insert(parent: dict[str, Any] | list[Any], key: str, value: Any) -> None:
    if isinstance(parent, dict):
        parent[key] = value
    else:
        parent.insert(_insertion_point(key, len(parent)), value)


def _delete(parent: dict[str, Any] | list[Any], key: str) -> Any:
    if isinstance(parent, dict):
        if key not in parent:
            raise _InnerError(f"Unable to remove nonexistent key: {key}: missing value")
        return parent.pop(key)
    return parent.pop(_position(key, len(parent)))


def _op_add(doc: Any, op: dict[str, Any]) -> Any:
    path, tokens = _pointer(op, "add", "path")
    value = _copy(op.get("value"))
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if parent is _MISSING:
        raise _missing(f'add operation does not apply: doc is missing path: "{path}"')
    try:
        _insert(parent, tokens[-1], value)
    except _InnerError as exc:
        raise PatchError(f"error in add for path: '{path}': {exc}") from None
    return doc


def _op_remove(doc: Any, op: dict[str, Any]) -> Any:
    path, tokens = _pointer(op, "remove", "path")
    parent = _parent(doc, tokens)
    if parent is _MISSING:
        raise _missing(f'remove operation does not apply: doc is missing path: "{path}"')
    try:
        _delete(parent, tokens[-1])
    except _InnerError as exc:
        raise PatchError(f"error in remove for path: '{path}': {exc}") from None
    return doc


def _op_replace(doc: Any, op: dict[str, Any]) -> Any:
    path, tokens = _pointer(op, "replace", "path")
    value = _copy(op.get("value"))
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if parent is _MISSING:
        raise _missing(f"replace operation does not apply: doc is missing path: {path}")
    key = tokens[-1]
    if isinstance(parent, dict):
        parent[key] = value
        return doc
    try:
        parent[_position(key, len(parent))] = value
    except _InnerError:
        raise _missing(f"replace operation does not apply: doc is missing key: {path}") from None
    return doc


def _op_move(doc: Any, op: dict[str, Any]) -> Any:
    src, src_tokens = _pointer(op, "move", "from")
    parent = _parent(doc, src_tokens)
    if parent is _MISSING:
        raise _missing(f"move operation does not apply: doc is missing from path: {src}")
    key = src_tokens[-1]
    try:
        value = _delete(parent, key)
    except _InnerError as exc:
        raise PatchError(f"error in move for path: '{key}': {exc}") from None
    path, tokens = _pointer(op, "move", "path")
    parent = _parent(doc, tokens)
    if parent is _MISSING:
        raise _missing(f"move operation does not apply: doc is missing destination path: {path}")
    try:
        _insert(parent, tokens[-1], value)
    except _InnerError as exc:
        raise PatchError(f"error in move for path: '{path}': {exc}") from None
    return doc


def _op_copy(doc: Any, op: dict[str, Any]) -> Any:
    src, src_tokens = _pointer(op, "copy", "from")
    parent = _parent(doc, src_tokens)
    if parent is _MISSING:
        raise _missing(f"copy operation does not apply: doc is missing from path: {src}")
    try:
        value = _copy(_get(parent, src_tokens[-1]))
    except _InnerError as exc:
        raise PatchError(f"error in copy for from: '{src}': {exc}") from None
    path, tokens = _pointer(op, "copy", "path")
    parent = _parent(doc, tokens)
    if parent is _MISSING:
        raise _missing(f"copy operation does not apply: doc is missing destination path: {path}")
    try:
        _insert(parent, tokens[-1], value)
    except _InnerError as exc:
        raise PatchError(f"error while adding value during copy: {exc}") from None
    return doc


def _op_test(doc: Any, op: dict[str, Any]) -> Any:
    path, tokens = _pointer(op, "test", "path")
    failed = PatchError(f"testing value {path} failed: test failed")
    if "value" not in op:
        raise failed
    expected = op["value"]
    if tokens:
        parent = _parent(doc, tokens)
        if parent is _MISSING:
            raise _missing(f"test operation does not apply: is missing path: {path}")
        try:
            actual = _get(parent, tokens[-1])
        except _InnerError as exc:
            raise PatchError(f"error in test for path: '{path}': {exc}") from None
    else:
        actual = doc
    if not json_equal(actual, expected):
        raise failed
    return doc


_OPERATIONS = {
    "add": _op_add,
    "remove": _op_remove,
    "replace": _op_replace,
    "move": _op_move,
    "copy": _op_copy,
    "test": _op_test,
}


def _copied_size(doc: Any, op: dict[str, Any]) -> int:
    """The encoded size of what a copy operation would copy (0 when it cannot apply: it fails by itself)."""
    try:
        _, tokens = _pointer(op, "copy", "from")
        parent = _parent(doc, tokens)
        if parent is _MISSING:
            return 0
        return len(orjson.dumps(_get(parent, tokens[-1])))
    except (PatchError, _InnerError, orjson.JSONEncodeError):
        return 0


def json_patch(target: Any, operations: Any, copy_limit: int = 0) -> Any:
    """Apply an RFC 6902 patch atomically: either every operation applies or PatchError is raised.

    A null patch is no operations, as upstream decodes it. Limits on the number of operations are
    the caller's business (upstream's apiserver allows 10,000). `copy_limit` bounds the bytes all copy
    operations together may add (evanphx/json-patch's AccumulatedCopySizeLimit): each copy can double
    the document, so without it a short patch grows it exponentially.
    """
    if operations is None:
        return _copy(target)
    if not isinstance(operations, list):
        raise PatchError(
            f"json: cannot unmarshal {_go_json_type(operations)} into Go value of type jsonpatch.Patch", 400
        )
    for op in operations:
        if op is not None and not isinstance(op, dict):
            raise PatchError(
                f"json: cannot unmarshal {_go_json_type(op)} into Go value of type jsonpatch.Operation", 400
            )
    doc = _copy(target)
    copied = 0
    for op in operations:
        kind = (op or {}).get("op")
        apply = _OPERATIONS.get(kind) if isinstance(kind, str) else None
        if apply is None:
            raise PatchError(f"Unexpected kind: {kind if isinstance(kind, str) else 'unknown'}")
        if apply is _op_copy and copy_limit:
            copied += _copied_size(doc, op)
            if copied > copy_limit:
                raise PatchError(f"Unable to complete the copy, the accumulated size increase of copy is {copied}, "
                                 f"exceeding the limit {copy_limit}")
        doc = apply(doc, op)
    return doc
