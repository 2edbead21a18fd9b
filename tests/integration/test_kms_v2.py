"""KMS v2 envelope encryption against a real plugin process (tests/kms_plugin.py, grpcio on a unix socket):
the stored layout, the data-key cache, rotation of the plugin's key, and the apiserver end to end."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from apiserver.storage.encryption import parse_config
from apiserver.storage.kms import decode, decode_map
from tests.conftest import REPO, Kubectl, eventually, start_apiserver

ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"
PREFIX = f"/kms-{os.getpid()}"
KEY = "/registry/secrets/ns/name"


class Plugin:
    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, key_id: str) -> None:
        self.stop()
        self.socket.unlink(missing_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.kms_plugin", str(self.socket), "--key-id", key_id],
                                     cwd=REPO)
        deadline = time.monotonic() + 20
        while not self.socket.exists():
            assert time.monotonic() < deadline and self.proc.poll() is None, "the KMS plugin did not start"
            time.sleep(0.05)

    @property
    def decrypts(self) -> int:
        return int(Path(f"{self.socket}.decrypts").read_text())

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture(scope="module")
def plugin(workdir: Path) -> Iterator[Plugin]:
    (workdir / "kms").mkdir(exist_ok=True)
    p = Plugin(workdir / "kms" / "plugin.sock")
    p.start("key-1")
    try:
        yield p
    finally:
        p.stop()


def _config(plugin: Plugin, *after: dict) -> str:
    kms = {"kms": {"apiVersion": "v2", "name": "test", "endpoint": f"unix://{plugin.socket}", "timeout": "3s"}}
    return yaml.safe_dump({"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
                           "resources": [{"resources": ["secrets"], "providers": [kms, *after]}]})


def _envelope(stored: bytes) -> dict[int, list[bytes | int]]:
    prefix = b"k8s:enc:kms:v2:test:"
    assert stored.startswith(prefix), stored[:40]
    return decode(stored[len(prefix):])


async def _transformer(plugin: Plugin):  # type: ignore[no-untyped-def]
    t = parse_config(_config(plugin))
    t.register("/registry/secrets/", "", "secrets")
    await t.start()
    found = t.for_key(KEY)
    assert found is not None
    return t, found


async def test_envelope_layout_and_the_data_key_cache(plugin: Plugin) -> None:
    writer_set, writer = await _transformer(plugin)
    stored = await writer.to_storage(b"secret bytes", KEY)
    envelope = _envelope(stored)
    assert envelope[2] == [b"key-1"]  # keyID
    assert len(envelope[3][0]) > 32  # the wrapped data key
    assert decode_map(envelope[4]) == {"kms.example.com/plugin": b"pyk8s-test"}
    assert b"secret bytes" not in stored
    before = plugin.decrypts
    assert await writer.from_storage(stored, KEY) == (b"secret bytes", False)
    assert plugin.decrypts == before  # its own data key is known without asking the plugin
    reader_set, reader = await _transformer(plugin)  # another apiserver: must ask the plugin, once
    assert await reader.from_storage(stored, KEY) == (b"secret bytes", False)
    assert await reader.from_storage(await writer.to_storage(b"again", KEY), KEY) == (b"again", False)
    assert plugin.decrypts == before + 1
    writer_set.close()
    reader_set.close()


async def test_a_new_plugin_key_makes_old_values_stale(plugin: Plugin) -> None:
    old_set, old = await _transformer(plugin)
    stored = await old.to_storage(b"v", KEY)
    old_set.close()
    plugin.start("key-2")
    try:
        new_set, new = await _transformer(plugin)
        assert await new.from_storage(stored, KEY) == (b"v", True)
        assert _envelope(await new.to_storage(b"v", KEY))[2] == [b"key-2"]
        new_set.close()
    finally:
        plugin.start("key-1")


async def test_a_running_provider_follows_the_plugins_new_key(plugin: Plugin) -> None:
    t, transformer = await _transformer(plugin)
    provider = t.kms_providers()[0]
    provider.status_interval = 0.0  # every write looks (a minute apart otherwise)
    try:
        assert _envelope(await transformer.to_storage(b"v", KEY))[2] == [b"key-1"]
        plugin.start("key-2")

        async def sealed_under_key_2() -> bool:
            return _envelope(await transformer.to_storage(b"v", KEY))[2] == [b"key-2"]

        await eventually(sealed_under_key_2)
    finally:
        t.close()
        plugin.start("key-1")


def test_apiserver_with_kms_v2(plugin: Plugin, etcd_server: str, workdir: Path) -> None:
    base = workdir / "kms-apiserver"
    base.mkdir(exist_ok=True)
    config = base / "encryption.yaml"
    config.write_text(_config(plugin, {"identity": {}}))
    kubectl = Kubectl(base / "kubeconfig")

    def start() -> object:
        server = start_apiserver([etcd_server], base, "--etcd-prefix", PREFIX, "--encryption-provider-config",
                                 str(config))
        kubectl.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "t",
            "clusters": [{"name": "t", "cluster": {"server": server.url}}],
            "users": [{"name": "t", "user": {"token": "t"}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}))
        return server

    def stored() -> bytes:
        return subprocess.run([ETCDCTL, f"--endpoints={etcd_server}", "get", f"{PREFIX}/secrets/default/wrapped",
                               "--print-value-only"], capture_output=True, check=True).stdout.rstrip(b"\n")

    def password() -> str:
        data = kubectl.json("get", "secret", "wrapped")["data"]
        return base64.b64decode(data["password"]).decode()

    server = start()
    try:
        kubectl.run("create", "secret", "generic", "wrapped", "--from-literal=password=enveloped")
        assert _envelope(stored())[2] == [b"key-1"]
        assert password() == "enveloped"
        server.stop()  # type: ignore[attr-defined]
        plugin.start("key-2")
        server = start()
        assert password() == "enveloped"
        kubectl.run("replace", "-f", "-", stdin=kubectl.run("get", "secrets", "-o", "json").stdout)
        assert _envelope(stored())[2] == [b"key-2"]
        assert password() == "enveloped"
    finally:
        server.stop()  # type: ignore[attr-defined]
        plugin.start("key-1")
