"""Garbage collector: an owner graph built from the ownerReferences of every resource discovery
lists (custom ones too, rediscovered periodically), and two queues as upstream:

- attempt-to-delete: dependents whose owners are gone are deleted (background), dependents of
  owners deleting in the foreground are deleted before them, and an owner carrying the
  `foregroundDeletion` finalizer loses it once no blocking dependent is left;
- attempt-to-orphan: owners carrying the `orphan` finalizer have their references removed from
  every dependent, then lose the finalizer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx
import structlog

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from controller_manager.discovery import APIResource, discover
from services.client import ApiError, Conflict, NotFound
from services.informers import Informer

NAME = "garbagecollector"
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
#: resources upstream's GC never watches
IGNORED = {("", "events"), ("events.k8s.io", "events")}

log = structlog.get_logger(__name__)
Obj = dict[str, Any]


def new(ctx: ControllerContext) -> GarbageCollector:
    return GarbageCollector(ctx)


@dataclass
class Node:
    """One object in the graph; `virtual` until an informer has shown it to us."""

    uid: str
    api_version: str
    kind: str
    namespace: str
    name: str
    owners: list[Obj] = field(default_factory=list)
    dependents: set[str] = field(default_factory=set)
    virtual: bool = True
    being_deleted: bool = False
    deleting_dependents: bool = False


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def classify_owners(owners: list[Obj], states: dict[str, str]) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """(solid, dangling, waiting-for-dependents-deletion) from each owner uid's state:
    "absent", "foreground" (deleting its dependents first) or anything else (present)."""
    solid, dangling, waiting = [], [], []
    for ref in owners:
        state = states.get(ref.get("uid", ""), "present")
        if state == "absent":
            dangling.append(ref)
        elif state == "foreground":
            waiting.append(ref)
        else:
            solid.append(ref)
    return solid, dangling, waiting


def delete_policy(finalizers: list[str], waiting_on_foreground_owner: bool) -> str:
    """How a dependent whose owners are all gone (or deleting in the foreground) gets deleted."""
    if waiting_on_foreground_owner:
        return "Foreground"
    if ORPHAN in finalizers:
        return "Orphan"
    if FOREGROUND in finalizers:
        return "Foreground"
    return "Background"


class _Loop(QueueController):
    """A queue of uids with its own workers, handing each to `handler`."""

    def __init__(self, name: str, informers: list[Informer], workers: int, handler: Any) -> None:
        super().__init__(name, informers, workers)
        self.handler = handler
        self.MAX_RETRIES = None

    async def sync(self, key: str) -> None:
        await self.handler(key)


class GarbageCollector:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.client = ctx.client
        self.graph: dict[str, Node] = {}
        self.resources: dict[tuple[str, str], APIResource] = {}
        self.monitors: dict[tuple[str, str, str], Informer] = {}
        self.absent: set[str] = set()
        workers = int(ctx.options.concurrent_gc_syncs)
        self.delete_loop = _Loop("garbage_collector_attempt_to_delete", [], workers, self.attempt_to_delete)
        self.orphan_loop = _Loop("garbage_collector_attempt_to_orphan", [], workers, self.attempt_to_orphan)
        self.period = float(ctx.options.gc_discovery_period)

    # -- monitors ----------------------------------------------------------------------------------

    async def sync_monitors(self) -> None:
        """Watch every deletable resource discovery lists now; keep watching ones that vanish."""
        found = await discover(self.client)
        for res in found.resources:
            self.resources[(res.gvr.group, res.kind)] = res
            key = (res.gvr.group, res.gvr.version, res.gvr.plural)
            if key in self.monitors or (res.gvr.group, res.gvr.plural) in IGNORED:
                continue
            if not res.supports("list", "watch", "delete"):
                continue
            informer = self.ctx.informers.informer_for(res.gvr)
            informer.add_event_handler(self._on_add, self._on_update, self._on_delete)
            informer.start()
            self.monitors[key] = informer

    async def run(self) -> None:
        await self.sync_monitors()
        await asyncio.gather(*(i.wait_for_sync() for i in self.monitors.values()))
        log.info("garbage collector graph synced", objects=len(self.graph))
        tasks = [asyncio.create_task(self.delete_loop.run()), asyncio.create_task(self.orphan_loop.run()),
                 asyncio.create_task(self._rediscover())]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _rediscover(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            try:
                await self.sync_monitors()
            except (ApiError, httpx.HTTPError) as exc:
                log.info("garbage collector rediscovery failed", error=str(exc))

    # -- graph builder -----------------------------------------------------------------------------

    def _on_add(self, obj: Obj) -> None:
        self._upsert(obj)

    def _on_update(self, old: Obj, new: Obj) -> None:
        self._upsert(new)

    def _upsert(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        node = self.graph.get(uid)
        if node is None:
            node = self.graph[uid] = Node(uid, obj.get("apiVersion", ""), obj.get("kind", ""),
                                          meta.get("namespace", ""), meta.get("name", ""))
        was_virtual = node.virtual
        node.virtual = False
        node.api_version, node.kind = obj.get("apiVersion", node.api_version), obj.get("kind", node.kind)
        node.namespace, node.name = meta.get("namespace", ""), meta.get("name", "")
        self.absent.discard(uid)
        old_owners = {r.get("uid") for r in node.owners}
        node.owners = list(meta.get("ownerReferences") or [])
        new_owners = {r.get("uid") for r in node.owners}
        for gone in old_owners - new_owners:
            owner = self.graph.get(gone)
            if owner is not None:
                owner.dependents.discard(uid)
                if owner.deleting_dependents:
                    self.delete_loop.queue.add(gone)
        for ref in node.owners:
            owner_uid = ref.get("uid", "")
            owner = self.graph.get(owner_uid)
            if owner is None:
                res = self.resources.get((group_of(ref.get("apiVersion", "")), ref.get("kind", "")))
                namespace = node.namespace if res is None or res.gvr.namespaced else ""
                owner = self.graph[owner_uid] = Node(owner_uid, ref.get("apiVersion", ""), ref.get("kind", ""),
                                                     namespace, ref.get("name", ""))
                self.delete_loop.queue.add(owner_uid)
            owner.dependents.add(uid)
            if owner.virtual and owner_uid in self.absent:
                self.delete_loop.queue.add(uid)
        if was_virtual and node.dependents:
            for dep in node.dependents:
                self.delete_loop.queue.add(dep)
        finalizers = meta.get("finalizers") or []
        node.being_deleted = bool(meta.get("deletionTimestamp"))
        node.deleting_dependents = node.being_deleted and FOREGROUND in finalizers
        if node.being_deleted and ORPHAN in finalizers:
            self.orphan_loop.queue.add(uid)
        if node.deleting_dependents:
            self.delete_loop.queue.add(uid)
            for dep in node.dependents:
                self.delete_loop.queue.add(dep)

    def _on_delete(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid", "")
        node = self.graph.get(uid)
        if node is None:
            return
        self.absent.add(uid)
        for ref in node.owners:
            owner = self.graph.get(ref.get("uid", ""))
            if owner is None:
                continue
            owner.dependents.discard(uid)
            if owner.deleting_dependents:
                self.delete_loop.queue.add(owner.uid)
            if owner.virtual and not owner.dependents:
                self.graph.pop(owner.uid, None)
        if node.dependents:
            node.virtual = True
            node.being_deleted = node.deleting_dependents = False
            for dep in node.dependents:
                self.delete_loop.queue.add(dep)
        else:
            del self.graph[uid]

    # -- helpers -----------------------------------------------------------------------------------

    def _resource(self, api_version: str, kind: str) -> APIResource | None:
        return self.resources.get((group_of(api_version), kind))

    async def _get(self, node: Node) -> Obj | None:
        """The live object of a node, or None when it (this incarnation) no longer exists."""
        res = self._resource(node.api_version, node.kind)
        if res is None:
            raise RuntimeError(f"no resource known for {node.api_version} {node.kind}")
        try:
            obj = await self.client.get(res.gvr, node.name, node.namespace or None)
        except NotFound:
            return None
        return obj if (obj.get("metadata") or {}).get("uid") == node.uid else None

    async def _owner_state(self, ref: Obj, namespace: str) -> str:
        uid = ref.get("uid", "")
        if uid in self.absent:
            return "absent"
        res = self._resource(ref.get("apiVersion", ""), ref.get("kind", ""))
        if res is None:
            raise RuntimeError(f"no resource known for {ref.get('apiVersion')} {ref.get('kind')}")
        try:
            owner = await self.client.get(res.gvr, ref.get("name", ""), namespace if res.gvr.namespaced else None)
        except NotFound:
            self.absent.add(uid)
            return "absent"
        meta = owner.get("metadata") or {}
        if meta.get("uid") != uid:
            self.absent.add(uid)
            return "absent"
        if meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or []):
            return "foreground"
        return "present"

    async def _remove_finalizer(self, node: Node, finalizer: str) -> None:
        res = self._resource(node.api_version, node.kind)
        if res is None:
            return
        for _ in range(5):
            obj = await self._get(node)
            if obj is None:
                return
            meta = obj["metadata"]
            finalizers = meta.get("finalizers") or []
            if finalizer not in finalizers:
                return
            patch = {"metadata": {"finalizers": [f for f in finalizers if f != finalizer],
                                  "resourceVersion": meta["resourceVersion"]}}
            try:
                await self.client.patch(res.gvr, node.name, patch, node.namespace or None)
                return
            except NotFound:
                return
            except Conflict:
                continue
        raise RuntimeError(f"could not remove finalizer {finalizer} from {node.kind} {node.name}")

    async def _patch_owner_refs(self, node: Node, obj: Obj, keep: list[Obj]) -> None:
        res = self._resource(node.api_version, node.kind)
        if res is None:
            return
        patch = {"metadata": {"ownerReferences": keep or None, "uid": obj["metadata"]["uid"],
                              "resourceVersion": obj["metadata"]["resourceVersion"]}}
        try:
            await self.client.patch(res.gvr, node.name, patch, node.namespace or None)
        except NotFound:
            return

    # -- attempt to delete -------------------------------------------------------------------------

    async def attempt_to_delete(self, uid: str) -> None:
        node = self.graph.get(uid)
        if node is None:
            return
        if node.virtual:
            await self._verify_virtual(node)
            return
        if node.being_deleted and not node.deleting_dependents:
            return
        obj = await self._get(node)
        if obj is None:
            self._absent_node(node)
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and FOREGROUND not in (meta.get("finalizers") or []):
            return
        if meta.get("deletionTimestamp"):
            await self._process_deleting_dependents(node)
            return
        owners = meta.get("ownerReferences") or []
        if not owners:
            return
        namespace = meta.get("namespace", "")
        states = {ref.get("uid", ""): await self._owner_state(ref, namespace) for ref in owners}
        solid, dangling, waiting = classify_owners(owners, states)
        if solid:
            if dangling or waiting:
                gone = {r.get("uid") for r in dangling + waiting}
                await self._patch_owner_refs(node, obj, [r for r in owners if r.get("uid") not in gone])
            return
        if waiting and node.dependents:
            await self._unblock_dependents(node)
        policy = delete_policy(meta.get("finalizers") or [], bool(waiting and node.dependents))
        res = self._resource(node.api_version, node.kind)
        if res is None:
            return
        log.info("deleting dependent", kind=node.kind, namespace=node.namespace, name=node.name,
                 propagation=policy)
        try:
            await self.client.delete(res.gvr, node.name, node.namespace or None, propagation_policy=policy,
                                     preconditions={"uid": uid})
        except (NotFound, Conflict):
            return

    async def _unblock_dependents(self, node: Node) -> None:
        """A dependent deleted in the foreground itself must not wait on its own dependents' block."""
        for dep_uid in list(node.dependents):
            dep = self.graph.get(dep_uid)
            if dep is None or dep.virtual or not dep.deleting_dependents:
                continue
            obj = await self._get(dep)
            if obj is None:
                continue
            refs = [dict(r, blockOwnerDeletion=False) if r.get("uid") == node.uid else r
                    for r in obj["metadata"].get("ownerReferences") or []]
            await self._patch_owner_refs(dep, obj, refs)

    async def _verify_virtual(self, node: Node) -> None:
        """An owner we only know from a reference: does it exist? If not, its dependents are orphans."""
        obj = await self._get(node)
        if obj is not None:
            return
        self._absent_node(node)

    def _absent_node(self, node: Node) -> None:
        self.absent.add(node.uid)
        for dep in node.dependents:
            self.delete_loop.queue.add(dep)
        if node.virtual and not node.dependents:
            self.graph.pop(node.uid, None)

    async def _process_deleting_dependents(self, node: Node) -> None:
        blocking = []
        for dep_uid in node.dependents:
            dep = self.graph.get(dep_uid)
            if dep is None or dep.virtual:
                continue
            if any(r.get("uid") == node.uid and r.get("blockOwnerDeletion") for r in dep.owners):
                blocking.append(dep)
        if not blocking:
            await self._remove_finalizer(node, FOREGROUND)
            return
        for dep in blocking:
            if not dep.being_deleted or dep.deleting_dependents:
                self.delete_loop.queue.add(dep.uid)

    # -- attempt to orphan -------------------------------------------------------------------------

    async def attempt_to_orphan(self, uid: str) -> None:
        node = self.graph.get(uid)
        if node is None:
            return
        for dep_uid in list(node.dependents):
            dep = self.graph.get(dep_uid)
            if dep is None or dep.virtual:
                continue
            for _ in range(5):
                obj = await self._get(dep)
                if obj is None:
                    break
                refs = obj["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs):
                    break
                try:
                    await self._patch_owner_refs(dep, obj, [r for r in refs if r.get("uid") != uid])
                    break
                except Conflict:
                    continue
        await self._remove_finalizer(node, ORPHAN)
