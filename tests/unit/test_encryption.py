"""The encryption providers' stored layout (upstream's), rotation and staleness, and config checking."""

from __future__ import annotations

import base64

import nacl.secret
import pytest
import yaml
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from apiserver.storage.encryption import ConfigError, TransformError, parse_config

KEY = "/registry/secrets/ns/name"
SECRET = bytes(range(32))


def _config(*providers: dict, resources: list[str] | None = None) -> str:
    return yaml.safe_dump({"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
                           "resources": [{"resources": resources or ["secrets"], "providers": list(providers)}]})


def _keyed(kind: str, name: str = "k1", secret: bytes = SECRET) -> dict:
    return {kind: {"keys": [{"name": name, "secret": base64.b64encode(secret).decode()}]}}


def _transformer(*providers: dict):  # type: ignore[no-untyped-def]
    t = parse_config(_config(*providers))
    t.register("/registry/secrets/", "", "secrets")
    found = t.for_key(KEY)
    assert found is not None
    return found


async def test_aescbc_is_iv_then_pkcs7_cbc() -> None:
    stored = await _transformer(_keyed("aescbc")).to_storage(b"plain text", KEY)
    prefix = b"k8s:enc:aescbc:v1:k1:"
    assert stored.startswith(prefix)
    body = stored[len(prefix):]
    dec = Cipher(algorithms.AES(SECRET), modes.CBC(body[:16])).decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    assert unpadder.update(dec.update(body[16:]) + dec.finalize()) + unpadder.finalize() == b"plain text"


async def test_aesgcm_is_nonce_then_sealed_with_the_key_as_context() -> None:
    t = _transformer(_keyed("aesgcm", secret=SECRET[:16]))
    stored = await t.to_storage(b"plain text", KEY)
    body = stored[len(b"k8s:enc:aesgcm:v1:k1:"):]
    assert AESGCM(SECRET[:16]).decrypt(body[:12], body[12:], KEY.encode()) == b"plain text"
    with pytest.raises(TransformError):  # moved to another key, it no longer authenticates
        await t.from_storage(stored, "/registry/secrets/ns/other")


async def test_secretbox_is_nacl_secretbox() -> None:
    stored = await _transformer(_keyed("secretbox")).to_storage(b"plain text", KEY)
    body = stored[len(b"k8s:enc:secretbox:v1:k1:"):]
    assert nacl.secret.SecretBox(SECRET).decrypt(body[24:], body[:24]) == b"plain text"


async def test_the_first_provider_writes_and_the_others_read_stale() -> None:
    old = _transformer(_keyed("aescbc", "old"))
    stored = await old.to_storage(b"v", KEY)
    rotated = _transformer(_keyed("secretbox", "new"), _keyed("aescbc", "old"), {"identity": {}})
    assert await rotated.from_storage(stored, KEY) == (b"v", True)
    fresh = await rotated.to_storage(b"v", KEY)
    assert fresh.startswith(b"k8s:enc:secretbox:v1:new:")
    assert await rotated.from_storage(fresh, KEY) == (b"v", False)
    assert await rotated.from_storage(b'{"plain":1}', KEY) == (b'{"plain":1}', True)
    with pytest.raises(TransformError, match="no matching prefix"):
        await _transformer(_keyed("secretbox", "new")).from_storage(stored, KEY)


async def test_identity_first_stores_plaintext() -> None:
    t = _transformer({"identity": {}}, _keyed("aescbc"))
    assert await t.to_storage(b"v", KEY) == b"v"
    encrypted = await _transformer(_keyed("aescbc")).to_storage(b"v", KEY)
    assert await t.from_storage(encrypted, KEY) == (b"v", True)


async def test_resources_match_by_group_and_wildcards() -> None:
    t = parse_config(yaml.safe_dump({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
        "resources": [{"resources": ["secrets", "*.apps"], "providers": [_keyed("aescbc")]},
                      {"resources": ["*.*"], "providers": [_keyed("secretbox")]}]}))
    t.register("/registry/secrets/", "", "secrets")
    t.register("/registry/deployments/", "apps", "deployments")
    t.register("/registry/example.com/widgets/", "example.com", "widgets")
    t.register("/registry/services/specs/", "", "services")
    for key, prefix in (("/registry/secrets/a/b", b"k8s:enc:aescbc:"),
                        ("/registry/deployments/a/b", b"k8s:enc:aescbc:"),
                        ("/registry/example.com/widgets/a/b", b"k8s:enc:secretbox:")):
        found = t.for_key(key)
        assert found is not None and (await found.to_storage(b"x", key)).startswith(prefix)
    assert t.for_key("/registry/services/specs/a/b") is not None
    assert t.for_key("/registry/ranges/serviceips/10.0.0.1") is None


def test_unlisted_resources_stay_plain() -> None:
    t = parse_config(_config(_keyed("aescbc")))
    t.register("/registry/configmaps/", "", "configmaps")
    assert t.for_key("/registry/configmaps/a/b") is None


@pytest.mark.parametrize(("doc", "problem"), [
    ("[]", "not an EncryptionConfiguration"),
    ("kind: Other\napiVersion: apiserver.config.k8s.io/v1\n", 'kind is "Other"'),
    (_config(_keyed("aescbc", secret=b"short")), "resources[0].providers[0].aescbc.keys[0].secret"),
    (_config(_keyed("secretbox", secret=SECRET[:16])), "got 16, expected one of [32]"),
    (_config({"aescbc": {"keys": []}}), "keys (list) should have at least one element"),
    (_config(_keyed("aescbc", name="a:b")), "should not contain ':'"),
    (_config({"unknown": {}}), "provider does not contain any of the expected providers"),
    (_config({"identity": {}}, resources=["secrets", "secrets"]), 'Duplicate value: "secrets"'),
    (_config({"aescbc": {"keys": [{"name": "k", "secret": "not base64!"}]}}), "must be base64 encoded"),
    (_config({"kms": {"apiVersion": "v1", "name": "k", "endpoint": "unix:///s"}}),
     'kms.apiVersion: Unsupported value: "v1"'),
    (_config({"kms": {"apiVersion": "v2", "name": "k", "endpoint": "tcp://127.0.0.1:1"}}),
     "only unix is supported"),
    (_config({"kms": {"apiVersion": "v2", "name": "k", "endpoint": "unix:///s", "timeout": "-1s"}}),
     "timeout should be a positive value"),
    (_config({"kms": {"apiVersion": "v2", "name": "k", "endpoint": "unix:///s"}},
             {"kms": {"apiVersion": "v2", "name": "k", "endpoint": "unix:///t"}}), "duplicate kms provider name"),
])
def test_bad_configs_say_what_and_where(doc: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(doc)
    assert problem in str(raised.value)
