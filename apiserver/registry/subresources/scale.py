"""The `scale` subresource (upstream's ScaleREST): an autoscaling/v1 Scale read from and written into
the replicas and selector paths the catalog names for the resource."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from apiserver.registry import crschema
from apiserver.registry.store import WriteOptions, apply_patch
from apiserver.registry.strategy import Obj
from apiserver.registry.subresources.base import Check, SubresourceREST
from services.api import errors
from services.api.catalog import Resource
from services.api.selectors import LabelSelector


class ScaleREST(SubresourceREST):
    name: ClassVar[str] = "scale"
    verbs: ClassVar[tuple[str, ...]] = ("get", "update", "patch")
    kind: ClassVar[tuple[str, str] | None] = ("autoscaling/v1", "Scale")

    @classmethod
    def serves(cls, res: Resource) -> bool:
        return res.scale is not None

    def to_scale(self, obj: Obj) -> Obj:
        """The Scale of an object of the resource."""
        res = self.store.res
        scale_spec = res.scale
        assert scale_spec is not None
        m = obj["metadata"]
        spec = obj.get("spec") or {}
        if res.custom:
            selector = crschema.value_at(obj, scale_spec.label_selector) if scale_spec.label_selector else ""
        elif scale_spec.label_selector == ".spec.selector":
            selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
        else:
            try:
                selector = str(LabelSelector.from_dict(spec.get("selector") or {}))
            except ValueError:
                selector = ""
        return {
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: m[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in m},
            "spec": {"replicas": int(crschema.value_at(obj, scale_spec.spec_replicas) or 0)},
            "status": {"replicas": int(crschema.value_at(obj, scale_spec.status_replicas) or 0),
                       "selector": selector or ""},
        }

    async def get(self, namespace: str | None, name: str) -> Obj:
        return self.to_scale(await self.store.get(namespace, name))

    async def update(self, namespace: str | None, name: str, body: Obj, opts: WriteOptions) -> Obj:
        return await self._rescale(namespace, name, lambda current: body, opts)

    async def patch(
        self, namespace: str | None, name: str, patch_type: str, patch: Any, opts: WriteOptions, check: Check
    ) -> Obj:
        def patched(current: Obj) -> Obj:
            wanted = apply_patch(patch_type, current, patch)
            check(wanted)
            return wanted

        return await self._rescale(namespace, name, patched, opts)

    async def _rescale(
        self, namespace: str | None, name: str, wanted_of: Callable[[Obj], Obj], opts: WriteOptions
    ) -> Obj:
        """Write the replicas of the Scale `wanted_of` makes of the current one."""
        store = self.store
        scale_spec = store.res.scale
        assert scale_spec is not None

        def rescale(obj: Obj) -> Obj:
            wanted = wanted_of(self.to_scale(obj))
            rv = (wanted.get("metadata") or {}).get("resourceVersion")
            if rv and rv != obj["metadata"].get("resourceVersion"):
                raise errors.conflict(store.res.plural, store.res.group, name, errors.STALE_WRITE)
            # ScaleSpec.replicas is a plain int32: absent (or null) it is Go's 0, as upstream reads it
            replicas = (wanted.get("spec") or {}).get("replicas", 0)
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise errors.invalid("Scale", "autoscaling", name, [errors.cause(
                    "spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")])
            crschema.set_at(obj, scale_spec.spec_replicas, replicas)
            return obj

        return self.to_scale(await store.mutate(namespace, name, rescale, opts, subresource="scale"))
