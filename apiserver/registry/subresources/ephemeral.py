"""pods/ephemeralcontainers (upstream's EphemeralContainersREST): reads and writes whole Pods, of which
only spec.ephemeralContainers may change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from apiserver.registry import pods
from apiserver.registry.store import WriteOptions, apply_patch
from apiserver.registry.strategy import Obj
from apiserver.registry.subresources.base import Check, SubresourceREST
from services.api import errors
from services.api.catalog import Resource


class EphemeralContainersREST(SubresourceREST):
    name: ClassVar[str] = "ephemeralcontainers"
    verbs: ClassVar[tuple[str, ...]] = ("get", "update", "patch")

    @classmethod
    def serves(cls, res: Resource) -> bool:
        return res.kind == "Pod" and not res.group

    async def get(self, namespace: str | None, name: str) -> Obj:
        return await self.store.get(namespace, name)

    async def update(self, namespace: str | None, name: str, body: Obj, opts: WriteOptions) -> Obj:
        return await self._change(namespace, name, body, lambda pod: body, opts)

    async def patch(
        self, namespace: str | None, name: str, patch_type: str, patch: Any, opts: WriteOptions, check: Check
    ) -> Obj:
        if patch_type == "apply":
            raise errors.StatusError(415, "UnsupportedMediaType", "the server does not support apply patches "
                                     "on pods/ephemeralcontainers")

        def patched(pod: Obj) -> Any:
            wanted = apply_patch(patch_type, pod, patch)
            check(wanted)
            return wanted

        return await self._change(namespace, name, patch, patched, opts)

    async def _change(self, namespace: str | None, name: str, sent: Any, wanted_of: Callable[[Obj], Any],
                      opts: WriteOptions) -> Obj:
        """Write the ephemeral containers of the pod `wanted_of` makes of the current one; a
        resourceVersion in what the client `sent` must be the pod's."""
        res = self.store.res

        def change(pod: Obj) -> Obj:
            rv = (sent.get("metadata") or {}).get("resourceVersion") if isinstance(sent, dict) else None
            if rv and rv != pod["metadata"].get("resourceVersion"):
                raise errors.conflict(res.plural, res.group, name, errors.STALE_WRITE)
            return pods.update_ephemeral_containers(pod, wanted_of(pod))

        return await self.store.mutate(namespace, name, change, opts, subresource=self.name)
