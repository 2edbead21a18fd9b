"""The etcd store: the only code in pyk8s that talks to etcd.

Writes are single transactions that compare the key's revision, so a stale write
fails instead of overwriting. Several endpoints may be given; when the one in use
fails, calls and the watch move to the next and the watch resumes from the last
revision it delivered, so nothing is lost or seen twice. A write with a TTL attaches
the object to a shared etcd lease (see `lease.py`); etcd deletes it when the lease
expires, and the watch reports that like any other delete.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlparse

import structlog
from aetcd import rpc
from prometheus_client import Histogram

from apiserver.storage.encryption import PrefixTransformers, TransformError
from apiserver.storage.grpc_wire import Connection, GrpcError, StatusCode, client_tls
from apiserver.storage.lease import DEFAULT_MAX_OBJECTS, DEFAULT_REUSE_SECONDS, LeaseManager
from services.api import errors

log = structlog.get_logger("apiserver.storage")

ETCD_LATENCY = Histogram(
    "etcd_request_duration_seconds",
    "etcd request latency by operation and resource prefix.",
    ["operation", "type"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)

T = TypeVar("T")

#: statuses after which the call is tried again, on the next endpoint
_RETRIABLE = frozenset({StatusCode.UNAVAILABLE, StatusCode.DEADLINE_EXCEEDED, StatusCode.UNKNOWN,
                        StatusCode.CANCELLED})
_CALL_TIMEOUT = 5.0
_CLOSE_GRACE = 10.0

_RANGE = "/etcdserverpb.KV/Range"
_PUT = "/etcdserverpb.KV/Put"
_TXN = "/etcdserverpb.KV/Txn"
_COMPACT = "/etcdserverpb.KV/Compact"
_LEASE_GRANT = "/etcdserverpb.Lease/LeaseGrant"
_WATCH = "/etcdserverpb.Watch/Watch"


class KeyExists(Exception):
    """A create found the key (or an allocation key) already present."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class RevisionMismatch(Exception):
    """A compare-and-swap found another revision (or no object) at the key."""

    def __init__(self, current: KV | None) -> None:
        super().__init__("revision mismatch")
        self.current = current


class WatchCanceled(Exception):
    """etcd ended a watch for a reason other than compaction; the watch resumes."""


class Compacted(Exception):
    """The revision asked for has been compacted away."""

    def __init__(self, compacted_revision: int) -> None:
        super().__init__(f"compacted at {compacted_revision}")
        self.compacted_revision = compacted_revision


class Unavailable(Exception):
    """No etcd endpoint answered."""


#: what etcd answers a write past its --max-request-bytes (1.5 MiB by default)
_TOO_LARGE = "etcdserver: request is too large"


class RequestTooLarge(errors.StatusError):
    """etcd refused a write past its request size limit: an object that outgrew what etcd stores (its
    managedFields count too), which no retry helps. Upstream passes etcd's text on as a bare 500; it is
    the request that is too large, so it is a 413 with that text."""

    def __init__(self) -> None:
        super().__init__(413, "RequestEntityTooLarge", _TOO_LARGE)


@dataclass(slots=True)
class KV:
    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    #: decrypted with a provider that no longer writes: an update should rewrite it even if unchanged
    stale: bool = False


@dataclass(slots=True)
class WatchEvent:
    """One change of a key; `value` is empty for deletes."""

    key: str
    value: bytes
    revision: int
    deleted: bool


def _range_end(prefix: bytes) -> bytes:
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


def _kv(raw: Any) -> KV:
    return KV(raw.key.decode(), raw.value, raw.mod_revision, raw.create_revision)


_EQ = rpc.Compare.EQUAL
_DELETE = rpc.Event.DELETE


def _absent(key: str) -> Any:
    return rpc.Compare(key=key.encode(), target=rpc.Compare.CREATE, result=_EQ, create_revision=0)


def _at(key: str, revision: int) -> Any:
    return rpc.Compare(key=key.encode(), target=rpc.Compare.MOD, result=_EQ, mod_revision=revision)


def _put(key: str, value: bytes, lease: int = 0) -> Any:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key.encode(), value=value, lease=lease))


def _del(key: str) -> Any:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key.encode()))


def _read_op(key: str) -> Any:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key.encode()))


class EtcdStore:
    """A thin, fast layer over etcd's KV and Watch APIs with endpoint failover."""

    def __init__(
        self,
        endpoints: list[str],
        lease_reuse_seconds: int = DEFAULT_REUSE_SECONDS,
        lease_max_objects: int = DEFAULT_MAX_OBJECTS,
        tls: ssl.SSLContext | None = None,
        transformers: PrefixTransformers | None = None,
    ) -> None:
        """`tls` is used for the `https://` endpoints (the system's CAs and no client cert when None);
        `transformers` encrypt and decrypt the values of the resources they are configured for."""
        if not endpoints:
            raise ValueError("at least one etcd endpoint is required")
        self._endpoints = [self._host_port(e) for e in endpoints]
        self._tls = [(tls or client_tls()) if e.startswith("https://") else None for e in endpoints]
        self._transform = transformers
        self._index = 0
        self._client: Connection | None = None
        self._lock = asyncio.Lock()
        self._generation = 0
        self.leases = LeaseManager(self._grant_lease, reuse_seconds=lease_reuse_seconds,
                                   max_objects=lease_max_objects)

    @staticmethod
    def _host_port(url: str) -> tuple[str, int]:
        parsed = urlparse(url if "://" in url else f"http://{url}")
        return parsed.hostname or "127.0.0.1", parsed.port or 2379

    def encrypts(self, prefix: str, group: str, resource: str) -> None:
        """Tell the encryption configuration which resource the keys under `prefix` hold."""
        if self._transform is not None:
            self._transform.register(prefix, group, resource)

    async def _kv(self, raw: Any, lenient: bool = False) -> KV:
        """A read key-value in plaintext. One that does not decrypt is a 500, or with `lenient` comes back
        empty, which the watch cache logs and skips like any object it cannot decode."""
        kv = _kv(raw)
        if self._transform is not None and (t := self._transform.for_key(kv.key)) is not None:
            try:
                kv.value, kv.stale = await t.from_storage(kv.value, kv.key)
            except TransformError as exc:
                if not lenient:
                    raise errors.internal(f"unable to transform key \"{kv.key}\": {exc}") from exc
                log.error("unable to decrypt a stored object", key=kv.key, error=str(exc))
                kv.value = b""
        return kv

    async def _encrypt(self, key: str, value: bytes) -> bytes:
        if self._transform is not None and (t := self._transform.for_key(key)) is not None:
            try:
                return await t.to_storage(value, key)
            except TransformError as exc:
                raise errors.internal(f"unable to transform key \"{key}\": {exc}") from exc
        return value

    @property
    def endpoint(self) -> str:
        host, port = self._endpoints[self._index]
        return f"{host}:{port}"

    async def _connect(self) -> Connection:
        client = self._client
        if client is not None and client.usable:
            return client
        async with self._lock:
            old = self._client
            if old is None or not old.usable:
                host, port = self._endpoints[self._index]
                self._client = await Connection.open(host, port, _CALL_TIMEOUT, self._tls[self._index])
                if old is not None:
                    # Told to go away, or out of stream ids: what is still running on it may finish.
                    asyncio.get_running_loop().call_later(_CLOSE_GRACE, old.close)
            return self._client

    async def _failover(self, generation: int, error: str = "") -> None:
        """Drop the current connection and move to the next endpoint (once per failure)."""
        async with self._lock:
            if generation != self._generation:
                return
            self._generation += 1
            old, self._client = self._client, None
            self._index = (self._index + 1) % len(self._endpoints)
            log.warning("etcd endpoint failed, moving on", next=self.endpoint, error=error)
        if old is not None:
            # Calls still in flight on the old channel fail over by themselves; closing it at once
            # would cancel them instead, so close it once they have had time to finish.
            asyncio.get_running_loop().call_later(_CLOSE_GRACE, old.close)

    async def _call(self, op: str, fn: Callable[[Connection], Awaitable[T]], deadline: float = 30.0) -> T:
        result, _ = await self._call_counted(op, fn, deadline)
        return result

    async def _call_counted(
        self, op: str, fn: Callable[[Connection], Awaitable[T]], deadline: float = 30.0
    ) -> tuple[T, int]:
        """Run `fn` against etcd, failing over between endpoints until `deadline` seconds pass.

        Returns the result and how many times the call was sent, so writes can recognise an
        earlier attempt of their own that landed before its connection broke.
        """
        start = time.monotonic()
        attempt = 0
        while True:
            generation = self._generation
            attempt += 1
            try:
                client = await self._connect()
                result = await fn(client)
                ETCD_LATENCY.labels(op, "").observe(time.monotonic() - start)
                return result, attempt
            except GrpcError as exc:
                if exc.code not in _RETRIABLE:
                    raise
                exc_text = str(exc)
            except OSError as exc:
                exc_text = str(exc)
            if time.monotonic() - start > deadline:
                raise Unavailable(f"etcd unavailable: {exc_text}")
            await self._failover(generation, exc_text)
            await asyncio.sleep(min(0.05 * attempt, 0.5))

    # -- reads -----------------------------------------------------------------
    async def get(self, key: str, revision: int = 0) -> KV | None:
        resp = await self._read("get", rpc.RangeRequest(key=key.encode(), revision=revision))
        if not resp.kvs:
            return None
        return _kv(resp.kvs[0]) if self._transform is None else await self._kv(resp.kvs[0])

    async def list(
        self, prefix: str, revision: int = 0, limit: int = 0, start: str | None = None, lenient: bool = False
    ) -> tuple[list[KV], int, bool]:
        """Keys under `prefix` (from `start` on), at `revision` (0 = now): (kvs, revision, more); `lenient`
        as for `_kv`."""
        begin = (start or prefix).encode()
        end = _range_end(prefix.encode())

        resp = await self._read("list", rpc.RangeRequest(key=begin, range_end=end, revision=revision, limit=limit),
                                _CALL_TIMEOUT * 4)
        if self._transform is None:
            return [_kv(kv) for kv in resp.kvs], resp.header.revision, bool(resp.more)
        return [await self._kv(kv, lenient) for kv in resp.kvs], resp.header.revision, bool(resp.more)

    async def count(self, prefix: str, start: str | None = None, revision: int = 0) -> tuple[int, int]:
        """(number of keys under prefix from `start` on, at `revision`; the response's revision)."""
        end = _range_end(prefix.encode())
        begin = (start or prefix).encode()

        resp = await self._read("count", rpc.RangeRequest(key=begin, range_end=end, count_only=True,
                                                          revision=revision))
        return resp.count, resp.header.revision

    async def current_revision(self) -> int:
        resp = await self._read("revision", rpc.RangeRequest(key=b"\0", range_end=b"\0", count_only=True, limit=1))
        return int(resp.header.revision)

    async def _read(self, op: str, request: Any, deadline: float = _CALL_TIMEOUT) -> Any:
        raw = request.SerializeToString()

        async def run(c: Connection) -> bytes:
            return await c.unary(_RANGE, raw, deadline)

        try:
            return rpc.RangeResponse.FromString(await self._call(op, run))
        except GrpcError as exc:
            if exc.code == StatusCode.OUT_OF_RANGE or "compacted" in exc.details:
                raise Compacted(0) from exc
            raise

    # -- writes ----------------------------------------------------------------
    async def create(
        self, key: str, value: bytes, also_create: dict[str, bytes] | None = None, ttl: int = 0
    ) -> int:
        """Create `key` (and allocation keys) atomically; KeyExists names the key that was taken.

        With `ttl` (seconds) etcd deletes the key once that time has passed.
        """
        also = also_create or {}
        if self._transform is not None:
            value = await self._encrypt(key, value)
        keys = [key, *also]
        compare = [_absent(k) for k in keys]
        rest = [_put(k, v) for k, v in also.items()]
        failure = [_read_op(k) for k in keys]
        resp, sent = await self._write("create", key, value, ttl, compare, rest, failure)
        if resp.succeeded:
            return int(resp.header.revision)
        existing = resp.responses[0].response_range.kvs
        if existing and sent > 1 and existing[0].value == value:
            # Our own earlier attempt landed before its connection broke: report it once.
            return int(existing[0].mod_revision)
        for k, r in zip(keys, resp.responses, strict=True):
            if r.response_range.kvs:
                raise KeyExists(k)
        raise RevisionMismatch(None)

    async def update(
        self,
        key: str,
        value: bytes,
        revision: int,
        also_create: dict[str, bytes] | None = None,
        also_delete: list[str] | None = None,
        ttl: int = 0,
    ) -> int:
        """Compare-and-swap on the key's mod revision; RevisionMismatch carries what is there now.

        The write replaces the key's lease: with `ttl` its life starts over, without it the key stays.
        """
        also = also_create or {}
        compare = [_at(key, revision)] + [_absent(k) for k in also]
        rest = [_put(k, v) for k, v in also.items()] + [_del(k) for k in also_delete or ()]
        failure = [_read_op(key)] + [_read_op(k) for k in also]
        stored = value if self._transform is None else await self._encrypt(key, value)
        resp, sent = await self._write("update", key, stored, ttl, compare, rest, failure)
        if resp.succeeded:
            return int(resp.header.revision)
        kvs = resp.responses[0].response_range.kvs
        current = await self._kv(kvs[0]) if kvs else None
        if current is not None and current.mod_revision == revision:
            for k, r in zip(also, resp.responses[1:], strict=True):
                if r.response_range.kvs:
                    raise KeyExists(k)
        # Only a resent write can have landed already; a first attempt that finds the same bytes lost
        # to a writer that happened to write them too (two quota charges from the same usage).
        if sent > 1 and current is not None and current.value == value:
            return current.mod_revision
        raise RevisionMismatch(current)

    async def delete(self, key: str, revision: int, also_delete: list[str] | None = None) -> int:
        """Delete `key` if it is still at `revision`; returns the revision of the delete."""
        compare = [_at(key, revision)]
        success = [_del(key)] + [_del(k) for k in also_delete or ()]
        failure = [_read_op(key)]
        resp, sent = await self._txn("delete", compare, success, failure)
        if resp.succeeded:
            return int(resp.header.revision)
        kvs = resp.responses[0].response_range.kvs
        if not kvs and sent > 1:
            # Our own earlier attempt deleted it before its connection broke.
            return int(resp.header.revision)
        raise RevisionMismatch(await self._kv(kvs[0]) if kvs else None)

    async def put_raw(self, key: str, value: bytes) -> int:
        """Unconditional put, for bookkeeping keys only (never API objects)."""
        raw = rpc.PutRequest(key=key.encode(), value=value).SerializeToString()

        async def run(c: Connection) -> bytes:
            return await c.unary(_PUT, raw, _CALL_TIMEOUT)

        return int(rpc.PutResponse.FromString(await self._call("put", run)).header.revision)

    async def _write(
        self, op: str, key: str, value: bytes, ttl: int, compare: list[Any], rest: list[Any], failure: list[Any]
    ) -> tuple[Any, int]:
        """The transaction that puts `key` (on a shared lease when `ttl` is set) and then `rest`."""
        lease = await self.leases.lease(ttl) if ttl > 0 else 0
        try:
            return await self._txn(op, compare, [_put(key, value, lease), *rest], failure)
        except GrpcError as exc:
            # The lease is gone before its time (revoked by hand, or an etcd restored from a backup).
            if not lease or exc.code != StatusCode.NOT_FOUND:
                raise
            self.leases.forget(lease)
        lease = await self.leases.lease(ttl)
        return await self._txn(op, compare, [_put(key, value, lease), *rest], failure)

    async def _grant_lease(self, ttl: int) -> int:
        raw = rpc.LeaseGrantRequest(TTL=ttl).SerializeToString()

        async def run(c: Connection) -> bytes:
            return await c.unary(_LEASE_GRANT, raw, _CALL_TIMEOUT)

        return int(rpc.LeaseGrantResponse.FromString(await self._call("lease_grant", run)).ID)

    async def _txn(self, op: str, compare: list[Any], success: list[Any], failure: list[Any]) -> tuple[Any, int]:
        raw = rpc.TxnRequest(compare=compare, success=success, failure=failure).SerializeToString()

        async def run(c: Connection) -> bytes:
            return await c.unary(_TXN, raw, _CALL_TIMEOUT)

        try:
            resp, sent = await self._call_counted(op, run)
        except GrpcError as exc:
            if exc.code == StatusCode.INVALID_ARGUMENT and _TOO_LARGE in exc.details:
                raise RequestTooLarge() from exc
            raise
        return rpc.TxnResponse.FromString(resp), sent

    async def compact(self, revision: int) -> None:
        raw = rpc.CompactionRequest(revision=revision).SerializeToString()

        async def run(c: Connection) -> bytes:
            return await c.unary(_COMPACT, raw, _CALL_TIMEOUT * 6)

        try:
            await self._call("compact", run)
        except GrpcError as exc:
            if "compacted" not in exc.details:
                raise

    # -- watch -----------------------------------------------------------------
    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[WatchEvent]:
        """Changes under `prefix` from `start_revision` on, in order, across endpoint failures.

        Raises Compacted when `start_revision` is older than etcd's history.
        """
        next_revision = start_revision
        key = prefix.encode()
        end = _range_end(key)
        failures = 0
        while True:
            generation = self._generation
            try:
                client = await self._connect()
                call = await client.stream(_WATCH, rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
                    key=key, range_end=end, start_revision=next_revision)).SerializeToString())
                try:
                    failures = 0
                    while True:
                        raw = await call.read()
                        if raw is None:
                            break
                        resp = rpc.WatchResponse.FromString(raw)
                        if resp.compact_revision:
                            raise Compacted(resp.compact_revision)
                        if resp.canceled:
                            raise WatchCanceled(resp.cancel_reason or "watch canceled by etcd")
                        for ev in resp.events:
                            kv = ev.kv
                            key, value = kv.key.decode(), kv.value
                            if value and self._transform is not None:
                                value = await self._decrypt_event(key, value)
                            yield WatchEvent(key, value, kv.mod_revision, ev.type == _DELETE)
                            next_revision = kv.mod_revision + 1
                finally:
                    call.cancel()
                if self._generation == generation:
                    # The stream ended without an error: the channel was closed; reconnect.
                    await self._failover(generation)
            except (GrpcError, OSError, WatchCanceled) as exc:
                failures += 1
                log.warning("etcd watch broke, resuming", error=str(exc), revision=next_revision)
                await self._failover(generation)
                await asyncio.sleep(min(0.05 * failures, 1.0))

    async def _decrypt_event(self, key: str, value: bytes) -> bytes:
        """A watched value in plaintext; one that does not decrypt is passed on empty, which the watch
        cache logs and skips, as it does any object it cannot decode."""
        t = self._transform.for_key(key) if self._transform is not None else None
        if t is None:
            return value
        try:
            return (await t.from_storage(value, key))[0]
        except TransformError as exc:
            log.error("unable to decrypt a watched object", key=key, error=str(exc))
            return b""

    async def start(self) -> None:
        """Ready what encryption needs before the first read (KMS plugins' data keys)."""
        if self._transform is not None:
            await self._transform.start()

    async def close(self) -> None:
        if self._transform is not None:
            self._transform.close()
        if self._client is not None:
            self._client.close()
            self._client = None

