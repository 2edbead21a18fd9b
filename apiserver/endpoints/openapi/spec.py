"""The OpenAPI documents: `/openapi/v2` (one swagger document) and `/openapi/v3` (an index of one
document per group-version), built from the live catalog and upstream's type definitions.

kubectl reads them before `create`/`apply` (does the PATCH operation of this kind take
`fieldValidation`? then the server validates strictly), to compute strategic merge patches
(`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`) and for `kubectl explain`.
The type definitions come from the `kubernetes-validate` package, which ships upstream's
schemas converted to JSON Schema; they are turned back into OpenAPI here.

Documents are built on first request in a worker thread, cached as bytes with a content hash
(the ETag and the `?hash=` of the v3 index) and thrown away when the catalog changes, which
the apiserver signals by bumping `app.state.catalog_generation`.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import struct
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.utils import formatdate
from functools import cache
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from services.api import definitions as shipped
from services.api.catalog import Catalog, Resource
from services.api.errors import StatusError, not_acceptable

router = APIRouter()

Schema = dict[str, Any]

PREFERRED_SCHEMA_VERSION = "v1.32.0"
V3_REF = "#/components/schemas/"
V2_REF = "#/definitions/"
_SOURCE_REF = "#/$defs/"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"

# Kinds that a subresource reads or writes when it is not the parent's own kind.
_SUBRESOURCE_KINDS: dict[str, tuple[str, str, str]] = {
    "scale": ("autoscaling", "v1", "Scale"),
    "eviction": ("policy", "v1", "Eviction"),
    "binding": ("", "v1", "Binding"),
    "token": ("authentication.k8s.io", "v1", "TokenRequest"),
}
_CONNECT_KINDS: dict[str, str] = {
    "exec": "PodExecOptions",
    "attach": "PodAttachOptions",
    "portforward": "PodPortForwardOptions",
}
_PROXY_METHODS = ("get", "put", "post", "delete", "options", "head", "patch")

_P = tuple[str, str, str]  # (name, type, description)
_LIST_PARAMS: tuple[_P, ...] = (
    ("allowWatchBookmarks", "boolean", "Ask a watch for BOOKMARK events; servers may ignore it."),
    ("continue", "string", "The continue token of the previous page of a chunked list."),
    ("fieldSelector", "string", "Restrict the result to objects whose fields match. Defaults to all."),
    ("labelSelector", "string", "Restrict the result to objects whose labels match. Defaults to all."),
    ("limit", "integer", "The most items to return in one response; the rest follow by `continue`."),
    ("resourceVersion", "string", "Which version of the data may be served; see the API concepts."),
    ("resourceVersionMatch", "string", "How resourceVersion applies to a list: Exact or NotOlderThan."),
    ("sendInitialEvents", "boolean", "Start a watch with synthetic events for the current state."),
    ("timeoutSeconds", "integer", "End the list or watch after this many seconds."),
    ("watch", "boolean", "Watch for changes and stream them as add, update and remove events."),
)
_DRY_RUN: _P = ("dryRun", "string", "`All` runs every stage of the request without persisting anything.")
_FIELD_MANAGER: _P = (
    "fieldManager",
    "string",
    "The name of the actor making the change, for managed fields.",
)
_FIELD_VALIDATION: _P = (
    "fieldValidation",
    "string",
    "How the server treats unknown or duplicate fields in the body: Ignore, Warn (default) or Strict.",
)
_WRITE_PARAMS: tuple[_P, ...] = (_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION)
_PATCH_PARAMS: tuple[_P, ...] = _WRITE_PARAMS + (
    ("force", "boolean", "Take over fields owned by other managers; only for apply patches."),
)
_DELETE_PARAMS: tuple[_P, ...] = (
    _DRY_RUN,
    ("gracePeriodSeconds", "integer", "Seconds before the object is deleted; zero deletes at once."),
    (
        "ignoreStoreReadErrorWithClusterBreakingPotential",
        "boolean",
        "Delete an object that cannot be read from storage. Dangerous.",
    ),
    ("orphanDependents", "boolean", "Deprecated in favour of propagationPolicy."),
    ("propagationPolicy", "string", "Garbage collection of dependents: Orphan, Background or Foreground."),
)
_LOG_PARAMS: tuple[_P, ...] = (
    ("container", "string", "The container to read from; optional when the pod has one."),
    ("follow", "boolean", "Stream the log as it grows."),
    ("insecureSkipTLSVerifyBackend", "boolean", "Do not verify the kubelet's serving certificate."),
    ("limitBytes", "integer", "Stop after this many bytes."),
    ("previous", "boolean", "Read the log of the previous, terminated container."),
    ("sinceSeconds", "integer", "Only lines newer than this many seconds."),
    ("stream", "string", "Which stream to read: All, Stdout or Stderr."),
    ("tailLines", "integer", "Only this many lines from the end of the log."),
    ("timestamps", "boolean", "Prefix every line with an RFC3339 timestamp."),
)
_STREAM_PARAMS: tuple[_P, ...] = (
    ("container", "string", "The container to attach to; optional when the pod has one."),
    ("stderr", "boolean", "Redirect the standard error stream."),
    ("stdin", "boolean", "Redirect the standard input stream."),
    ("stdout", "boolean", "Redirect the standard output stream."),
    ("tty", "boolean", "Allocate a terminal."),
)
_CONNECT_PARAMS: dict[str, tuple[_P, ...]] = {
    "exec": (("command", "string", "The command to run, one argument per parameter."),) + _STREAM_PARAMS,
    "attach": _STREAM_PARAMS,
    "portforward": (("ports", "integer", "The ports to forward."),),
}
_PRETTY: _P = ("pretty", "string", "If 'true', the output is pretty printed.")

# What pyk8s serves; upstream also lists application/vnd.kubernetes.protobuf.
_JSON_TYPES = ("application/json", "application/yaml")
_PATCH_TYPES = ("application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json")
_SMP = "application/strategic-merge-patch+json"
_WATCH_TYPE = "application/json;stream=watch"
_REASONS = {"200": "OK", "201": "Created", "202": "Accepted", "401": "Unauthorized"}


# ---------------------------------------------------------------------------------------------
# Type definitions


@dataclass
class Definitions:
    """Upstream's types in a flavour-neutral form: nullable types collapsed, refs by bare name."""

    version: str
    schemas: dict[str, Schema]
    by_gvk: dict[tuple[str, str, str], str]
    deps: dict[str, frozenset[str]]

    def closure(self, roots: Iterable[str], extra: dict[str, Schema] | None = None) -> list[str]:
        """Every definition reachable from `roots`, in a stable order."""
        extra = extra or {}
        seen: set[str] = set()
        stack = list(roots)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in extra:
                stack.extend(_refs(extra[name]))
            else:
                stack.extend(self.deps.get(name, ()))
        return sorted(seen)


def _neutral(node: Any, top_level_kind: bool = False) -> Any:
    """Undo the JSON Schema conversion: `["string", "null"]` -> `string`, `#/$defs/X` -> `X`."""
    if not isinstance(node, dict):
        return node
    out: Schema = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, list):
            kinds = [t for t in value if t != "null"]
            value = kinds[0] if len(kinds) == 1 else kinds
        elif key == "$ref":
            value = value.removeprefix(_SOURCE_REF)
        elif key in ("items", "additionalProperties"):
            value = _neutral(value)
        elif key in ("oneOf", "anyOf", "allOf"):
            value = [_neutral(v) for v in value]
        elif key == "properties":
            props = {}
            for prop, sub in value.items():
                sub = _neutral(sub)
                if top_level_kind and prop in ("apiVersion", "kind"):
                    # The converter pins these to constants; upstream leaves them free strings.
                    sub.pop("enum", None)
                props[prop] = sub
            value = props
        out[key] = value
    return out


def _refs(node: Any) -> set[str]:
    """Names referenced by a neutral schema, skipping vendor extensions."""
    found: set[str] = set()
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            for key, value in cur.items():
                if key == "$ref" and isinstance(value, str):
                    found.add(value)
                elif key == "properties" and isinstance(value, dict):
                    # Property names are data, not keywords: JSONSchemaProps has ones named `$ref` and `x-...`.
                    stack.extend(value.values())
                elif not key.startswith("x-"):
                    stack.append(value)
        elif isinstance(cur, list):
            stack.extend(cur)
    return found


@cache
def definitions() -> Definitions:
    """Load the shipped definitions once per process (1.8 MB of JSON)."""
    directory = shipped.schema_dir()
    raw = shipped.definitions()
    schemas: dict[str, Schema] = {}
    by_gvk: dict[tuple[str, str, str], str] = {}
    for name, schema in raw.items():
        gvks = schema.get("x-kubernetes-group-version-kind", [])
        schemas[name] = _neutral(schema, top_level_kind=bool(gvks))
        if not name.startswith("io.k8s.apimachinery."):
            for gvk in gvks:
                by_gvk[(gvk["group"], gvk["version"], gvk["kind"])] = name
    deps = {name: frozenset(_refs(schema)) for name, schema in schemas.items()}
    return Definitions(directory.name.split("-")[0], schemas, by_gvk, deps)


def _render(node: Any, prefix: str, v3: bool) -> Any:
    """A neutral schema as OpenAPI: refs get their prefix; in v3 a ref with siblings goes in allOf."""
    if isinstance(node, list):
        return [_render(v, prefix, v3) for v in node]
    if not isinstance(node, dict):
        return node
    out: Schema = {}
    for key, value in node.items():
        if key.startswith("x-"):
            out[key] = value
        elif key == "$ref":
            out[key] = prefix + value
        elif key == "properties":
            out[key] = {prop: _render(sub, prefix, v3) for prop, sub in value.items()}
        else:
            out[key] = _render(value, prefix, v3)
    if v3 and "$ref" in out and len(out) > 1:
        out = {"allOf": [{"$ref": out.pop("$ref")}], **out}
    return out


def _render_definition(name: str, schema: Schema, prefix: str, v3: bool) -> Schema:
    if not v3 and name in (_INT_OR_STRING, _QUANTITY):
        # Swagger 2.0 has no oneOf: upstream's v2 spells these as strings.
        flat: Schema = {"description": schema.get("description", ""), "type": "string"}
        if name == _INT_OR_STRING:
            flat["format"] = "int-or-string"
        return flat
    out = _render(schema, prefix, v3)
    if v3 and name == _INT_OR_STRING:
        out["format"] = "int-or-string"
    return out


# ---------------------------------------------------------------------------------------------
# Paths and operations (built in v3 form; v2 is derived from it)


def _friendly_group(group: str) -> str:
    """`rbac.authorization.k8s.io` -> `RbacAuthorization`, `` -> `Core`, as upstream's operation ids."""
    if not group:
        return "Core"
    parts = re.split(r"[^A-Za-z0-9]+", group.removesuffix(".k8s.io"))
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


def _gv_prefix(group: str, version: str) -> str:
    return f"/apis/{group}/{version}" if group else f"/api/{version}"


def _gv_key(group: str, version: str) -> str:
    return _gv_prefix(group, version).lstrip("/")


def custom_schema_name(group: str, version: str, kind: str) -> str:
    """Upstream's name for a custom resource's schema: the group reversed, e.g. `com.example.v1.Foo`."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _param(spec: _P, where: str = "query", required: bool = False) -> Schema:
    name, kind, description = spec
    param: Schema = {
        "name": name,
        "in": where,
        "description": description,
        "schema": {"type": kind, "uniqueItems": True},
    }
    if required:
        param["required"] = True
    return param


def _ref(name: str) -> Schema:
    return {"$ref": V3_REF + name}


@dataclass
class _Builder:
    """Paths and custom schemas of one or more group-versions."""

    defs: Definitions
    paths: dict[str, Schema] = field(default_factory=dict)
    custom: dict[str, Schema] = field(default_factory=dict)

    def kind_schema(self, res: Resource) -> tuple[str, str]:
        """Names of the schemas of a resource's kind and list kind; invents permissive ones if unknown."""
        name = self.defs.by_gvk.get((res.group, res.version, res.kind))
        list_name = self.defs.by_gvk.get((res.group, res.version, res.list_kind))
        if name and list_name and not res.custom:
            return name, list_name
        name = custom_schema_name(res.group, res.version, res.kind)
        list_name = custom_schema_name(res.group, res.version, res.list_kind)
        if name not in self.custom:
            self.custom[name] = self._custom_object(res)
            self.custom[list_name] = self._custom_list(res, name)
        return name, list_name

    def _type_meta(self, list_kind: bool) -> dict[str, Schema]:
        base = self.defs.schemas[_META + ("Status" if list_kind else "DeleteOptions")]["properties"]
        return {"apiVersion": dict(base["apiVersion"]), "kind": dict(base["kind"])}

    def _custom_object(self, res: Resource) -> Schema:
        props = self._type_meta(False)
        metadata = dict(self.defs.schemas["io.k8s.api.core.v1.ConfigMap"]["properties"]["metadata"])
        props["metadata"] = metadata
        gvk = [{"group": res.group, "kind": res.kind, "version": res.version}]
        if res.schema:
            declared = {k: v for k, v in (res.schema.get("properties") or {}).items()
                        if k not in ("apiVersion", "kind", "metadata")}
            schema = {k: v for k, v in res.schema.items() if k != "properties"}
            return {**schema, "properties": {**props, **declared}, "x-kubernetes-group-version-kind": gvk}
        return {
            "type": "object",
            "properties": props,
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-group-version-kind": gvk,
        }

    def _custom_list(self, res: Resource, item: str) -> Schema:
        props = self._type_meta(True)
        props["items"] = {"type": "array", "description": f"List of {res.plural}.", "items": {"$ref": item}}
        props["metadata"] = dict(self.defs.schemas["io.k8s.api.core.v1.ConfigMapList"]["properties"]["metadata"])
        return {
            "type": "object",
            "description": f"{res.list_kind} is a list of {res.kind}",
            "required": ["items"],
            "properties": props,
            "x-kubernetes-group-version-kind": [{"group": res.group, "kind": res.list_kind, "version": res.version}],
        }

    # -- operations ----------------------------------------------------------------------------

    @staticmethod
    def _media(schema: Schema, types: Iterable[str]) -> Schema:
        return {t: {"schema": schema} for t in types}

    def _responses(self, schema: Schema, codes: Iterable[str], types: Iterable[str]) -> Schema:
        types = tuple(types)
        out: Schema = {c: {"description": _REASONS[c], "content": self._media(schema, types)} for c in codes}
        out["401"] = {"description": _REASONS["401"]}
        return out

    def _op(
        self,
        op_id: str,
        description: str,
        action: str,
        gvk: tuple[str, str, str],
        tag: str,
        response: Schema,
        codes: Iterable[str] = ("200",),
        params: Iterable[_P] = (),
        body: Schema | None = None,
        body_types: Iterable[str] = ("*/*",),
        response_types: Iterable[str] = (),
    ) -> Schema:
        op: Schema = {
            "description": description,
            "operationId": op_id,
            "tags": [tag],
            "responses": self._responses(response, codes, response_types),
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": {"group": gvk[0], "kind": gvk[2], "version": gvk[1]},
        }
        params = [_param(p) for p in params]
        if params:
            op["parameters"] = params
        if body is not None:
            op["requestBody"] = {"content": self._media(body, body_types), "required": True}
        return op

    def _add(self, path: str, method: str, op: Schema, path_params: list[Schema]) -> None:
        item = self.paths.setdefault(path, {"parameters": path_params})
        item[method] = op

    def add_resource(self, res: Resource) -> None:
        group, version = res.group, res.version
        prefix = _gv_prefix(group, version)
        kind_name, list_name = self.kind_schema(res)
        gvk = (group, version, res.kind)
        friendly = _friendly_group(group)
        tag = f"{friendly[:1].lower()}{friendly[1:]}_{version}"
        base = f"{friendly}{version[:1].upper()}{version[1:]}"
        scope = "Namespaced" if res.namespaced else ""
        types = _JSON_TYPES
        watch_types = (_WATCH_TYPE,)
        ns_param = [_param(("namespace", "string", "The namespace of the object."), "path", True)]
        name_param = [_param(("name", "string", f"The name of the {res.kind}."), "path", True)]
        pretty = [_param(_PRETTY)]
        coll_params = (ns_param if res.namespaced else []) + pretty
        item_params = name_param + (ns_param if res.namespaced else []) + pretty
        scoped = f"{prefix}/namespaces/{{namespace}}" if res.namespaced else prefix
        collection = f"{scoped}/{res.plural}"
        item = f"{collection}/{{name}}"
        verbs = set(res.verbs)
        obj, lst = _ref(kind_name), _ref(list_name)
        status_ref = _ref(_META + "Status")
        patch_types = _PATCH_TYPES if res.custom else (*_PATCH_TYPES, _SMP)

        def op(verb: str, what: str, action: str, **kw: Any) -> Schema:
            kw.setdefault("response_types", types)
            return self._op(f"{verb}{base}{what}", kw.pop("description"), action, kw.pop("gvk", gvk), tag, **kw)

        if "list" in verbs:
            self._add(
                collection,
                "get",
                op(
                    "list",
                    f"{scope}{res.kind}",
                    "list",
                    response=lst,
                    description=f"list or watch objects of kind {res.kind}",
                    params=_LIST_PARAMS,
                    response_types=(*types, *watch_types),
                ),
                coll_params,
            )
            if res.namespaced:
                self._add(
                    f"{prefix}/{res.plural}",
                    "get",
                    op(
                        "list",
                        f"{res.kind}ForAllNamespaces",
                        "list",
                        response=lst,
                        description=f"list or watch objects of kind {res.kind}",
                        response_types=(*types, *watch_types),
                    ),
                    pretty + [_param(p) for p in _LIST_PARAMS],
                )
        if "create" in verbs:
            self._add(
                collection,
                "post",
                op(
                    "create",
                    f"{scope}{res.kind}",
                    "post",
                    response=obj,
                    codes=("200", "201", "202"),
                    params=_WRITE_PARAMS,
                    body=obj,
                    description=f"create a {res.kind}",
                ),
                coll_params,
            )
        if "deletecollection" in verbs:
            self._add(
                collection,
                "delete",
                op(
                    "delete",
                    f"Collection{scope}{res.kind}",
                    "deletecollection",
                    response=status_ref,
                    params=_DELETE_PARAMS + _LIST_PARAMS,
                    body=_ref(_META + "DeleteOptions"),
                    description=f"delete collection of {res.kind}",
                ),
                coll_params,
            )
        item_ops = (
            ("get", "get", "read", "get", f"read the specified {res.kind}", obj, ("200",), (), None),
            (
                "update",
                "put",
                "replace",
                "put",
                f"replace the specified {res.kind}",
                obj,
                ("200", "201"),
                _WRITE_PARAMS,
                obj,
            ),
            (
                "patch",
                "patch",
                "patch",
                "patch",
                f"partially update the specified {res.kind}",
                obj,
                ("200", "201"),
                _PATCH_PARAMS,
                _ref(_META + "Patch"),
            ),
            (
                "delete",
                "delete",
                "delete",
                "delete",
                f"delete a {res.kind}",
                status_ref,
                ("200", "202"),
                _DELETE_PARAMS,
                _ref(_META + "DeleteOptions"),
            ),
        )
        for verb, method, op_verb, action, description, response, codes, params, body in item_ops:
            if verb in verbs:
                self._add(
                    item,
                    method,
                    op(
                        op_verb,
                        f"{scope}{res.kind}",
                        action,
                        response=response,
                        codes=codes,
                        params=params,
                        body=body,
                        description=description,
                        body_types=patch_types if method == "patch" else ("*/*",),
                    ),
                    item_params,
                )
        if "watch" in verbs:
            event = _ref(_META + "WatchEvent")
            watch_scoped = f"{prefix}/watch/namespaces/{{namespace}}" if res.namespaced else f"{prefix}/watch"
            list_params = [_param(p) for p in _LIST_PARAMS]
            self._add(
                f"{watch_scoped}/{res.plural}",
                "get",
                op(
                    "watch",
                    f"{scope}{res.kind}List",
                    "watchlist",
                    response=event,
                    response_types=(*types, *watch_types),
                    description=f"watch individual changes to a list of {res.kind}",
                ),
                coll_params + list_params,
            )
            self._add(
                f"{watch_scoped}/{res.plural}/{{name}}",
                "get",
                op(
                    "watch",
                    f"{scope}{res.kind}",
                    "watch",
                    response=event,
                    response_types=(*types, *watch_types),
                    description=f"watch changes to an object of kind {res.kind}",
                ),
                item_params + list_params,
            )
            if res.namespaced:
                self._add(
                    f"{prefix}/watch/{res.plural}",
                    "get",
                    op(
                        "watch",
                        f"{res.kind}ListForAllNamespaces",
                        "watchlist",
                        response=event,
                        response_types=(*types, *watch_types),
                        description=f"watch individual changes to a list of {res.kind}",
                    ),
                    pretty + list_params,
                )
        for sub in res.subresources:
            self._add_subresource(res, sub, item, item_params, op, obj, patch_types, scope)

    def _add_subresource(
        self,
        res: Resource,
        sub: str,
        item: str,
        item_params: list[Schema],
        op: Any,
        obj: Schema,
        patch_types: tuple[str, ...],
        scope: str,
    ) -> None:
        path = f"{item}/{sub}"
        title = sub[:1].upper() + sub[1:]
        what = f"{scope}{res.kind}{title}"
        if sub in ("status", "scale", "ephemeralcontainers", "finalize"):
            sub_gvk = _SUBRESOURCE_KINDS.get(sub, (res.group, res.version, res.kind))
            target = _ref(self.defs.by_gvk.get(sub_gvk, "")) if sub == "scale" else obj
            methods = (
                (("put", "replace", ("200", "201"), _WRITE_PARAMS, target),)
                if sub == "finalize"
                else (
                    ("get", "read", ("200",), (), None),
                    ("put", "replace", ("200", "201"), _WRITE_PARAMS, target),
                    ("patch", "patch", ("200", "201"), _PATCH_PARAMS, _ref(_META + "Patch")),
                )
            )
            for method, verb, codes, params, body in methods:
                self._add(
                    path,
                    method,
                    op(
                        verb,
                        what,
                        method,
                        gvk=sub_gvk,
                        response=target,
                        codes=codes,
                        params=params,
                        body=body,
                        description=f"{verb} {sub} of the specified {res.kind}",
                        body_types=patch_types if method == "patch" else ("*/*",),
                    ),
                    item_params,
                )
        elif sub in ("binding", "eviction", "token"):
            sub_gvk = _SUBRESOURCE_KINDS[sub]
            target = _ref(self.defs.by_gvk[sub_gvk])
            self._add(
                path,
                "post",
                op(
                    "create",
                    what,
                    "post",
                    gvk=sub_gvk,
                    response=target,
                    codes=("200", "201", "202"),
                    params=_WRITE_PARAMS,
                    body=target,
                    description=f"create {sub} of a {res.kind}",
                ),
                item_params,
            )
        elif sub == "log":
            self._add(
                path,
                "get",
                op(
                    "read",
                    what,
                    "get",
                    response={"type": "string"},
                    params=_LOG_PARAMS,
                    response_types=("text/plain", "application/json", "application/yaml"),
                    description=f"read log of the specified {res.kind}",
                ),
                item_params,
            )
        elif sub in _CONNECT_KINDS:
            sub_gvk = ("", "v1", _CONNECT_KINDS[sub])
            for method in ("get", "post"):
                verb = f"connect{method[:1].upper()}{method[1:]}"
                self._add(
                    path,
                    method,
                    op(
                        verb,
                        what,
                        "connect",
                        gvk=sub_gvk,
                        response={"type": "string"},
                        params=_CONNECT_PARAMS[sub],
                        response_types=("*/*",),
                        description=f"connect {method.upper()} requests to {sub} of {res.kind}",
                    ),
                    item_params,
                )
        elif sub == "proxy":
            sub_gvk = ("", "v1", f"{res.kind}ProxyOptions")
            path_param = _param(("path", "string", "The path to proxy to."), "path", True)
            for method in _PROXY_METHODS:
                verb = f"connect{method[:1].upper()}{method[1:]}"
                for sub_path, params, suffix in (
                    (path, [], ""),
                    (f"{path}/{{path}}", [path_param], "WithPath"),
                ):
                    query = () if suffix else (("path", "string", "The path to proxy to."),)
                    self._add(
                        sub_path,
                        method,
                        op(
                            verb,
                            f"{what}{suffix}",
                            "connect",
                            gvk=sub_gvk,
                            response={"type": "string"},
                            params=query,
                            response_types=("*/*",),
                            description=f"connect {method.upper()} requests to proxy of {res.kind}",
                        ),
                        item_params[:-1] + params,
                    )

    def add_discovery(self, path: str, op_id: str, schema: str, tag: str, description: str) -> None:
        self.paths[path] = {
            "get": {
                "description": description,
                "operationId": op_id,
                "tags": [tag],
                "responses": self._responses(_ref(schema), ("200",), _JSON_TYPES),
            }
        }


# ---------------------------------------------------------------------------------------------
# Documents


def _schemas_for(builder: _Builder, v3: bool) -> dict[str, Schema]:
    defs = builder.defs
    names = defs.closure({ref.removeprefix(V3_REF) for ref in _refs(builder.paths)}, builder.custom)
    prefix = V3_REF if v3 else V2_REF
    out: dict[str, Schema] = {}
    for name in names:
        schema = builder.custom.get(name) or defs.schemas.get(name)
        if schema is None:
            continue
        if not v3 and schema.get("x-kubernetes-preserve-unknown-fields"):
            # Swagger 2.0 cannot say "and anything else"; kubectl's v2 validator would reject every
            # field not listed, so the object stays untyped there.
            schema = {k: v for k, v in schema.items() if k != "properties"}
        out[name] = _render_definition(name, schema, prefix, v3)
    return out


def _security_scheme() -> Schema:
    return {
        "BearerToken": {
            "type": "apiKey",
            "name": "authorization",
            "in": "header",
            "description": "Bearer Token authentication",
        }
    }


def _v3_document(builder: _Builder) -> Schema:
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": builder.paths,
        "components": {"schemas": _schemas_for(builder, True), "securitySchemes": _security_scheme()},
    }


def _discovery_builder(defs: Definitions, key: str) -> _Builder:
    """The small documents upstream serves for `/api/`, `/apis/` and `/apis/<group>/`."""
    builder = _Builder(defs)
    if key == "api":
        builder.add_discovery(
            "/api/", "getCoreAPIVersions", _META + "APIVersions", "core", "get available API versions"
        )
    elif key == "apis":
        builder.add_discovery("/apis/", "getAPIVersions", _META + "APIGroupList", "apis", "get available API versions")
    else:
        group = key.removeprefix("apis/")
        friendly = _friendly_group(group)
        builder.add_discovery(
            f"/apis/{group}/",
            f"get{friendly}APIGroup",
            _META + "APIGroup",
            friendly[:1].lower() + friendly[1:],
            "get information of a group",
        )
    return builder


def _gv_builder(defs: Definitions, resources: list[Resource], group: str, version: str) -> _Builder:
    builder = _Builder(defs)
    friendly = _friendly_group(group)
    tag = f"{friendly[:1].lower()}{friendly[1:]}_{version}"
    builder.add_discovery(
        f"{_gv_prefix(group, version)}/",
        f"get{friendly}{version[:1].upper()}{version[1:]}APIResources",
        _META + "APIResourceList",
        tag,
        "get available resources",
    )
    for res in resources:
        if res.group == group and res.version == version:
            builder.add_resource(res)
    return builder


def document_keys(resources: list[Resource]) -> list[str]:
    """The names under `/openapi/v3/`: `api`, `apis`, each `apis/<group>` and each group-version."""
    keys = {"api", "apis"}
    for res in resources:
        keys.add(_gv_key(res.group, res.version))
        if res.group:
            keys.add(f"apis/{res.group}")
    return sorted(keys)


def _builder_for(defs: Definitions, resources: list[Resource], key: str) -> _Builder:
    parts = key.split("/")
    if len(parts) == 1 or parts[0] == "apis" and len(parts) == 2:
        return _discovery_builder(defs, key)
    group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
    return _gv_builder(defs, resources, group, version)


def build_v3(resources: list[Resource], key: str) -> Schema | None:
    """The v3 document for one index entry, or None when the catalog serves nothing there."""
    if key not in document_keys(resources):
        return None
    return _v3_document(_builder_for(definitions(), resources, key))


def _v2_params(params: list[Schema]) -> list[Schema]:
    out = []
    for param in params:
        flat = {k: v for k, v in param.items() if k != "schema"}
        flat.update(param.get("schema", {}))
        out.append(flat)
    return out


def _v2_operation(op: Schema) -> Schema:
    """A v3 operation in swagger 2.0 form: body parameter, consumes/produces, schemas in responses."""
    out: Schema = {k: v for k, v in op.items() if k not in ("parameters", "requestBody", "responses")}
    params = _v2_params(op.get("parameters", []))
    if "requestBody" in op:
        content = op["requestBody"]["content"]
        out["consumes"] = list(content)
        body = next(iter(content.values()))["schema"]
        params.insert(0, {"name": "body", "in": "body", "required": True, "schema": body})
    if params:
        out["parameters"] = params
    responses: Schema = {}
    produces: list[str] = []
    for code, response in op["responses"].items():
        flat: Schema = {"description": response["description"]}
        content = response.get("content")
        if content:
            flat["schema"] = next(iter(content.values()))["schema"]
            produces += [t for t in content if t not in produces]
        responses[code] = flat
    out["produces"] = produces
    out["schemes"] = ["https"]
    out["responses"] = responses
    return out


def _retarget(node: Any) -> Any:
    """Point v3 refs at swagger 2.0's `#/definitions/`."""
    if isinstance(node, dict):
        return {k: (V2_REF + v.removeprefix(V3_REF) if k == "$ref" and isinstance(v, str) else _retarget(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_retarget(v) for v in node]
    return node


def build_v2(resources: list[Resource]) -> Schema:
    """One swagger 2.0 document covering every served group-version."""
    defs = definitions()
    merged = _Builder(defs)
    for key in document_keys(resources):
        part = _builder_for(defs, resources, key)
        merged.paths.update(part.paths)
        merged.custom.update(part.custom)
    paths: Schema = {}
    for path, item in merged.paths.items():
        out: Schema = {}
        for method, op in item.items():
            out[method] = _v2_params(op) if method == "parameters" else _v2_operation(op)
        paths[path] = _retarget(out)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": defs.version},
        "paths": paths,
        "definitions": _schemas_for(merged, False),
        "securityDefinitions": _security_scheme(),
        "security": [{"BearerToken": []}],
    }


# ---------------------------------------------------------------------------------------------
# Swagger 2.0 as protobuf (gnostic's openapi.v2.Document), the only form of /openapi/v2 kubectl
# reads: it validates `kind: List` manifests and explains with `--output plaintext-openapiv2`.


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _pb_bytes(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _pb_str(num: int, value: str) -> bytes:
    return _pb_bytes(num, value.encode()) if value else b""


def _pb_bool(num: int, value: bool) -> bytes:
    return _varint(num << 3) + b"\x01" if value else b""


def _pb_any(num: int, value: Any) -> bytes:
    """An `Any` carries its value as YAML text; JSON is YAML."""
    return _pb_bytes(num, _pb_str(2, orjson.dumps(value).decode()))


def _pb_extensions(num: int, node: Schema) -> bytes:
    return b"".join(
        _pb_bytes(num, _pb_str(1, key) + _pb_any(2, value)) for key, value in node.items() if key.startswith("x-")
    )


_PB_SCHEMA_FIELDS: dict[str, tuple[int, str]] = {
    "$ref": (1, "s"),
    "format": (2, "s"),
    "title": (3, "s"),
    "description": (4, "s"),
    "multipleOf": (6, "d"),
    "maximum": (7, "d"),
    "exclusiveMaximum": (8, "b"),
    "minimum": (9, "d"),
    "exclusiveMinimum": (10, "b"),
    "maxLength": (11, "i"),
    "minLength": (12, "i"),
    "pattern": (13, "s"),
    "maxItems": (14, "i"),
    "minItems": (15, "i"),
    "uniqueItems": (16, "b"),
    "maxProperties": (17, "i"),
    "minProperties": (18, "i"),
    "discriminator": (26, "s"),
    "readOnly": (27, "b"),
}


def _pb_scalar(num: int, kind: str, value: Any) -> bytes:
    if kind == "s":
        return _pb_str(num, value)
    if kind == "b":
        return _pb_bool(num, value)
    if kind == "i":
        return _varint(num << 3) + _varint(int(value)) if value else b""
    return _varint(num << 3 | 1) + struct.pack("<d", float(value)) if value else b""


def _pb_schema(node: Schema) -> bytes:
    out: list[bytes] = []
    for key, value in node.items():
        if key in _PB_SCHEMA_FIELDS:
            out.append(_pb_scalar(*_PB_SCHEMA_FIELDS[key], value))
        elif key == "default":
            out.append(_pb_any(5, value))
        elif key == "example":
            out.append(_pb_any(30, value))
        elif key == "required":
            out += [_pb_str(19, name) for name in value]
        elif key == "enum":
            out += [_pb_any(20, item) for item in value]
        elif key == "additionalProperties":
            inner = _pb_bytes(1, _pb_schema(value)) if isinstance(value, dict) else _pb_bool(2, bool(value))
            out.append(_pb_bytes(21, inner))
        elif key == "type":
            kinds = value if isinstance(value, list) else [value]
            out.append(_pb_bytes(22, b"".join(_pb_str(1, k) for k in kinds)))
        elif key == "items":
            items = value if isinstance(value, list) else [value]
            out.append(_pb_bytes(23, b"".join(_pb_bytes(1, _pb_schema(i)) for i in items)))
        elif key == "allOf":
            out += [_pb_bytes(24, _pb_schema(sub)) for sub in value]
        elif key == "properties":
            named = b"".join(_pb_bytes(1, _pb_str(1, k) + _pb_bytes(2, _pb_schema(v))) for k, v in value.items())
            out.append(_pb_bytes(25, named))
    out.append(_pb_extensions(31, node))
    return b"".join(out)


def _pb_parameter(param: Schema) -> bytes:
    """A ParametersItem holding a body, query or path parameter."""
    where = param.get("in", "query")
    if where == "body":
        body = (
            _pb_str(1, param.get("description", ""))
            + _pb_str(2, param["name"])
            + _pb_str(3, where)
            + _pb_bool(4, param.get("required", False))
            + _pb_bytes(5, _pb_schema(param["schema"]))
        )
        return _pb_bytes(1, _pb_bytes(1, body))
    # Query and path sub-schemas differ only in where `type` and `uniqueItems` sit.
    type_num, unique_num, which = (6, 20, 3) if where == "query" else (5, 19, 4)
    sub = (
        _pb_bool(1, param.get("required", False))
        + _pb_str(2, where)
        + _pb_str(3, param.get("description", ""))
        + _pb_str(4, param["name"])
        + _pb_str(type_num, param.get("type", ""))
        + _pb_bool(unique_num, param.get("uniqueItems", False))
    )
    return _pb_bytes(1, _pb_bytes(2, _pb_bytes(which, sub)))


def _pb_operation(op: Schema) -> bytes:
    out = [_pb_str(1, tag) for tag in op.get("tags", [])]
    out.append(_pb_str(3, op.get("description", "")))
    out.append(_pb_str(5, op.get("operationId", "")))
    out += [_pb_str(6, t) for t in op.get("produces", [])]
    out += [_pb_str(7, t) for t in op.get("consumes", [])]
    out += [_pb_bytes(8, _pb_parameter(p)) for p in op.get("parameters", [])]
    codes = []
    for code, response in op.get("responses", {}).items():
        body = _pb_str(1, response.get("description", ""))
        if "schema" in response:
            body += _pb_bytes(2, _pb_bytes(1, _pb_schema(response["schema"])))
        codes.append(_pb_bytes(1, _pb_str(1, code) + _pb_bytes(2, _pb_bytes(1, body))))
    out.append(_pb_bytes(9, b"".join(codes)))
    out += [_pb_str(10, scheme) for scheme in op.get("schemes", [])]
    out.append(_pb_extensions(13, op))
    return b"".join(out)


_PB_METHODS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def encode_v2_protobuf(doc: Schema) -> bytes:
    """The swagger 2.0 document `build_v2` returns, in gnostic's protobuf form."""
    paths = []
    for path, item in doc["paths"].items():
        body = b"".join(_pb_bytes(_PB_METHODS[m], _pb_operation(op)) for m, op in item.items() if m in _PB_METHODS)
        body += b"".join(_pb_bytes(9, _pb_parameter(p)) for p in item.get("parameters", []))
        paths.append(_pb_bytes(2, _pb_str(1, path) + _pb_bytes(2, body)))
    definitions = b"".join(
        _pb_bytes(1, _pb_str(1, name) + _pb_bytes(2, _pb_schema(schema))) for name, schema in doc["definitions"].items()
    )
    security = b"".join(
        _pb_bytes(
            12,
            b"".join(
                _pb_bytes(1, _pb_str(1, name) + _pb_bytes(2, b"".join(_pb_str(1, s) for s in scopes)))
                for name, scopes in requirement.items()
            ),
        )
        for requirement in doc.get("security", [])
    )
    schemes = b""
    for name, scheme in doc.get("securityDefinitions", {}).items():
        api_key = (
            _pb_str(1, scheme["type"])
            + _pb_str(2, scheme["name"])
            + _pb_str(3, scheme["in"])
            + _pb_str(4, scheme.get("description", ""))
        )
        schemes += _pb_bytes(1, _pb_str(1, name) + _pb_bytes(2, _pb_bytes(2, api_key)))
    info = _pb_str(1, doc["info"]["title"]) + _pb_str(2, doc["info"]["version"])
    return (
        _pb_str(1, doc["swagger"])
        + _pb_bytes(2, info)
        + _pb_bytes(8, b"".join(paths))
        + _pb_bytes(9, definitions)
        + security
        + _pb_bytes(13, schemes)
    )


# ---------------------------------------------------------------------------------------------
# Cache and HTTP


@dataclass(frozen=True)
class Built:
    body: bytes
    etag: str  # upper-case hex sha512 of body, as upstream


def _encode(doc: Schema) -> Built:
    body = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    return Built(body, hashlib.sha512(body).hexdigest().upper())


class DocumentCache:
    """Built documents of one catalog.

    The whole-catalog documents (v2, the v3 index) are rebuilt when the generation changes; a
    group-version's v3 document is kept while the resources it is built from stay the same, so a
    new custom resource costs one small document and the index, not all of them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation: int | None = None
        self._docs: dict[tuple[str, str, tuple[Any, ...]], Built | None] = {}
        self._previous: dict[tuple[str, str, tuple[Any, ...]], Built | None] = {}

    def get(self, generation: int, resources: list[Resource], kind: str, entry: str = "") -> Built | None:
        """`kind` is `v2` (JSON), `v2pb` (protobuf), `index` (of v3) or `v3` (the index `entry`).

        Runs in a worker thread: a build takes tens to hundreds of milliseconds.
        """
        with self._lock:
            if generation != self._generation:
                self._generation = generation
                self._previous = {k: v for k, v in self._docs.items() if k[0] == "v3"}
                self._docs = {}
            return self._get(resources, kind, entry)

    def _get(self, resources: list[Resource], kind: str, entry: str) -> Built | None:
        inputs: tuple[Any, ...] = ()
        if kind == "v3":
            keys = document_keys(resources)
            inputs = (entry in keys, *(r for r in resources if _gv_key(r.group, r.version) == entry))
        key = (kind, entry, inputs)
        if key not in self._docs:
            if key in self._previous:
                self._docs[key] = self._previous.pop(key)
            else:
                self._docs[key] = self._build(resources, kind, entry)
        return self._docs[key]

    def _build(self, resources: list[Resource], kind: str, entry: str) -> Built | None:
        if kind == "v2":
            return _encode(build_v2(resources))
        if kind == "v2pb":
            body = encode_v2_protobuf(build_v2(resources))
            return Built(body, hashlib.sha512(body).hexdigest().upper())
        if kind == "index":
            index = {}
            for name in document_keys(resources):
                built = self._get(resources, "v3", name)
                if built is not None:
                    index[name] = {"serverRelativeURL": f"/openapi/v3/{name}?hash={built.etag}"}
            return _encode({"paths": index})
        doc = build_v3(resources, entry)
        return None if doc is None else _encode(doc)


_caches: weakref.WeakKeyDictionary[Catalog, DocumentCache] = weakref.WeakKeyDictionary()

JSON = "application/json"
PROTOBUF_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
_PROTOBUF_V2_OLD = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def negotiate(accept: str, offers: tuple[str, ...]) -> str | None:
    """The first of the client's acceptable media types that we offer, in the client's order."""
    if not accept.strip():
        return offers[0]
    for part in accept.split(","):
        media, *params = (p.strip().lower() for p in part.split(";"))
        if any(p.replace(" ", "") in ("q=0", "q=0.0", "q=0.00", "q=0.000") for p in params):
            continue
        for offer in offers:
            if media in (offer, "*/*", offer.split("/")[0] + "/*"):
                return PROTOBUF_V2 if offer == _PROTOBUF_V2_OLD else offer
    return None


def _status_response(err: StatusError) -> Response:
    return Response(orjson.dumps(err.to_status()), status_code=err.code, media_type=JSON)


def _etag_matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    tags = {t.strip().removeprefix("W/") for t in header.split(",")}
    return "*" in tags or f'"{etag}"' in tags


async def _serve(request: Request, kind: str, entry: str = "") -> Response:
    accept = request.headers.get("accept", "")
    offers = (JSON, PROTOBUF_V2, _PROTOBUF_V2_OLD) if kind == "v2" else (JSON,)
    media_type = negotiate(accept, offers)
    if media_type is None:
        return _status_response(not_acceptable(f"only the following media types are accepted: {', '.join(offers)}"))
    if media_type == PROTOBUF_V2:
        kind = "v2pb"
    catalog: Catalog = request.app.state.catalog
    generation = int(getattr(request.app.state, "catalog_generation", 0))
    cache_ = _caches.get(catalog)
    if cache_ is None:
        cache_ = _caches[catalog] = DocumentCache()
    built = await asyncio.to_thread(cache_.get, generation, list(catalog), kind, entry)
    if built is None:
        return _status_response(StatusError(404, "NotFound", "the server could not find the requested resource"))
    headers = {"ETag": f'"{built.etag}"', "Vary": "Accept"}
    wanted_hash = request.query_params.get("hash")
    if kind == "v3" and wanted_hash:
        if wanted_hash != built.etag:
            return Response(status_code=301, headers={"Location": f"/openapi/v3/{entry}?hash={built.etag}"})
        # The hash names this exact content, so it may be cached for good.
        headers["Cache-Control"] = "public, immutable"
        headers["Expires"] = formatdate(time.time() + 365 * 24 * 3600, usegmt=True)
    else:
        headers["Cache-Control"] = "no-cache, private"
    if _etag_matches(request.headers.get("if-none-match"), built.etag):
        return Response(status_code=304, headers=headers)
    # Go's media type parser rejects the `@` of the protobuf type; upstream answers it as a byte stream.
    content_type = "application/octet-stream" if kind == "v2pb" else media_type
    return Response(built.body, media_type=content_type, headers=headers)


@router.get("/openapi/v2", include_in_schema=False)
async def openapi_v2(request: Request) -> Response:
    return await _serve(request, "v2")


@router.get("/openapi/v3", include_in_schema=False)
async def openapi_v3_index(request: Request) -> Response:
    """The local documents, and those of the aggregated group/versions (which the aggregator proxies)."""
    response = await _serve(request, "index")
    # an OpenAPI router mounted without an apiserver (as its unit tests do) serves the local documents only
    server = getattr(request.app.state, "server", None)
    remote = server.aggregator.openapi_v3_paths() if server is not None else {}
    if response.status_code != 200 or not remote:
        return response
    body = orjson.dumps({"paths": {**orjson.loads(response.body)["paths"], **remote}})
    etag = hashlib.sha512(body).hexdigest().upper()
    if _etag_matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers={"ETag": f'"{etag}"', "Vary": "Accept"})
    return Response(body, media_type=JSON, headers={"ETag": f'"{etag}"', "Vary": "Accept",
                                                    "Cache-Control": "no-cache, private"})


@router.get("/openapi/v3/{path:path}", include_in_schema=False)
async def openapi_v3_document(request: Request, path: str) -> Response:
    return await _serve(request, "v3", path.strip("/"))
