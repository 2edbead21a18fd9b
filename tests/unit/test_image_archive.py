"""Image references normalised as docker does, and archives into the store: what is refused and why."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from image_registry.archive import ArchiveError, load_archive
from image_registry.store import ImageStore
from kubelet_agent.images import write_image_archive
from services.images import ImageRef, normalize_image, parse_image


def test_references_normalise_as_docker_does() -> None:
    assert normalize_image("busybox") == "docker.io/library/busybox:latest"
    assert normalize_image("docker.io/busybox") == "docker.io/library/busybox:latest"
    assert normalize_image("index.docker.io/library/busybox:1") == "docker.io/library/busybox:1"
    assert normalize_image("localhost:5000/app") == "localhost:5000/app:latest"
    assert parse_image("registry.k8s.io/pause:3.10") == ImageRef("registry.k8s.io/pause", "3.10")
    assert parse_image("user/app:v1").path == "user/app"
    digest = "sha256:" + "a" * 64
    assert parse_image(f"nginx:1.25@{digest}") == ImageRef("docker.io/library/nginx", "", digest)
    with pytest.raises(ValueError, match="must be lowercase"):
        parse_image("Busybox")
    with pytest.raises(ValueError, match="digest"):
        parse_image("busybox@sha256:abc")


def layer() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("empty"), io.BytesIO(b""))
    return buf.getvalue()


def docker_archive_without_tags(path: Path) -> Path:
    write_image_archive(path, "x:1", layer(), [], [])
    with tarfile.open(path) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    manifest = json.loads(members["manifest.json"])
    manifest[0]["RepoTags"] = None
    members["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_unnamed_image_needs_a_name(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    archive = docker_archive_without_tags(tmp_path / "untagged.tar")
    with pytest.raises(ArchiveError, match="has no name: give it one with --name REF"):
        load_archive(store, archive)
    assert store.images() == []
    stored = load_archive(store, archive, name="ghcr.io/me/tool:2")
    assert [str(image.ref) for image in stored] == ["ghcr.io/me/tool:2"]
    assert [str(image.ref) for image in store.images()] == ["ghcr.io/me/tool:2"]


def test_a_corrupt_blob_stores_no_image(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    blob = b"not what the digest says"
    index = {"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "b" * 64, "size": len(blob),
         "annotations": {"io.containerd.image.name": "docker.io/library/bad:1"}}]}
    archive = tmp_path / "bad.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in (("oci-layout", b"{}"), ("index.json", json.dumps(index).encode()),
                           ("blobs/sha256/" + "b" * 64, blob)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ArchiveError, match="the archive is corrupt"):
        load_archive(store, archive)
    assert store.images() == []
    assert [p.name for p in store.blobs.iterdir()] == []


def test_a_file_that_is_no_image_archive(tmp_path: Path) -> None:
    archive = tmp_path / "other.tar"
    with tarfile.open(archive, "w") as tar:
        tar.addfile(tarfile.TarInfo("README"), io.BytesIO(b""))
    with pytest.raises(ArchiveError, match="neither a docker-save archive"):
        load_archive(ImageStore(tmp_path / "store"), archive)
    (tmp_path / "junk.tar").write_bytes(b"junk")
    with pytest.raises(ArchiveError, match="junk.tar"):
        load_archive(ImageStore(tmp_path / "store"), tmp_path / "junk.tar")


def test_loading_again_replaces_the_tag(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "store")
    first = load_archive(store, write_image_archive(tmp_path / "a.tar", "app:1", layer(), [], ["a"]))
    second = load_archive(store, write_image_archive(tmp_path / "b.tar", "app:1", layer(), [], ["b"]))
    assert first[0].manifest != second[0].manifest
    assert [(str(i.ref), i.manifest) for i in store.images()] == [("docker.io/library/app:1", second[0].manifest)]
