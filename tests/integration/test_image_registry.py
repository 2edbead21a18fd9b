"""The registry process on loopback, over a store loaded from a docker-save archive and an OCI-layout
tarball built here: the distribution API's read side as containerd and `docker pull` use it."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from image_registry.archive import load_archive
from image_registry.store import ImageStore
from kubelet_agent.images import write_image_archive
from tests.conftest import REPO, free_port


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def small_layer(text: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        data = text.encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@dataclass
class OciImage:
    archive: Path
    index_digest: str
    manifest: bytes
    layer: bytes


def write_oci_layout(path: Path) -> OciImage:
    """An OCI layout tarball as skopeo writes one: a gzip layer, a manifest, an index over it for one
    platform, and index.json naming the image with a bare tag (the repository must come from --name)."""
    layer = gzip.compress(small_layer("from an oci layout\n"), mtime=0)
    diff_id = sha(gzip.decompress(layer))
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["cat", "/hello.txt"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": sha(layer),
                    "size": len(layer)}]}).encode()
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha(manifest),
                       "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"}},
                      {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "0" * 64,
                       "size": 500, "platform": {"architecture": "arm64", "os": "linux"}}]}).encode()
    top = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": sha(index), "size": len(index),
         "annotations": {"org.opencontainers.image.ref.name": "3.1"}}]}).encode()
    with tarfile.open(path, "w") as tar:
        add(tar, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add(tar, "index.json", top)
        for blob in (layer, config, manifest, index):
            add(tar, f"blobs/sha256/{sha(blob).split(':')[1]}", blob)
    return OciImage(path, sha(index), manifest, layer)


@dataclass
class Registry:
    url: str
    health: str
    store: ImageStore
    docker_layer: bytes
    oci: OciImage


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    base = tmp_path_factory.mktemp("registry")
    store = ImageStore(base / "store")
    docker_layer = small_layer("from docker save\n")
    docker = write_image_archive(base / "hello.tar", "hello:1.0", docker_layer, [], ["cat", "/hello.txt"])
    load_archive(store, docker)
    oci = write_oci_layout(base / "oci.tar")
    load_archive(store, oci.archive, name="quay.io/pyk8s/tool")
    port, health = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "image_registry", f"--store={store.root}", "--address=127.0.0.1",
                             f"--port={port}", f"--secure-port={health}", "--bind-address=127.0.0.1"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(base / "log", "wb"))  # noqa: SIM115
    url, health_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{health}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{health_url}/readyz").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, (base / "log").read_text()
        time.sleep(0.1)
    try:
        yield Registry(url, health_url, store, docker_layer, oci)
    finally:
        proc.terminate()
        proc.wait(10)


def test_base_endpoint_answers_with_the_api_version(registry: Registry) -> None:
    response = httpx.get(f"{registry.url}/v2/")
    assert response.status_code == 200
    assert response.headers["Docker-Distribution-API-Version"] == "registry/2.0"
    assert response.json() == {}


def test_docker_archive_manifest_by_tag_and_digest(registry: Registry) -> None:
    """`hello:1.0` from docker save is served as docker.io/library/hello:1.0, as an OCI manifest whose
    uncompressed layer digest is the layer's own sha256."""
    for ns, name in (("docker.io", "library/hello"), ("", "hello"), ("", "docker.io/library/hello")):
        url = f"{registry.url}/v2/{name}/manifests/1.0" + (f"?ns={ns}" if ns else "")
        got = httpx.get(url)
        assert got.status_code == 200, (url, got.text)
        assert got.headers["Content-Type"] == "application/vnd.oci.image.manifest.v1+json"
        assert got.headers["Docker-Content-Digest"] == sha(got.content)
        assert int(got.headers["Content-Length"]) == len(got.content)
    manifest = got.json()
    assert manifest["layers"] == [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                   "digest": sha(registry.docker_layer), "size": len(registry.docker_layer)}]
    head = httpx.head(f"{registry.url}/v2/library/hello/manifests/1.0?ns=docker.io")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["Docker-Content-Digest"] == sha(got.content)
    assert head.headers["Content-Length"] == str(len(got.content))
    by_digest = httpx.get(f"{registry.url}/v2/library/hello/manifests/{sha(got.content)}?ns=docker.io")
    assert by_digest.status_code == 200 and by_digest.content == got.content
    config = httpx.get(f"{registry.url}/v2/library/hello/blobs/{manifest['config']['digest']}?ns=docker.io")
    assert sha(config.content) == manifest["config"]["digest"] == config.headers["Docker-Content-Digest"]
    assert json.loads(config.content)["config"]["Cmd"] == ["cat", "/hello.txt"]


def test_blobs_stream_whole_and_by_range(registry: Registry) -> None:
    digest = sha(registry.oci.layer)
    url = f"{registry.url}/v2/pyk8s/tool/blobs/{digest}?ns=quay.io"
    head = httpx.head(url)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["Content-Length"] == str(len(registry.oci.layer))
    assert head.headers["Docker-Content-Digest"] == digest
    got = httpx.get(url)
    assert got.content == registry.oci.layer and sha(got.content) == digest
    part = httpx.get(url, headers={"Range": "bytes=10-"})
    assert part.status_code == 206 and part.content == registry.oci.layer[10:]
    assert part.headers["Content-Range"] == f"bytes 10-{len(registry.oci.layer) - 1}/{len(registry.oci.layer)}"


def test_a_large_blob_streams_while_other_requests_are_answered(registry: Registry) -> None:
    """A 64 MiB blob goes out in chunks read in a thread: the loop keeps answering while it streams."""
    big = io.BytesIO(bytes(range(256)) * (1 << 18))
    digest, size = registry.store.add_blob(big)
    with httpx.stream("GET", f"{registry.url}/v2/pyk8s/tool/blobs/{digest}?ns=quay.io") as stream:
        chunks = stream.iter_raw(1 << 16)
        first = next(chunks)
        assert httpx.get(f"{registry.url}/v2/", timeout=5).status_code == 200
        hasher = hashlib.sha256(first)
        received = len(first)
        for chunk in chunks:
            hasher.update(chunk)
            received += len(chunk)
    assert received == size == 1 << 26
    assert "sha256:" + hasher.hexdigest() == digest


def test_oci_layout_index_keeps_its_media_type(registry: Registry) -> None:
    got = httpx.get(f"{registry.url}/v2/pyk8s/tool/manifests/3.1?ns=quay.io")
    assert got.status_code == 200
    assert got.headers["Content-Type"] == "application/vnd.oci.image.index.v1+json"
    assert got.headers["Docker-Content-Digest"] == registry.oci.index_digest == sha(got.content)
    child = got.json()["manifests"][0]["digest"]
    manifest = httpx.get(f"{registry.url}/v2/pyk8s/tool/manifests/{child}?ns=quay.io")
    assert manifest.status_code == 200 and manifest.content == registry.oci.manifest
    assert manifest.headers["Content-Type"] == "application/vnd.oci.image.manifest.v1+json"
    tags = httpx.get(f"{registry.url}/v2/pyk8s/tool/tags/list?ns=quay.io").json()
    assert tags == {"name": "pyk8s/tool", "tags": ["3.1"]}


def test_unknown_names_tags_and_blobs_are_404_with_the_spec_error(registry: Registry) -> None:
    def code(url: str, status: int = 404) -> str:
        response = httpx.get(f"{registry.url}{url}")
        assert response.status_code == status, (url, response.text)
        assert response.headers["Content-Type"] == "application/json"
        errors = response.json()["errors"]
        assert len(errors) == 1 and errors[0]["message"]
        return str(errors[0]["code"])

    assert code("/v2/library/nginx/manifests/latest?ns=docker.io") == "NAME_UNKNOWN"
    # The same path under another registry is another repository.
    assert code("/v2/library/hello/manifests/1.0?ns=ghcr.io") == "NAME_UNKNOWN"
    assert code("/v2/library/hello/manifests/2.0?ns=docker.io") == "MANIFEST_UNKNOWN"
    assert code(f"/v2/library/hello/manifests/sha256:{'1' * 64}?ns=docker.io") == "MANIFEST_UNKNOWN"
    assert code(f"/v2/library/hello/blobs/sha256:{'1' * 64}?ns=docker.io") == "BLOB_UNKNOWN"
    assert code("/v2/library/hello/blobs/sha256:xyz?ns=docker.io", 400) == "DIGEST_INVALID"
    assert code("/v2/Library/Hello/manifests/1.0", 400) == "NAME_INVALID"
    assert code("/v2/library/hello:1.0/manifests/1.0?ns=docker.io", 400) == "NAME_INVALID"
    head = httpx.head(f"{registry.url}/v2/library/hello/manifests/2.0?ns=docker.io")
    assert head.status_code == 404 and head.content == b""


def test_it_is_read_only(registry: Registry) -> None:
    for method, path in (("PUT", "/v2/library/hello/manifests/1.0"), ("DELETE", "/v2/library/hello/manifests/1.0"),
                         ("POST", "/v2/library/hello/blobs/uploads/")):
        response = httpx.request(method, f"{registry.url}{path}?ns=docker.io", content=b"{}")
        assert response.status_code == 405, (method, path)
        assert response.json()["errors"][0]["code"] == "UNSUPPORTED"
    assert httpx.get(f"{registry.url}/v2/library/hello/manifests/1.0?ns=docker.io").status_code == 200


def test_an_image_loaded_while_it_runs_is_served(registry: Registry, tmp_path: Path) -> None:
    url = f"{registry.url}/v2/library/late/manifests/2?ns=docker.io"
    assert httpx.get(url).status_code == 404
    load_archive(registry.store, write_image_archive(tmp_path / "late.tar", "late:2", small_layer("late\n"), [], []))
    assert httpx.get(url).status_code == 200


def test_health_and_metrics(registry: Registry) -> None:
    assert httpx.get(f"{registry.health}/healthz").status_code == 200
    assert httpx.get(f"{registry.health}/readyz").text == "ok"
    metrics = httpx.get(f"{registry.health}/metrics").text
    assert 'registry_http_requests_total{code="200",method="GET",route="manifests"}' in metrics


def skopeo(*argv: str) -> str:
    result = subprocess.run(["skopeo", *argv], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"skopeo {' '.join(argv)}: {result.stderr}"
    return result.stdout


def test_skopeo_pulls_from_it_and_verifies_every_digest(registry: Registry, tmp_path: Path) -> None:
    """containers/image, another implementation of the client side, reads the registry: inspect by tag and a
    full copy, which checks each blob against its digest."""
    host = registry.url.removeprefix("http://")
    inspected = json.loads(skopeo("inspect", "--tls-verify=false", f"docker://{host}/library/hello:1.0"))
    manifest = httpx.get(f"{registry.url}/v2/library/hello/manifests/1.0")
    assert inspected["Digest"] == manifest.headers["Docker-Content-Digest"]
    assert inspected["Layers"] == [sha(registry.docker_layer)]
    assert json.loads(skopeo("list-tags", "--tls-verify=false", f"docker://{host}/hello"))["Tags"] == ["1.0"]
    skopeo("copy", "--src-tls-verify=false", f"docker://{host}/library/hello:1.0", f"dir:{tmp_path / 'copy'}")
    assert (tmp_path / "copy" / sha(registry.docker_layer).split(":")[1]).read_bytes() == registry.docker_layer


def test_an_oci_archive_skopeo_writes_loads(registry: Registry, tmp_path: Path) -> None:
    """skopeo's oci-archive (a bare tag as ref.name, so the repository comes from --name) serves the very
    manifest skopeo wrote."""
    source = write_image_archive(tmp_path / "src.tar", "tool:9", small_layer("via skopeo\n"), [], ["sh"])
    skopeo("copy", f"docker-archive:{source}", f"oci-archive:{tmp_path / 'oci.tar'}:9")
    with tarfile.open(tmp_path / "oci.tar") as tar:
        wrote = json.loads(tar.extractfile("index.json").read())["manifests"][0]  # type: ignore[union-attr]
    stored = load_archive(registry.store, tmp_path / "oci.tar", name="ghcr.io/pyk8s/skopeo")
    assert [str(image.ref) for image in stored] == ["ghcr.io/pyk8s/skopeo:9"]
    got = httpx.get(f"{registry.url}/v2/pyk8s/skopeo/manifests/9?ns=ghcr.io")
    assert got.status_code == 200
    assert got.headers["Docker-Content-Digest"] == wrote["digest"] == sha(got.content)
    assert got.headers["Content-Type"] == wrote["mediaType"]


def test_a_docker_archive_skopeo_writes_loads(registry: Registry, tmp_path: Path) -> None:
    """skopeo's docker-archive writer (docker load's format, layers as <digest>.tar) round-trips through the
    registry: out of it with skopeo, back in with the loader under another name, the same layer served."""
    host = registry.url.removeprefix("http://")
    archive = tmp_path / "saved.tar"
    skopeo("copy", "--src-tls-verify=false", f"docker://{host}/library/hello:1.0",
           f"docker-archive:{archive}:docker.io/pyk8s/saved:3")
    stored = load_archive(registry.store, archive)
    assert [str(image.ref) for image in stored] == ["docker.io/pyk8s/saved:3"]
    manifest = httpx.get(f"{registry.url}/v2/pyk8s/saved/manifests/3?ns=docker.io").json()
    assert [layer["digest"] for layer in manifest["layers"]] == [sha(registry.docker_layer)]
