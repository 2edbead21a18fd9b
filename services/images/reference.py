"""Image references normalised as docker does, so `busybox`, `library/busybox:latest` and
`docker.io/library/busybox:latest` name one image wherever a name is compared (kubelet, registry, loader)."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_REGISTRY = "docker.io"
DEFAULT_TAG = "latest"
#: What docker spells `docker.io` in old references.
LEGACY_REGISTRY = "index.docker.io"

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
_NAME = re.compile(rf"^{_DOMAIN}/{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


@dataclass(frozen=True)
class ImageRef:
    """A normalised reference: `repository` includes the registry (`docker.io/library/busybox`)."""

    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def registry(self) -> str:
        return self.repository.split("/", 1)[0]

    @property
    def path(self) -> str:
        """The repository within its registry, as it appears in /v2/<path>/ URLs."""
        return self.repository.split("/", 1)[1]

    def __str__(self) -> str:
        return f"{self.repository}@{self.digest}" if self.digest else f"{self.repository}:{self.tag}"


def _looks_like_domain(first: str) -> bool:
    return "." in first or ":" in first or first == "localhost"


def normalize_image(image: str) -> str:
    """docker's reference normalisation: `busybox` -> `docker.io/library/busybox:latest`."""
    name, digest = (image.split("@", 1) + [""])[:2] if "@" in image else (image, "")
    first, _, rest = name.partition("/")
    if not rest:
        name = f"{DEFAULT_REGISTRY}/library/{name}"
    elif not _looks_like_domain(first):
        name = f"{DEFAULT_REGISTRY}/{name}"
    elif first in (DEFAULT_REGISTRY, LEGACY_REGISTRY):
        name = f"{DEFAULT_REGISTRY}/{rest if '/' in rest else f'library/{rest}'}"
    if digest:
        return f"{name}@{digest}"
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        name += f":{DEFAULT_TAG}"
    return name


def parse_image(image: str) -> ImageRef:
    """Normalise and split `image`; ValueError names what is wrong with it.

    A reference with both a tag and a digest keeps the digest, which is what a pull resolves.
    """
    full = normalize_image(image.strip())
    name, _, digest = full.partition("@")
    tag = ""
    head, _, last = name.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
        name = f"{head}/{last}"
    if not _NAME.match(name):
        raise ValueError(f"invalid reference format: repository name {name!r} must be lowercase")
    if digest:
        if not _DIGEST.match(digest):
            raise ValueError(f"invalid reference format: digest {digest!r} is not sha256:<64 hex digits>")
        return ImageRef(name, "", digest)
    if not _TAG.match(tag):
        raise ValueError(f"invalid reference format: tag {tag!r}")
    return ImageRef(name, tag)
