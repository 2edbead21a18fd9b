"""The KMS v2 envelope provider: objects are sealed with a data key (DEK) that a KMS plugin wraps.

The plugin is a gRPC service (`v2.KeyManagementService`: Status, Encrypt, Decrypt) on a unix socket,
reached with the apiserver's own gRPC client. At start the provider makes a random 32-byte AES-GCM DEK
and has the plugin encrypt it; each object is then sealed locally (nonce and AES-GCM ciphertext with
the etcd key as additional data) and stored as `k8s:enc:kms:v2:<name>:` and an `EncryptedObject`
protobuf carrying the wrapped DEK, so reads need the plugin only for DEKs not seen before. The
plugin's Status is asked again once a minute (from a write, in the background); when its key ID has
changed a new DEK is made under it. A value whose key ID is not the current one is stale, so a rewrite
moves it to the current key.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import OrderedDict
from urllib.parse import urlparse

import structlog
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from apiserver.storage.grpc_wire import Connection, GrpcError

log = structlog.get_logger("apiserver.kms")

SERVICE = "/v2.KeyManagementService/"
#: EncryptedObject.encryptedDEKSourceType: the wrapped bytes are the AES-GCM key itself
AES_GCM_KEY = 0
_DEK_CACHE = 1000
#: seconds between Status calls that look for a new key ID (upstream's is a minute too)
STATUS_INTERVAL = 60.0


class KMSError(Exception):
    """The plugin failed or answered something unusable."""


# -- protobuf, the few messages of the KMS v2 API ----------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value) if value else b""
    raw = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(raw)) + raw if raw else b""


def _map(number: int, entries: dict[str, bytes]) -> bytes:
    return b"".join(_varint(number << 3 | 2) + _varint(len(e)) + e
                    for e in (_field(1, k) + _field(2, v) for k, v in sorted(entries.items())))


def encode(fields: dict[int, bytes | str | int | dict[str, bytes]]) -> bytes:
    """A message from {field number: value}; maps are string → bytes."""
    return b"".join(_map(n, v) if isinstance(v, dict) else _field(n, v) for n, v in fields.items())


def decode(data: bytes) -> dict[int, list[bytes | int]]:
    """{field number: values}; length-delimited values stay bytes, varints are ints."""
    out: dict[int, list[bytes | int]] = {}
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            if pos >= len(data):
                raise KMSError("truncated protobuf message")
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    while pos < len(data):
        tag = varint()
        number, kind = tag >> 3, tag & 7
        if kind == 0:
            out.setdefault(number, []).append(varint())
        elif kind == 2:
            size = varint()
            out.setdefault(number, []).append(data[pos:pos + size])
            pos += size
        elif kind == 5:
            pos += 4
        elif kind == 1:
            pos += 8
        else:
            raise KMSError(f"unsupported protobuf wire type {kind}")
    return out


def decode_map(entries: list[bytes | int]) -> dict[str, bytes]:
    out = {}
    for entry in entries:
        assert isinstance(entry, bytes)
        f = decode(entry)
        out[bytes(f.get(1, [b""])[0]).decode()] = bytes(f.get(2, [b""])[0])  # type: ignore[arg-type]
    return out


def _bytes(fields: dict[int, list[bytes | int]], number: int) -> bytes:
    value = fields.get(number, [b""])[-1]
    return value if isinstance(value, bytes) else b""


# -- the client ---------------------------------------------------------------------------------

class PluginClient:
    """Calls to one KMS v2 plugin over its unix socket; reconnects after the plugin restarts."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        parsed = urlparse(endpoint)
        self.path = parsed.path or parsed.netloc
        self.timeout = timeout
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()

    async def _connection(self) -> Connection:
        async with self._lock:
            if self._conn is None or not self._conn.usable:
                self._conn = await Connection.open_unix(self.path, self.timeout)
            return self._conn

    async def call(self, method: str, request: bytes) -> dict[int, list[bytes | int]]:
        try:
            conn = await self._connection()
            return decode(await conn.unary(SERVICE + method, request, self.timeout))
        except (GrpcError, OSError, TimeoutError) as exc:
            raise KMSError(f"KMS plugin {method} at {self.path} failed: {exc}") from exc

    async def status(self) -> tuple[str, str, str]:
        """(version, healthz, key_id)"""
        f = await self.call("Status", b"")
        return _bytes(f, 1).decode(), _bytes(f, 2).decode(), _bytes(f, 3).decode()

    async def encrypt(self, plaintext: bytes) -> tuple[bytes, str, dict[str, bytes]]:
        f = await self.call("Encrypt", encode({1: plaintext, 2: str(uuid.uuid4())}))
        return _bytes(f, 1), _bytes(f, 2).decode(), decode_map(f.get(3, []))

    async def decrypt(self, ciphertext: bytes, key_id: str, annotations: dict[str, bytes]) -> bytes:
        f = await self.call("Decrypt", encode({1: ciphertext, 2: str(uuid.uuid4()), 3: key_id, 4: annotations}))
        return _bytes(f, 1)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


class KMSv2:
    """The provider of one `kms` entry with `apiVersion: v2`."""

    def __init__(self, name: str, endpoint: str, timeout: float) -> None:
        self.name = name
        self.prefix = f"k8s:enc:kms:v2:{name}:".encode()
        self.plugin = PluginClient(endpoint, timeout)
        self._dek: AESGCM | None = None
        self._wrapped = b""
        self._key_id = ""
        self._annotations: dict[str, bytes] = {}
        self._deks: OrderedDict[bytes, AESGCM] = OrderedDict()
        self.status_interval = STATUS_INTERVAL
        self._checked = 0.0
        self._refresh: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Check the plugin is healthy and make the DEK that seals writes from now on."""
        version, healthz, key_id = await self.plugin.status()
        if healthz != "ok" or version != "v2" or not key_id:
            raise KMSError(f"KMS plugin {self.name} is not ready: version={version!r} healthz={healthz!r} "
                           f"key_id={key_id!r}")
        self._checked = time.monotonic()
        if key_id == self._key_id:
            return
        dek = os.urandom(32)
        wrapped, key_id, annotations = await self.plugin.encrypt(dek)
        if not wrapped or not key_id:
            raise KMSError(f"KMS plugin {self.name} returned an empty ciphertext or key ID")
        self._dek, self._wrapped, self._key_id, self._annotations = AESGCM(dek), wrapped, key_id, annotations
        self._remember(wrapped, self._dek)
        log.info("KMS v2 data key ready", provider=self.name, key_id=key_id)

    def _remember(self, wrapped: bytes, dek: AESGCM) -> None:
        self._deks[wrapped] = dek
        self._deks.move_to_end(wrapped)
        while len(self._deks) > _DEK_CACHE:
            self._deks.popitem(last=False)

    def _check_key(self) -> None:
        """Ask the plugin for its key ID in the background; writes go on with the current DEK meanwhile."""
        if time.monotonic() - self._checked < self.status_interval or (self._refresh and not self._refresh.done()):
            return

        async def refresh() -> None:
            try:
                await self.start()
            except KMSError as exc:
                log.warning("KMS v2 status check failed; keeping the current data key", provider=self.name,
                            error=str(exc))

        self._checked = time.monotonic()
        self._refresh = asyncio.get_running_loop().create_task(refresh())

    async def encrypt(self, data: bytes, context: bytes) -> bytes:
        if self._dek is None:
            await self.start()
        assert self._dek is not None
        self._check_key()
        nonce = os.urandom(12)
        sealed = nonce + self._dek.encrypt(nonce, data, context)
        return self.prefix + encode({1: sealed, 2: self._key_id, 3: self._wrapped, 4: self._annotations,
                                     5: AES_GCM_KEY})

    async def decrypt(self, data: bytes, context: bytes) -> tuple[bytes, bool]:
        """The plaintext, and whether it was sealed under another key ID than the plugin's current one."""
        f = decode(data[len(self.prefix):])
        sealed, key_id, wrapped = _bytes(f, 1), _bytes(f, 2).decode(), _bytes(f, 3)
        if f.get(5, [AES_GCM_KEY])[-1] != AES_GCM_KEY:
            raise KMSError("unsupported encryptedDEKSourceType")
        dek = self._deks.get(wrapped)
        if dek is None:
            raw = await self.plugin.decrypt(wrapped, key_id, decode_map(f.get(4, [])))
            if len(raw) != 32:
                raise KMSError("KMS plugin returned a data key of the wrong size")
            dek = AESGCM(raw)
            self._remember(wrapped, dek)
        try:
            return dek.decrypt(sealed[:12], sealed[12:], context), key_id != self._key_id
        except InvalidTag as exc:
            raise KMSError("message authentication failed") from exc
