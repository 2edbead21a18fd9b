"""Content negotiation: request bodies in, JSON / YAML / Table / partial metadata out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import yaml

from apiserver.endpoints import protobuf
from services.api import errors

MAX_BODY_BYTES = 3 * 1024 * 1024
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


def decode_body(raw: bytes, content_type: str | None) -> Any:
    """Decode a JSON or YAML request body; 400 with the parser's complaint when it is malformed."""
    if len(raw) > MAX_BODY_BYTES:
        raise errors.too_large()
    mt = media_type(content_type)
    if not raw.strip():
        raise errors.bad_request("the request body is empty")
    if mt in ("application/yaml", "application/apply-patch+yaml", "text/yaml"):
        if raw.lstrip()[:1] == b"{":
            # JSON is YAML, and clients (kubectl apply --server-side among them) mostly send JSON.
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                pass
        try:
            return yaml.load(raw, Loader=_StringTimestampLoader)  # noqa: S506 - SafeLoader subclass
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error converting YAML to JSON: {exc}".replace("\n", " ")) from exc
    if mt == PROTOBUF:
        return protobuf.decode_request(raw)
    if mt and not (mt == "application/json" or mt.endswith("+json") or mt == "*/*"):
        raise errors.unsupported_media_type(mt)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.bad_request(f"error decoding request body as JSON: {exc}") from exc


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
