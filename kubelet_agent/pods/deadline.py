"""spec.activeDeadlineSeconds as the kubelet enforces it (upstream's activeDeadlineHandler): a pod
running on the node longer than its deadline, counted from status.startTime, is stopped and fails."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from services.api.meta import parse_time

REASON = "DeadlineExceeded"
MESSAGE = "Pod was active on the node longer than the specified deadline"


def seconds_left(spec: dict[str, Any], status: dict[str, Any], now: datetime | None = None) -> float | None:
    """Seconds until the pod's active deadline passes (zero or less: it has); None without a deadline
    or before the pod has a start time."""
    deadline = spec.get("activeDeadlineSeconds")
    started = parse_time(status.get("startTime"))
    if deadline is None or started is None:
        return None
    elapsed = ((now or datetime.now(UTC)) - started).total_seconds()
    return int(deadline) - elapsed
