"""Namespace controller: empties a Terminating namespace of every namespaced object of every
resource discovery lists (custom ones too), reports upstream's deletion conditions while it
waits, then removes the `kubernetes` finalizer through the finalize subresource.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.discovery import APIResource, discover
from controller_manager.resources import NAMESPACES
from services.api.meta import now_rfc3339
from services.client import ApiError, Conflict, MethodNotAllowed, NotFound

NAME = "namespace"
FINALIZER = "kubernetes"

#: (condition type, failure reason, success reason, success message) as upstream reports them
CONDITIONS = (
    ("NamespaceDeletionDiscoveryFailure", "DiscoveryFailed", "ResourcesDiscovered",
     "All resources successfully discovered"),
    ("NamespaceDeletionGroupVersionParsingFailure", "GroupVersionParsingFailed", "ParsedGroupVersions",
     "All legacy kube types successfully parsed"),
    ("NamespaceDeletionContentFailure", "ContentDeletionFailed", "ContentDeleted",
     "All content successfully deleted, may be waiting on finalization"),
    ("NamespaceContentRemaining", "SomeResourcesRemain", "ContentRemoved", "All content successfully removed"),
    ("NamespaceFinalizersRemaining", "SomeFinalizersRemain", "ContentHasNoFinalizers",
     "All content-preserving finalizers finished"),
)

Obj = dict[str, Any]


def new(ctx: ControllerContext) -> NamespaceController:
    return NamespaceController(ctx)


def build_conditions(old: list[Obj], failures: dict[str, str]) -> list[Obj]:
    """Every deletion condition: True with the failure message where `failures` names it, else False."""
    previous = {c.get("type"): c for c in old}
    out = [c for c in old if c.get("type") not in {t for t, *_ in CONDITIONS}]
    now = now_rfc3339()
    for kind, bad, good, ok_message in CONDITIONS:
        failed = kind in failures
        cond = {"type": kind, "status": "True" if failed else "False", "reason": bad if failed else good,
                "message": failures[kind] if failed else ok_message}
        prev = previous.get(kind)
        same = prev is not None and all(prev.get(k) == v for k, v in cond.items())
        cond["lastTransitionTime"] = prev.get("lastTransitionTime", now) if same and prev else now
        out.append(cond)
    return out


class NamespaceController(QueueController):
    MAX_RETRIES = None

    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.namespaces = ctx.informer(NAMESPACES)
        super().__init__("namespace", [self.namespaces], int(ctx.options.concurrent_namespace_syncs))
        self.namespaces.add_event_handler(self._maybe, lambda old, new: self._maybe(new))

    def _maybe(self, namespace: Obj) -> None:
        if namespace["metadata"].get("deletionTimestamp"):
            self.enqueue(namespace)

    async def sync(self, key: str) -> None:
        try:
            namespace = await self.client.get(NAMESPACES, key)
        except NotFound:
            return
        if not namespace["metadata"].get("deletionTimestamp"):
            return
        if FINALIZER not in ((namespace.get("spec") or {}).get("finalizers") or []):
            return
        found = await discover(self.client)
        failures: dict[str, str] = {}
        if found.failed:
            failures["NamespaceDeletionDiscoveryFailure"] = "Discovery failed for some groups, " + ", ".join(
                f"{gv}: {err}" for gv, err in sorted(found.failed.items()))
        resources = [r for r in found.resources if r.gvr.namespaced and r.supports("list", "delete")
                     and not (r.gvr.group == "" and r.gvr.plural == "events")]
        # Events last, as upstream does, so what happens during teardown stays visible.
        resources += [r for r in found.resources if r.gvr.group == "" and r.gvr.plural == "events"]
        results = await asyncio.gather(*(self._delete_content(key, r) for r in resources))
        errors = [err for _, _, err in results if err]
        if errors:
            failures["NamespaceDeletionContentFailure"] = "Failed to delete all resource types, " + (
                f"{len(errors)} remaining: " + ", ".join(errors))
        remaining = sorted(f"{r.gvr.plural}.{r.gvr.group} has {n} resource instances"
                           for r, (n, _, _) in zip(resources, results, strict=True) if n)
        finalizers: dict[str, int] = {}
        for _, fins, _ in results:
            for name, count in fins.items():
                finalizers[name] = finalizers.get(name, 0) + count
        if remaining:
            failures["NamespaceContentRemaining"] = "Some resources are remaining: " + ", ".join(remaining)
        if finalizers:
            failures["NamespaceFinalizersRemaining"] = "Some content in the namespace has finalizers remaining: " + (
                ", ".join(f"{name} in {n} resource instances" for name, n in sorted(finalizers.items())))
        conditions = build_conditions((namespace.get("status") or {}).get("conditions") or [], failures)
        if conditions != (namespace.get("status") or {}).get("conditions"):
            try:
                await self.client.patch_status(NAMESPACES, key, {"status": {"conditions": conditions}})
            except NotFound:
                return
        if errors or remaining or found.failed:
            raise RequeueAfter(2.0 if not errors else 5.0)
        await self._finalize(key)

    async def _delete_content(self, namespace: str, res: APIResource) -> tuple[int, dict[str, int], str]:
        """Delete everything of one resource; (how many remain, their finalizers, an error or "")."""
        try:
            if res.supports("deletecollection"):
                try:
                    await self.client.delete_collection(res.gvr, namespace)
                except MethodNotAllowed:
                    await self._delete_each(namespace, res)
            else:
                await self._delete_each(namespace, res)
            left = await self.client.list(res.gvr, namespace)
        except NotFound:
            return 0, {}, ""
        except (ApiError, httpx.HTTPError) as exc:
            return 0, {}, f"{res.gvr.plural}.{res.gvr.group}: {exc}"
        items = left.get("items") or []
        finalizers: dict[str, int] = {}
        for item in items:
            for name in (item.get("metadata") or {}).get("finalizers") or []:
                finalizers[name] = finalizers.get(name, 0) + 1
        return len(items), finalizers, ""

    async def _delete_each(self, namespace: str, res: APIResource) -> None:
        items = (await self.client.list(res.gvr, namespace)).get("items") or []
        for item in items:
            if (item.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                await self.client.delete(res.gvr, item["metadata"]["name"], namespace)
            except NotFound:
                pass

    async def _finalize(self, name: str) -> None:
        """Drop our finalizer via PUT namespaces/<name>/finalize, retrying on conflicts."""
        for _ in range(5):
            try:
                namespace = await self.client.get(NAMESPACES, name)
            except NotFound:
                return
            spec = namespace.setdefault("spec", {})
            spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != FINALIZER]
            try:
                await self.client.replace(NAMESPACES, namespace, name, subresource="finalize")
                return
            except NotFound:
                return
            except Conflict:
                continue
        raise RuntimeError(f"could not finalize namespace {name}: conflicts")
