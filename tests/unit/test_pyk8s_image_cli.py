"""`pyk8s image load` and `pyk8s image ls` on a state dir whose cluster is not running: the image goes into
the registry's store, and `ls` lists what the registry serves with crictl-style sizes."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

import pytest

from deploy import nodes
from deploy.local import human_size
from deploy.nodes import (
    REGISTRY_UPSTREAMS,
    NodeNet,
    containerd_argv,
    containerd_config,
    registry_hosts_files,
    write_node_files,
)
from image_registry.store import ImageStore
from kubelet_agent.images import write_image_archive
from tests.conftest import REPO


def pyk8s(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run([sys.executable, "-m", "deploy", *argv], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=60, check=False)


def layer(size: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("data")
        info.size = size
        tar.addfile(info, io.BytesIO(os.urandom(size)))
    return buf.getvalue()


def test_image_ls_lists_each_loaded_image_with_digest_and_size(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    empty = pyk8s("image", "ls", "--state-dir", str(state_dir))
    assert empty.returncode == 0 and empty.stdout.split() == ["REF", "DIGEST", "SIZE"]
    big = write_image_archive(tmp_path / "big.tar", "ghcr.io/pyk8s/big:v2", layer(2_500_000), [], ["sh"])
    small = write_image_archive(tmp_path / "small.tar", "small", layer(1000), [], ["sh"])
    for archive in (big, small):
        loaded = pyk8s("image", "load", str(archive), "--state-dir", str(state_dir))
        assert loaded.returncode == 0, loaded.stderr
        assert "the image registry is not running" in loaded.stdout
    assert "docker.io/library/small:latest: stored (sha256:" in loaded.stdout
    listed = pyk8s("image", "ls", "--state-dir", str(state_dir))
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["REF", "DIGEST", "SIZE"]
    assert header.index("DIGEST") == rows[0].index("sha256:"), "columns line up"
    store = ImageStore(state_dir.resolve() / "registry")
    expected = [[str(image.ref), image.manifest.digest, human_size(store.size(image.manifest))]
                for image in store.images()]
    assert [row.split() for row in rows] == expected
    assert [row[0] for row in expected] == ["docker.io/library/small:latest", "ghcr.io/pyk8s/big:v2"]
    assert expected[1][2].endswith("MB") and expected[1][2].startswith("2.5")
    missing = pyk8s("image", "load", str(tmp_path / "nope.tar"), "--state-dir", str(state_dir))
    assert missing.returncode == 1 and "nope.tar: no such file" in missing.stderr


def test_human_size_is_what_crictl_prints() -> None:
    assert human_size(999) == "999B"
    assert human_size(4_271_234) == "4.271MB"
    assert human_size(1_000_000_000) == "1GB"


def test_node_registry_hosts_put_the_mirror_before_every_registry() -> None:
    files = registry_hosts_files("http://172.30.1.1:5000")
    assert set(files) == {f"{registry}/hosts.toml" for registry in
                          ("docker.io", "registry.k8s.io", "quay.io", "ghcr.io", "_default")}
    for name, text in files.items():
        hosts = tomllib.loads(text)
        assert hosts["host"] == {"http://172.30.1.1:5000": {"capabilities": ["pull", "resolve"]}}
        upstream = REGISTRY_UPSTREAMS[name.split("/")[0]]
        assert hosts.get("server", "") == upstream
    assert tomllib.loads(files["docker.io/hosts.toml"])["server"] == "https://registry-1.docker.io"


def test_node_containerd_config_reads_registry_hosts_from_config_path(tmp_path: Path) -> None:
    config = tomllib.loads(containerd_config(tmp_path / "root", tmp_path / "state", tmp_path / "c.sock",
                                             tmp_path / "cni", tmp_path / "certs.d"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["registry"] == {"config_path": str(tmp_path / "certs.d")}


def test_a_changed_containerd_config_changes_its_command_line(request: pytest.FixtureRequest,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """containerd reads its config once: a config that changed (the registry section, when a cluster made
    before it is brought up again) must change the command line, so `up` restarts containerd."""
    short = Path(tempfile.mkdtemp(prefix="pyk8s-cfg-", dir="/tmp"))  # a unix socket path must stay short
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    node = NodeNet(1, "node-1", "pyk8s-test-node-1", "pktestn1", "172.30.9.2", short / "node-1")
    write_node_files(node, "http://172.30.9.1:5000")
    before = containerd_argv(node)
    config = Path(before[before.index("--config") + 1])
    assert [p.name for p in node.containerd_dir.glob("config*.toml")] == [config.name]
    assert 'config_path = "' + str(node.registry_hosts) + '"' in config.read_text()
    write_node_files(node, "http://172.30.9.1:5001")
    assert containerd_argv(node) == before, "the mirror's address is in hosts.toml, read on every pull"
    assert "172.30.9.1:5001" in (node.registry_hosts / "docker.io" / "hosts.toml").read_text()
    monkeypatch.setattr(nodes, "CONTAINERD_CONFIG", nodes.CONTAINERD_CONFIG + "# changed\n")
    write_node_files(node, "http://172.30.9.1:5001")
    after = containerd_argv(node)
    assert after != before
    assert [p.name for p in node.containerd_dir.glob("config*.toml")] == [Path(after[-1]).name]
