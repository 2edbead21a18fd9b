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
