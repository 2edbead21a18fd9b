"""Resource paths: parse `/api/v1/...` and `/apis/<group>/<version>/...` and run the verb.

The catalog decides what exists; nothing here knows a particular resource except
the few subresources with their own shape (scale, binding, eviction).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from prometheus_client import Counter, Histogram

from apiserver.auth import reviews
from apiserver.auth.tokens import TokenIssuer
from apiserver.endpoints.handlers import options
from apiserver.endpoints.handlers.watch import WatchStream, error_event
from apiserver.endpoints.printers import tables
from apiserver.endpoints.serialization import fieldvalidation, typecheck
from apiserver.endpoints.serialization.negotiation import (
    PATCH_TYPES,
    PROTOBUF,
    Representation,
    decoded_body,
    media_type,
    negotiate,
    read_body,
    to_yaml,
)
from apiserver.registry import crschema, subresources
from apiserver.registry.store import DeleteOptions, ListOptions, RESTStore, WriteOptions
from apiserver.storage.cache import Entry
from services.api import errors
from services.api.catalog import Resource
from services.api.selectors import FieldSelector, LabelSelector
from services.api.validation import go_value, is_path_segment_name

REQUESTS = Counter(
    "apiserver_request_total", "API requests by verb, group, resource and code.",
    ["verb", "group", "resource", "subresource", "code"],
)
LATENCY = Histogram(
    "apiserver_request_duration_seconds", "API request latency by verb and resource (watches excluded).",
    ["verb", "group", "resource", "subresource"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

NAMESPACE_SUBRESOURCES = ("status", "finalize")
SCALE_SUBRESOURCES = ("scale",)


@dataclass
class Target:
    """What a resource path names."""

    res: Resource
    namespace: str | None
    name: str | None
    subresource: str
    legacy_watch: bool = False


def parse_path(catalog: Any, legacy: bool, parts: list[str]) -> Target | None:
    """Resolve path segments after `/api` (legacy) or `/apis` to a target, or None for a discovery path."""
    if legacy:
        if not parts:
            return None
        group, version, rest = "", parts[0], parts[1:]
    else:
        if len(parts) < 2:
            return None
        group, version, rest = parts[0], parts[1], parts[2:]
    if not rest:
        return None
    legacy_watch = False
    if rest[0] == "watch":
        legacy_watch = True
        rest = rest[1:]
        if not rest:
            raise errors.not_found("", "", "watch")
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in NAMESPACE_SUBRESOURCES:
        namespace = rest[1]
        rest = rest[2:]
    plural = rest[0]
    res = catalog.get(group, version, plural)
    if res is None:
        raise errors.StatusError(
            404, "NotFound", "the server could not find the requested resource", {}
        )
    name = rest[1] if len(rest) > 1 else None
    sub = "/".join(rest[2:]) if len(rest) > 2 else ""
    if sub and sub.split("/", 1)[0] not in res.subresources:
        raise errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})
    if name == "":
        name = None
    _check_segment("Namespace", namespace)
    _check_segment("Name", name)
    if res.namespaced and namespace is None and name is not None and plural != "namespaces":
        raise errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})
    if not res.namespaced and namespace is not None:
        raise errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})
    return Target(res, namespace, name, sub, legacy_watch)


def _check_segment(what: str, value: str | None) -> None:
    """A name or namespace from the path must be one path segment, as upstream's storage keys require."""
    if value is None:
        return
    problems = is_path_segment_name(value)
    if problems:
        raise errors.bad_request(f"{what} parameter invalid: {go_value(value)}: {';'.join(problems)}")


def _columns(res: Resource) -> list[dict[str, Any]] | None:
    """A custom resource's additionalPrinterColumns (None: the built-in printers decide)."""
    return list(res.printer_columns) if res.printer_columns else None


def _bool(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


_DECIMAL = re.compile(r"[+-]?[0-9]+")
_INT64 = range(-(1 << 63), 1 << 63)


def _int(params: Any, name: str) -> int | None:
    """An int64 query parameter, parsed as upstream's strconv.ParseInt parses it (400 when it cannot)."""
    value = params.get(name)
    if value is None:
        return None
    quoted = orjson.dumps(value).decode()
    if not _DECIMAL.fullmatch(value):
        raise errors.bad_request(f"strconv.ParseInt: parsing {quoted}: invalid syntax")
    number = int(value)
    if number not in _INT64:
        raise errors.bad_request(f"strconv.ParseInt: parsing {quoted}: value out of range")
    return number


def _selectors(params: Any) -> tuple[LabelSelector | None, FieldSelector | None]:
    labels = fields = None
    if params.get("labelSelector"):
        try:
            labels = LabelSelector.parse(params["labelSelector"])
        except ValueError as exc:
            raise errors.bad_request(f"unable to parse requirement: {exc}" if "requirement" not in str(exc)
                                     else str(exc)) from exc
    if params.get("fieldSelector"):
        try:
            fields = FieldSelector.parse(params["fieldSelector"])
        except ValueError as exc:
            raise errors.bad_request(str(exc)) from exc
    return labels, fields


def _patched_decoder(res: Resource) -> Callable[[dict[str, Any]], None]:
    """How a patched or applied object is decoded, in place, before the strategy sees it: a built-in one
    as upstream's Go decoder would (its nulls read, 422 for fields of the wrong type); a custom one's
    metadata as the built-in ObjectMeta (its schema reads the rest)."""
    if res.custom:
        return typecheck.decode_metadata

    def check(obj: dict[str, Any]) -> None:
        problem = typecheck.decode(res.api_version, res.kind, obj)
        if problem is not None:
            meta = obj.get("metadata")
            name = meta.get("name", "") if isinstance(meta, dict) else ""
            raise errors.StatusError(422, "Invalid", f'{res.kind} "{name}" is invalid: patch: Invalid value: '
                                     f'"{orjson.dumps(obj).decode()}": {problem}',
                                     {"name": name, "kind": res.kind, "causes": [
                                         {"reason": "FieldValueInvalid", "message": f"Invalid value: {problem}",
                                          "field": "patch"}]})

    return check


async def _decode_as(request: Request, api_version: str, kind: str) -> dict[str, Any]:
    """A subresource's body decoded as upstream decodes it into the Go struct of `kind`: its nulls
    read, and 400 when it is no object or has fields of the wrong type."""
    body = await decoded_body(request)
    _type_check(api_version, kind)(body)
    return body


def _type_check(api_version: str, kind: str) -> Callable[[dict[str, Any]], None]:
    """A patched subresource object checked as upstream decodes it into the Go struct of `kind`."""

    def check(obj: Any) -> None:
        if not isinstance(obj, dict):
            raise errors.bad_request(f"a {kind} object is required")
        wrong_type = typecheck.type_error(api_version, kind, obj)
        if wrong_type is not None:
            raise wrong_type

    return check


#: The front door's check of an object a write would store, and the current one (see `WriteOptions.guard`).
Guard = Callable[[dict[str, Any], dict[str, Any] | None], None]


def _pruner(res: Resource) -> Callable[[dict[str, Any]], list[str]]:
    """What decoding a body of this resource drops, in place, and where: the structural schema and
    ObjectMeta of a custom resource, upstream's Go struct of a built-in one."""
    if res.custom and res.schema is not None:
        schema = res.schema
        return lambda obj: crschema.prune(schema, obj, fieldvalidation.prune_object_meta)
    return lambda obj: fieldvalidation.prune_unknown_fields(res.api_version, res.kind, obj)


def _write_options(request: Request, verb: str, guard: Guard | None = None) -> WriteOptions:
    """Options of a write, validated as upstream validates the verb's options kind (a read has none);
    the field manager defaults to the user agent's product, as upstream's does. `guard` is the front
    door's own check of the object to be written (see `WriteOptions.guard`)."""
    params = request.query_params
    manager = params.get("fieldManager") or ""
    dry_run = params.getlist("dryRun")
    kind = options.OPTIONS_KINDS.get(verb)
    if kind is not None and kind != "DeleteOptions":
        causes = options.field_manager_causes(manager) + options.dry_run_causes(dry_run)
        if kind == "PatchOptions":
            fieldvalidation.directive(params.get("fieldValidation"), kind)
        options.refuse(kind, causes)
    if not manager:
        manager = (request.headers.get("user-agent") or "").split("/", 1)[0] or "unknown"
    return WriteOptions(dry_run=bool(dry_run), field_manager=manager, force=_bool(params.get("force")),
                        user=request.scope.get("pyk8s.user"), guard=guard)


class ResourceHandler:
    """Runs one request against the right `RESTStore`."""

    def __init__(self, stores: dict[tuple[str, str, str], RESTStore], tokens: TokenIssuer) -> None:
        self.stores = stores
        self.deps = subresources.Dependencies(stores, functools.partial(reviews.token_request, tokens))

    def store(self, res: Resource) -> RESTStore:
        return self.stores[(res.group, res.version, res.plural)]

    async def handle(self, request: Request, target: Target, guard: Guard | None = None) -> Response:
        """Run the request's verb; `guard` checks what a write would store before admission sees it."""
        method = request.method
        if target.legacy_watch and method != "GET":
            raise errors.method_not_allowed()
        verb = self._verb(method, target, request.query_params)
        started = time.monotonic()
        code = 500
        try:
            response = await self._dispatch(request, target, verb, guard)
            code = response.status_code
            return response
        except errors.StatusError as exc:
            code = exc.code
            raise
        finally:
            labels = (verb, target.res.group, target.res.plural, target.subresource)
            REQUESTS.labels(*labels, str(code)).inc()
            if verb != "watch":
                LATENCY.labels(*labels).observe(time.monotonic() - started)

    @staticmethod
    def _verb(method: str, target: Target, params: Any) -> str:
        if method == "GET":
            if target.legacy_watch or _bool(params.get("watch")):
                return "watch"
            return "get" if target.name else "list"
        if method == "POST":
            return "create"
        if method == "PUT":
            return "update"
        if method == "PATCH":
            return "patch"
        if method == "DELETE":
            return "delete" if target.name else "deletecollection"
        return method.lower()

    async def _dispatch(self, request: Request, target: Target, verb: str, guard: Guard | None) -> Response:
        res = target.res
        store = self.store(res)
        params = request.query_params
        sub = target.subresource
        rep = negotiate(request.headers.get("accept"), is_list=target.name is None,
                        include_object=params.get("includeObject", "Metadata"))
        if sub:
            return await self._subresource(request, target, store, verb, rep, guard)
        if verb not in res.verbs:
            raise errors.method_not_allowed()
        ns, name = target.namespace, target.name
        if verb == "get":
            obj = await store.get(ns, name or "", params.get("resourceVersion", ""))
            return self._object(obj, rep, res)
        if verb in ("list", "watch"):
            labels, fields = _selectors(params)
            opts = ListOptions(
                labels,
                fields,
                params.get("resourceVersion", ""),
                params.get("resourceVersionMatch", ""),
                _int(params, "limit") or 0,
                params.get("continue", ""),
            )
            send_initial = params.get("sendInitialEvents")
            options.refuse("ListOptions", options.list_causes(
                verb == "watch", opts, None if send_initial is None else _bool(send_initial),
                _bool(params.get("allowWatchBookmarks"))))
            if verb == "watch":
                return await self._watch(request, target, store, opts, rep)
            items, list_meta = await store.list(ns, opts)
            return self._list(store, items, list_meta, rep)
        wopts = _write_options(request, verb, guard)
        dry_run = wopts.dry_run
        if verb == "create" and res.kind == "Binding" and not res.group:
            binder = subresources.BindingREST(store, self.deps)
            binding = await self._action_body(request, binder)
            pod_name = (binding.get("metadata") or {}).get("name", "")
            return self._json(await binder.create(ns, pod_name, binding, wopts), 201)
        if verb == "create":
            if name:
                raise errors.method_not_allowed()
            body, warnings = await self._body(request, res)
            obj = await store.create(ns, body, wopts)
            return self._object(obj, rep, res, 201, warnings)
        if verb == "update":
            body, warnings = await self._body(request, res)
            obj, created = await store.update(ns, name or "", body, wopts)
            return self._object(obj, rep, res, 201 if created else 200, warnings)
        if verb == "patch":
            patch_type, patch, raw = await self._patch_request(request)
            check, validated = self._patch_check(request, res, patch_type, raw)
            if patch_type == "apply":
                obj, created = await store.apply(ns, name or "", patch, wopts, check=check)
                return self._object(obj, rep, res, 201 if created else 200, validated())
            obj = await store.patch(ns, name or "", patch_type, patch, wopts, check=check)
            return self._object(obj, rep, res, 200, validated())
        if verb == "delete":
            dopts = await self._delete_options(request, dry_run)
            obj, gone = await store.delete(ns, name or "", dopts)
            notes = fieldvalidation.warning_headers(store.strategy.delete_warnings(dopts.propagation_chosen))
            if gone and not store.strategy.graceful:
                return self._json(self._success(res, obj), warnings=notes)
            return self._object(obj, rep, res, 200, notes)
        if verb == "deletecollection":
            labels, fields = _selectors(params)
            dopts = await self._delete_options(request, dry_run)
            deleted = await store.delete_collection(ns, ListOptions(labels, fields), dopts)
            notes = fieldvalidation.warning_headers(store.strategy.delete_warnings(dopts.propagation_chosen))
            return self._list(store, deleted, {"resourceVersion": ""}, rep, notes)
        raise errors.method_not_allowed()

    # -- bodies -------------------------------------------------------------------
    async def _body(self, request: Request, res: Resource) -> tuple[Any, list[str]]:
        raw = await read_body(request)
        content_type = request.headers.get("content-type")
        body = await decoded_body(request)
        options_kind = "CreateOptions" if request.method == "POST" else "UpdateOptions"
        mode = fieldvalidation.directive(request.query_params.get("fieldValidation"), options_kind)
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        if res.custom:
            typecheck.decode_metadata(body)
        else:
            wrong_type = typecheck.type_error(res.api_version, res.kind, body)
            if wrong_type is not None:
                raise wrong_type
        unknown = _pruner(res)(body)
        if mode == "Ignore":
            return body, []
        mt = media_type(content_type)
        duplicates = [] if mt == PROTOBUF else fieldvalidation.duplicate_fields(
            raw, mt.endswith("yaml"), api_version=res.api_version, kind=res.kind
        )
        if mode == "Strict" and (unknown or duplicates):
            raise fieldvalidation.field_validation_error(
                unknown, duplicates, kind=res.kind, api_version=str(body.get("apiVersion") or res.api_version)
            )
        return body, fieldvalidation.warnings(unknown, duplicates)

    @staticmethod
    def _patch_check(
        request: Request, res: Resource, patch_type: str, raw: bytes
    ) -> tuple[Callable[[dict[str, Any]], None], Callable[[], list[str]]]:
        """How a patched (or applied) object of `res` is vetted before the strategy sees it, as the
        request's `fieldValidation` asks, and the warnings that leaves once the write is done."""
        mode = fieldvalidation.directive(request.query_params.get("fieldValidation"), "PatchOptions")
        if patch_type == "apply":
            warnings = fieldvalidation.apply_warnings(mode, raw)
            return _patched_decoder(res), lambda: warnings
        validation = fieldvalidation.PatchValidation(mode, raw, patch_type, _pruner(res), _patched_decoder(res))
        return validation, lambda: validation.warnings

    async def _patch_request(self, request: Request) -> tuple[str, Any, bytes]:
        """The patch type, the decoded patch and its raw bytes (where field validation finds repeats)."""
        mt = media_type(request.headers.get("content-type"))
        patch_type = PATCH_TYPES.get(mt)
        if patch_type is None:
            raise errors.StatusError(
                415, "UnsupportedMediaType",
                f"the server does not support the patch type {mt!r}; supported: " + ", ".join(PATCH_TYPES),
            )
        raw = await read_body(request)
        if patch_type == "apply":
            if not request.query_params.get("fieldManager"):
                raise errors.invalid("PatchOptions", "meta.k8s.io", "", [errors.cause(
                    "fieldManager", "Required value: is required for apply patch", "FieldValueRequired")])
        elif "force" in request.query_params:
            raise errors.invalid("PatchOptions", "meta.k8s.io", "", [errors.cause(
                "force", "Forbidden: may not be specified for non-apply patch", "FieldValueForbidden")])
        # The patch media types are JSON, or YAML for apply: the content type decodes them as they are.
        return patch_type, await decoded_body(request), raw

    async def _delete_options(self, request: Request, dry_run: bool) -> DeleteOptions:
        params = request.query_params
        opts = DeleteOptions(dry_run=dry_run, user=request.scope.get("pyk8s.user"))
        raw = await read_body(request)
        body: dict[str, Any] = {}
        if raw.strip():
            decoded = await decoded_body(request)
            if not isinstance(decoded, dict):
                raise errors.bad_request("DeleteOptions must be a JSON object")
            # Upstream answers a DeleteOptions its decoder refuses with the bare decode error.
            problem = typecheck.decode("v1", "DeleteOptions", decoded)
            if problem is not None:
                raise errors.bad_request(problem)
            body = decoded
        grace = body.get("gracePeriodSeconds")
        q_grace = _int(params, "gracePeriodSeconds")
        opts.grace_period = q_grace if q_grace is not None else (int(grace) if grace is not None else None)
        opts.propagation = params.get("propagationPolicy") or body.get("propagationPolicy")
        orphan = params.get("orphanDependents")
        if orphan is not None:
            opts.orphan_dependents = _bool(orphan)
        elif body.get("orphanDependents") is not None:
            opts.orphan_dependents = bool(body["orphanDependents"])
        pre = body.get("preconditions") or {}
        if not isinstance(pre, dict):
            raise errors.bad_request("preconditions must be an object")
        opts.precondition_uid = pre.get("uid")
        opts.precondition_rv = pre.get("resourceVersion")
        body_dry_run = body.get("dryRun")
        options.refuse("DeleteOptions", options.delete_causes(
            opts.propagation, opts.orphan_dependents is not None,
            [*params.getlist("dryRun"), *(body_dry_run if isinstance(body_dry_run, list) else [])]))
        if body_dry_run and not dry_run:
            opts.dry_run = body_dry_run == ["All"]
        return opts

    # -- responses ----------------------------------------------------------------
    @staticmethod
    def _json(obj: Any, status: int = 200, warnings: list[str] | None = None) -> Response:
        headers = {"Warning": ", ".join(warnings)} if warnings else None
        return Response(orjson.dumps(obj), status, headers=headers, media_type="application/json")

    def _object(
        self, obj: dict[str, Any], rep: Representation, res: Resource, status: int = 200,
        warnings: list[str] | None = None,
    ) -> Response:
        headers = {"Warning": ", ".join(warnings)} if warnings else None
        if rep.form == "Table":
            body: Any = tables.to_table(res, [obj], include_object=rep.include_object,
                                         printer_columns=_columns(res))
        elif rep.form == "PartialObjectMetadata":
            body = tables.partial_object_metadata(obj)
        else:
            body = obj
        if rep.yaml:
            return Response(to_yaml(body), status, headers=headers, media_type="application/yaml")
        return Response(orjson.dumps(body), status, headers=headers, media_type="application/json")

    def _list(
        self, store: RESTStore, items: list[Entry | dict[str, Any]], list_meta: dict[str, Any], rep: Representation,
        warnings: list[str] | None = None,
    ) -> Response:
        res = store.res
        headers = {"Warning": ", ".join(warnings)} if warnings else None
        if rep.form != "object":
            objs = [store.out(i.obj) if isinstance(i, Entry) else store.out(i) for i in items]
            if rep.form == "Table":
                body: Any = tables.to_table(res, objs, list_meta=list_meta, include_object=rep.include_object,
                                             printer_columns=_columns(res))
            else:
                body = tables.partial_object_metadata_list(objs, list_meta)
            if rep.yaml:
                return Response(to_yaml(body), 200, headers=headers, media_type="application/yaml")
            return Response(orjson.dumps(body), 200, headers=headers, media_type="application/json")
        if rep.yaml:
            objs = [store.out(i.obj) if isinstance(i, Entry) else store.out(i) for i in items]
            body = {"kind": res.list_kind, "apiVersion": res.api_version, "metadata": list_meta, "items": objs}
            return Response(to_yaml(body), 200, headers=headers, media_type="application/yaml")
        parts: list[bytes] = []
        for item in items:
            if isinstance(item, Entry) and not store._converts:
                parts.append(item.encoded())
            else:
                obj = item.obj if isinstance(item, Entry) else item
                parts.append(orjson.dumps(store.out(obj)))
        head = orjson.dumps({"kind": res.list_kind, "apiVersion": res.api_version, "metadata": list_meta})
        payload = head[:-1] + b',"items":[' + b",".join(parts) + b"]}"
        return Response(payload, 200, headers=headers, media_type="application/json")

    #: For resources served without a store behind them (ComponentStatus): the same representations.
    render = _object
    render_list = _list

    @staticmethod
    def _success(res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        m = obj.get("metadata", {})
        details: dict[str, Any] = {"name": m.get("name", ""), "kind": res.plural, "uid": m.get("uid", "")}
        if res.group:
            details["group"] = res.group
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    # -- watch ----------------------------------------------------------------------
    async def _watch(
        self, request: Request, target: Target, store: RESTStore, opts: ListOptions, rep: Representation
    ) -> Response:
        params = request.query_params
        pred = store.predicate(opts)
        name = target.name
        if not name and opts.field_selector is not None:
            for fname, op, value in opts.field_selector.requirements:
                if fname == "metadata.name" and op in ("=", "=="):
                    name = value
        send_initial = params.get("sendInitialEvents")
        send_initial_events = None if send_initial is None else _bool(send_initial)
        allow_bookmarks = _bool(params.get("allowWatchBookmarks"))
        render = None
        if rep.form == "Table":
            res = target.res

            def render(obj: dict[str, Any], first: bool) -> bytes:
                return orjson.dumps(tables.to_table(res, [obj], with_columns=first,
                                                    include_object=rep.include_object,
                                                    printer_columns=_columns(res)))
        elif rep.form == "PartialObjectMetadata" or rep.form == "PartialObjectMetadataList":
            def render(obj: dict[str, Any], first: bool) -> bytes:
                return orjson.dumps(tables.partial_object_metadata(obj))
        stream = WatchStream(
            store,
            target.namespace,
            name,
            pred,
            opts.resource_version,
            send_initial_events,
            allow_bookmarks,
            _int(params, "timeoutSeconds"),
            render,
        )
        try:
            await stream.prepare()
        except errors.StatusError as exc:
            if exc.code != 410:
                raise
            stream.close()
            return Response(error_event(exc), 200, media_type="application/json")
        return StreamingResponse(stream.events(), 200, media_type="application/json",
                                 headers={"Transfer-Encoding": "chunked"})

    # -- subresources -----------------------------------------------------------------
    async def _subresource(
        self, request: Request, target: Target, store: RESTStore, verb: str, rep: Representation,
        guard: Guard | None,
    ) -> Response:
        """HTTP around the subresource's REST object: decode what it takes, render what it returns (the
        parent's representations for a subresource of the parent's kind, JSON for one of its own)."""
        res, ns, name, sub = target.res, target.namespace, target.name or "", target.subresource
        wopts = _write_options(request, verb, guard)
        rest = subresources.rest_for(res, sub, store, self.deps)
        if rest is None:
            raise errors.StatusError(
                405 if sub in res.subresources else 404, "MethodNotAllowed" if sub in res.subresources else "NotFound",
                f"the server does not serve {verb} on {res.plural}/{sub} yet",
            )
        if verb not in rest.verbs:
            raise errors.method_not_allowed()
        warnings: list[str] = []
        if verb == "create":
            body = await self._action_body(request, rest)
            out = await rest.create(ns, name, body, wopts)
            return self._json(out, int(out.get("code") or 201) if out.get("kind") == "Status" else 201)
        if verb == "get":
            obj = await rest.get(ns, name)
        elif verb == "update":
            if rest.kind is None:
                body, warnings = await self._body(request, res)
            else:
                body = await _decode_as(request, *rest.kind)
            obj = await rest.update(ns, name, body, wopts)
        else:
            patch_type, patch, raw = await self._patch_request(request)
            if rest.kind is None:
                check, validated = self._patch_check(request, res, patch_type, raw)
                obj = await rest.patch(ns, name, patch_type, patch, wopts, check)
                warnings = validated()
            else:
                obj = await rest.patch(ns, name, patch_type, patch, wopts, _type_check(*rest.kind))
        if rest.kind is not None:
            return self._json(obj)
        return self._object(obj, rep, res, 200, warnings)

    async def _action_body(self, request: Request, rest: subresources.SubresourceREST) -> dict[str, Any]:
        """The body of a create on a subresource, as the Go struct of its kind; {} for an empty one
        where the subresource takes none."""
        assert rest.kind is not None
        if rest.body_optional and not (await read_body(request)).strip():
            return {}
        return await _decode_as(request, *rest.kind)
