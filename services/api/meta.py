"""Object metadata helpers shared by every component."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from typing import Any

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_rfc3339() -> str:
    """metav1.Time: seconds precision, UTC, `Z` suffix."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """metav1.MicroTime: microseconds, UTC, `Z` suffix."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def new_uid() -> str:
    return str(uuid.uuid4())


def generate_name(base: str) -> str:
    """Upstream's SimpleNameGenerator: base (cut to leave room) plus five random characters."""
    base = base[: 63 - 5] if len(base) > 58 else base
    return base + "".join(random.choices(_GENERATE_ALPHABET, k=5))


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    """The object's metadata dict, created when missing."""
    m = obj.get("metadata")
    if not isinstance(m, dict):
        m = obj["metadata"] = {}
    return m


def object_key(namespace: str | None, name: str) -> str:
    """`namespace/name` or `name`, the key informers and work queues use."""
    return f"{namespace}/{name}" if namespace else name
