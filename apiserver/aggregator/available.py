"""The availability controller: each APIService's `Available` condition, and the discovery document of
each proxied group/version, fetched in the same check.

A local APIService is always available. A proxied one is available when its Service exists, exposes the
port, has a ready endpoint, and that endpoint answers `GET /apis/<group>/<version>` with a 2xx within
five seconds, asked as `system:kube-aggregator` in `system:masters` (upstream's identity for the check).
Every apiserver runs it, as every kube-apiserver runs the aggregator; a condition is written only when
it changes.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import structlog

from apiserver.aggregator.index import APIServiceIndex, is_local
from apiserver.aggregator.proxy import identity_headers
from apiserver.aggregator.resolver import ResolveError, ServiceGetter, resolve
from apiserver.aggregator.transport import ProxyClientConfig, server_name
from apiserver.registry.store import RESTStore, WriteOptions
from apiserver.storage.cache import ResourceCache
from services.api import errors
from services.api.conditions import find_condition, set_status_condition
from services.api.meta import now_rfc3339
from services.auth.identity import MASTERS, UserInfo
from services.client.dialerrors import dial_error

log = structlog.get_logger("apiserver.aggregator")

Obj = dict[str, Any]
CHECKER = UserInfo("system:kube-aggregator", groups=(MASTERS,))
CHECK_TIMEOUT = 5.0
#: How often a proxied APIService is checked again when nothing about it changed (upstream: 30 s).
RECHECK_SECONDS = 10.0


@dataclass
class Checked:
    signature: tuple[Any, ...]
    at: float


class AvailabilityController:
    def __init__(self, index: APIServiceIndex, store: RESTStore, services: ServiceGetter, slices: ResourceCache,
                 config: ProxyClientConfig, tick: float = 1.0) -> None:
        self.index = index
        self.store = store
        self.services = services
        self.slices = slices
        self.config = config
        self.tick = tick
        #: (group, version) -> the APIResourceList its extension apiserver last served.
        self.discovery: dict[tuple[str, str], Obj] = {}
        self._checked: dict[str, Checked] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _slices_signature(self) -> tuple[Any, ...]:
        c = self.slices
        return (len(c.entries), c.history[-1].revision if c.history else 0)

    async def _run(self) -> None:
        while True:
            try:
                await self.sync()
            except Exception:  # noqa: BLE001 - retried next tick; one bad APIService must not stop the rest
                log.exception("apiservice availability check failed")
            await asyncio.sleep(self.tick)

    async def sync(self) -> None:
        """Check every APIService that changed, or was last checked RECHECK_SECONDS ago."""
        now = time.monotonic()
        slices = self._slices_signature()
        alive = set()
        checks = []
        for apiservice in self.index.all():
            name = apiservice["metadata"]["name"]
            alive.add(name)
            signature = (apiservice["metadata"].get("resourceVersion"), slices)
            seen = self._checked.get(name)
            local = is_local(apiservice)
            if seen is not None and (seen.signature == signature or local) and now - seen.at < RECHECK_SECONDS:
                continue
            self._checked[name] = Checked(signature, now)
            checks.append(self._check(apiservice))
        for gone in set(self._checked) - alive:
            del self._checked[gone]
        served = {((a.get("spec") or {}).get("group"), (a.get("spec") or {}).get("version"))
                  for a in self.index.all() if not is_local(a)}
        for key in set(self.discovery) - served:
            del self.discovery[key]
        await asyncio.gather(*checks)

    async def _check(self, apiservice: Obj) -> None:
        if is_local(apiservice):
            await self._write(apiservice, "True", "Local", "Local APIServices are always available")
            return
        spec = apiservice["spec"]
        group, version = str(spec.get("group") or ""), str(spec.get("version") or "")
        try:
            host = await resolve(spec["service"], self.services, self.slices)
        except ResolveError as exc:
            await self._write(apiservice, "False", exc.reason, exc.message)
            return
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        url = f"https://{host}{path}"
        client = self.config.client(apiservice)
        try:
            response = await asyncio.wait_for(client.get(url, headers=identity_headers(CHECKER), extensions={
                "sni_hostname": server_name(apiservice)}), CHECK_TIMEOUT)
        except (httpx.HTTPError, TimeoutError, OSError) as exc:
            parts = urllib.parse.urlsplit(url)
            reason = dial_error(exc, parts.hostname or "", parts.port or 443) or str(exc) or type(exc).__name__
            await self._write(apiservice, "False", "FailedDiscoveryCheck",
                              f"failing or missing response from {url}: {reason}")
            return
        if not 200 <= response.status_code < 300:
            await self._write(apiservice, "False", "FailedDiscoveryCheck",
                              f"failing or missing response from {url}: bad status from {url}: "
                              f"{response.status_code}")
            return
        try:
            doc = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and doc.get("kind") == "APIResourceList":
            self.discovery[(group, version)] = doc
        await self._write(apiservice, "True", "Passed", "all checks passed")

    async def _write(self, apiservice: Obj, status: str, reason: str, message: str) -> None:
        current = find_condition((apiservice.get("status") or {}).get("conditions"), "Available")
        if current is not None and (current.get("status"), current.get("reason"), current.get("message")) == (
                status, reason, message):
            return
        wanted = {"type": "Available", "status": status, "reason": reason, "message": message}

        def change(obj: Obj) -> Obj:
            if not isinstance(obj.get("status"), dict):
                obj["status"] = {}
            set_status_condition(obj["status"], wanted, now_rfc3339())
            return obj

        name = apiservice["metadata"]["name"]
        try:
            await self.store.mutate(None, name, change, WriteOptions(), "status")
        except errors.StatusError as exc:
            if exc.code not in (404, 409):
                raise
        log.info("apiservice availability", name=name, available=status, reason=reason)
