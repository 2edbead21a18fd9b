"""The generic REST store: every verb on every resource, the same way upstream's
`genericregistry.Store` does it, with the resource's `Strategy` filling in what differs.

Stored objects never carry `metadata.resourceVersion`: it is the etcd revision of the
key and is added on the way out. Every write is a compare-and-swap, so a failed
request changes nothing and a stale one gets 409.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import ipaddress
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import orjson

from apiserver.registry import conversion, crschema
from apiserver.registry.strategy import Obj, Strategy
from apiserver.storage.cache import Entry, ResourceCache, WatchCache, decode
from apiserver.storage.etcd import KV, Compacted, EtcdStore, KeyExists, RevisionMismatch
from services.api import errors, nesting
from services.api.catalog import Resource
from services.api.fieldmanager import InvalidApply, update_managed_fields
from services.api.fieldmanager import apply as fm_apply
from services.api.meta import generate_name, new_uid, now_rfc3339
from services.api.patch import PatchError, json_merge_patch, json_patch
from services.api.selectors import FieldSelector, LabelSelector
from services.api.strategic import UnsupportedStrategicPatch, strategic_merge_patch
from services.auth.identity import UserInfo

MAX_ALLOCATION_ATTEMPTS = 32
# Upstream's RetryGenerateName: a generated name that collides is drawn again this many times.
GENERATE_NAME_RETRIES = 7
CONSISTENT_READ_WAIT = 3.0


class ResourceAdmission(Protocol):
    """The admission chain of one resource (apiserver/admission/chain.py builds it; the server hands it
    in, so the registry depends on no plugin). `operation` is upstream's: CREATE, UPDATE, DELETE (validation
    with the object being deleted as `old`); `user` is who writes."""

    async def admit(self, operation: str, obj: Obj | None, old: Obj | None, subresource: str, dry_run: bool,
                    user: UserInfo | None = None) -> None: ...

    async def validate(self, operation: str, obj: Obj | None, old: Obj | None, subresource: str, dry_run: bool,
                       user: UserInfo | None = None) -> None: ...


class Admission(Protocol):
    """The whole chain; each store asks once for its resource's part."""

    def for_resource(self, res: Resource) -> ResourceAdmission: ...


@dataclass
class ServerContext:
    """What every resource store shares: storage, cache, options."""

    etcd: EtcdStore
    cache: WatchCache
    root: str = "/registry/"
    service_cidr: ipaddress.IPv4Network = field(default_factory=lambda: ipaddress.IPv4Network("10.96.0.0/12"))
    node_port_range: tuple[int, int] = (30000, 32767)
    admission: Admission | None = None
    #: Seconds etcd keeps an Event after its last write (--event-ttl); 0 keeps events for good.
    event_ttl: int = 3600

    async def taken(self, prefix: str) -> set[str]:
        """Allocation keys (relative to the storage root) held under `prefix`, read from etcd, never a cache."""
        out: set[str] = set()
        start: str | None = None
        full = self.root + prefix
        while True:
            kvs, _, more = await self.etcd.list(full, limit=10000, start=start)
            out.update(kv.key[len(self.root):] for kv in kvs)
            if not more or not kvs:
                return out
            start = kvs[-1].key + "\0"


@dataclass
class ListOptions:
    label_selector: LabelSelector | None = None
    field_selector: FieldSelector | None = None
    resource_version: str = ""
    resource_version_match: str = ""
    limit: int = 0
    continue_token: str = ""


@dataclass
class WriteOptions:
    dry_run: bool = False
    field_manager: str = ""
    force: bool = False
    #: managedFields were already computed (server-side apply), so the write does not track them again.
    tracked: bool = False
    #: who writes, for the strategies that record it (a CSR's requester)
    user: UserInfo | None = None
    #: The request's own check of the object it would write and the current one (None on create), run
    #: before admission and validation (upstream's create/update ValidateObjectFunc): the RBAC escalation
    #: guard and the CSR signer and subject checks; raises to refuse the write.
    guard: Callable[[Obj, Obj | None], None] | None = None


@dataclass
class DeleteOptions:
    grace_period: int | None = None
    propagation: str | None = None
    orphan_dependents: bool | None = None
    precondition_uid: str | None = None
    precondition_rv: str | None = None
    dry_run: bool = False
    #: who deletes, for admission (unset for deletes the server makes itself, as an eviction's)
    user: UserInfo | None = None

    @property
    def propagation_chosen(self) -> bool:
        """The client named a policy (propagationPolicy or the older orphanDependents)."""
        return self.propagation is not None or self.orphan_dependents is not None


def _timestamp_in(seconds: int) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def encode_continue(revision: int, start_key: str) -> str:
    token = orjson.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": start_key})
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    """(revision, start key below the prefix) of a continue token, checked as upstream's DecodeContinue: a
    revision of 0 or a start key that climbs out of the prefix is refused; a negative revision (upstream's
    inconsistent continuation) asks for the newest revision, returned as 0 here."""
    try:
        padded = token + "=" * (-len(token) % 4)
        data = orjson.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise _bad_continue(f"continue key is not valid: {exc}") from exc
    if not isinstance(data, dict):
        raise _bad_continue("continue key is not valid: not an object")
    version, rv, start = data.get("v", ""), data.get("rv", 0), data.get("start", "")
    if not isinstance(rv, int) or isinstance(rv, bool) or not isinstance(start, str) or not isinstance(version, str):
        raise _bad_continue("continue key is not valid: a field has the wrong type")
    if version != "meta.k8s.io/v1":
        raise _bad_continue(f"continue key is not valid: server does not recognize this encoded version {version}")
    if rv == 0:
        raise _bad_continue("continue key is not valid: incorrect encoded start resourceVersion "
                            "(version meta.k8s.io/v1)")
    if not start:
        raise _bad_continue("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")
    key = start if start.startswith("/") else "/" + start
    if posixpath.normpath(key) != key or key.startswith("//"):
        raise _bad_continue(f"continue key is not valid: {start}")
    return max(rv, 0), key[1:]


def _bad_continue(why: str) -> errors.StatusError:
    return errors.bad_request(f"invalid continue token: {why}")


class RESTStore:
    """All verbs of one served resource (one group/version/plural)."""

    def __init__(self, res: Resource, strategy: Strategy, ctx: ServerContext) -> None:
        self.res = res
        self.strategy = strategy
        self.ctx = ctx
        self.prefix = f"{ctx.root}{res.etcd_prefix}/"
        self.cache: ResourceCache = ctx.cache.register(self.prefix)
        ctx.etcd.encrypts(self.prefix, res.group, res.plural)
        # Custom objects stored before a default was added to their schema get it on every read, as
        # upstream's storage codec defaults what it decodes from etcd.
        self._defaults_on_read = bool(res.custom and res.schema and crschema.has_defaults(res.schema))
        self._converts = conversion.needs_conversion(res) or self._defaults_on_read
        self.admission = ctx.admission.for_resource(res) if ctx.admission is not None else None
        # Seconds each write keeps the object in etcd (upstream's TTLFunc); 0 for resources that never expire.
        ttl = getattr(strategy, "ttl", None)
        self.ttl: int = ttl(ctx) if ttl is not None else 0

    # -- keys and conversion ------------------------------------------------------
    def key(self, namespace: str | None, name: str) -> str:
        if self.res.namespaced:
            return f"{self.prefix}{namespace}/{name}"
        return f"{self.prefix}{name}"

    def ns_prefix(self, namespace: str | None) -> str:
        if self.res.namespaced and namespace:
            return f"{self.prefix}{namespace}/"
        return self.prefix

    def out(self, obj: Obj, *, own: bool = False) -> Obj:
        """A stored object as this resource's version shows it; `own` when nobody else holds `obj`
        (a freshly written object), so the converted view need not copy it."""
        if self._defaults_on_read:
            obj = orjson.loads(orjson.dumps(obj)) if not own else obj
            crschema.apply_defaults(self.res.schema or {}, obj)
            own = True
        if self._converts:
            return conversion.from_storage(self.res, obj, shared=own)
        return obj

    def _encode(self, obj: Obj) -> bytes:
        """The bytes etcd keeps for an object already in the storage version."""
        stored = obj
        m = stored.get("metadata", {})
        if "resourceVersion" in m or "selfLink" in m:
            stored = dict(stored)
            stored["metadata"] = {k: v for k, v in m.items() if k not in ("resourceVersion", "selfLink")}
        return orjson.dumps(stored)

    def _not_found(self, name: str) -> errors.StatusError:
        return errors.not_found(self.res.plural, self.res.group, name)

    def _conflict(self, name: str, why: str = errors.STALE_WRITE) -> errors.StatusError:
        return errors.conflict(self.res.plural, self.res.group, name, why)

    def _invalid(self, name: str, causes: list[dict[str, str]]) -> errors.StatusError:
        return errors.invalid(self.res.kind, self.res.group, name, causes)

    # -- reads ----------------------------------------------------------------
    async def _read(self, namespace: str | None, name: str) -> tuple[Obj, int]:
        kv = await self.ctx.etcd.get(self.key(namespace, name))
        if kv is None:
            raise self._not_found(name)
        return decode(kv.value, kv.mod_revision), kv.mod_revision

    async def get(self, namespace: str | None, name: str, resource_version: str = "") -> Obj:
        if resource_version:
            rv = self._parse_rv(resource_version)
            if rv:
                await self.ctx.cache.wait_for(rv, CONSISTENT_READ_WAIT)
            entry = self.cache.entries.get(self.key(namespace, name))
            if entry is None:
                raise self._not_found(name)
            return self.out(entry.obj)
        obj, _ = await self._read(namespace, name)
        return self.out(obj)

    @staticmethod
    def _parse_rv(value: str) -> int:
        try:
            rv = int(value)
            if rv < 0:
                raise ValueError
            return rv
        except ValueError as exc:
            raise errors.bad_request(
                f'resourceVersion: Invalid value: "{value}": must be a non-negative integer'
            ) from exc

    def predicate(self, opts: ListOptions) -> Callable[[Obj], bool] | None:
        """The selector test an object must pass, or None when nothing is selected out."""
        labels = opts.label_selector if opts.label_selector and not opts.label_selector.empty else None
        fields = opts.field_selector if opts.field_selector and opts.field_selector.requirements else None
        if fields is not None:
            supported = set(self.strategy.field_set({"metadata": {}}))
            for fname, _, _ in fields.requirements:
                if fname not in supported:
                    raise errors.bad_request(f'field label not supported: {fname}')
        if labels is None and fields is None:
            return None
        field_set = self.strategy.field_set

        def test(obj: Obj) -> bool:
            if labels is not None and not labels.matches(obj.get("metadata", {}).get("labels")):
                return False
            if fields is not None and not fields.matches(field_set(obj)):
                return False
            return True

        return test

    async def list(self, namespace: str | None, opts: ListOptions) -> tuple[list[Entry | Obj], dict[str, Any]]:
        """Matching objects (cache entries or decoded objects) and the list metadata."""
        pred = self.predicate(opts)
        rv_match = opts.resource_version_match
        if opts.continue_token and opts.resource_version not in ("", "0"):
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        if opts.continue_token or (opts.limit > 0 and opts.resource_version != "0") or rv_match == "Exact":
            return await self._list_etcd(namespace, opts, pred)
        rv = self._parse_rv(opts.resource_version) if opts.resource_version else None
        if rv is None:
            current = await self.ctx.etcd.current_revision()
            if not await self.ctx.cache.wait_for(current, CONSISTENT_READ_WAIT):
                return await self._list_etcd(namespace, opts, pred)
        elif rv > 0 and not await self.ctx.cache.wait_for(rv, CONSISTENT_READ_WAIT):
            raise errors.too_large_resource_version(rv, self.ctx.cache.revision)
        return self._list_cache(namespace, pred), {"resourceVersion": str(self.ctx.cache.revision)}

    async def list_objects(self, namespace: str | None, opts: ListOptions) -> list[Obj]:
        """What `list` finds, as objects of this resource's version (for code that reads them, not a client)."""
        items, _ = await self.list(namespace, opts)
        return [self.out(item.obj if isinstance(item, Entry) else item) for item in items]

    def _list_cache(self, namespace: str | None, pred: Callable[[Obj], bool] | None) -> list[Entry | Obj]:
        entries = self.cache.entries
        prefix = self.ns_prefix(namespace)
        keys = self.cache.sorted_keys()
        if prefix != self.prefix:
            keys = [k for k in keys if k.startswith(prefix)]
        out: list[Entry | Obj] = []
        for k in keys:
            entry = entries[k]
            if pred is None or pred(entry.obj):
                out.append(entry)
        return out

    async def _list_etcd(
        self, namespace: str | None, opts: ListOptions, pred: Callable[[Obj], bool] | None
    ) -> tuple[list[Entry | Obj], dict[str, Any]]:
        prefix = self.ns_prefix(namespace)
        revision = 0
        start: str | None = None
        if opts.continue_token:
            revision, start_rel = decode_continue(opts.continue_token)
            start = prefix + start_rel
        elif opts.resource_version and opts.resource_version_match == "Exact":
            revision = self._parse_rv(opts.resource_version)
        limit = opts.limit
        out: list[Entry | Obj] = []
        last_key = ""
        more = False
        while True:
            batch = limit - len(out) if limit > 0 else 0
            if pred is not None and batch:
                batch = max(batch, 100)
            try:
                kvs, header_rev, more = await self.ctx.etcd.list(prefix, revision=revision, limit=batch, start=start)
            except Compacted as exc:
                if opts.continue_token:
                    raise errors.gone(
                        "The provided continue parameter is too old to display a consistent list result. You can "
                        "start a new list without the continue parameter, or use the continue token in this "
                        "response to retrieve the remainder of the results. Continuing with the provided token "
                        "results in an inconsistent list - objects that were created, modified, or deleted "
                        "between the time the first chunk was returned and now may show up in the list."
                    ) from exc
                raise errors.gone(f"too old resource version: {revision}") from exc
            if not revision:
                revision = header_rev
            for i, kv in enumerate(kvs):
                try:
                    obj = decode(kv.value, kv.mod_revision)
                except (orjson.JSONDecodeError, TypeError, AttributeError):
                    continue
                last_key = kv.key
                if pred is None or pred(obj):
                    out.append(obj)
                    if limit > 0 and len(out) >= limit:
                        more = more or i < len(kvs) - 1
                        break
            if limit > 0 and len(out) >= limit:
                break
            if not more or not kvs:
                more = False
                break
            start = kvs[-1].key + "\0"
        list_meta: dict[str, Any] = {"resourceVersion": str(revision)}
        if more and last_key:
            list_meta["continue"] = encode_continue(revision, last_key[len(prefix):] + "\0")
            if pred is None:
                remaining, _ = await self.ctx.etcd.count(prefix, start=last_key + "\0", revision=revision)
                list_meta["remainingItemCount"] = remaining
        return out, list_meta

    # -- create ---------------------------------------------------------------
    def _check_body(self, obj: Any, namespace: str | None, name: str | None = None) -> Obj:
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if kind and kind != self.res.kind:
            raise errors.bad_request(
                f"the kind of the object ({kind}) does not match the kind this endpoint serves ({self.res.kind})"
            )
        if api_version and api_version != self.res.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({self.res.api_version})"
            )
        obj["apiVersion"] = self.res.api_version
        obj["kind"] = self.res.kind
        m = obj.get("metadata")
        if m is None:
            m = obj["metadata"] = {}
        if not isinstance(m, dict):
            raise errors.bad_request("metadata must be an object")
        if self.res.namespaced:
            body_ns = m.get("namespace")
            if body_ns and namespace and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            if namespace:
                m["namespace"] = namespace
        else:
            m.pop("namespace", None)
        if name is not None:
            body_name = m.get("name")
            if body_name and body_name != name:
                raise errors.bad_request(
                    f"the name of the object ({body_name}) does not match the name on the URL ({name})"
                )
            m["name"] = name
        return obj

    def _check_namespace(self, namespace: str | None) -> None:
        if self.res.namespaced and not namespace:
            raise errors.bad_request("the server could not find the requested resource")

    async def create(self, namespace: str | None, body: Any, opts: WriteOptions) -> Obj:
        obj = self._check_body(body, namespace)
        if opts.guard is not None:
            opts.guard(obj, None)
        m = obj["metadata"]
        if not m.get("name") and m.get("generateName"):
            m["name"] = generate_name(str(m["generateName"]))
        name = m.get("name") or ""
        for f in ("resourceVersion", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"):
            m.pop(f, None)
        m["uid"] = new_uid()
        m["creationTimestamp"] = now_rfc3339()
        if self.strategy.uses_generation:
            m["generation"] = 1
        else:
            m.pop("generation", None)
        if self.admission is not None:
            await self.admission.admit("CREATE", obj, None, "", opts.dry_run, opts.user)
        self.strategy.defaults(obj)
        obj = self._track(None, obj, opts, "")
        self.strategy.prepare_for_create(obj)
        self.strategy.set_requester(obj, opts.user)
        causes = self.strategy.validate(obj)
        if causes:
            raise self._invalid(name, causes)
        self._check_namespace(namespace)
        if self.admission is not None:
            await self.admission.validate("CREATE", obj, None, "", opts.dry_run, opts.user)
        if self._converts:
            obj = conversion.to_storage(self.res, obj)
        return await self._store_new(obj, name, opts.dry_run)

    async def admit_subresource(self, namespace: str | None, name: str, obj: Obj, subresource: str,
                                opts: WriteOptions) -> None:
        """Admission of a create on a subresource that stores no object of its own (an Eviction, a
        TokenRequest): both phases see it as a CREATE of `name`'s `subresource`."""
        if self.admission is None:
            return
        obj = {**obj, "metadata": {**(obj.get("metadata") or {}), "name": name, "namespace": namespace or ""}}
        await self.admission.admit("CREATE", obj, None, subresource, opts.dry_run, opts.user)
        await self.admission.validate("CREATE", obj, None, subresource, opts.dry_run, opts.user)

    def _keys(self, allocated: dict[str, bytes]) -> dict[str, bytes]:
        """Allocation keys are relative to the storage root, like every other key."""
        return {self.ctx.root + key: value for key, value in allocated.items()}

    def _released(self, obj: Obj) -> list[str]:
        return [self.ctx.root + key for key in self.strategy.release(obj)]

    def _track(self, old: Obj | None, new: Obj, opts: WriteOptions, subresource: str) -> Obj:
        """`new` with metadata.managedFields recording this write's manager (upstream's field manager)."""
        if opts.tracked:
            return new
        return update_managed_fields(
            self.res.api_version, self.res.kind, old, new, opts.field_manager or "unknown",
            subresource=subresource, now=now_rfc3339(), schema=self.res.schema,
        )

    async def _store_new(self, requested: Obj, name: str, dry_run: bool) -> Obj:
        m = requested["metadata"]
        name_retries = GENERATE_NAME_RETRIES if m.get("generateName") and name.startswith(m["generateName"]) else 0
        # Allocate from the object as requested each time: values picked by a lost attempt are not
        # requests, and taking them for requests would answer "already allocated".
        allocates = type(self.strategy).allocate is not Strategy.allocate
        pristine = copy.deepcopy(requested) if allocates else requested
        for attempt in range(MAX_ALLOCATION_ATTEMPTS):
            key = self.key(m.get("namespace"), name)
            obj = copy.deepcopy(pristine) if attempt and allocates else requested
            obj["metadata"]["name"] = name
            allocation = await self.strategy.allocate(self.ctx, obj, None)
            if dry_run:
                return self.out(obj)
            try:
                revision = await self.ctx.etcd.create(
                    key, self._encode(obj), self._keys(allocation.create), ttl=self.ttl
                )
            except KeyExists as exc:
                if exc.key == key:
                    if name_retries > 0:
                        name_retries -= 1
                        name = generate_name(str(m["generateName"]))
                        continue
                    raise errors.already_exists(self.res.plural, self.res.group, name) from exc
                continue
            obj["metadata"]["resourceVersion"] = str(revision)
            return self.out(obj, own=True)
        raise errors.internal("could not allocate a free value after several attempts")

    # -- update ---------------------------------------------------------------
    async def update(
        self,
        namespace: str | None,
        name: str,
        body: Any,
        opts: WriteOptions,
        subresource: str = "",
    ) -> tuple[Obj, bool]:
        """PUT: returns the stored object and whether it was created."""
        new_template = self._check_body(body, namespace, name)
        wanted_rv = new_template["metadata"].get("resourceVersion") or ""
        if not wanted_rv and not self.strategy.allow_unconditional_update:
            raise self._invalid(name, [errors.cause("metadata.resourceVersion", "Invalid value: 0x0: must be "
                                                    "specified for an update")])
        return await self._guaranteed_update(
            namespace, name, lambda current: copy.deepcopy(new_template), opts, subresource, wanted_rv
        )

    async def _guaranteed_update(
        self,
        namespace: str | None,
        name: str,
        make_new: Callable[[Obj | None], Obj],
        opts: WriteOptions,
        subresource: str,
        wanted_rv: str,
    ) -> tuple[Obj, bool]:
        key = self.key(namespace, name)
        while True:
            kv = await self.ctx.etcd.get(key)
            if kv is None:
                if subresource or not self.strategy.allow_create_on_update:
                    raise self._not_found(name)
                new = make_new(None)
                new["metadata"].pop("resourceVersion", None)
                return await self.create(namespace, new, opts), True
            old = decode(kv.value, kv.mod_revision)
            if wanted_rv and wanted_rv != str(kv.mod_revision):
                raise self._conflict(name)
            new = make_new(self.out(old))
            if not isinstance(new, dict):
                raise errors.bad_request("the result is not a JSON object")
            new = self._check_body(new, namespace, name)
            if opts.guard is not None:
                opts.guard(new, self.out(old))
            if self._converts:
                new = conversion.to_storage(self.res, new)
                old_view = old
            else:
                old_view = old
            if self.admission is not None:
                await self.admission.admit("UPDATE", new, old_view, subresource, opts.dry_run, opts.user)
            result = await self._prepare_update(new, old_view, subresource, opts, stale=kv.stale)
            if result is None:
                return self.out(old), False
            new, allocation_old = result
            if self.admission is not None:
                await self.admission.validate("UPDATE", new, old_view, subresource, opts.dry_run, opts.user)
            if opts.dry_run:
                return self.out(new), False
            try:
                if self._finished_deleting(new):
                    await self.ctx.etcd.delete(key, kv.mod_revision, self._released(new))
                    return self.out(new), False
                allocation = await self.strategy.allocate(self.ctx, new, allocation_old)
                released = [k for k in self._released(allocation_old) if k not in self._released(new)]
                revision = await self.ctx.etcd.update(
                    key, self._encode(new), kv.mod_revision, self._keys(allocation.create), released, ttl=self.ttl
                )
            except RevisionMismatch as exc:
                if wanted_rv:
                    raise self._conflict(name) from exc
                continue
            except KeyExists:
                continue
            new["metadata"]["resourceVersion"] = str(revision)
            return self.out(new), False

    def _finished_deleting(self, obj: Obj) -> bool:
        m = obj["metadata"]
        return bool(m.get("deletionTimestamp")) and not m.get("finalizers") and not self.strategy.deletion_blocked(obj)

    async def _prepare_update(
        self, new: Obj, old: Obj, subresource: str, opts: WriteOptions, stale: bool = False
    ) -> tuple[Obj, Obj] | None:
        """Apply the strategy to an update; None when nothing would change, unless the stored bytes are
        `stale` (encrypted with a key that no longer writes), which an unchanged update rewrites."""
        name = old["metadata"].get("name", "")
        m, om = new["metadata"], old["metadata"]
        for f in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace"):
            if f in om:
                m[f] = om[f]
            else:
                m.pop(f, None)
        m.pop("selfLink", None)
        if "generation" in om:
            m["generation"] = om["generation"]
        else:
            m.pop("generation", None)
        m["resourceVersion"] = om.get("resourceVersion")
        self.strategy.defaults(new)
        new = self._track(old, new, opts, subresource)
        m = new["metadata"]
        if subresource == "status":
            self.strategy.prepare_for_status_update(new, old)
            causes = self.strategy.validate_status_update(new, old)
        elif subresource == "finalize":
            self.strategy.prepare_for_finalize(new, old)
            causes = []
        elif subresource == "approval":
            self.strategy.prepare_for_approval_update(new, old)
            for f in ("labels", "annotations", "finalizers", "ownerReferences"):
                if f in om:
                    m[f] = om[f]
                else:
                    m.pop(f, None)
            causes = self.strategy.validate_approval_update(new, old)
        else:
            self.strategy.prepare_for_update(new, old)
            if self.strategy.uses_generation and self.strategy.spec_changed(new, old):
                m["generation"] = int(om.get("generation") or 0) + 1
            causes = self.strategy.validate_update(new, old)
        if om.get("deletionTimestamp"):
            added = set(m.get("finalizers") or []) - set(om.get("finalizers") or [])
            if added:
                causes = [*causes, errors.cause(
                    "metadata.finalizers",
                    f"Forbidden: no new finalizers can be added if the object is being deleted, found new "
                    f"finalizers {sorted(added)!r}".replace("'", '"'),
                    "FieldValueForbidden",
                )]
        if causes:
            raise self._invalid(name, causes)
        if new == old and not stale:
            return None
        return new, old

    async def mutate(
        self, namespace: str | None, name: str, change: Callable[[Obj], Obj], opts: WriteOptions,
        subresource: str = "",
    ) -> Obj:
        """Read-modify-write for subresources with their own rules (binding, scale).

        The first attempt starts from the watch cache's copy, as upstream's GuaranteedUpdate does with
        the cacher's object: the compare-and-swap on its revision catches a stale copy, and the retry
        starts from what etcd answered. A write that would change nothing is confirmed against etcd.
        """
        key = self.key(namespace, name)
        # A dry run writes nothing, so no compare-and-swap would catch a stale copy: it reads etcd.
        entry = self.cache.entries.get(key) if self.cache.ready and not opts.dry_run else None
        current: KV | None = None
        while True:
            if entry is not None:
                old, revision = entry.obj, entry.revision
                obj = orjson.loads(entry.encoded())
            else:
                if current is None:
                    current = await self.ctx.etcd.get(key)
                    if current is None:
                        raise self._not_found(name)
                old, revision = decode(current.value, current.mod_revision), current.mod_revision
                obj = decode(current.value, current.mod_revision)
            new = change(obj)
            if subresource:
                new = self._track(old, new, opts, subresource)
            if new == old:
                if entry is not None:
                    entry = None
                    continue
                return self.out(new)
            if self.strategy.uses_generation and self.strategy.spec_changed(new, old):
                new["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1
            if opts.dry_run:
                return self.out(new)
            try:
                if self._finished_deleting(new):
                    await self.ctx.etcd.delete(key, revision, self._released(new))
                    return self.out(new)
                rv = await self.ctx.etcd.update(key, self._encode(new), revision, ttl=self.ttl)
            except RevisionMismatch as exc:
                if exc.current is None and entry is None:
                    raise self._not_found(name) from exc
                entry, current = None, exc.current
                continue
            new["metadata"]["resourceVersion"] = str(rv)
            return self.out(new)

    # -- patch ----------------------------------------------------------------
    async def patch(
        self,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        opts: WriteOptions,
        subresource: str = "",
        check: Callable[[Obj], None] | None = None,
    ) -> Obj:
        """Patch with retries on conflict; `check` vets the patched object before the strategy sees it."""
        wanted_rv = ""
        if patch_type != "json" and isinstance(patch, dict):
            pm = patch.get("metadata")
            if isinstance(pm, dict) and isinstance(pm.get("resourceVersion"), str):
                wanted_rv = pm["resourceVersion"]

        def apply(current: Obj | None) -> Obj:
            if current is None:
                raise self._not_found(name)
            patched = apply_patch(patch_type, current, patch)
            if check is not None:
                check(patched)
            return patched

        if not self.strategy.allow_create_on_update:
            obj, _ = await self._guaranteed_update(namespace, name, apply, opts, subresource, wanted_rv)
            return obj
        kv = await self.ctx.etcd.get(self.key(namespace, name))
        if kv is None:
            raise self._not_found(name)
        obj, _ = await self._guaranteed_update(namespace, name, apply, opts, subresource, wanted_rv)
        return obj

    async def apply(
        self, namespace: str | None, name: str, config: Any, opts: WriteOptions, subresource: str = "",
        check: Callable[[Obj], None] | None = None,
    ) -> tuple[Obj, bool]:
        """Server-side apply: returns the object and whether the apply created it; `check` vets the
        merged object before the strategy sees it, as for patches."""
        tracked = dataclasses.replace(opts, tracked=True)

        def merge(live: Obj | None) -> Obj:
            try:
                merged = fm_apply(
                    self.res.api_version, self.res.kind, live, config, opts.field_manager, opts.force,
                    now_rfc3339(), subresource=subresource, schema=self.res.schema,
                )
            except InvalidApply as exc:
                # Upstream answers configurations its schema cannot type with a bare 500; they are the
                # client's mistake, so they get 422.
                code = 422 if exc.code >= 500 else exc.code
                raise errors.StatusError(code, "Invalid" if code == 422 else exc.reason, str(exc)) from exc
            if check is not None:
                check(merged)
            return merged

        while True:
            kv = await self.ctx.etcd.get(self.key(namespace, name))
            if kv is None:
                if subresource:
                    raise self._not_found(name)
                created = merge(None)
                body_name = (created.get("metadata") or {}).get("name") or ""
                if body_name != name:
                    raise errors.bad_request(
                        f"the name of the object ({body_name}) does not match the name on the URL ({name})"
                    )
                try:
                    return await self.create(namespace, created, tracked), True
                except errors.StatusError as exc:
                    if exc.reason != "AlreadyExists":
                        raise
                    continue
            obj, _ = await self._guaranteed_update(namespace, name, merge, tracked, subresource, "")
            return obj, False

    # -- delete ---------------------------------------------------------------
    async def delete(self, namespace: str | None, name: str, opts: DeleteOptions) -> tuple[Obj, bool]:
        """Returns the object and whether it is gone (False: deletion is pending)."""
        key = self.key(namespace, name)
        while True:
            kv = await self.ctx.etcd.get(key)
            if kv is None:
                raise self._not_found(name)
            obj = decode(kv.value, kv.mod_revision)
            m = obj["metadata"]
            if opts.precondition_uid is not None and opts.precondition_uid != m.get("uid"):
                raise self._conflict(
                    name,
                    f"Precondition failed: UID in precondition: {opts.precondition_uid}, UID in object meta: "
                    f"{m.get('uid', '')}",
                )
            if opts.precondition_rv is not None and opts.precondition_rv != str(kv.mod_revision):
                raise self._conflict(
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {opts.precondition_rv}, "
                    f"ResourceVersion in object meta: {kv.mod_revision}",
                )
            if self.admission is not None:
                await self.admission.admit("DELETE", obj, obj, "", opts.dry_run, opts.user)
                await self.admission.validate("DELETE", None, self.out(obj), "", opts.dry_run, opts.user)
            pending = self._start_deletion(obj, opts)
            if pending is None:
                if opts.dry_run:
                    return self.out(obj), True
                try:
                    revision = await self.ctx.etcd.delete(key, kv.mod_revision, self._released(obj))
                except RevisionMismatch:
                    continue
                m["resourceVersion"] = str(revision)
                return self.out(obj), True
            if pending is obj:
                return self.out(obj), False
            if opts.dry_run:
                return self.out(pending), False
            try:
                revision = await self.ctx.etcd.update(key, self._encode(pending), kv.mod_revision, ttl=self.ttl)
            except RevisionMismatch:
                continue
            pending["metadata"]["resourceVersion"] = str(revision)
            return self.out(pending), False

    def _start_deletion(self, obj: Obj, opts: DeleteOptions) -> Obj | None:
        """The object as it must be stored while deletion waits; None to delete now; `obj` for no change."""
        m = obj["metadata"]
        finalizers = list(m.get("finalizers") or [])
        policy = opts.propagation
        if policy is None and opts.orphan_dependents is not None:
            policy = "Orphan" if opts.orphan_dependents else "Background"
        if policy is None and not {"orphan", "foregroundDeletion"} & set(finalizers):
            policy = self.strategy.default_propagation()
        if policy not in (None, "Orphan", "Foreground", "Background"):
            raise self._invalid(m.get("name", ""), [errors.cause(
                "propagationPolicy",
                f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan"',
                "FieldValueNotSupported",
            )])
        if m.get("deletionTimestamp"):
            new = copy.deepcopy(obj)
            changed = False
            if self.strategy.graceful and opts.grace_period is not None:
                current = int(m.get("deletionGracePeriodSeconds") or 0)
                grace = self.strategy.grace_period(obj, opts.grace_period)
                if grace < current:
                    if grace == 0 and not finalizers:
                        return None
                    new["metadata"]["deletionGracePeriodSeconds"] = grace
                    new["metadata"]["deletionTimestamp"] = _timestamp_in(grace)
                    changed = True
            if policy in ("Orphan", "Foreground"):
                changed = self._set_policy_finalizers(new, policy) or changed
            return new if changed else obj
        grace = self.strategy.grace_period(obj, opts.grace_period) if self.strategy.graceful else 0
        new = copy.deepcopy(obj)
        changed = False
        if policy in ("Orphan", "Foreground"):
            changed = self._set_policy_finalizers(new, policy)
        if grace <= 0 and not changed and not finalizers and not self.strategy.deletion_blocked(obj):
            return None
        nm = new["metadata"]
        nm["deletionTimestamp"] = _timestamp_in(grace) if grace > 0 else now_rfc3339()
        nm["deletionGracePeriodSeconds"] = max(grace, 0)
        if not self.strategy.graceful and grace <= 0:
            nm["deletionGracePeriodSeconds"] = 0
        self.strategy.prepare_for_delete(new)
        return new

    @staticmethod
    def _set_policy_finalizers(obj: Obj, policy: str) -> bool:
        m = obj["metadata"]
        finalizers = list(m.get("finalizers") or [])
        before = list(finalizers)
        if policy == "Orphan":
            finalizers = [f for f in finalizers if f != "foregroundDeletion"]
            if "orphan" not in finalizers:
                finalizers.append("orphan")
        elif policy == "Foreground":
            finalizers = [f for f in finalizers if f != "orphan"]
            if "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
        m["finalizers"] = finalizers
        return finalizers != before

    async def delete_collection(
        self, namespace: str | None, list_opts: ListOptions, opts: DeleteOptions
    ) -> list[Obj]:
        items, _ = await self.list(namespace, ListOptions(list_opts.label_selector, list_opts.field_selector))
        deleted: list[Obj] = []
        sem = asyncio.Semaphore(16)

        async def one(item: Entry | Obj) -> None:
            obj = item.obj if isinstance(item, Entry) else item
            m = obj["metadata"]
            async with sem:
                try:
                    gone, _ = await self.delete(m.get("namespace"), m["name"], opts)
                    deleted.append(gone)
                except errors.StatusError as exc:
                    if exc.code != 404:
                        raise

        await asyncio.gather(*(one(i) for i in items))
        return deleted


#: upstream's maxJSONPatchOperations and JSONPatchMaxCopyBytes (the apiserver's default, 3 MiB)
MAX_JSON_PATCH_OPERATIONS = 10000
JSON_PATCH_MAX_COPY_BYTES = 3 * 1024 * 1024


def apply_patch(patch_type: str, current: Obj, patch: Any) -> Obj:
    """The object after a patch of the given type, or a 4xx naming what is wrong with the patch."""
    if patch_type == "json" and isinstance(patch, list) and len(patch) > MAX_JSON_PATCH_OPERATIONS:
        raise errors.too_large(f"Request entity too large: The allowed maximum operations in a JSON patch is "
                               f"{MAX_JSON_PATCH_OPERATIONS}, got {len(patch)}")
    try:
        if patch_type == "json":
            result = json_patch(current, patch, JSON_PATCH_MAX_COPY_BYTES)
        elif patch_type == "merge":
            if not isinstance(patch, dict):
                raise errors.bad_request("the patch must be a JSON object")
            result = json_merge_patch(current, patch)
        elif patch_type == "strategic":
            result = strategic_merge_patch(current.get("apiVersion", ""), current.get("kind", ""), current, patch)
        else:
            raise errors.unsupported_media_type(patch_type)
    except UnsupportedStrategicPatch as exc:
        raise errors.StatusError(415, "UnsupportedMediaType", exc.message) from exc
    except PatchError as exc:
        if exc.code == 400:
            raise errors.bad_request(exc.message) from exc
        # Upstream answers some malformed strategic patches (a list element without its merge key)
        # with a bare 500; they are the client's mistake, so they get 422.
        raise errors.StatusError(422, "Invalid", exc.message) from exc
    if not isinstance(result, dict):
        raise errors.bad_request("the patched object is not a JSON object")
    if patch_type == "json" and nesting.too_deep(result):
        # A JSON patch can put a deep value at a deep path; merge patches nest no deeper than their input.
        raise errors.bad_request(nesting.TOO_DEEP)
    return result
