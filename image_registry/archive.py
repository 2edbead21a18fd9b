"""Image tarballs into the store: what `docker save` writes (manifest.json, a tar per layer, a config
JSON) is converted to OCI manifests; an OCI image layout (`oci-layout`, `index.json`, `blobs/`, as skopeo,
crane and docker 25+ write) is copied blob by blob. Every blob is hashed as it is copied, so a corrupt
archive stores nothing under a wrong name; an image is tagged only once all its blobs are in.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from image_registry.store import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    NAME_ANNOTATION,
    OCI_CONFIG,
    OCI_LAYER,
    OCI_MANIFEST,
    REF_ANNOTATION,
    Descriptor,
    ImageStore,
    StoredImage,
    StoreError,
    manifest_media_type,
    referenced,
)
from services.images import ImageRef, parse_image

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class ArchiveError(Exception):
    """The file is not an image archive this loader understands, or is incomplete."""


def load_archive(store: ImageStore, path: Path, name: str | None = None) -> list[StoredImage]:
    """Put every image of the tarball at `path` into `store`; the images stored, by reference.

    `name` names an image the archive leaves unnamed (`docker save IMAGE_ID`, an OCI layout whose
    ref.name is a bare tag or absent); with several unnamed images it is an error.
    """
    store.ensure()
    try:
        with tarfile.open(path) as tar:
            members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
            if "oci-layout" in members and "index.json" in members:
                images = _load_oci_layout(store, tar, members, name)
            elif "manifest.json" in members:
                images = _load_docker_archive(store, tar, members, name)
            else:
                raise ArchiveError(f"{path}: neither a docker-save archive (manifest.json) nor an OCI image "
                                   "layout (oci-layout, index.json)")
    except (tarfile.TarError, OSError) as error:
        raise ArchiveError(f"{path}: {error}") from None
    except StoreError as error:
        raise ArchiveError(f"{path}: {error}") from None
    except (KeyError, TypeError, ValueError) as error:
        raise ArchiveError(f"{path}: malformed archive: {error}") from None
    if not images:
        raise ArchiveError(f"{path}: holds no image")
    for image in images:
        store.tag(image.ref, image.manifest)
    return images


def _read(tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str) -> bytes:
    member = members.get(name)
    handle = tar.extractfile(member) if member is not None else None
    if handle is None:
        raise ArchiveError(f"{name} is missing from the archive")
    with handle:
        return handle.read()


def _copy(store: ImageStore, tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str,
          expected: str | None = None) -> tuple[str, int, bytes]:
    """Copy one member into the store; (digest, size, its first bytes) for telling compression apart."""
    member = members.get(name)
    handle = tar.extractfile(member) if member is not None else None
    if handle is None:
        raise ArchiveError(f"{name} is missing from the archive")
    with handle:
        head = handle.read(4)
        handle.seek(0)
        digest, size = store.add_blob(handle, expected)
    return digest, size, head


def _layer_type(head: bytes) -> str:
    if head.startswith(GZIP_MAGIC):
        return OCI_LAYER + "+gzip"
    if head.startswith(ZSTD_MAGIC):
        return OCI_LAYER + "+zstd"
    return OCI_LAYER


def _named(refs: list[str], name: str | None, what: str, unnamed: list[str]) -> list[ImageRef]:
    """The references of one image: its own, or `name` when it has none."""
    try:
        if refs:
            return [parse_image(ref) for ref in refs]
        if name is None:
            raise ArchiveError(f"{what} has no name: give it one with --name REF")
        unnamed.append(what)
        if len(unnamed) > 1:
            raise ArchiveError(f"--name can name one image, and the archive has several unnamed: {', '.join(unnamed)}")
        return [parse_image(name)]
    except ValueError as error:
        raise ArchiveError(f"{what}: {error}") from None


def _load_docker_archive(store: ImageStore, tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo],
                         name: str | None) -> list[StoredImage]:
    entries = json.loads(_read(tar, members, "manifest.json"))
    if not isinstance(entries, list):
        raise ArchiveError("manifest.json is not a list of images")
    out: list[StoredImage] = []
    unnamed: list[str] = []
    for entry in entries:
        config = _read(tar, members, entry["Config"])
        config_desc = store.add_bytes(config, OCI_CONFIG)
        layers = []
        for layer in entry["Layers"]:
            digest, size, head = _copy(store, tar, members, layer)
            layers.append(Descriptor(_layer_type(head), digest, size))
        diff_ids = (json.loads(config).get("rootfs") or {}).get("diff_ids") or []
        if len(diff_ids) != len(layers):
            raise ArchiveError(f"{entry['Config']} lists {len(diff_ids)} layers and the archive {len(layers)}")
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config_desc.as_json(),
                    "layers": [layer.as_json() for layer in layers]}
        manifest_desc = store.add_bytes(json.dumps(manifest, separators=(",", ":")).encode(), OCI_MANIFEST)
        for ref in _named(list(entry.get("RepoTags") or []), name, f"image {config_desc.digest}", unnamed):
            out.append(StoredImage(ref, manifest_desc))
    return out


def _load_oci_layout(store: ImageStore, tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo],
                     name: str | None) -> list[StoredImage]:
    index = json.loads(_read(tar, members, "index.json"))
    out: list[StoredImage] = []
    unnamed: list[str] = []
    for entry in index.get("manifests") or []:
        desc = Descriptor(entry.get("mediaType") or "", entry["digest"], int(entry["size"]))
        _copy_tree(store, tar, members, desc)
        raw = store.read_manifest(desc.digest)
        if raw is None:
            raise ArchiveError(f"{desc.digest} in index.json is not an image manifest or index")
        desc = Descriptor(raw[1], desc.digest, desc.size)
        annotations = entry.get("annotations") or {}
        full = annotations.get(NAME_ANNOTATION) or annotations.get(REF_ANNOTATION) or ""
        if full and not any(c in full for c in ":/@"):
            # A bare tag (what the OCI spec suggests for ref.name): the repository comes from --name.
            full = f"{parse_image(name).repository}:{full}" if name is not None else ""
            if not full:
                raise ArchiveError(f"image {desc.digest} is tagged {annotations[REF_ANNOTATION]!r} without a "
                                   "repository: give it one with --name REF")
        for ref in _named([full] if full else [], name, f"image {desc.digest}", unnamed):
            out.append(StoredImage(ref, desc))
    return out


def _copy_tree(store: ImageStore, tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo],
               root: Descriptor) -> None:
    """Copy a manifest or index and everything it references; an index's children for other platforms may
    be absent (a single-platform copy), but a manifest's config and layers must all be there."""
    todo: list[tuple[Descriptor, bool]] = [(root, True)]
    while todo:
        desc, required = todo.pop()
        member = f"blobs/{desc.digest.replace(':', '/', 1)}"
        if member not in members:
            if required:
                raise ArchiveError(f"blob {desc.digest} is missing from the archive")
            continue
        if store.blob_path(desc.digest) is None:
            _copy(store, tar, members, member, desc.digest)
        if desc.media_type in MANIFEST_TYPES or desc is root:
            found = store.read_manifest(desc.digest)
            if found is None:
                continue
            doc: dict[str, Any] = json.loads(found[0])
            optional = manifest_media_type(found[0]) in INDEX_TYPES
            todo.extend((child, not optional) for child in referenced(doc))
