"""Upstream's OpenAPI type definitions, as shipped by the `kubernetes-validate` package.

One loader for everything that needs them (field validation, type checks, strategic merge
patch, server-side apply, OpenAPI documents, printer descriptions): the newest shipped set no
newer than the Kubernetes version the apiserver speaks, read once per process.
"""

from __future__ import annotations

import importlib.resources
from functools import cache
from pathlib import Path
from typing import Any

import orjson

#: The API version pyk8s serves (kubectl 1.32 is the client these machines have).
SERVED_VERSION = (1, 32, 0)


def _version(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in path.name[1:].split("-")[0].split("."))


@cache
def schema_dir() -> Path:
    """The directory of the definitions in use."""
    root = Path(str(importlib.resources.files("kubernetes_validate"))) / "kubernetes-json-schema"
    candidates = sorted((p for p in root.glob("v*-local") if (p / "_definitions.json").is_file()), key=_version)
    if not candidates:
        raise RuntimeError(f"kubernetes-validate ships no definitions under {root}")
    usable = [p for p in candidates if _version(p) <= SERVED_VERSION]
    return (usable or candidates)[-1]


@cache
def definitions() -> dict[str, Any]:
    """Definition name (`io.k8s.api.core.v1.Pod`) -> JSON schema, refs as `#/$defs/<name>`."""
    document = orjson.loads((schema_dir() / "_definitions.json").read_bytes())
    defs: dict[str, Any] = document.get("$defs") or document.get("definitions") or {}
    return defs


@cache
def by_kind() -> dict[tuple[str, str], str]:
    """(apiVersion, kind) -> definition name, from each definition's x-kubernetes-group-version-kind."""
    out: dict[tuple[str, str], str] = {}
    for name, schema in definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind", ()):
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            out.setdefault((api_version, gvk["kind"]), name)
    return out


_MAX_SCHEMA_DEPTH = 12


def _structural(schema: Any, depth: int) -> dict[str, Any]:
    """One definition as the CEL type checker reads schemas: refs resolved, nullable type lists narrowed,
    int-or-string marked; past a depth (recursive types), anything goes."""
    if not isinstance(schema, dict) or depth > _MAX_SCHEMA_DEPTH:
        return {"x-kubernetes-preserve-unknown-fields": True}
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _structural(definitions().get(ref.rsplit("/", 1)[-1]), depth + 1)
    variants = schema.get("oneOf")
    if isinstance(variants, list):
        types = {t for v in variants if isinstance(v, dict) for t in _types(v.get("type"))}
        if types == {"string", "integer"}:
            return {"x-kubernetes-int-or-string": True}
        return {"type": "string"} if "string" in types else {"x-kubernetes-preserve-unknown-fields": True}
    out: dict[str, Any] = {}
    types = _types(schema.get("type"))
    if types:
        out["type"] = types[0]
    if isinstance(schema.get("format"), str):
        out["format"] = schema["format"]
    if isinstance(schema.get("properties"), dict):
        out["type"] = "object"
        out["properties"] = {k: _structural(v, depth + 1) for k, v in schema["properties"].items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = _structural(schema["items"], depth + 1)
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = _structural(schema["additionalProperties"], depth + 1)
    if not out:
        return {"x-kubernetes-preserve-unknown-fields": True}
    return out


def _types(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value != "null" else []
    if isinstance(value, list):
        return [t for t in value if isinstance(t, str) and t != "null"]
    return []


@cache
def structural_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    """A built-in kind's schema in the structural form CRDs use (what CEL type checks read), or None."""
    name = by_kind().get((api_version, kind))
    return _structural(definitions()[name], 0) if name is not None else None
