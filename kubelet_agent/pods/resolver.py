"""Reads of the API objects pods refer to (configMaps, secrets, services, claims), with a short TTL
cache so a node's pods referring to one object cost one request per TTL, not one per pod sync.
"""

from __future__ import annotations

import time
from typing import Any

from services.client import Client, NotFound, gvr

CONFIGMAPS = gvr("v1", "configmaps")
SECRETS = gvr("v1", "secrets")
SERVICES = gvr("v1", "services")
PVCS = gvr("v1", "persistentvolumeclaims")
PVS = gvr("v1", "persistentvolumes", namespaced=False)
SERVICEACCOUNTS = gvr("v1", "serviceaccounts")
RUNTIMECLASSES = gvr("node.k8s.io/v1", "runtimeclasses", namespaced=False)


class Resolver:
    def __init__(self, client: Client, ttl: float = 2.0) -> None:
        self.client = client
        self.ttl = ttl
        self._cache: dict[tuple[str, str, str], tuple[float, Any]] = {}

    async def _get(self, resource: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        key = (resource.plural, namespace or "", name)
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        try:
            obj: dict[str, Any] | None = await self.client.get(resource, name, namespace)
        except NotFound:
            obj = None
        self._cache[key] = (now, obj)
        return obj

    async def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get(CONFIGMAPS, namespace, name)

    async def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get(SECRETS, namespace, name)

    async def pvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get(PVCS, namespace, name)

    async def pv(self, name: str) -> dict[str, Any] | None:
        return await self._get(PVS, None, name)

    async def runtime_class(self, name: str) -> dict[str, Any] | None:
        return await self._get(RUNTIMECLASSES, None, name)

    async def services(self, namespace: str) -> list[dict[str, Any]]:
        key = ("services", namespace, "")
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        items = (await self.client.list(SERVICES, namespace)).get("items") or []
        self._cache[key] = (now, items)
        return items

    async def token(self, namespace: str, service_account: str, pod: dict[str, Any], audiences: list[str],
                    expiration: int) -> dict[str, Any]:
        """A bound service-account token from the TokenRequest API: (token, expirationTimestamp)."""
        meta = pod.get("metadata") or {}
        body = {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": audiences, "expirationSeconds": expiration,
                     "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta.get("name"),
                                        "uid": meta.get("uid")}},
        }
        result = await self.client.create(SERVICEACCOUNTS, body, namespace, name=service_account,
                                          subresource="token")
        return result.get("status") or {}
