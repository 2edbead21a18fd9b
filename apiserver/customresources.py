"""Serving custom resources: follows CustomResourceDefinitions in the watch cache and keeps the
catalog, the REST stores and each CRD's status in step, on every apiserver replica."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from apiserver.registry.apiextensions import CLEANUP_FINALIZER, accepted_status, served_resources
from apiserver.registry.store import DeleteOptions, ListOptions, RESTStore, ServerContext, WriteOptions
from apiserver.registry.strategies import strategy_for
from apiserver.storage.cache import Watcher
from services.api import errors
from services.api.catalog import Catalog

log = structlog.get_logger("apiserver.customresources")

Obj = dict[str, Any]


class Server(Protocol):
    """What custom resources need of the apiserver (apiserver/server.py), which owns this module's server."""

    catalog: Catalog
    stores: dict[tuple[str, str, str], RESTStore]
    ctx: ServerContext

    def store(self, group: str, version: str, plural: str) -> RESTStore: ...


class CustomResourceServer:
    """Adds, changes and removes the catalog entries CRDs ask for."""

    def __init__(self, server: Server, on_change: Callable[[], None]) -> None:
        self.server = server
        self.on_change = on_change
        self.crds = server.store("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        self._served: dict[str, list[tuple[str, str, str]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._cleanups: dict[str, asyncio.Task[None]] = {}

    def start(self) -> None:
        watcher = Watcher(self.crds.prefix, None)
        for entry in list(self.crds.cache.entries.values()):
            self._sync(entry.obj)
        self.crds.cache.watchers.add(watcher)
        self._task = asyncio.get_running_loop().create_task(self._run(watcher))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for task in self._cleanups.values():
            task.cancel()

    async def _run(self, watcher: Watcher) -> None:
        while True:
            await watcher.wakeup.wait()
            watcher.wakeup.clear()
            while watcher.queue:
                kind, change = watcher.queue.popleft()
                try:
                    if kind == "DELETED":
                        self._unserve(change.obj["metadata"]["name"])
                    else:
                        self._sync(change.obj)
                except Exception:  # noqa: BLE001 - one bad CRD must not stop the others being served
                    log.exception("could not serve CRD", name=change.obj.get("metadata", {}).get("name"))

    def _conflict(self, crd: Obj) -> str | None:
        """Upstream's NamesAccepted check: plural, kind and short names unique within the group."""
        spec = crd.get("spec") or {}
        group, names = spec.get("group"), spec.get("names") or {}
        name = crd["metadata"]["name"]
        for res in self.server.catalog:
            if res.group != group:
                continue
            owner = f"{res.plural}.{res.group}"
            if owner == name:
                continue
            if res.plural == names.get("plural"):
                return f'"{res.plural}" is already in use'
            if res.kind == names.get("kind"):
                return f'"{res.kind}" is already in use'
            taken = set(names.get("shortNames") or ()) & set(res.short_names)
            if taken:
                return f'"{sorted(taken)[0]}" is already in use'
        return None

    def _sync(self, crd: Obj) -> None:
        name = crd["metadata"]["name"]
        conflict = self._conflict(crd)
        if conflict is None:
            self._serve(name, crd)
        wanted = accepted_status(crd, conflict)
        if not _same_status(crd.get("status") or {}, wanted):
            asyncio.get_running_loop().create_task(self._write_status(name, wanted))
        if crd["metadata"].get("deletionTimestamp") and CLEANUP_FINALIZER in (crd["metadata"].get("finalizers") or []):
            if name not in self._cleanups or self._cleanups[name].done():
                self._cleanups[name] = asyncio.get_running_loop().create_task(self._cleanup(name))

    def _serve(self, name: str, crd: Obj) -> None:
        server = self.server
        resources = served_resources(crd)
        keys = [(r.group, r.version, r.plural) for r in resources]
        for key in self._served.get(name, []):
            if key not in keys:
                server.catalog.remove(*key)
                server.stores.pop(key, None)
        for res in resources:
            key = (res.group, res.version, res.plural)
            server.catalog.add(res)
            server.stores[key] = RESTStore(res, strategy_for(res), server.ctx)
        self._served[name] = keys
        self.on_change()
        log.info("serving custom resource", crd=name, versions=[k[1] for k in keys])

    def _unserve(self, name: str) -> None:
        for key in self._served.pop(name, []):
            self.server.catalog.remove(*key)
            self.server.stores.pop(key, None)
        self.on_change()
        log.info("stopped serving custom resource", crd=name)

    async def _write_status(self, name: str, status: Obj) -> None:
        def change(crd: Obj) -> Obj:
            crd["status"] = status
            return crd

        try:
            await self.crds.mutate(None, name, change, WriteOptions())
        except errors.StatusError as exc:
            if exc.code != 404:
                log.warning("could not update CRD status", crd=name, error=exc.message)

    async def _cleanup(self, name: str) -> None:
        """Delete every object of a CRD being deleted, then let the CRD go (upstream's finalizer)."""
        for key in list(self._served.get(name, [])):
            store = self.server.stores.get(key)
            if store is None or store.res.version != store.res.stored_version:
                continue
            while True:
                items, _ = await store.list(None, ListOptions())
                if not items:
                    break
                await store.delete_collection(None, ListOptions(), DeleteOptions(grace_period=0))
                await asyncio.sleep(0.2)

        def release(crd: Obj) -> Obj:
            crd["metadata"]["finalizers"] = [f for f in crd["metadata"].get("finalizers") or []
                                             if f != CLEANUP_FINALIZER]
            return crd

        try:
            await self.crds.mutate(None, name, release, WriteOptions())
        except errors.StatusError as exc:
            if exc.code != 404:
                raise


def _same_status(current: Obj, wanted: Obj) -> bool:
    def strip(status: Obj) -> Obj:
        out = dict(status)
        out["conditions"] = sorted(
            ({k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []),
            key=lambda c: c.get("type", ""),
        )
        return out

    return strip(current) == strip(wanted)
