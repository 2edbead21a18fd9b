"""Encryption at rest: upstream's `EncryptionConfiguration` (`--encryption-provider-config`).

Each configured resource gets an ordered list of providers. The first one encrypts every write; every
one of them can decrypt, chosen by the prefix the stored value starts with, so keys rotate by putting a
new key first and rewriting the objects. A value read with any provider but the first is *stale*: an
update that changes nothing still writes it, which is how `kubectl replace` re-encrypts.

Stored values are laid out as upstream's, so the same etcd data reads back in either:
`k8s:enc:aescbc:v1:<key>:` IV and AES-CBC ciphertext with PKCS#7 padding; `k8s:enc:aesgcm:v1:<key>:`
nonce and AES-GCM ciphertext, authenticated with the etcd key; `k8s:enc:secretbox:v1:<key>:` nonce
and NaCl secretbox; `k8s:enc:kms:v2:<name>:` and an EncryptedObject (see `kms.py`). `identity`
stores plaintext.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import nacl.exceptions
import nacl.secret
import yaml
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from apiserver.storage.kms import KMSError, KMSv2
from services.runtime.durations import go_duration

API_VERSIONS = ("apiserver.config.k8s.io/v1", "apiserver.config.k8s.io/v1beta1")
KIND = "EncryptionConfiguration"
ENCRYPTED_PREFIX = b"k8s:enc:"
_AES_KEY_SIZES = (16, 24, 32)


class ConfigError(ValueError):
    """The encryption configuration file cannot be used; the text says what is wrong and where."""


class TransformError(Exception):
    """A stored value matches no configured provider or fails its integrity check, or a KMS plugin failed."""


class Provider(Protocol):
    prefix: bytes

    def encrypt(self, data: bytes, context: bytes) -> bytes: ...

    def decrypt(self, data: bytes, context: bytes) -> bytes: ...


class Identity:
    """Plaintext; reads anything that carries no encryption prefix."""

    prefix = b""

    def encrypt(self, data: bytes, context: bytes) -> bytes:
        return data

    def decrypt(self, data: bytes, context: bytes) -> bytes:
        if data.startswith(ENCRYPTED_PREFIX):
            raise TransformError("identity transformer tried to read encrypted data")
        return data


class AESCBC:
    def __init__(self, name: str, secret: bytes) -> None:
        self.prefix = f"k8s:enc:aescbc:v1:{name}:".encode()
        self._algorithm = algorithms.AES(secret)

    def encrypt(self, data: bytes, context: bytes) -> bytes:
        iv = os.urandom(16)
        padder = padding.PKCS7(128).padder()
        enc = Cipher(self._algorithm, modes.CBC(iv)).encryptor()
        return self.prefix + iv + enc.update(padder.update(data) + padder.finalize()) + enc.finalize()

    def decrypt(self, data: bytes, context: bytes) -> bytes:
        body = data[len(self.prefix):]
        if len(body) < 32 or len(body) % 16:
            raise TransformError("the stored data is not a multiple of the block size")
        dec = Cipher(self._algorithm, modes.CBC(body[:16])).decryptor()
        unpadder = padding.PKCS7(128).unpadder()
        try:
            return unpadder.update(dec.update(body[16:]) + dec.finalize()) + unpadder.finalize()
        except ValueError as exc:
            raise TransformError("invalid PKCS7 data (empty or not padded)") from exc


class AESGCMProvider:
    """AES-GCM with a random 12-byte nonce; the etcd key is the additional authenticated data, so a
    value copied to another key does not decrypt."""

    def __init__(self, name: str, secret: bytes) -> None:
        self.prefix = f"k8s:enc:aesgcm:v1:{name}:".encode()
        self._aead = AESGCM(secret)

    def encrypt(self, data: bytes, context: bytes) -> bytes:
        nonce = os.urandom(12)
        return self.prefix + nonce + self._aead.encrypt(nonce, data, context)

    def decrypt(self, data: bytes, context: bytes) -> bytes:
        body = data[len(self.prefix):]
        try:
            return self._aead.decrypt(body[:12], body[12:], context)
        except (InvalidTag, ValueError) as exc:
            raise TransformError("message authentication failed") from exc


class Secretbox:
    """XSalsa20-Poly1305 (NaCl secretbox) with a random 24-byte nonce."""

    def __init__(self, name: str, secret: bytes) -> None:
        self.prefix = f"k8s:enc:secretbox:v1:{name}:".encode()
        self._box = nacl.secret.SecretBox(secret)

    def encrypt(self, data: bytes, context: bytes) -> bytes:
        return self.prefix + bytes(self._box.encrypt(data))

    def decrypt(self, data: bytes, context: bytes) -> bytes:
        try:
            return self._box.decrypt(data[len(self.prefix):])
        except nacl.exceptions.CryptoError as exc:
            raise TransformError("output array was not large enough for encryption") from exc


class Transformer:
    """The providers of one resource rule, in order: the first writes, any reads."""

    def __init__(self, providers: Sequence[Provider | KMSv2]) -> None:
        self.providers = list(providers)
        self._writer = self.providers[0]

    async def to_storage(self, data: bytes, key: str) -> bytes:
        writer = self._writer
        if isinstance(writer, KMSv2):
            try:
                return await writer.encrypt(data, key.encode())
            except KMSError as exc:
                raise TransformError(str(exc)) from exc
        return writer.encrypt(data, key.encode())

    async def from_storage(self, data: bytes, key: str) -> tuple[bytes, bool]:
        """The plaintext, and whether it was stored by any provider but the first, or under a KMS key
        that is no longer the plugin's current one (stale)."""
        for i, provider in enumerate(self.providers):
            if data.startswith(provider.prefix):
                if isinstance(provider, KMSv2):
                    try:
                        plain, old_key = await provider.decrypt(data, key.encode())
                    except KMSError as exc:
                        raise TransformError(str(exc)) from exc
                    return plain, i > 0 or old_key
                try:
                    return provider.decrypt(data, key.encode()), i > 0
                except TransformError:
                    if provider.prefix:
                        raise
        raise TransformError("no matching prefix found")


@dataclass(frozen=True)
class Rule:
    """One `resources` entry: the group resources it names and their transformer."""

    patterns: tuple[str, ...]
    transformer: Transformer

    def matches(self, group: str, resource: str) -> bool:
        for pattern in self.patterns:
            name, _, pgroup = pattern.partition(".")
            if pattern == "*.*" or (name == "*" and pgroup == group) or (name == resource and pgroup == group):
                return True
        return False


class PrefixTransformers:
    """Which transformer each etcd key prefix of a resource uses; keys of other prefixes stay as they are."""

    def __init__(self, rules: Iterable[Rule], root: str) -> None:
        self.rules = list(rules)
        self._root_len = len(root)
        self._by_prefix: dict[str, Transformer] = {}
        self._nested: set[str] = set()

    def kms_providers(self) -> list[KMSv2]:
        return [p for rule in self.rules for p in rule.transformer.providers if isinstance(p, KMSv2)]

    async def start(self) -> None:
        """Have every KMS provider make its data key; before any read, so the plugins are checked at start."""
        for provider in self.kms_providers():
            await provider.start()

    def close(self) -> None:
        for provider in self.kms_providers():
            provider.plugin.close()

    def register(self, prefix: str, group: str, resource: str) -> None:
        """Map a resource's key prefix (`/registry/secrets/`) to the first rule that names it; the first
        resource registered for a shared prefix decides (as upstream, events.k8s.io's Events are core's)."""
        if prefix in self._by_prefix:
            return
        for rule in self.rules:
            if rule.matches(group, resource):
                self._by_prefix[prefix] = rule.transformer
                first = prefix.find("/", self._root_len) + 1
                if first < len(prefix):
                    self._nested.add(prefix[:first])
                return

    def for_key(self, key: str) -> Transformer | None:
        cut = key.find("/", self._root_len) + 1
        first = key[:cut]
        found = self._by_prefix.get(first)
        if found is None and first in self._nested:
            found = self._by_prefix.get(key[:key.find("/", cut) + 1])
        return found


# -- the configuration file ----------------------------------------------------------------------

def _secret(raw: Any, where: str, sizes: tuple[int, ...]) -> bytes:
    if not isinstance(raw, str) or not raw:
        raise ConfigError(f"{where}.secret: Required value")
    try:
        secret = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(f"{where}.secret: Invalid value: \"REDACTED\": secrets must be base64 encoded") from exc
    if len(secret) not in sizes:
        expected = ", ".join(str(s) for s in sizes)
        raise ConfigError(f"{where}.secret: Invalid value: \"REDACTED\": secret is not of the expected length, "
                          f"got {len(secret)}, expected one of [{expected}]")
    return secret


_KEYED = {"aescbc": (AESCBC, _AES_KEY_SIZES), "aesgcm": (AESGCMProvider, _AES_KEY_SIZES),
          "secretbox": (Secretbox, (32,))}
_ALL_PROVIDERS = ("aesgcm", "aescbc", "secretbox", "identity", "kms")


def _keyed(kind: str, body: Any, where: str) -> list[Provider]:
    cls, sizes = _KEYED[kind]
    keys = body.get("keys") if isinstance(body, dict) else None
    if not isinstance(keys, list) or not keys:
        raise ConfigError(f"{where}.keys: Required value: keys (list) should have at least one element")
    out: list[Provider] = []
    names: set[str] = set()
    for k, key in enumerate(keys):
        at = f"{where}.keys[{k}]"
        if not isinstance(key, dict):
            raise ConfigError(f"{at}: Invalid value: a key must be an object with name and secret")
        name = key.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{at}.name: Required value: key name is required")
        if ":" in name:
            raise ConfigError(f"{at}.name: Invalid value: \"{name}\": should not contain ':'")
        if name in names:
            raise ConfigError(f"{at}.name: Duplicate value: \"{name}\"")
        names.add(name)
        out.append(cls(name, _secret(key.get("secret"), at, sizes)))
    return out


def _kms(body: Any, where: str, names: set[str]) -> KMSv2:
    if not isinstance(body, dict):
        raise ConfigError(f"{where}: Invalid value: must be an object")
    if body.get("apiVersion") != "v2":
        raise ConfigError(f"{where}.apiVersion: Unsupported value: \"{body.get('apiVersion', '')}\": "
                          "supported values: \"v2\"")
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: Required value: name is required")
    if ":" in name:
        raise ConfigError(f"{where}.name: Invalid value: \"{name}\": should not contain ':'")
    if name in names:
        raise ConfigError(f"{where}.name: Duplicate value: \"{name}\": duplicate kms provider name")
    names.add(name)
    endpoint = body.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise ConfigError(f"{where}.endpoint: Required value: endpoint is required")
    if not endpoint.startswith("unix://") or len(endpoint) <= len("unix://"):
        raise ConfigError(f"{where}.endpoint: Invalid value: \"{endpoint}\": unsupported scheme for KMS "
                          "provider, only unix is supported")
    try:
        timeout = go_duration(str(body.get("timeout", "3s")))
    except ValueError as exc:
        raise ConfigError(f"{where}.timeout: Invalid value: {exc}") from None
    if timeout <= 0:
        raise ConfigError(f"{where}.timeout: Invalid value: timeout should be a positive value")
    return KMSv2(name, endpoint, timeout)


def _providers(raw: Any, where: str, kms_names: set[str]) -> list[Provider | KMSv2]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: Required value: provider does not contain any of the expected providers: "
                          + ", ".join(_ALL_PROVIDERS))
    out: list[Provider | KMSv2] = []
    for p, entry in enumerate(raw):
        at = f"{where}[{p}]"
        kinds = [k for k in (entry or {}) if k in _ALL_PROVIDERS] if isinstance(entry, dict) else []
        if len(kinds) != 1:
            if len(kinds) > 1:
                raise ConfigError(f"{at}: Invalid value: more than one provider specified in a single element, "
                                  "should split into different list elements")
            raise ConfigError(f"{at}: Invalid value: provider does not contain any of the expected providers: "
                              + ", ".join(_ALL_PROVIDERS))
        kind = kinds[0]
        if kind == "identity":
            out.append(Identity())
        elif kind == "kms":
            out.append(_kms(entry[kind], f"{at}.kms", kms_names))
        else:
            out.extend(_keyed(kind, entry[kind], f"{at}.{kind}"))
    return out


def _patterns(raw: Any, where: str, seen: set[str]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: Required value: resources (list) should have at least one element")
    out = []
    for r, name in enumerate(raw):
        at = f"{where}[{r}]"
        if not isinstance(name, str) or not name or name != name.lower():
            raise ConfigError(f"{at}: Invalid value: {name!r}: resource name should be lowercase")
        if name in seen:
            raise ConfigError(f"{at}: Duplicate value: \"{name}\"")
        resource, _, group = name.partition(".")
        if group.startswith("*") and group != "*":
            raise ConfigError(f"{at}: Invalid value: \"{name}\": use '*.' to encrypt all the resources from core "
                              "API group or *.* to encrypt all resources")
        if resource == "*" and name not in ("*.", "*.*") and not group:
            raise ConfigError(f"{at}: Invalid value: \"{name}\": use '*.' to encrypt all the resources from core "
                              "API group or *.* to encrypt all resources")
        seen.add(name)
        out.append(name)
    return tuple(out)


def parse_config(text: str, root: str = "/registry/") -> PrefixTransformers:
    """An `EncryptionConfiguration` document, checked as upstream checks it; ConfigError says what is wrong."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"error while parsing file: {exc}") from exc
    if not isinstance(doc, dict):
        raise ConfigError("error while parsing file: not an EncryptionConfiguration object")
    if doc.get("kind") != KIND:
        raise ConfigError(f"error while parsing file: kind is \"{doc.get('kind', '')}\", expected \"{KIND}\"")
    if doc.get("apiVersion") not in API_VERSIONS:
        raise ConfigError(f"error while parsing file: no kind \"{KIND}\" is registered for version "
                          f"\"{doc.get('apiVersion', '')}\"")
    resources = doc.get("resources")
    if not isinstance(resources, list) or not resources:
        raise ConfigError("resources: Required value: resources (list) should have at least one element")
    rules = []
    seen: set[str] = set()
    kms_names: set[str] = set()
    for i, entry in enumerate(resources):
        at = f"resources[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}: Invalid value: must be an object with resources and providers")
        patterns = _patterns(entry.get("resources"), f"{at}.resources", seen)
        rules.append(Rule(patterns, Transformer(_providers(entry.get("providers"), f"{at}.providers", kms_names))))
    return PrefixTransformers(rules, root)


def load_config(path: str | Path, root: str = "/registry/") -> PrefixTransformers:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"error opening encryption provider configuration file \"{path}\": {exc.strerror}") \
            from exc
    return parse_config(text, root)
