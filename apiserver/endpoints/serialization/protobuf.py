"""Kubernetes protobuf request bodies, decoded into the JSON dicts the rest of the apiserver uses.

client-go (and so kubectl) sends built-in objects as `application/vnd.kubernetes.protobuf`:
the magic `k8s\\x00`, then a `runtime.Unknown` envelope whose `raw` holds the object's own
message. Decoding follows what upstream does for such a body, decode into the Go struct and
encode that as JSON, so `omitempty`, pointers and Go's struct semantics shape the result.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from apiserver.endpoints.serialization import protobuf_schema
from services.api import errors

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5
_MAX_DEPTH = 64
_SCALARS = frozenset("silby")
_STRUCTS = frozenset({"T", "MT", "D", "Q", "IS", "RAW", "FV", "SL"})
_ZERO: dict[str, Any] = {"s": "", "i": 0, "l": 0, "b": False, "y": ""}
# Seconds of 0001-01-01T00:00:00Z and of 9999-12-31T23:59:59Z, the range RFC 3339 can write.
_MIN_SECONDS, _MAX_SECONDS = -62135596800, 253402300799
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class ProtobufError(ValueError):
    """A protobuf body that cannot be decoded; the request answers 400."""


@dataclass(frozen=True, slots=True)
class Field:
    number: int
    name: str
    kind: str  # a scalar or well-known code from protobuf_schema, or "msg"
    message: str = ""  # the qualified message name when kind is "msg"
    pointer: bool = False
    repeated: bool = False
    map: bool = False
    omitempty: bool = True
    inline: bool = False

    @property
    def scalar(self) -> bool:
        return self.kind in _SCALARS


@dataclass(frozen=True, slots=True)
class Message:
    name: str
    fields: dict[int, Field]


def _parse_field(package: str, message: str, entry: str, tables: dict[str, dict[str, str]]) -> Field:
    parts = entry.split()
    if len(parts) not in (2, 3) or not parts[0].isdigit():
        raise ValueError(f"protobuf schema {package}.{message}: bad entry {entry!r}")
    number, name = int(parts[0]), parts[1]
    spec = parts[2] if len(parts) == 3 else "s"
    omitempty = not name.endswith("!")
    name = name.rstrip("!")
    pointer = repeated = is_map = False
    if spec.startswith("*"):
        pointer, spec = True, spec[1:]
    elif spec.startswith("[]"):
        repeated, spec = True, spec[2:]
    elif spec.startswith("{}"):
        is_map, spec = True, spec[2:]
    if spec in _SCALARS or spec in _STRUCTS:
        return Field(number, name, spec, "", pointer, repeated, is_map, omitempty, name == "~")
    for candidate in (package, "meta", "core"):
        if spec in tables[candidate]:
            return Field(number, name, "msg", f"{candidate}.{spec}", pointer, repeated, is_map, omitempty,
                         name == "~")
    raise ValueError(f"protobuf schema {package}.{message}: unknown type {spec!r}")


def _load() -> dict[str, Message]:
    tables = {pkg: table for pkg, (_, table, _) in protobuf_schema.PACKAGES.items()}
    out: dict[str, Message] = {}
    for pkg, table in tables.items():
        for name, spec in table.items():
            fields = [_parse_field(pkg, name, e.strip(), tables) for e in spec.split(",") if e.strip()]
            out[f"{pkg}.{name}"] = Message(f"{pkg}.{name}", {f.number: f for f in fields})
    return out


MESSAGES: dict[str, Message] = _load()
ROOTS: dict[tuple[str, str], str] = {
    (protobuf_schema.PACKAGES[pkg][0], kind): f"{pkg}.{kind}"
    for pkg, kinds in protobuf_schema.KINDS.items()
    for kind in kinds
}


# ---------------------------------------------------------------------------------------------
# Wire format


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        if shift == 63 and byte > 1:
            raise ProtobufError("varint overflows 64 bits")
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) for each field: an int, or bytes for length-delimited ones."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("illegal field number 0")
        if wire == _VARINT:
            value, pos = _varint(data, pos)
        elif wire == _BYTES:
            length, pos = _varint(data, pos)
            if length > end - pos:
                raise ProtobufError(f"field {number}: length {length} runs past the end of the message")
            value, pos = data[pos:pos + length], pos + length
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if size > end - pos:
                raise ProtobufError(f"field {number}: truncated fixed-width value")
            value, pos = int.from_bytes(data[pos:pos + size], "little"), pos + size
        else:
            raise ProtobufError(f"field {number}: unsupported wire type {wire}")
        yield number, wire, value


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _bytes(wire: int, value: Any, where: str) -> bytes:
    if wire != _BYTES:
        raise ProtobufError(f"{where}: wrong wire type {wire} for bytes")
    return value


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _scalar(kind: str, wire: int, value: Any, where: str) -> Any:
    if kind in ("s", "y"):
        if wire != _BYTES:
            raise ProtobufError(f"{where}: wrong wire type {wire} for a string")
        return _text(value) if kind == "s" else base64.b64encode(value).decode()
    if wire != _VARINT:
        raise ProtobufError(f"{where}: wrong wire type {wire} for an integer")
    if kind == "b":
        return value != 0
    return _signed(value, 32 if kind == "i" else 64)


def _packed(kind: str, raw: bytes, where: str) -> list[Any]:
    """Packed repeated integers: varints back to back in one length-delimited field."""
    if kind not in ("i", "l", "b"):
        raise ProtobufError(f"{where}: wrong wire type 2 for a repeated integer")
    out, pos = [], 0
    while pos < len(raw):
        value, pos = _varint(raw, pos)
        out.append(_scalar(kind, _VARINT, value, where))
    return out


# ---------------------------------------------------------------------------------------------
# Well-known types


def _timestamp(raw: bytes, micro: bool, where: str) -> str | None:
    if not raw:
        return None  # Go marshals a zero Time as an empty message, and JSON shows it as null
    seconds = nanos = 0
    for number, wire, value in _fields(raw):
        if number == 1:
            seconds = _scalar("l", wire, value, where)
        elif number == 2:
            nanos = _scalar("i", wire, value, where)
    if not micro:
        nanos = 0  # upstream's Time keeps whole seconds only
    nanos = abs(nanos) // 1000 * 1000 * (1 if nanos >= 0 else -1)  # truncated toward zero, as Go does
    seconds += nanos // 1_000_000_000
    nanos %= 1_000_000_000
    if not _MIN_SECONDS <= seconds <= _MAX_SECONDS:
        raise ProtobufError(f"{where}: timestamp {seconds}s is outside the years 1 to 9999")
    m = _EPOCH + datetime.timedelta(seconds=seconds, microseconds=nanos // 1000)
    text = f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}"
    return f"{text}.{m.microsecond:06d}Z" if micro else f"{text}Z"


def go_duration(ns: int) -> str:
    """Go's time.Duration.String, the JSON form of meta.v1.Duration."""
    if ns == 0:
        return "0s"
    sign, u = ("-" if ns < 0 else ""), abs(ns)

    def fraction(value: int, digits: int) -> str:
        text = str(value).rjust(digits, "0").rstrip("0")
        return f".{text}" if text else ""

    if u < 1_000:
        return f"{sign}{u}ns"
    if u < 1_000_000:
        return f"{sign}{u // 1_000}{fraction(u % 1_000, 3)}µs"
    if u < 1_000_000_000:
        return f"{sign}{u // 1_000_000}{fraction(u % 1_000_000, 6)}ms"
    seconds, rest = divmod(u, 1_000_000_000)
    text = f"{seconds % 60}{fraction(rest, 9)}s"
    minutes = seconds // 60
    if minutes:
        text = f"{minutes % 60}m{text}"
        if minutes // 60:
            text = f"{minutes // 60}h{text}"
    return sign + text


def _embedded_json(raw: bytes, where: str) -> Any:
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProtobufError(f"{where}: embedded object is not JSON: {exc}") from exc


def _well_known(kind: str, raw: bytes, where: str) -> Any:
    if kind in ("T", "MT"):
        return _timestamp(raw, kind == "MT", where)
    if kind == "SL":
        return [_scalar("s", wire, value, where) for number, wire, value in _fields(raw) if number == 1]
    last: dict[int, tuple[int, Any]] = {number: (wire, value) for number, wire, value in _fields(raw)}

    def get(number: int, scalar: str, default: Any) -> Any:
        found = last.get(number)
        return default if found is None else _scalar(scalar, found[0], found[1], where)

    if kind == "D":
        return go_duration(get(1, "l", 0))
    if kind == "Q":
        return get(1, "s", "") or "0"
    if kind == "IS":
        tag = get(1, "l", 0)
        if tag == 0:
            return get(2, "i", 0)
        if tag == 1:
            return get(3, "s", "")
        raise ProtobufError(f"{where}: IntOrString has unknown type {tag}")
    found = last.get(1)
    return _embedded_json(_bytes(found[0], found[1], where) if found else b"", where)


# ---------------------------------------------------------------------------------------------
# Messages


def _struct(field: Field, raw: bytes, where: str, depth: int) -> Any:
    if field.kind == "msg":
        return _message(MESSAGES[field.message], raw, depth + 1)
    return _well_known(field.kind, raw, where)


def _map_entry(field: Field, raw: bytes, where: str, depth: int) -> tuple[str, Any]:
    key, value_raw, value_scalar = "", None, None
    for number, wire, value in _fields(raw):
        if number == 1:
            key = _scalar("s", wire, value, where)
        elif number == 2:
            if field.scalar:
                value_scalar = _scalar(field.kind, wire, value, where)
            elif wire != _BYTES:
                raise ProtobufError(f"{where}: wrong wire type {wire} for a map value")
            else:
                value_raw = value if value_raw is None else value_raw + value
    if field.scalar:
        return key, _ZERO[field.kind] if value_scalar is None else value_scalar
    return key, _struct(field, value_raw or b"", where, depth)


def _message(msg: Message, data: bytes, depth: int = 0) -> dict[str, Any]:
    if depth > _MAX_DEPTH:
        raise ProtobufError(f"{msg.name}: nested too deeply")
    scalars: dict[int, Any] = {}
    chunks: dict[int, list[bytes]] = {}
    lists: dict[int, list[Any]] = {}
    maps: dict[int, dict[str, Any]] = {}
    for number, wire, value in _fields(data):
        field = msg.fields.get(number)
        if field is None:
            continue
        where = f"{msg.name}.{field.name}"
        if field.map:
            if wire != _BYTES:
                raise ProtobufError(f"{where}: wrong wire type {wire} for a map entry")
            key, item = _map_entry(field, value, where, depth)
            maps.setdefault(number, {})[key] = item
        elif field.repeated:
            items = lists.setdefault(number, [])
            if field.scalar:
                if wire == _BYTES and field.kind not in ("s", "y"):
                    items.extend(_packed(field.kind, value, where))
                else:
                    items.append(_scalar(field.kind, wire, value, where))
            elif wire != _BYTES:
                raise ProtobufError(f"{where}: wrong wire type {wire} for a message")
            else:
                items.append(_struct(field, value, where, depth))
        elif field.scalar:
            scalars[number] = _scalar(field.kind, wire, value, where)
        elif wire != _BYTES:
            raise ProtobufError(f"{where}: wrong wire type {wire} for a message")
        else:
            chunks.setdefault(number, []).append(value)  # repeats of one message merge, as in proto
    out: dict[str, Any] = {}
    for number, field in msg.fields.items():
        where = f"{msg.name}.{field.name}"
        if field.inline:
            out.update(_struct(field, b"".join(chunks.get(number, ())), where, depth))
        elif field.map or field.repeated:
            found = maps.get(number) if field.map else lists.get(number)
            if found is not None:
                out[field.name] = found
            elif not field.omitempty:
                out[field.name] = None
        elif not field.scalar:
            if number in chunks:
                out[field.name] = _struct(field, b"".join(chunks[number]), where, depth)
            elif not field.pointer:
                out[field.name] = _struct(field, b"", where, depth)
            elif not field.omitempty:
                out[field.name] = None
        elif number in scalars:
            value = scalars[number]
            if field.pointer or not field.omitempty or value:
                out[field.name] = value
        elif not field.omitempty:
            out[field.name] = None if field.pointer else _ZERO[field.kind]
    return out


def decode_protobuf(body: bytes) -> dict[str, Any]:
    """The JSON form of a `k8s\\x00`-prefixed protobuf object, with its apiVersion and kind."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf prefix k8s\\x00")
    type_meta, raw, encoding, content_type = b"", b"", "", ""
    for number, wire, value in _fields(body[len(MAGIC):]):
        if number == 1:
            type_meta = _bytes(wire, value, "Unknown.typeMeta")
        elif number == 2:
            raw = _bytes(wire, value, "Unknown.raw")
        elif number == 3:
            encoding = _scalar("s", wire, value, "Unknown.contentEncoding")
        elif number == 4:
            content_type = _scalar("s", wire, value, "Unknown.contentType")
    api_version = kind = ""
    for number, wire, value in _fields(type_meta):
        if number == 1:
            api_version = _scalar("s", wire, value, "TypeMeta.apiVersion")
        elif number == 2:
            kind = _scalar("s", wire, value, "TypeMeta.kind")
    if encoding:
        raise ProtobufError(f"unsupported content encoding {encoding!r} in the protobuf envelope")
    if not kind:
        raise ProtobufError("the protobuf envelope does not name the object's kind")
    if content_type and content_type.split(";", 1)[0].strip() == "application/json":
        obj = _embedded_json(raw, "Unknown.raw")
        if not isinstance(obj, dict):
            raise ProtobufError("the embedded JSON is not an object")
        return {"kind": kind, "apiVersion": api_version, **obj}
    if content_type and content_type.split(";", 1)[0].strip() != MEDIA_TYPE:
        raise ProtobufError(f"unsupported content type {content_type!r} in the protobuf envelope")
    name = "meta.DeleteOptions" if kind == "DeleteOptions" else ROOTS.get((api_version, kind))
    if name is None:
        raise ProtobufError(f'no kind "{kind}" is registered for version "{api_version}"')
    return {"kind": kind, "apiVersion": api_version, **_message(MESSAGES[name], raw)}


def decode_request(raw: bytes) -> dict[str, Any]:
    """decode_protobuf for a request body: a malformed one answers 400 Bad Request."""
    try:
        return decode_protobuf(raw)
    except ProtobufError as exc:
        raise errors.bad_request(f"unable to decode the protobuf request body: {exc}") from exc
