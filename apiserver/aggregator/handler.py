"""The aggregator's one entry point in the front door: discovery with the aggregated groups merged in,
and every request under an aggregated group/version proxied to its extension apiserver."""

from __future__ import annotations

from typing import Any

import orjson

from apiserver.aggregator.available import AvailabilityController
from apiserver.aggregator.discovery import api_group, merge_aggregated, merge_group_list
from apiserver.aggregator.index import APIServiceIndex, is_available
from apiserver.aggregator.proxy import forward, send_status
from apiserver.aggregator.resolver import ResolveError, ServiceGetter, resolve
from apiserver.aggregator.transport import ProxyClientConfig
from apiserver.endpoints.handlers import discovery
from apiserver.registry.store import RESTStore
from apiserver.storage.cache import ResourceCache
from services.api import errors
from services.api.catalog import Catalog
from services.auth.identity import UserInfo


def _unavailable(message: str = "service unavailable") -> errors.StatusError:
    return errors.StatusError(503, "ServiceUnavailable", message)


class Aggregator:
    def __init__(self, catalog: Catalog, apiservices: RESTStore, services: ServiceGetter, slices: ResourceCache,
                 config: ProxyClientConfig) -> None:
        self.catalog = catalog
        self.index = APIServiceIndex(apiservices.cache)
        self.services = services
        self.slices = slices
        self.config = config
        self.available = AvailabilityController(self.index, apiservices, services, slices, config)

    def start(self) -> None:
        self.available.start()

    async def stop(self) -> None:
        await self.available.stop()
        await self.config.close()

    async def _respond(self, send: Any, body: dict[str, Any], content_type: str = "application/json") -> None:
        data = orjson.dumps(body)
        headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    def openapi_v3_paths(self) -> dict[str, dict[str, str]]:
        """The /openapi/v3 index entries of the available aggregated group/versions."""
        out = {}
        for group, apiservices in self.index.remote_groups().items():
            if self.catalog.versions(group):
                continue
            for a in apiservices:
                if is_available(a):
                    name = f"apis/{group}/{a['spec']['version']}"
                    out[name] = {"serverRelativeURL": f"/openapi/v3/{name}"}
        return out

    async def _openapi(self, scope: dict[str, Any], receive: Any, send: Any, user: UserInfo) -> bool:
        """`/openapi/v3/apis/<group>/<version>` of an aggregated group/version, from its extension apiserver."""
        parts = [p for p in scope["path"].split("/") if p]
        if len(parts) != 5 or parts[2] != "apis" or self.catalog.versions(parts[3]):
            return False
        apiservice = self.index.remote(parts[3], parts[4])
        if apiservice is None:
            return False
        await self._proxy(scope, receive, send, apiservice, user)
        return True

    async def _proxy(self, scope: dict[str, Any], receive: Any, send: Any, apiservice: dict[str, Any],
                     user: UserInfo) -> None:
        if not is_available(apiservice):
            await send_status(send, _unavailable())
            return
        try:
            host = await resolve(apiservice["spec"]["service"], self.services, self.slices)
        except ResolveError as exc:
            await send_status(send, _unavailable(exc.message))
            return
        await forward(scope, receive, send, apiservice, host, user, self.config)

    async def serve(self, scope: dict[str, Any], receive: Any, send: Any, user: UserInfo) -> bool:
        """Answer the request if it is the aggregator's (True), else leave it to local handling (False)."""
        path: str = scope["path"]
        if scope["type"] == "http" and path.startswith("/openapi/v3/apis/"):
            return await self._openapi(scope, receive, send, user)
        if scope["type"] != "http" or not (path == "/apis" or path.startswith("/apis/")):
            return False
        parts = [p for p in path.split("/") if p][1:]
        remote = self.index.remote_groups()
        if not remote:
            return False
        method = scope.get("method", "GET")
        if not parts:
            if method != "GET":
                return False
            await self._root(scope, send, remote)
            return True
        group = parts[0]
        if group not in remote or self.catalog.versions(group):
            return False
        if len(parts) == 1:
            if method != "GET":
                await send_status(send, errors.method_not_allowed())
            else:
                await self._respond(send, api_group(group, remote[group]))
            return True
        apiservice = self.index.remote(group, parts[1])
        if apiservice is None:
            return False
        await self._proxy(scope, receive, send, apiservice, user)
        return True

    async def _root(self, scope: dict[str, Any], send: Any, remote: dict[str, list[dict[str, Any]]]) -> None:
        accept = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"accept"), None)
        wanted = discovery.wants_aggregated(accept)
        if wanted is not None:
            version, content_type = wanted
            local = discovery.aggregated(self.catalog, False, version)
            await self._respond(send, merge_aggregated(local, remote, self.available.discovery), content_type)
            return
        await self._respond(send, merge_group_list(discovery.api_group_list(self.catalog), remote))
