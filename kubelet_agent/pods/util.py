"""Small pure helpers the pod workers share: times, image names, quantities, QoS."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from services.api.quantity import parse_quantity
from services.images import normalize_image as normalize_image

Pod = dict[str, Any]


def ns_to_rfc3339(value: int) -> str | None:
    """CRI's nanoseconds as metav1.Time; None for zero (never happened)."""
    if value <= 0:
        return None
    return datetime.fromtimestamp(value / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_key(pod: Pod) -> str:
    m = pod.get("metadata") or {}
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


def pod_uid(pod: Pod) -> str:
    return (pod.get("metadata") or {}).get("uid", "")


def quantity(value: Any) -> Decimal:
    try:
        return parse_quantity(value)
    except (ValueError, TypeError):
        return Decimal(0)


def qos_class(spec: dict[str, Any]) -> str:
    """Guaranteed, Burstable or BestEffort, like upstream's GetPodQOS."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        res = c.get("resources") or {}
        for name, value in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items():
            if name in ("cpu", "memory") and quantity(value) > 0:
                requests[name] = requests.get(name, Decimal(0)) + quantity(value)
        found = set()
        for name, value in (res.get("limits") or {}).items():
            if name in ("cpu", "memory") and quantity(value) > 0:
                found.add(name)
                limits[name] = limits.get(name, Decimal(0)) + quantity(value)
        guaranteed &= found == {"cpu", "memory"}
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"


def cpu_shares(request: Decimal) -> int:
    """Upstream's MilliCPUToShares: 1 CPU = 1024 shares, at least 2."""
    if request <= 0:
        return 2
    return max(2, int(request * 1024))


def cpu_quota(limit: Decimal, period: int = 100_000) -> int:
    """Upstream's MilliCPUToQuota: at least 1 ms per period."""
    if limit <= 0:
        return 0
    return max(1000, int(limit * period))


def named_port(container: dict[str, Any], port: Any) -> int:
    """A probe or hook port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"port {port!r} not found in container {container.get('name')!r}")
