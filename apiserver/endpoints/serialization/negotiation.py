"""Content negotiation: request bodies in, JSON / YAML / Table / partial metadata out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from starlette.requests import Request

from apiserver.endpoints.serialization import protobuf
from services.api import errors, nesting

MAX_BODY_BYTES = 3 * 1024 * 1024
#: go-yaml's alias-expansion bounds (its allowedAliasRatio): up to 99% of the decoded nodes may come from
#: aliases in a document of up to 400k nodes, down to 10% from 4M nodes on.
_ALIAS_RATIO_LOW = 400_000
_ALIAS_RATIO_HIGH = 4_000_000
_BODY_KEY = "pyk8s.body"
_DECODED_KEY = "pyk8s.decoded"
_UNREAD = object()
PROTOBUF = "application/vnd.kubernetes.protobuf"

PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


class _StringTimestampLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML loader that keeps timestamps as strings, as Kubernetes objects expect."""


_StringTimestampLoader.yaml_implicit_resolvers = {
    k: [(tag, regexp) for tag, regexp in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


async def read_body(request: Request) -> bytes:
    """The request body, read once per request and refused with 413 as soon as it passes MAX_BODY_BYTES:
    the rest is never read (upstream's limitedReadBody)."""
    cached = request.scope.get(_BODY_KEY)
    if cached is not None:
        return cached
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise errors.too_large()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise errors.too_large()
        chunks.append(chunk)
    raw = b"".join(chunks)
    request.scope[_BODY_KEY] = raw
    return raw


async def decoded_body(request: Request) -> Any:
    """The request body decoded once (`decode_body`, as its content type says); every later call gets the
    same object, or the same refusal. Its readers may change it in place, as decoding into Go's types does."""
    cached = request.scope.get(_DECODED_KEY, _UNREAD)
    if cached is _UNREAD:
        raw = await read_body(request)
        try:
            cached = decode_body(raw, request.headers.get("content-type"))
        except errors.StatusError as exc:
            cached = exc
        request.scope[_DECODED_KEY] = cached
    if isinstance(cached, errors.StatusError):
        raise cached
    return cached


def body_read(scope: dict[str, Any]) -> bytes | None:
    """The body `read_body` read for this request, if it read one (the audit log records it)."""
    return scope.get(_BODY_KEY)


def _allowed_alias_ratio(decoded: int) -> float:
    if decoded <= _ALIAS_RATIO_LOW:
        return 0.99
    if decoded >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decoded - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


def _check_aliases(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand into far more nodes than it holds, counting nodes as go-yaml's
    decoder does; a document that contains itself trips the same bound."""
    decoded = aliased = 0
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, in_alias = stack.pop()
        if not in_alias and id(node) in seen:
            in_alias = True
        seen.add(id(node))
        decoded += 1
        aliased += in_alias
        if aliased > 100 and decoded > 1000 and aliased / decoded > _allowed_alias_ratio(decoded):
            raise errors.bad_request("error converting YAML to JSON: yaml: document contains excessive aliasing")
        if isinstance(node, yaml.MappingNode):
            for key, value in reversed(node.value):
                stack.append((value, in_alias))
                stack.append((key, in_alias))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, in_alias) for item in reversed(node.value))


def _check_depth(value: Any) -> None:
    if nesting.too_deep(value):
        raise errors.bad_request(nesting.TOO_DEEP)


def _decode_yaml(raw: bytes) -> Any:
    if b"*" not in raw:
        try:
            return yaml.load(raw, Loader=_StringTimestampLoader)  # noqa: S506 - SafeLoader subclass
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error converting YAML to JSON: {exc}".replace("\n", " ")) from exc
    # Aliases are references once constructed, and every later walk expands them: bound the expansion on
    # the composed graph before constructing it, as go-yaml does while decoding.
    loader = _StringTimestampLoader(raw)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_aliases(root)
        return loader.construct_document(root)
    except yaml.YAMLError as exc:
        raise errors.bad_request(f"error converting YAML to JSON: {exc}".replace("\n", " ")) from exc
    finally:
        loader.dispose()


def decode_body(raw: bytes, content_type: str | None) -> Any:
    """Decode a JSON, YAML or protobuf request body; 400 with the parser's complaint when it is malformed,
    when YAML aliases expand too far or when it nests too deep."""
    if len(raw) > MAX_BODY_BYTES:
        raise errors.too_large()
    mt = media_type(content_type)
    if not raw.strip():
        raise errors.bad_request("the request body is empty")
    if mt in ("application/yaml", "application/apply-patch+yaml", "text/yaml"):
        body = None
        if raw.lstrip()[:1] == b"{":
            # JSON is YAML, and clients (kubectl apply --server-side among them) mostly send JSON.
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                pass
        if body is None:
            body = _decode_yaml(raw)
        _check_depth(body)
        return body
    if mt == PROTOBUF:
        body = protobuf.decode_request(raw)
        _check_depth(body)
        return body
    if mt and not (mt == "application/json" or mt.endswith("+json") or mt == "*/*"):
        raise errors.unsupported_media_type(mt)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            raise errors.bad_request(nesting.TOO_DEEP) from exc
        raise errors.bad_request(f"error decoding request body as JSON: {exc}") from exc
    if raw.count(b"{") + raw.count(b"[") > nesting.MAX_DEPTH:
        _check_depth(body)
    return body


@dataclass(frozen=True)
class Representation:
    """What the client asked to receive."""

    form: str = "object"  # object | Table | PartialObjectMetadata | PartialObjectMetadataList
    yaml: bool = False
    include_object: str = "Metadata"


def media_params(part: str) -> tuple[str, dict[str, str]]:
    pieces = [p.strip() for p in part.split(";")]
    params = {}
    for p in pieces[1:]:
        if "=" in p:
            k, v = p.split("=", 1)
            params[k.strip()] = v.strip()
    return pieces[0].lower(), params


def negotiate(accept: str | None, is_list: bool, include_object: str = "Metadata") -> Representation:
    """Pick the first acceptable representation in the client's order, like upstream."""
    if include_object not in ("None", "Metadata", "Object"):
        raise errors.bad_request(
            f'includeObject: Unsupported value: "{include_object}": supported values: "Metadata", "None", "Object"'
        )
    if not accept:
        return Representation()
    unsupported: list[str] = []
    for part in accept.split(","):
        if not part.strip():
            continue
        mt, params = media_params(part)
        as_ = params.get("as")
        if as_:
            if params.get("g") != "meta.k8s.io" or params.get("v") not in ("v1", "v1beta1"):
                unsupported.append(part.strip())
                continue
            if mt not in ("application/json", "application/yaml", "*/*"):
                unsupported.append(part.strip())
                continue
            if as_ == "Table":
                return Representation("Table", mt == "application/yaml", include_object)
            if as_ == "PartialObjectMetadata" and not is_list:
                return Representation("PartialObjectMetadata", mt == "application/yaml")
            if as_ == "PartialObjectMetadataList" and is_list:
                return Representation("PartialObjectMetadataList", mt == "application/yaml")
            unsupported.append(part.strip())
            continue
        if mt in ("application/json", "*/*", "application/*", "application/json-seq"):
            return Representation()
        if mt == "application/yaml":
            return Representation(yaml=True)
        unsupported.append(part.strip())
    raise errors.not_acceptable(
        "only the following media types are accepted: application/json, application/yaml, "
        "application/vnd.kubernetes.protobuf"
    )


def to_yaml(obj: Any) -> bytes:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False).encode()
