"""An in-memory apiserver behind the real client's transport, for testing one controller alone.

Upstream tests a controller's sync with a fake clientset and informers fed by hand. Here the fake
sits one layer lower: `FakeApiServer.client()` is the real `services.client.Client` whose httpx
transport answers from memory, so request encoding, typed errors, list pagination, watch streaming
and the informers all run unchanged. The server keeps upstream's rules a controller depends on:
resourceVersions from one counter, 409 on a stale update or a uid precondition that no longer
holds, 404 and AlreadyExists, label and field selectors on list and watch, generateName, the status
subresource (a main-resource write keeps status, a status write keeps the rest), merge, strategic
and JSON patches, finalizers and foreground/orphan deletion, and discovery from the catalog.

Every request is recorded as an `Action`, so a test asserts what the controller wrote.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import httpx
import orjson

from services.api import errors
from services.api.catalog import Catalog, Resource
from services.api.errors import StatusError
from services.api.meta import generate_name, new_uid, now_rfc3339
from services.api.patch import PatchError, json_merge_patch, json_patch
from services.api.selectors import FieldSelector, LabelSelector
from services.api.strategic import strategic_merge_patch
from services.client import Client, ClientConfig, ResourceType

Obj = dict[str, Any]

SERVER = "http://fake-apiserver"
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
#: verbs that change state, the ones tests usually assert on
WRITES = frozenset({"create", "update", "patch", "delete"})


@dataclass(frozen=True)
class Action:
    """One request the server answered (or refused), as upstream's fake clientset records it."""

    verb: str
    resource: str
    namespace: str
    name: str = ""
    subresource: str = ""
    body: Any = None
    patch_type: str = ""
    #: the object as stored after the request, None when it failed or removed the object
    result: Obj | None = None
    code: int = 200


@dataclass
class _Watcher:
    key: tuple[str, str]
    namespace: str
    labels: LabelSelector
    fields: FieldSelector
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)

    def wants(self, key: tuple[str, str], obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        return (key == self.key and (not self.namespace or meta.get("namespace") == self.namespace)
                and self.labels.matches(meta.get("labels")) and self.fields.matches(_field_values(obj, self.fields)))


def _field_values(obj: Obj, selector: FieldSelector) -> dict[str, str]:
    """The values of the fields `selector` names, any dotted path of the object (missing ones empty),
    where upstream's registries offer a fixed set per resource."""
    values: dict[str, str] = {}
    for path, _, _ in selector.requirements:
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, bool):
            value = "true" if value else "false"
        values[path] = "" if value is None else str(value)
    return values


class _WatchStream(httpx.AsyncByteStream):
    def __init__(self, server: FakeApiServer, watcher: _Watcher, timeout: float | None) -> None:
        self._server = server
        self._watcher = watcher
        self._timeout = timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async with asyncio.timeout(self._timeout):
                while True:
                    line = await self._watcher.queue.get()
                    if line is None:
                        return
                    yield line
        except TimeoutError:
            return
        finally:
            self._server._unwatch(self._watcher)

    async def aclose(self) -> None:
        self._server._unwatch(self._watcher)


class FakeApiServer:
    """The state of a pretend cluster, served over an httpx transport; see the module docstring."""

    def __init__(self, catalog: Catalog | None = None) -> None:
        self.catalog = catalog or Catalog()
        self.actions: list[Action] = []
        self._objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        self._revision = itertools.count(1)
        self._rv = 0
        #: (resourceVersion, resource key, event line, object) for watches from an older resourceVersion
        self._history: list[tuple[int, tuple[str, str], bytes, Obj]] = []
        self._watchers: list[_Watcher] = []
        #: (verb, plural) -> a StatusError the next matching request fails with
        self._failures: dict[tuple[str, str], list[StatusError]] = {}

    # -- what tests call -----------------------------------------------------------------------------

    def transport(self) -> httpx.AsyncBaseTransport:
        """An httpx transport answering from this server, for a Client built by hand."""
        return _Transport(self)

    def client(self) -> Client:
        """The real client, talking to this server; `max_retries=0` so a failure surfaces at once."""
        return Client(ClientConfig(server=SERVER, qps=0.0), transport=self.transport(), max_retries=0)

    def seed(self, resource: ResourceType, obj: Obj) -> Obj:
        """Store an object as if a user had created it earlier (recorded as no action)."""
        res = self._resource(resource.group, resource.version, resource.plural)
        return self._create(res, copy.deepcopy(obj), (obj.get("metadata") or {}).get("namespace") or "")

    def replace(self, resource: ResourceType, obj: Obj) -> Obj:
        """Overwrite a stored object, status included, as another component would (recorded as no action)."""
        res = self._resource(resource.group, resource.version, resource.plural)
        meta = obj["metadata"]
        current = self._current(res, meta.get("namespace") or "", meta["name"])
        new = copy.deepcopy(obj)
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        stored = self._store(res, current, new, "")
        if res.has_status:
            stored = self._store(res, stored, {**new, "metadata": {**new["metadata"], **stored["metadata"]}}, "status")
        return copy.deepcopy(stored)

    def get(self, resource: ResourceType, name: str, namespace: str = "") -> Obj | None:
        stored = self._objects.get((resource.group, resource.plural), {}).get((namespace, name))
        return copy.deepcopy(stored) if stored is not None else None

    def list(self, resource: ResourceType, namespace: str | None = None) -> list[Obj]:
        objs = self._objects.get((resource.group, resource.plural), {})
        return [copy.deepcopy(o) for (ns, _), o in sorted(objs.items()) if namespace is None or ns == namespace]

    def writes(self, resource: str | None = None, verb: str | None = None) -> list[Action]:
        """The successful writes, optionally of one resource (plural) and verb, in order."""
        return [a for a in self.actions if a.verb in WRITES and a.code < 400
                and (resource is None or a.resource == resource) and (verb is None or a.verb == verb)]

    def clear_actions(self) -> None:
        self.actions.clear()

    def fail_next(self, verb: str, resource: str, error: StatusError) -> None:
        """Make the next `verb` on `resource` fail with `error` (e.g. a quota's Forbidden)."""
        self._failures.setdefault((verb, resource), []).append(error)

    def close_watches(self) -> None:
        """End every open watch, as an apiserver shutting down would."""
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)

    # -- storage -------------------------------------------------------------------------------------

    def _resource(self, group: str, version: str, plural: str) -> Resource:
        res = self.catalog.get(group, version, plural)
        if res is None:
            raise errors.not_found(plural, group, "")
        return res

    def _next_rv(self) -> str:
        self._rv = next(self._revision)
        return str(self._rv)

    def _emit(self, key: tuple[str, str], kind: str, obj: Obj) -> None:
        line = orjson.dumps({"type": kind, "object": obj}) + b"\n"
        self._history.append((self._rv, key, line, obj))
        for watcher in self._watchers:
            if watcher.wants(key, obj):
                watcher.queue.put_nowait(line)

    def _unwatch(self, watcher: _Watcher) -> None:
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def _create(self, res: Resource, obj: Obj, namespace: str) -> Obj:
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                         "sent on the request")
            meta["namespace"] = namespace or meta.get("namespace") or ""
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.invalid(res.kind, res.group, "", [errors.cause("metadata.name",
                                     "Required value: name or generateName is required", "FieldValueRequired")])
            meta["name"] = generate_name(meta["generateName"])
        store = self._objects.setdefault(res.group_resource, {})
        key = (meta.get("namespace") or "", meta["name"])
        if key in store:
            raise errors.already_exists(res.plural, res.group, meta["name"])
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        meta["uid"] = meta.get("uid") or new_uid()
        meta["creationTimestamp"] = meta.get("creationTimestamp") or now_rfc3339()
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = self._next_rv()
        store[key] = obj
        self._emit(res.group_resource, "ADDED", obj)
        return obj

    def _current(self, res: Resource, namespace: str, name: str) -> Obj:
        found = self._objects.get(res.group_resource, {}).get((namespace if res.namespaced else "", name))
        if found is None:
            raise errors.not_found(res.plural, res.group, name)
        return found

    def _store(self, res: Resource, current: Obj, new: Obj, subresource: str) -> Obj:
        """Write `new` over `current` as an update of the object or of its status subresource."""
        meta = current["metadata"]
        new_meta = new.setdefault("metadata", {})
        wanted_rv = new_meta.get("resourceVersion")
        if wanted_rv and wanted_rv != meta["resourceVersion"]:
            raise errors.conflict(res.plural, res.group, meta["name"],
                                  "the object has been modified; please apply your changes to the latest "
                                  "version and try again")
        if new_meta.get("uid") and new_meta["uid"] != meta["uid"]:
            raise errors.conflict(res.plural, res.group, meta["name"],
                                  f"Precondition failed: UID in precondition: {new_meta['uid']}, "
                                  f"UID in object meta: {meta['uid']}")
        if subresource == "status":
            stored = {**copy.deepcopy(current), "status": copy.deepcopy(new.get("status"))}
        else:
            stored = copy.deepcopy(new)
            if res.has_status:
                stored["status"] = copy.deepcopy(current.get("status"))
            for fixed in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp"):
                if meta.get(fixed) is not None:
                    stored["metadata"][fixed] = meta[fixed]
            stored["metadata"]["generation"] = int(meta.get("generation") or 1) + (
                1 if stored.get("spec") != current.get("spec") else 0)
        if stored.get("status") is None:
            stored.pop("status", None)
        stored["apiVersion"], stored["kind"] = current["apiVersion"], current["kind"]
        if stored == current:
            return current
        stored["metadata"]["resourceVersion"] = self._next_rv()
        key = ((stored["metadata"].get("namespace") or ""), stored["metadata"]["name"])
        if stored["metadata"].get("deletionTimestamp") and not stored["metadata"].get("finalizers"):
            del self._objects[res.group_resource][key]
            self._emit(res.group_resource, "DELETED", stored)
            return stored
        self._objects[res.group_resource][key] = stored
        self._emit(res.group_resource, "MODIFIED", stored)
        return stored

    def _delete(self, res: Resource, current: Obj, options: Obj) -> Obj:
        meta = current["metadata"]
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise errors.conflict(res.plural, res.group, meta["name"],
                                  f"Precondition failed: UID in precondition: {pre['uid']}, "
                                  f"UID in object meta: {meta['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise errors.conflict(res.plural, res.group, meta["name"], "the object has been modified")
        policy = options.get("propagationPolicy")
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        elif policy == "Orphan" and ORPHAN not in finalizers:
            finalizers.append(ORPHAN)
        key = (meta.get("namespace") or "", meta["name"])
        if not finalizers:
            del self._objects[res.group_resource][key]
            deleted = copy.deepcopy(current)
            deleted["metadata"]["resourceVersion"] = self._next_rv()
            self._emit(res.group_resource, "DELETED", deleted)
            return deleted
        if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
            return current
        marked = copy.deepcopy(current)
        marked["metadata"]["finalizers"] = finalizers
        marked["metadata"].setdefault("deletionTimestamp", now_rfc3339())
        marked["metadata"]["deletionGracePeriodSeconds"] = 0
        marked["metadata"]["resourceVersion"] = self._next_rv()
        self._objects[res.group_resource][key] = marked
        self._emit(res.group_resource, "MODIFIED", marked)
        return marked

    # -- HTTP ----------------------------------------------------------------------------------------

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        query = {k: v[-1] for k, v in parse_qs(request.url.query.decode(), keep_blank_values=True).items()}
        discovery = self._discovery(path)
        if discovery is not None:
            return _json(200, discovery)
        try:
            res, namespace, name, subresource = self._route(path)
        except StatusError as exc:
            return _json(exc.code, exc.to_status())
        body = orjson.loads(request.content) if request.content else None
        verb = _verb(request.method, name, query)
        patch_type = request.headers.get("content-type", "") if verb == "patch" else ""
        if verb == "watch":
            self.actions.append(Action("watch", res.plural, namespace))
            return self._watch(res, namespace, query)
        try:
            failure = self._failures.get((verb, res.plural))
            if failure:
                raise failure.pop(0)
            code, result = self._serve(verb, res, namespace, name, subresource, body, query, patch_type)
        except StatusError as exc:
            self.actions.append(Action(verb, res.plural, namespace, name, subresource, body, patch_type,
                                       None, exc.code))
            return _json(exc.code, exc.to_status())
        stored = result if verb in WRITES and result.get("kind") not in (None, "Status") else None
        self.actions.append(Action(verb, res.plural, namespace, name or (stored or {}).get("metadata", {}).get(
            "name", ""), subresource, body, patch_type, copy.deepcopy(stored), code))
        return _json(code, result)

    def _serve(self, verb: str, res: Resource, namespace: str, name: str, subresource: str, body: Any,
               query: dict[str, str], patch_type: str) -> tuple[int, Obj]:
        if verb == "list":
            return 200, self._list(res, namespace, query)
        if verb == "create":
            if not isinstance(body, dict):
                raise errors.bad_request("the body of the request was in an unknown format")
            body = copy.deepcopy(body)
            (body.get("metadata") or {}).pop("deletionTimestamp", None)
            return 201, copy.deepcopy(self._create(res, body, namespace))
        current = self._current(res, namespace, name)
        if subresource and subresource not in res.subresources:
            raise errors.not_found(f"{res.plural}/{subresource}", res.group, name)
        if subresource == "scale" and res.scale is not None and verb in ("get", "update"):
            return 200, self._scale(res, current, body if verb == "update" else None)
        if verb == "get":
            return 200, copy.deepcopy(current)
        if verb == "update":
            return 200, copy.deepcopy(self._store(res, current, copy.deepcopy(body), subresource))
        if verb == "patch":
            return 200, copy.deepcopy(self._store(res, current, self._patched(res, current, body, patch_type),
                                                  subresource))
        return 200, copy.deepcopy(self._delete(res, current, body or {}))

    def _scale(self, res: Resource, current: Obj, body: Any) -> Obj:
        """The autoscaling/v1 Scale of an object; with `body`, spec.replicas set from it first."""
        assert res.scale is not None

        def at(obj: Obj, path: str) -> Any:
            for key in path.strip(".").split("."):
                obj = (obj or {}).get(key) if isinstance(obj, dict) else None
            return obj

        if isinstance(body, dict):
            updated = copy.deepcopy(current)
            target = updated
            *parents, last = res.scale.spec_replicas.strip(".").split(".")
            for key in parents:
                target = target.setdefault(key, {})
            target[last] = int((body.get("spec") or {}).get("replicas") or 0)
            current = self._store(res, current, updated, "")
        meta = current["metadata"]
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": meta["name"], "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                             "resourceVersion": meta["resourceVersion"]},
                "spec": {"replicas": at(current, res.scale.spec_replicas) or 0},
                "status": {"replicas": at(current, res.scale.status_replicas) or 0,
                           "selector": at(current, res.scale.label_selector) or ""}}

    def _patched(self, res: Resource, current: Obj, patch: Any, content_type: str) -> Obj:
        try:
            if content_type.startswith("application/merge-patch+json"):
                patched = json_merge_patch(copy.deepcopy(current), patch)
            elif content_type.startswith("application/strategic-merge-patch+json"):
                patched = strategic_merge_patch(res.api_version, res.kind, current, patch)
            elif content_type.startswith("application/json-patch+json"):
                patched = json_patch(current, patch)
            else:
                raise errors.unsupported_media_type(content_type)
        except PatchError as exc:
            raise errors.invalid(res.kind, res.group, current["metadata"]["name"],
                                 [errors.cause("", str(exc))]) from exc
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch did not produce an object")
        patch_meta = (patch.get("metadata") or {}) if isinstance(patch, dict) else {}
        if not patch_meta.get("resourceVersion"):
            patched.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
        return patched

    def _selectors(self, query: dict[str, str]) -> tuple[LabelSelector, FieldSelector]:
        try:
            return LabelSelector.parse(query.get("labelSelector", "")), FieldSelector.parse(
                query.get("fieldSelector", ""))
        except ValueError as exc:
            raise errors.bad_request(str(exc)) from exc

    def _list(self, res: Resource, namespace: str, query: dict[str, str]) -> Obj:
        labels, fields = self._selectors(query)
        items = [copy.deepcopy(o) for (ns, _), o in sorted(self._objects.get(res.group_resource, {}).items())
                 if (not namespace or ns == namespace) and labels.matches((o.get("metadata") or {}).get("labels"))
                 and fields.matches(_field_values(o, fields))]
        return {"kind": res.list_kind, "apiVersion": res.api_version,
                "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def _watch(self, res: Resource, namespace: str, query: dict[str, str]) -> httpx.Response:
        try:
            labels, fields = self._selectors(query)
        except StatusError as exc:
            return _json(exc.code, exc.to_status())
        watcher = _Watcher(res.group_resource, namespace, labels, fields)
        since = query.get("resourceVersion") or "0"
        if since == "0":  # upstream: the current state as ADDED events, then changes
            for obj in self._list(res, namespace, query)["items"]:
                watcher.queue.put_nowait(orjson.dumps({"type": "ADDED", "object": obj}) + b"\n")
        else:
            for rv, key, line, obj in self._history:
                if rv > int(since) and watcher.wants(key, obj):
                    watcher.queue.put_nowait(line)
        self._watchers.append(watcher)
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        return httpx.Response(200, headers={"content-type": "application/json"},
                              stream=_WatchStream(self, watcher, timeout))

    def _route(self, path: str) -> tuple[Resource, str, str, str]:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.not_found("", "", path)
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if not rest:
            raise errors.not_found("", group, path)
        res = self._resource(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else ""
        subresource = rest[2] if len(rest) > 2 else ""
        return res, namespace, name, subresource

    def _discovery(self, path: str) -> Obj | None:
        parts = [p for p in path.split("/") if p]
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"]}
        if parts == ["apis"]:
            groups = []
            for group in self.catalog.groups():
                if not group:
                    continue
                versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self.catalog.versions(group)]
                groups.append({"name": group, "versions": versions, "preferredVersion": versions[0]})
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if parts == ["api", "v1"] or (len(parts) == 3 and parts[0] == "apis"):
            group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
            resources = [{"name": r.plural, "namespaced": r.namespaced, "kind": r.kind, "verbs": list(r.verbs)}
                         for r in self.catalog.in_group_version(group, version)]
            return {"kind": "APIResourceList", "groupVersion": f"{group}/{version}" if group else version,
                    "resources": resources}
        return None


class _Transport(httpx.AsyncBaseTransport):
    def __init__(self, server: FakeApiServer) -> None:
        self._server = server

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        return await self._server.handle(request)


def _verb(method: str, name: str, query: dict[str, str]) -> str:
    if method == "GET":
        if name:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]


def _json(code: int, body: Obj) -> httpx.Response:
    return httpx.Response(code, headers={"content-type": "application/json"}, content=orjson.dumps(body))

