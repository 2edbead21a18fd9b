"""Structural schemas of custom resources: pruning, defaulting and validation, as upstream's
apiextensions-apiserver applies an openAPIV3Schema to every custom object."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any

from apiserver.registry import crcel
from services.api import errors

Cause = dict[str, str]
_SKIP_ROOT = ("apiVersion", "kind", "metadata")
_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
}


def value_at(obj: Any, path: str) -> Any:
    """The value at a simple JSON path like `.spec.replicas` (None when absent)."""
    cur = obj
    for part in [p for p in path.split(".") if p]:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def set_at(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = [p for p in path.split(".") if p]
    cur = obj
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = cur[part] = {}
        cur = nxt
    cur[parts[-1]] = value


def validate_schema(schema: Any, path: str) -> list[Cause]:
    """Structural-schema checks upstream makes when a CRD is written (the ones users hit)."""
    if not isinstance(schema, dict):
        return [errors.cause(path, "Invalid value: must be an object")]
    causes: list[Cause] = []
    if schema.get("type") != "object":
        causes.append(errors.cause(f"{path}.type", 'Unsupported value: "{}": supported values: "object"'.format(
            schema.get("type", "")), "FieldValueNotSupported"))
    _check_node(schema, path, causes)
    causes += crcel.compile_errors(schema, path)
    return causes


def _check_node(node: dict[str, Any], path: str, causes: list[Cause]) -> None:
    t = node.get("type")
    if t is not None and t not in ("object", "array", "string", "integer", "number", "boolean"):
        causes.append(errors.cause(f"{path}.type", f'Unsupported value: "{t}"', "FieldValueNotSupported"))
    if t is None and not node.get("x-kubernetes-int-or-string") and not node.get(
            "x-kubernetes-preserve-unknown-fields") and path.count(".") > 3:
        causes.append(errors.cause(f"{path}.type", "Required value: must not be empty for specified object fields",
                                   "FieldValueRequired"))
    pattern = node.get("pattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            causes.append(errors.cause(f"{path}.pattern", f'Invalid value: "{pattern}": must be a valid regular '
                                       f"expression, but isn't: {exc}"))
    for key, sub in (node.get("properties") or {}).items():
        if isinstance(sub, dict):
            _check_node(sub, f"{path}.properties[{key}]", causes)
    if isinstance(node.get("items"), dict):
        _check_node(node["items"], f"{path}.items", causes)
    if isinstance(node.get("additionalProperties"), dict):
        _check_node(node["additionalProperties"], f"{path}.additionalProperties", causes)


MetaPruner = Callable[[Any, str], list[str]]


def prune(schema: dict[str, Any], obj: dict[str, Any], prune_meta: MetaPruner | None = None) -> list[str]:
    """Drop fields the schema does not declare (unless it preserves unknown fields there);
    returns their paths, which strict field validation reports. `prune_meta` does the same for the
    ObjectMeta of the root and of embedded resources, whose fields no schema declares."""
    pruned: list[str] = []
    if prune_meta is not None and isinstance(obj.get("metadata"), dict):
        pruned += prune_meta(obj["metadata"], "metadata")
    props = schema.get("properties") or {}
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    for key in list(obj):
        if key in _SKIP_ROOT:
            continue
        if key in props:
            _prune(props[key], obj[key], key, pruned, prune_meta)
        elif not preserve:
            del obj[key]
            pruned.append(key)
    return pruned


def _prune(node: Any, value: Any, path: str, pruned: list[str], prune_meta: MetaPruner | None) -> None:
    if not isinstance(node, dict):
        return
    if isinstance(value, dict):
        props = node.get("properties") or {}
        additional = node.get("additionalProperties")
        preserve = bool(node.get("x-kubernetes-preserve-unknown-fields"))
        embedded = bool(node.get("x-kubernetes-embedded-resource"))
        for key in list(value):
            sub = props.get(key)
            if sub is None and isinstance(additional, dict):
                sub = additional
            if embedded and key in _SKIP_ROOT:
                if key == "metadata" and prune_meta is not None and isinstance(value[key], dict):
                    pruned += prune_meta(value[key], f"{path}.{key}")
            elif sub is not None:
                _prune(sub, value[key], f"{path}.{key}", pruned, prune_meta)
            elif not preserve and additional is not True:
                del value[key]
                pruned.append(f"{path}.{key}")
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(value):
            _prune(node["items"], item, f"{path}[{i}]", pruned, prune_meta)


def apply_defaults(schema: dict[str, Any], obj: dict[str, Any]) -> None:
    """Fill `default` values of absent fields, from the root down.

    A null where the schema is not `nullable` is read as upstream reads it: the default when there
    is one, else the field is dropped (a null list item stays, for validation to refuse).
    """
    _default(schema, obj, root=True)


def _non_nullable_null(value: Any, node: Any) -> bool:
    return value is None and isinstance(node, dict) and not node.get("nullable")


def has_defaults(schema: dict[str, Any]) -> bool:
    """Whether any node of the schema declares a `default`."""
    if "default" in schema:
        return True
    subs = list((schema.get("properties") or {}).values())
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            subs.append(schema[key])
    return any(isinstance(sub, dict) and has_defaults(sub) for sub in subs)


def _default(node: Any, value: Any, root: bool = False) -> None:
    if not isinstance(node, dict):
        return
    if isinstance(value, dict):
        props = node.get("properties") or {}
        for key, sub in props.items():
            if root and key in _SKIP_ROOT:
                continue
            if not isinstance(sub, dict):
                continue
            if key in value and _non_nullable_null(value[key], sub):
                del value[key]
            if key not in value and "default" in sub:
                value[key] = _copy(sub["default"])
            if key in value:
                _default(sub, value[key])
        additional = node.get("additionalProperties")
        if isinstance(additional, dict):
            for key in [k for k in value if k not in props]:
                if _non_nullable_null(value[key], additional):
                    if "default" not in additional:
                        del value[key]
                        continue
                    value[key] = _copy(additional["default"])
                _default(additional, value[key])
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        items = node["items"]
        for index, item in enumerate(value):
            if _non_nullable_null(item, items) and "default" in items:
                value[index] = item = _copy(items["default"])
            _default(items, item)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def validate(schema: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[Cause]:
    """Causes for every value the schema rejects, with upstream's field paths and messages; then the
    CEL rules, which see `oldSelf` when `old` (the stored object of an update) is given. As upstream,
    rules are skipped when the object already breaks a type, size, enum or required constraint."""
    causes = _validate_structure(schema, obj)
    if crcel.has_rules(schema):
        if any(c.get("reason") in crcel.BLOCKING for c in causes):
            causes.append(errors.cause("<nil>", 'Invalid value: "null": some validation rules were not checked '
                                       "because the object was invalid; correct the existing errors to complete "
                                       "validation"))
        else:
            causes += crcel.validate(schema, obj, old)
    return causes


def _validate_structure(schema: dict[str, Any], obj: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    props = schema.get("properties") or {}
    for key in schema.get("required") or []:
        if key not in obj and key not in _SKIP_ROOT:
            causes.append(errors.cause(key, "Required value", "FieldValueRequired"))
    for key, sub in props.items():
        if key in _SKIP_ROOT or key not in obj:
            continue
        _validate(sub, obj[key], key, causes)
    return causes


def _type_ok(t: str, value: Any) -> bool:
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, float) and value.is_integer())
    if t == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    expected = _TYPES.get(t)
    return expected is None or isinstance(value, expected)


def _json_type(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return "integer"
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value), "number")


def _json(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None


def _validate(node: Any, value: Any, path: str, causes: list[Cause]) -> None:
    if not isinstance(node, dict):
        return
    if value is None:
        if not node.get("nullable"):
            t = node.get("type") or "object"
            causes.append(errors.cause(path, f'Invalid value: "null": {path} in body must be of type {t}: "null"',
                                       "FieldValueTypeInvalid"))
        return
    t = node.get("type")
    if node.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))):
            actual = _json_type(value)
            causes.append(errors.cause(path, f'Invalid value: "{actual}": {path} in body must be of type '
                                       f'integer,string: "{actual}"', "FieldValueTypeInvalid"))
            return
    elif t and not _type_ok(t, value):
        actual = _json_type(value)
        causes.append(errors.cause(path, f'Invalid value: "{actual}": {path} in body must be of type {t}: '
                                   f'"{actual}"', "FieldValueTypeInvalid"))
        return
    enum = node.get("enum")
    if enum is not None and value not in enum:
        allowed = ", ".join(_json(e) for e in enum)
        causes.append(errors.cause(path, f"Unsupported value: {_json(value)}: supported values: {allowed}",
                                   "FieldValueNotSupported"))
    if isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(node, value, path, causes)
    elif isinstance(value, str):
        _validate_string(node, value, path, causes)
    elif isinstance(value, list):
        _validate_array(node, value, path, causes)
    elif isinstance(value, dict):
        _validate_object(node, value, path, causes)


def _validate_number(node: dict[str, Any], value: float, path: str, causes: list[Cause]) -> None:
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and (value < low or (node.get("exclusiveMinimum") and value == low)):
        op = "greater than" if node.get("exclusiveMinimum") else "greater than or equal to"
        causes.append(errors.cause(path, f"Invalid value: {_json(value)}: {path} in body should be {op} {low}"))
    if high is not None and (value > high or (node.get("exclusiveMaximum") and value == high)):
        op = "less than" if node.get("exclusiveMaximum") else "less than or equal to"
        causes.append(errors.cause(path, f"Invalid value: {_json(value)}: {path} in body should be {op} {high}"))
    multiple = node.get("multipleOf")
    if multiple and value % multiple:
        causes.append(errors.cause(path, f"Invalid value: {_json(value)}: {path} in body should be a multiple of "
                                   f"{multiple}"))


def _validate_string(node: dict[str, Any], value: str, path: str, causes: list[Cause]) -> None:
    if node.get("maxLength") is not None and len(value) > node["maxLength"]:
        causes.append(errors.cause(path, f"Too long: may not be more than {node['maxLength']} bytes",
                                   "FieldValueTooLong"))
    if node.get("minLength") is not None and len(value) < node["minLength"]:
        causes.append(errors.cause(path, f'Invalid value: "{value}": {path} in body should be at least '
                                   f"{node['minLength']} chars long"))
    pattern = node.get("pattern")
    if pattern is not None:
        rx = _regex(pattern)
        if rx is not None and not rx.search(value):
            causes.append(errors.cause(path, f'Invalid value: "{value}": {path} in body should match '
                                       f"'{pattern}'"))
    fmt = node.get("format")
    if fmt and not _format_ok(fmt, value):
        causes.append(errors.cause(path, f'Invalid value: "{value}": {path} in body must be of type {fmt}: '
                                   f'"{value}"'))


_FORMATS = {
    "uuid": re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"),
    "ipv4": re.compile(r"^((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)$"),
    "hostname": re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
    "email": re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$"),
    "byte": re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"),
}


def _format_ok(fmt: str, value: str) -> bool:
    if fmt in ("date-time", "datetime"):
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
            return True
        except ValueError:
            return False
    if fmt == "date":
        try:
            datetime.strptime(value, "%Y-%m-%d")
            return True
        except ValueError:
            return False
    rx = _FORMATS.get(fmt)
    return rx is None or bool(rx.match(value))


def _validate_array(node: dict[str, Any], value: list[Any], path: str, causes: list[Cause]) -> None:
    if node.get("maxItems") is not None and len(value) > node["maxItems"]:
        causes.append(errors.cause(path, f"Too many: {len(value)}: must have at most {node['maxItems']} items",
                                   "FieldValueTooMany"))
    if node.get("minItems") is not None and len(value) < node["minItems"]:
        causes.append(errors.cause(path, f"Invalid value: {len(value)}: {path} in body should have at least "
                                   f"{node['minItems']} items"))
    items = node.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(items, item, f"{path}[{i}]", causes)
    list_type = node.get("x-kubernetes-list-type")
    if list_type == "set" or node.get("uniqueItems"):
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                causes.append(errors.cause(f"{path}[{i}]", f"Duplicate value: {_go_value(item)}",
                                           "FieldValueDuplicate"))
            seen.append(item)
    elif list_type == "map":
        keys = [k for k in node.get("x-kubernetes-list-map-keys") or [] if isinstance(k, str)]
        seen_keys: list[dict[str, Any]] = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = {k: item[k] for k in keys if k in item}
            if key in seen_keys:
                causes.append(errors.cause(f"{path}[{i}]", f"Duplicate value: {_go_value(key)}",
                                           "FieldValueDuplicate"))
            seen_keys.append(key)


def _go_value(value: Any) -> str:
    """A value as Go's %#v prints it in upstream's field errors (maps as map[string]interface {}{...})."""
    if isinstance(value, dict):
        inner = ", ".join(f'"{k}":{_go_value(v)}' for k, v in sorted(value.items()))
        return f"map[string]interface {{}}{{{inner}}}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go_value(v) for v in value) + "}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return _json(value)


def _validate_object(node: dict[str, Any], value: dict[str, Any], path: str, causes: list[Cause]) -> None:
    for key in node.get("required") or []:
        if key not in value:
            causes.append(errors.cause(f"{path}.{key}", "Required value", "FieldValueRequired"))
    props = node.get("properties") or {}
    additional = node.get("additionalProperties")
    for key, item in value.items():
        sub = props.get(key)
        if sub is None and isinstance(additional, dict):
            sub = additional
        if sub is not None:
            _validate(sub, item, f"{path}.{key}", causes)
    if node.get("maxProperties") is not None and len(value) > node["maxProperties"]:
        causes.append(errors.cause(path, f"Too many: {len(value)}: must have at most {node['maxProperties']} items",
                                   "FieldValueTooMany"))
    if node.get("minProperties") is not None and len(value) < node["minProperties"]:
        causes.append(errors.cause(path, f"Invalid value: {len(value)}: {path} in body should have at least "
                                   f"{node['minProperties']} properties"))
