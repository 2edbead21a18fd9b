"""Server-side field validation (`fieldValidation=Strict|Warn|Ignore`) for built-in kinds.

Upstream decodes a built-in object into its Go struct, which silently drops every field the
struct does not declare; in Strict and Warn modes its decoder also reports those fields, and
keys given twice in one object, with the path where it met them (`spec.containers[0].bar`,
`metadata.labels.app`). Here the same knowledge comes from upstream's OpenAPI definitions
(shipped by `kubernetes-validate`), compiled lazily, once per kind, into a small tree of the
properties each object may carry, so pruning a request body never follows a `$ref`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import yaml

from services.api import definitions, errors
from services.api.errors import StatusError

_REF = "#/$defs/"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_MAX_STRICT_ERRORS = 100  # upstream's decoder stops collecting after this many
_WARNING_TOTAL_RUNES = 4 * 1024  # upstream's warning recorder starts truncating past this
_WARNING_ITEM_RUNES = 256
_YAML_ERRORS_PREFIX = "yaml: unmarshal errors:\n  "
_DIRECTIVES = ("", "Ignore", "Strict", "Warn")

# Types whose Go decoders take any JSON without reporting what they do not understand.
_OPAQUE = frozenset({
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
})


class _Struct:
    """An object with declared properties.

    `fields` maps every property to its node (None: nothing inside can be unknown or repeated);
    `deep` holds only the nodes below which something can be pruned, so the hot path skips
    maps of strings and scalar lists.
    """

    __slots__ = ("fields", "deep")

    def __init__(self) -> None:
        self.fields: dict[str, _Node] = {}
        self.deep: dict[str, _Node] = {}


class _Map:
    __slots__ = ("value",)

    def __init__(self, value: _Node) -> None:
        self.value = value


class _List:
    __slots__ = ("item",)

    def __init__(self, item: _Node) -> None:
        self.item = item


class _Free:
    """An object of unknown shape (a custom resource): every key is allowed, repeats still count."""


_Node = _Struct | _Map | _List | _Free | None
_FREE = _Free()
_UNKNOWN = object()


class _Pairs(list):  # type: ignore[type-arg]
    """A JSON object as its key/value pairs in document order, repeats kept."""


class FieldPath(str):
    """A field path that remembers its components, so YAML findings can be ordered like upstream's."""

    parts: tuple[str | int, ...]


class DuplicateFields(list[str]):
    """Repeated keys of a request body, plus what the formatters need to order findings as upstream.

    `yaml`: the body was YAML, whose repeats upstream reports as parser lines, before the unknown
    fields, which then come in sorted key order (upstream re-encodes YAML as JSON first).
    `ordered`: every strict finding of a JSON body in document order, when the body named a
    built-in kind and had repeats; without repeats the unknown fields are already in order.
    """

    yaml: bool = False
    ordered: list[str] | None = None


# ---------------------------------------------------------------------------------------------
# Definitions


def _definitions() -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    return definitions.definitions(), definitions.by_kind()


_compiled: dict[str, _Node] = {}
_roots: dict[tuple[str, str], _Node] = {}
_lock = threading.Lock()


def _needs_pruning(node: _Node) -> bool:
    if isinstance(node, _Map):
        return _needs_pruning(node.value)
    if isinstance(node, _List):
        return _needs_pruning(node.item)
    return isinstance(node, _Struct)


def _compile_ref(name: str, defs: dict[str, Any]) -> _Node:
    if name in _compiled:
        return _compiled[name]
    schema = defs.get(name)
    if schema is None or name in _OPAQUE:
        _compiled[name] = None
        return None
    is_object = (schema.get("type") or [None])[0] == "object"
    if "properties" in schema or (is_object and "additionalProperties" not in schema):
        node = _Struct()
        _compiled[name] = node  # registered before its properties: definitions refer to themselves
        _fill(node, schema, defs)
        return node
    compiled = _compile(schema, defs)
    _compiled[name] = compiled
    return compiled


def _fill(node: _Struct, schema: dict[str, Any], defs: dict[str, Any]) -> None:
    for prop, sub in schema.get("properties", {}).items():
        child = _compile(sub, defs)
        node.fields[prop] = child
        node.deep[prop] = child if _needs_pruning(child) else None


def _compile(schema: dict[str, Any], defs: dict[str, Any]) -> _Node:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return None
    ref = schema.get("$ref")
    if ref:
        return _compile_ref(ref.removeprefix(_REF), defs)
    if "properties" in schema:
        node = _Struct()
        _fill(node, schema, defs)
        return node
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        return _Map(_compile(extra, defs))
    items = schema.get("items")
    if isinstance(items, dict):
        item = _compile(items, defs)
        return _List(item) if item is not None else None
    return None


def _root(api_version: str, kind: str) -> _Node:
    """The compiled tree of a built-in kind, or None for kinds upstream has no definition of."""
    key = (api_version, kind)
    try:
        return _roots[key]
    except KeyError:
        pass
    defs, by_kind = _definitions()
    name = by_kind.get(key)
    if name is None:
        return None  # not cached: bodies may name any kind
    with _lock:
        node = _roots[key] = _compile_ref(name, defs)
    return node


def known_kinds() -> set[tuple[str, str]]:
    """(apiVersion, kind) of every built-in type whose unknown fields are pruned and reported."""
    return set(_definitions()[1])


# ---------------------------------------------------------------------------------------------
# Unknown fields


def _path(stack: list[str], key: str) -> FieldPath:
    path = FieldPath("".join(stack) + "." + key if stack else key)
    path.parts = (*(_part(token) for token in stack), key)
    return path


def _part(token: str) -> str | int:
    if token[0] == "[":
        return int(token[1:-1])
    return token[1:] if token[0] == "." else token


def _key_text(key: Any) -> str:
    """How a (YAML) key reads once upstream has turned the body into JSON."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    return "null" if key is None else str(key)


def _prune(node: _Node, value: Any, stack: list[str], found: list[str]) -> None:
    if isinstance(node, _Struct):
        if not isinstance(value, dict):
            return
        deep = node.deep
        drop = None
        for key, item in value.items():
            child = deep.get(key, _UNKNOWN)
            if child is None:
                continue
            if child is _UNKNOWN:
                if drop is None:
                    drop = []
                drop.append(key)
                found.append(_path(stack, _key_text(key)))
                continue
            stack.append("." + key if stack else key)
            _prune(child, item, stack, found)
            stack.pop()
        if drop:
            for key in drop:
                del value[key]
    elif isinstance(node, _List):
        if isinstance(value, list):
            for i, item in enumerate(value):
                stack.append(f"[{i}]")
                _prune(node.item, item, stack, found)
                stack.pop()
    elif isinstance(node, _Map) and isinstance(value, dict):
        for key, item in value.items():
            stack.append("." + _key_text(key) if stack else _key_text(key))
            _prune(node.value, item, stack, found)
            stack.pop()


def prune_unknown_fields(api_version: str, kind: str, obj: dict[str, Any]) -> list[str]:
    """Drop, in place, what the Go struct of a built-in kind would drop; return where, in order."""
    node = _root(api_version, kind)
    if node is None:
        return []
    found: list[str] = []
    _prune(node, obj, [], found)
    return found


def prune_object_meta(meta: Any, path: str) -> list[str]:
    """Drop, in place, what upstream's ObjectMeta would not decode from a custom object's `metadata`
    found at `path` (the root's or an embedded resource's); return where."""
    defs, _ = _definitions()
    with _lock:
        node = _compile_ref(_OBJECT_META, defs)
    found: list[str] = []
    _prune(node, meta, [path], found)
    return found


# ---------------------------------------------------------------------------------------------
# Duplicate fields


class _Findings:
    """Strict findings as upstream's decoder collects them: deduplicated, at most 100."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.duplicates: list[str] = []
        self.unknown = 0
        self._seen: set[tuple[bool, str]] = set()

    def add(self, duplicate: bool, stack: list[str], key: str) -> None:
        path = "".join(stack) + "." + key if stack else key
        if (duplicate, path) in self._seen or len(self.messages) >= _MAX_STRICT_ERRORS:
            return
        self._seen.add((duplicate, path))
        if duplicate:
            self.duplicates.append(path)
            self.messages.append("duplicate field " + go_quote(path))
        else:
            self.unknown += 1
            self.messages.append("unknown field " + go_quote(path))


def _walk_pairs(node: _Node, value: Any, stack: list[str], out: _Findings) -> None:
    """Upstream's strict JSON decode: repeats and unknown keys, none inside unknown or opaque parts."""
    if type(value) is _Pairs:
        if isinstance(node, _Struct):
            fields = node.fields
            seen: set[str] = set()
            for key, item in value:
                child = fields.get(key, _UNKNOWN)
                if child is _UNKNOWN:
                    out.add(False, stack, key)
                    continue
                if key in seen:
                    out.add(True, stack, key)
                seen.add(key)
                if child is not None:
                    stack.append("." + key if stack else key)
                    _walk_pairs(child, item, stack, out)
                    stack.pop()
        elif isinstance(node, (_Map, _Free)):
            inner = node.value if isinstance(node, _Map) else node
            seen = set()
            for key, item in value:
                if key in seen:
                    out.add(True, stack, key)
                seen.add(key)
                if inner is not None:
                    stack.append("." + key if stack else key)
                    _walk_pairs(inner, item, stack, out)
                    stack.pop()
    elif type(value) is list:
        inner = node.item if isinstance(node, _List) else node if isinstance(node, _Free) else None
        if inner is not None:
            for i, item in enumerate(value):
                stack.append(f"[{i}]")
                _walk_pairs(inner, item, stack, out)
                stack.pop()


def _any_repeat(raw: bytes) -> bool:
    repeated = False

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        obj = dict(pairs)
        if len(obj) != len(pairs):
            repeated = True
        return obj

    json.loads(raw, object_pairs_hook=hook)
    return repeated


def _reencodes_identically(raw: bytes) -> bool:
    """Re-encoding a body with a repeated key yields fewer bytes, so a compact body that comes back
    identical (what orjson-based clients send) has none, without the slow scan."""
    try:
        return orjson.dumps(orjson.loads(raw)) == raw
    except (ValueError, TypeError):
        return False


def _json_duplicates(raw: bytes, api_version: str, kind: str) -> DuplicateFields:
    result = DuplicateFields()
    try:
        if _reencodes_identically(raw) or not _any_repeat(raw):
            return result
        doc = json.loads(raw, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError):
        return result  # the body decoder reports malformed bodies
    if type(doc) is _Pairs and not kind:
        top = {k: v for k, v in doc if isinstance(v, str)}
        api_version, kind = top.get("apiVersion", ""), top.get("kind", "")
    node = _root(api_version, kind) if kind else None
    findings = _Findings()
    _walk_pairs(node if node is not None else _FREE, doc, [], findings)
    result.extend(findings.duplicates)
    if node is not None:
        result.ordered = findings.messages
    return result


def _go_value(value: Any) -> str:
    """A YAML map key the way Go's `%#v` prints it in goyaml's complaint."""
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _yaml_duplicates(raw: bytes) -> DuplicateFields:
    """goyaml's strict complaints: one per repeated key, at the line of its value, innermost first."""
    result = DuplicateFields()
    result.yaml = True
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(raw, Loader=loader_cls)
    except yaml.YAMLError:
        return result
    constructor = yaml.SafeLoader("")
    active: set[int] = set()

    def walk(node: yaml.Node) -> None:
        if id(node) in active:
            return
        active.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: set[tuple[type, Any]] = set()
            for key_node, value_node in node.value:
                walk(value_node)
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = constructor.construct_object(key_node, deep=True)
                typed = (type(key), key)  # Go tells true from 1, unlike Python
                if typed in seen:
                    result.append(f"line {value_node.start_mark.line + 1}: key {_go_value(key)} already set in map")
                seen.add(typed)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)
        active.discard(id(node))

    if root is not None:
        try:
            walk(root)
        except (yaml.YAMLError, RecursionError, TypeError):
            return result
    return result


def duplicate_fields(raw: bytes, yaml_input: bool, api_version: str = "", kind: str = "") -> DuplicateFields:
    """Keys given twice in one object of a request body, as upstream's strict decoder reports them.

    JSON: field paths (`metadata.name`); for built-in kinds (`api_version`/`kind`, else the
    body's own) none inside unknown fields or opaque types, and unknown keys never count as
    repeats, as upstream. YAML: goyaml's `line N: key "x" already set in map` lines.
    """
    if yaml_input:
        return _yaml_duplicates(raw)
    return _json_duplicates(raw, api_version, kind)


# ---------------------------------------------------------------------------------------------
# Reporting


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's strconv.Quote, which upstream's `%q` uses for field paths."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\ufffd")  # Go decodes a lone surrogate escape as the replacement character
        elif ch.isprintable():
            out.append(ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _sort_key(path: str) -> tuple[tuple[int, str | int], ...]:
    """Go's JSON encoding sorts map keys bytewise; list items keep their index order."""
    parts = getattr(path, "parts", None)
    if parts is None:
        parts = tuple(
            int(p[1:-1]) if p[:1] == "[" and p[1:-1].isdigit() else p for p in path.replace("[", ".[").split(".")
        )
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in parts)


def _strict_errors(paths_unknown: Iterable[str], paths_dup: list[str]) -> list[str]:
    """Upstream's strict decoding errors in its order; a YAML body's repeats are one error."""
    if getattr(paths_dup, "yaml", False):
        found = [_YAML_ERRORS_PREFIX + "\n  ".join(paths_dup)] if paths_dup else []
        ordered = sorted(paths_unknown, key=_sort_key)[:_MAX_STRICT_ERRORS]
        return found + ["unknown field " + go_quote(p) for p in ordered]
    ordered_all = getattr(paths_dup, "ordered", None)
    if ordered_all is not None:
        return list(ordered_all)
    findings = _Findings()
    for path in paths_unknown:
        findings.add(False, [], path)
    for path in paths_dup:
        findings.add(True, [], path)
    return findings.messages


def field_validation_error(
    paths_unknown: list[str], paths_dup: list[str], *, kind: str = "", api_version: str = ""
) -> StatusError:
    """The 400 of `fieldValidation=Strict`.

    With `kind` and `api_version` (the body's, defaulted from the endpoint), the message carries
    upstream's `Pod in version "v1" cannot be handled as a Pod: ` prefix.
    """
    message = "strict decoding error: " + ", ".join(_strict_errors(paths_unknown, paths_dup))
    if kind:
        version = api_version.rsplit("/", 1)[-1]
        message = f'{kind} in version "{version}" cannot be handled as a {kind}: {message}'
    return errors.bad_request(message)


def _warning_header(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    # Starlette writes header values as latin-1; carry the UTF-8 bytes Go would send.
    return ('299 - "' + escaped + '"').encode("utf-8").decode("latin-1")


def warnings(paths_unknown: list[str], paths_dup: list[str]) -> list[str]:
    """`Warning` header values of `fieldValidation=Warn`, one per finding, capped like upstream's."""
    texts: list[str] = []
    for error in _strict_errors(paths_unknown, paths_dup):
        if error.startswith(_YAML_ERRORS_PREFIX):
            texts.extend(line.strip() for line in error[len(_YAML_ERRORS_PREFIX):].split("\n"))
        else:
            texts.append(error)
    return _record(texts, _warning_header)


def warning_headers(texts: list[str]) -> list[str]:
    """`Warning` header values for a request's own warnings, recorded like upstream's."""
    return _record(texts, _warning_header)


def _record(texts: list[str], header: Callable[[str], str]) -> list[str]:
    """Upstream's warning recorder: dedupe, and past 4096 runes cut every warning to 256."""
    recorded: set[str] = set()
    ordered: list[str] = []
    headers: list[str] = []
    written = 0
    truncating = False
    for text in texts:
        if not text or text in recorded:
            continue
        if truncating and written >= _WARNING_TOTAL_RUNES:
            break
        recorded.add(text)
        ordered.append(text)
        if truncating:
            text = text[:_WARNING_ITEM_RUNES]
        if written + len(text) <= _WARNING_TOTAL_RUNES or truncating:
            written += len(text)
            headers.append(header(text))
            continue
        truncating = True
        headers = [header(t[:_WARNING_ITEM_RUNES]) for t in ordered]
        written = sum(len(t[:_WARNING_ITEM_RUNES]) for t in ordered)
    return headers


def directive(value: str | None, options_kind: str = "CreateOptions") -> str:
    """The effective `fieldValidation` (Warn when absent); upstream's 422 for anything else."""
    value = value or ""
    if value not in _DIRECTIVES:
        supported = ", ".join(f'"{d}"' for d in _DIRECTIVES)
        raise errors.invalid(options_kind, "meta.k8s.io", "", [errors.cause(
            "fieldValidation",
            f"Unsupported value: {go_quote(value)}: supported values: {supported}",
            "FieldValueNotSupported",
        )])
    return value or "Warn"


class PatchValidation:
    """`fieldValidation` of a JSON, merge or strategic-merge patch, as upstream's patcher does it: the
    keys the patch body repeats, then what decoding the patched object drops (`prune`, run in every
    mode, so nothing unknown is stored). Strict answers upstream's 422 on the field `patch`; Warn
    leaves `warnings` for the response. Called with each patched object (the store may retry)."""

    def __init__(self, mode: str, raw: bytes, patch_type: str, prune: Callable[[dict[str, Any]], list[str]],
                 check: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.mode = mode
        self.prune = prune
        self.check = check
        self.duplicates = DuplicateFields()
        if mode != "Ignore" and patch_type != "json":
            self.duplicates = duplicate_fields(raw, False)
        self.warnings: list[str] = []

    def __call__(self, obj: dict[str, Any]) -> None:
        if self.check is not None:
            self.check(obj)
        patched = orjson.dumps(obj).decode() if self.mode == "Strict" else ""
        unknown = self.prune(obj)
        self.warnings = []
        if self.mode == "Ignore" or not (unknown or self.duplicates):
            return
        if self.mode == "Warn":
            self.warnings = warnings(unknown, self.duplicates)
            return
        message = "strict decoding error: " + ", ".join(_strict_errors(unknown, self.duplicates))
        raise errors.invalid("", "", "", [errors.cause(
            "patch", f"Invalid value: {go_quote(patched)}: {message}", "FieldValueInvalid")])


def apply_warnings(mode: str, raw: bytes) -> list[str]:
    """The keys an apply configuration repeats: upstream's 400 in Strict mode, warnings in Warn."""
    if mode == "Ignore":
        return []
    duplicates = _yaml_duplicates(raw)
    if not duplicates:
        return []
    if mode == "Strict":
        raise errors.bad_request("error strict decoding YAML: error converting YAML to JSON: "
                                 + _strict_errors([], duplicates)[0])
    return warnings([], duplicates)
