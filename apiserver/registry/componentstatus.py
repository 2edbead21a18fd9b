"""v1 ComponentStatus, what `kubectl get cs` reads: etcd, the scheduler and the controller-manager, probed live.

Nothing is stored. As upstream's registry does, each request probes every component: etcd through the
apiserver's own connection (`etcd-0`), the other two over HTTP(S) at their health URLs without verifying
their certificates. Upstream probes fixed ports (10259, 10257) on loopback; the URLs here default to the
same and are flags, because `pyk8s up` gives each component a health port of its own.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from services.api import errors
from services.client.dialerrors import dial_error

#: The `Warning` header upstream sends with every ComponentStatus answer.
DEPRECATION_WARNING = '299 - "v1 ComponentStatus is deprecated in v1.19+"'
DEFAULT_SCHEDULER_URL = "https://127.0.0.1:10259/healthz"
DEFAULT_CONTROLLER_MANAGER_URL = "https://127.0.0.1:10257/healthz"
#: Upstream's probeTimeOut.
PROBE_TIMEOUT = 20.0

Condition = tuple[str, str, str]  # (status True/False/Unknown, message, error)


@dataclass(frozen=True)
class Components:
    """Where the components are: the health URLs, and how to check the apiserver's etcd."""

    etcd_check: Callable[[], Awaitable[Any]]
    scheduler_url: str = DEFAULT_SCHEDULER_URL
    controller_manager_url: str = DEFAULT_CONTROLLER_MANAGER_URL


async def probe_http(url: str) -> Condition:
    """Upstream's HTTP probe: 2xx and 3xx are healthy with the body as message; no answer is Unknown."""
    try:
        async with httpx.AsyncClient(verify=False, timeout=PROBE_TIMEOUT) as client:  # noqa: S501 - as upstream
            response = await client.get(url)
    except httpx.HTTPError as exc:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        reason = dial_error(exc, parts.hostname or "", port) or str(exc) or type(exc).__name__
        return "Unknown", "", f'Get "{url}": {reason}'
    if 200 <= response.status_code < 400:
        return "True", response.text, ""
    return "False", f"HTTP probe failed with statuscode: {response.status_code}", ""


async def probe_etcd(check: Callable[[], Awaitable[Any]]) -> Condition:
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            await check()
    except Exception as exc:  # noqa: BLE001 - any failure is what the condition reports
        return "False", "", str(exc) or type(exc).__name__
    return "True", "ok", ""


def _status(name: str, condition: Condition) -> dict[str, Any]:
    status, message, error = condition
    cond: dict[str, Any] = {"type": "Healthy", "status": status}
    if message:
        cond["message"] = message
    if error:
        cond["error"] = error
    return {"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": name}, "conditions": [cond]}


async def list_statuses(components: Components) -> list[dict[str, Any]]:
    """Every component's status, probed concurrently, in name order."""
    probes = {
        "controller-manager": probe_http(components.controller_manager_url),
        "etcd-0": probe_etcd(components.etcd_check),
        "scheduler": probe_http(components.scheduler_url),
    }
    results = await asyncio.gather(*probes.values())
    return [_status(name, result) for name, result in zip(probes, results, strict=True)]


async def get_status(components: Components, name: str) -> dict[str, Any]:
    if name == "etcd-0":
        return _status(name, await probe_etcd(components.etcd_check))
    urls = {"scheduler": components.scheduler_url, "controller-manager": components.controller_manager_url}
    if name not in urls:
        raise errors.not_found("componentstatuses", "", name)
    return _status(name, await probe_http(urls[name]))
