"""Type shapes for server-side apply, built from upstream's OpenAPI definitions.

Only what structured-merge-diff needs survives the conversion: which dicts are structs (declared fields),
which are maps, whether a map or list is atomic, and how list items are identified (set value or map keys).
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

import orjson

from services.api import definitions

# Upstream's Go types carry `+default` on some list-map key fields; the shipped JSON schema lost them, and
# without them a port listed without `protocol` would get a different key than the defaulted live item.
_KEY_DEFAULTS: dict[str, dict[str, Any]] = {
    "io.k8s.api.core.v1.ContainerPort": {"protocol": "TCP"},
    "io.k8s.api.core.v1.ServicePort": {"protocol": "TCP"},
}


class Type:
    """A node of the schema. `kind` is one of scalar, deduced, object, list."""

    __slots__ = ("kind", "fields", "elem", "atomic", "required", "list_type", "keys", "key_defaults")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.fields: dict[str, Type] = {}
        self.elem: Type | None = None
        self.atomic = False
        self.required: frozenset[str] = frozenset()
        self.list_type = "atomic"
        self.keys: tuple[str, ...] = ()
        self.key_defaults: dict[str, Any] = {}

    def field(self, name: str) -> Type:
        """The type of one key of an object: a declared field, the map's value type, or deduced."""
        found = self.fields.get(name)
        if found is not None:
            return found
        return self.elem or DEDUCED

    def __repr__(self) -> str:
        return f"Type({self.kind}, atomic={self.atomic}, list_type={self.list_type}, keys={self.keys})"


_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
SCALAR = Type("scalar")
DEDUCED = Type("deduced")
# What a value of deduced type becomes: maps stay granular (every key its own field), lists atomic.
DEDUCED_MAP = Type("object")
DEDUCED_MAP.elem = DEDUCED
ATOMIC_LIST = Type("list")
ATOMIC_LIST.elem = DEDUCED
ATOMIC_LIST.atomic = True


def resolve(t: Type, value: Any) -> Type:
    """The concrete type of a value: deduced types follow the value's own shape."""
    if t.kind != "deduced":
        return t
    if isinstance(value, dict):
        return DEDUCED_MAP
    if isinstance(value, list):
        return ATOMIC_LIST
    return SCALAR


class _Converter:
    """Turns OpenAPI/JSON-schema documents into `Type` trees, sharing named definitions."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self.named: dict[str, Type] = {}

    def ref(self, ref: str) -> Type:
        name = ref.rsplit("/", 1)[-1]
        found = self.named.get(name)
        if found is not None:
            return found
        schema = self.defs.get(name)
        if schema is None:
            return DEDUCED
        if schema.get("properties"):
            # Register before descending: definitions are recursive (JSONSchemaProps).
            t = Type("object")
            self.named[name] = t
            self._fill_struct(t, schema, _KEY_DEFAULTS.get(name))
            return t
        t = self.convert(schema)
        self.named[name] = t
        return t

    def _fill_struct(self, t: Type, schema: dict[str, Any], defaults: dict[str, Any] | None = None) -> None:
        t.fields = {name: self.convert(prop) for name, prop in schema["properties"].items()}
        t.required = frozenset(schema.get("required") or ())
        t.atomic = schema.get("x-kubernetes-map-type") == "atomic"
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            t.elem = self.convert(extra)
        elif schema.get("x-kubernetes-preserve-unknown-fields") or extra is True:
            t.elem = DEDUCED
        if schema.get("x-kubernetes-embedded-resource"):
            t.fields = {**t.fields, "apiVersion": SCALAR, "kind": SCALAR, "metadata": self.ref(_OBJECT_META)}
        if defaults:
            t.key_defaults = defaults

    def convert(self, schema: dict[str, Any]) -> Type:
        if "$ref" in schema:
            t = self.ref(schema["$ref"])
            return _with_map_type(t, schema.get("x-kubernetes-map-type"))
        for combined in ("allOf", "anyOf"):
            if len(schema.get(combined) or ()) == 1 and "$ref" in schema[combined][0]:
                rest = {k: v for k, v in schema.items() if k != combined}
                return self.convert({**schema[combined][0], **rest})
        if schema.get("x-kubernetes-int-or-string") or "oneOf" in schema:
            return SCALAR
        kinds = schema.get("type")
        kinds = {kinds} if isinstance(kinds, str) else set(kinds or ())
        if "array" in kinds:
            return self._list(schema)
        if "object" in kinds or "properties" in schema or "additionalProperties" in schema:
            if schema.get("properties"):
                t = Type("object")
                self._fill_struct(t, schema)
                return t
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                t = Type("object")
                t.elem = self.convert(extra)
                t.atomic = schema.get("x-kubernetes-map-type") == "atomic"
                return t
            return DEDUCED
        if kinds:
            return SCALAR
        return DEDUCED

    def _list(self, schema: dict[str, Any]) -> Type:
        t = Type("list")
        items = schema.get("items")
        t.elem = self.convert(items) if isinstance(items, dict) else DEDUCED
        list_type = schema.get("x-kubernetes-list-type")
        keys = schema.get("x-kubernetes-list-map-keys")
        merge_key = schema.get("x-kubernetes-patch-merge-key")
        if list_type is None and merge_key:
            list_type, keys = "map", [merge_key]
        if list_type == "map" and keys:
            t.list_type = "map"
            t.keys = tuple(sorted(keys))
            if t.elem.kind == "object":
                t.key_defaults = {k: v for k, v in t.elem.key_defaults.items() if k in t.keys}
        elif list_type == "set":
            t.list_type = "set"
        t.atomic = t.list_type == "atomic"
        return t


def _with_map_type(t: Type, map_type: str | None) -> Type:
    if map_type is None or t.kind != "object" or t.atomic == (map_type == "atomic"):
        return t
    copy = Type("object")
    copy.fields, copy.elem, copy.required, copy.key_defaults = t.fields, t.elem, t.required, t.key_defaults
    copy.atomic = map_type == "atomic"
    return copy


@cache
def _builtin() -> tuple[_Converter, dict[tuple[str, str], str]]:
    """Upstream's definitions as structured-merge types, built once per process."""
    return _Converter(definitions.definitions()), definitions.by_kind()


_lock = threading.RLock()
_roots: dict[tuple[str, str], Type] = {}


def object_type(api_version: str, kind: str, schema: dict[str, Any] | None = None) -> Type:
    """The root type of a kind: upstream's definition, the given structural schema, or deduced."""
    if schema is not None:
        return _custom_root(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
    key = (api_version, kind)
    found = _roots.get(key)
    if found is not None:
        return found
    with _lock:
        converter, by_kind = _builtin()
        name = by_kind.get(key)
        root = converter.ref(name) if name else _custom_root(b"{}")
        _roots[key] = root
        return root


@cache
def _custom_root(encoded: bytes) -> Type:
    """A custom resource's root: its structural schema, with upstream's ObjectMeta for `metadata`."""
    schema = orjson.loads(encoded)
    converter, _ = _builtin()
    with _lock:
        meta = converter.ref(_OBJECT_META)
    root = Type("object")
    if schema.get("properties"):
        _Converter(converter.defs)._fill_struct(root, schema)
    else:
        root.elem = DEDUCED
    root.fields = {
        **root.fields,
        "apiVersion": SCALAR,
        "kind": SCALAR,
        "metadata": meta,
    }
    return root


def has_status(root: Type) -> bool:
    """Whether the kind declares a `status` next to its content, so writes split between spec and status."""
    return "status" in root.fields
