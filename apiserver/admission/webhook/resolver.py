"""Where a webhook's request goes: its URL, or its Service resolved to one ready endpoint through the
Service's EndpointSlices, as upstream's endpoint service resolver (the one `--enable-aggregator-routing`
picks) does. The apiserver reaches pods directly, so no kube-proxy rules need to be on its host.

The TLS server name stays the Service's DNS name (`name.namespace.svc`), which is what a webhook's
serving certificate names.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from apiserver.storage.cache import WatchCache

Obj = dict[str, Any]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


class ResolveError(Exception):
    """The webhook cannot be reached: no such Service, port or ready endpoint."""


@dataclass(frozen=True, slots=True)
class Location:
    #: the URL requested (the endpoint's address for a Service)
    url: str
    #: the URL as upstream's error messages show it (the Service's DNS name for a Service)
    shown: str
    #: the name the server certificate must carry (SNI and hostname check), "" for the URL's own host
    server_name: str = ""


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ServiceResolver:
    """Resolves a webhook's clientConfig from the watch cache's Services and EndpointSlices."""

    def __init__(self, cache: WatchCache, root: str) -> None:
        self.cache = cache
        self.services = f"{root}services/specs/"
        self.slices = f"{root}endpointslices/"

    def _entries(self, prefix: str) -> dict[str, Any]:
        store = self.cache.resources.get(prefix)
        return store.entries if store is not None else {}

    def _namespace_slices(self, namespace: str) -> Iterator[Obj]:
        """The namespace's EndpointSlices, found by range in the cache's sorted keys (not by a scan of all)."""
        store = self.cache.resources.get(self.slices)
        if store is None:
            return
        prefix = f"{self.slices}{namespace}/"
        keys = store.sorted_keys()
        for i in range(bisect.bisect_left(keys, prefix), len(keys)):
            if not keys[i].startswith(prefix):
                return
            entry = store.entries.get(keys[i])
            if entry is not None:
                yield entry.obj

    def resolve(self, client_config: Obj, timeout: int) -> Location:
        query = f"timeout={timeout}s"
        url = client_config.get("url")
        if url:
            sep = "&" if urlsplit(url).query else "?"
            return Location(f"{url}{sep}{query}", f"{url}{sep}{query}")
        ref = client_config.get("service") or {}
        namespace, name = ref.get("namespace") or "", ref.get("name") or ""
        port = int(ref.get("port") or 443)
        path = ref.get("path") or "/"
        dns = f"{name}.{namespace}.svc"
        shown = f"https://{dns}:{port}{path}?{query}"
        address = self._endpoint(namespace, name, port)
        return Location(f"https://{address}{path}?{query}", shown, dns)

    def _endpoint(self, namespace: str, name: str, port: int) -> str:
        entry = self._entries(self.services).get(f"{self.services}{namespace}/{name}")
        if entry is None:
            raise ResolveError(f'service "{name}" not found')
        spec = entry.obj.get("spec") or {}
        if spec.get("type") == "ExternalName":
            return _host_port(str(spec.get("externalName") or ""), port)
        svc_port = next((p for p in spec.get("ports") or [] if p.get("port") == port), None)
        if svc_port is None:
            raise ResolveError(f'no service port {port} found for service "{name}"')
        port_name = svc_port.get("name") or ""
        candidates: list[str] = []
        for es in self._namespace_slices(namespace):
            if ((es.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME_LABEL) != name:
                continue
            target = next((p.get("port") for p in es.get("ports") or [] if (p.get("name") or "") == port_name),
                          None)
            if target is None:
                continue
            for ep in es.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready") is False:
                    continue
                candidates.extend(_host_port(addr, int(target)) for addr in ep.get("addresses") or [])
        if not candidates:
            raise ResolveError(f'no endpoints available for service "{name}"')
        return random.choice(candidates)
