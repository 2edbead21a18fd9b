"""Where an APIService's Service is served: one ready endpoint from its EndpointSlices, as upstream's
endpoint routing resolves it (the Service's port matched by number, the slice port by the port's name)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

from apiserver.storage.cache import ResourceCache
from services.api import errors

Obj = dict[str, Any]
ServiceGetter = Callable[[str, str], Awaitable[Obj]]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


class ResolveError(Exception):
    """Why no endpoint serves the APIService; `reason` is the Available condition's reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _host(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


async def resolve(reference: Obj, services: ServiceGetter, slices: ResourceCache) -> str:
    """`host:port` of a ready endpoint behind `spec.service` of an APIService."""
    namespace, name = str(reference.get("namespace") or ""), str(reference.get("name") or "")
    port = int(reference.get("port") or 443)
    try:
        service = await services(namespace, name)
    except errors.StatusError as exc:
        if exc.code == 404:
            raise ResolveError("ServiceNotFound", f'service/{name} in "{namespace}" is not present') from None
        raise
    spec = service.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return _host(str(spec.get("externalName") or ""), port)
    service_port = next((p for p in spec.get("ports") or () if p.get("port") == port), None)
    if service_port is None:
        raise ResolveError("ServicePortError", f'service/{name} in "{namespace}" is not listening on port {port}')
    port_name = service_port.get("name") or ""
    candidates: list[str] = []
    prefix = f"{slices.prefix}{namespace}/"
    for key, entry in slices.entries.items():
        obj = entry.obj
        if not key.startswith(prefix) or ((obj.get("metadata") or {}).get("labels") or {}).get(
                SERVICE_NAME_LABEL) != name:
            continue
        slice_port = next((p for p in obj.get("ports") or () if (p.get("name") or "") == port_name), None)
        if slice_port is None or slice_port.get("port") is None:
            continue
        for endpoint in obj.get("endpoints") or ():
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            candidates.extend(_host(a, int(slice_port["port"])) for a in (endpoint.get("addresses") or ())[:1])
    if not candidates:
        raise ResolveError("MissingEndpoints", f'endpoints for service/{name} in "{namespace}" have no addresses '
                                               f'with port name "{port_name}"')
    return random.choice(candidates)
