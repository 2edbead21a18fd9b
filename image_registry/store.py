"""The registry's images on disk as an OCI image layout: content-addressed `blobs/sha256/<hex>` and an
`index.json` whose entries name each image by its full reference (`io.containerd.image.name`, as
`ctr export` writes it). Writers (`pyk8s image load`) and the server are separate processes: blobs are
written under a temporary name and renamed into place, the index is replaced atomically under a lock,
and readers reload it when the file changes. Every call does file I/O: async callers run it in a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from services.images import ImageRef, parse_image

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST, *INDEX_TYPES)
#: Manifests are small documents; anything bigger is not one (containerd refuses over 4 MiB too).
MAX_MANIFEST_SIZE = 4 << 20

NAME_ANNOTATION = "io.containerd.image.name"
REF_ANNOTATION = "org.opencontainers.image.ref.name"
LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
CHUNK = 1 << 20

_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


class StoreError(Exception):
    """Content that cannot go into the store: a digest that does not match, a blob that is missing."""


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int

    def as_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class StoredImage:
    ref: ImageRef
    manifest: Descriptor


def valid_digest(digest: str) -> bool:
    return bool(_DIGEST.match(digest))


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def manifest_media_type(raw: bytes) -> str:
    """The media type a manifest document declares, or the one its shape implies (OCI allows omitting it)."""
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError("a manifest is a JSON object")
    declared = doc.get("mediaType")
    if isinstance(declared, str) and declared:
        return declared
    return OCI_INDEX if "manifests" in doc else OCI_MANIFEST


class ImageStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._index_key: tuple[int, int, int] | None = None
        self._images: dict[str, StoredImage] = {}

    @property
    def blobs(self) -> Path:
        return self.root / "blobs" / "sha256"

    @property
    def index_file(self) -> Path:
        return self.root / "index.json"

    def ensure(self) -> None:
        """Create the layout if it is not there yet."""
        self.blobs.mkdir(parents=True, exist_ok=True)
        if not (self.root / "oci-layout").exists():
            _atomic_write(self.root / "oci-layout", LAYOUT)
        if not self.index_file.exists():
            with self._locked():
                if not self.index_file.exists():
                    self._write_index([])

    # -- blobs -----------------------------------------------------------------------------------

    def blob_path(self, digest: str) -> Path | None:
        """Where the blob is, or None when the store lacks it (or `digest` is not a sha256 digest)."""
        if not valid_digest(digest):
            return None
        path = self.blobs / digest.removeprefix("sha256:")
        return path if path.is_file() else None

    def add_blob(self, source: IO[bytes], expected: str | None = None) -> tuple[str, int]:
        """Copy a stream into the store in chunks, hashing on the way; (digest, size).

        With `expected`, a stream whose bytes hash to anything else is refused and nothing is kept.
        """
        if expected is not None and not valid_digest(expected):
            raise StoreError(f"unsupported digest {expected!r}: only sha256 is")
        self.blobs.mkdir(parents=True, exist_ok=True)
        hasher = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(dir=self.blobs, prefix=".incoming-")
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := source.read(CHUNK):
                    hasher.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
            digest = "sha256:" + hasher.hexdigest()
            if expected is not None and digest != expected:
                raise StoreError(f"blob {expected} has digest {digest}: the archive is corrupt")
            final = self.blobs / hasher.hexdigest()
            if final.exists():
                os.unlink(tmp)
            else:
                os.chmod(tmp, 0o644)
                os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return digest, size

    def add_bytes(self, data: bytes, media_type: str) -> Descriptor:
        digest = sha256_digest(data)
        if self.blob_path(digest) is None:
            self.blobs.mkdir(parents=True, exist_ok=True)
            _atomic_write(self.blobs / digest.removeprefix("sha256:"), data)
        return Descriptor(media_type, digest, len(data))

    def read_manifest(self, digest: str) -> tuple[bytes, str] | None:
        """A manifest or index blob and its media type; None when absent or not a manifest."""
        path = self.blob_path(digest)
        if path is None or path.stat().st_size > MAX_MANIFEST_SIZE:
            return None
        raw = path.read_bytes()
        try:
            media_type = manifest_media_type(raw)
        except ValueError:
            return None
        return (raw, media_type) if media_type in MANIFEST_TYPES else None

    # -- the index -------------------------------------------------------------------------------

    def images(self) -> list[StoredImage]:
        """Every named image, sorted by reference; re-read when another process replaced the index."""
        try:
            st = self.index_file.stat()
        except FileNotFoundError:
            self._index_key, self._images = None, {}
            return []
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._index_key:
            self._images = {str(image.ref): image for image in self._read_index()}
            self._index_key = key
        return sorted(self._images.values(), key=lambda image: str(image.ref))

    def resolve(self, ref: ImageRef) -> Descriptor | None:
        """The manifest a tag names; by digest, the manifest blob itself when this repository is known."""
        images = self.images()
        if ref.digest:
            found = self.read_manifest(ref.digest)
            if found is None or not any(image.ref.repository == ref.repository for image in images):
                return None
            raw, media_type = found
            return Descriptor(media_type, ref.digest, len(raw))
        image = self._images.get(str(ref))
        return image.manifest if image is not None else None

    def repositories(self) -> set[str]:
        return {image.ref.repository for image in self.images()}

    def tags(self, repository: str) -> list[str]:
        return sorted(image.ref.tag for image in self.images() if image.ref.repository == repository)

    def tag(self, ref: ImageRef, manifest: Descriptor) -> None:
        """Point `ref` at `manifest` (whose blobs are all in the store already), replacing what it named."""
        if not ref.tag:
            raise StoreError(f"{ref}: an image is stored under a tag, not a digest")
        with self._locked():
            current = self._read_index()
            if StoredImage(ref, manifest) in current:
                return
            kept = [image for image in current if image.ref != ref]
            self._write_index([*kept, StoredImage(ref, manifest)])

    def reachable(self, manifest: Descriptor) -> Iterator[Descriptor]:
        """The descriptor and every blob it references that the store has (an index's children, configs,
        layers), each once."""
        seen: set[str] = set()
        todo = [manifest]
        while todo:
            desc = todo.pop()
            if desc.digest in seen or self.blob_path(desc.digest) is None:
                continue
            seen.add(desc.digest)
            yield desc
            if desc.media_type in MANIFEST_TYPES and (found := self.read_manifest(desc.digest)) is not None:
                todo.extend(referenced(json.loads(found[0])))

    def size(self, manifest: Descriptor) -> int:
        return sum(desc.size for desc in self.reachable(manifest))

    def _read_index(self) -> list[StoredImage]:
        try:
            doc = json.loads(self.index_file.read_bytes())
        except FileNotFoundError:
            return []
        out = []
        for entry in doc.get("manifests") or []:
            name = (entry.get("annotations") or {}).get(NAME_ANNOTATION)
            if not name:
                continue
            with contextlib.suppress(ValueError, KeyError, TypeError):
                out.append(StoredImage(parse_image(name), Descriptor(entry["mediaType"], entry["digest"],
                                                                      int(entry["size"]))))
        return out

    def _write_index(self, images: list[StoredImage]) -> None:
        entries = [{**image.manifest.as_json(),
                    "annotations": {NAME_ANNOTATION: str(image.ref), REF_ANNOTATION: image.ref.tag}}
                   for image in sorted(images, key=lambda image: str(image.ref))]
        doc = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
        self.root.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.index_file, json.dumps(doc, indent=2).encode() + b"\n")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def referenced(doc: dict[str, Any]) -> list[Descriptor]:
    """The descriptors a manifest (config and layers) or an index (its manifests) points at."""
    entries = list(doc.get("manifests") or [])
    if isinstance(doc.get("config"), dict):
        entries.append(doc["config"])
    entries += list(doc.get("layers") or [])
    out = []
    for entry in entries:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            out.append(Descriptor(str(entry.get("mediaType", "")), str(entry["digest"]), int(entry["size"])))
    return out


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
