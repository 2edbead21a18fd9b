"""pods/binding and the namespaced `bindings` resource (upstream's BindingREST): the scheduler's
assignment of a pod to a node."""

from __future__ import annotations

from typing import ClassVar

from apiserver.registry import pods
from apiserver.registry.store import WriteOptions
from apiserver.registry.strategy import Obj
from apiserver.registry.subresources.base import SubresourceREST, success
from services.api import errors


class BindingREST(SubresourceREST):
    name: ClassVar[str] = "binding"
    verbs: ClassVar[tuple[str, ...]] = ("create",)
    kind: ClassVar[tuple[str, str] | None] = ("v1", "Binding")

    async def create(self, namespace: str | None, name: str, body: Obj, opts: WriteOptions) -> Obj:
        """Bind the pod `name` (for the `bindings` resource: the Binding's own name) to the node the
        Binding names, once, unless a UID precondition no longer holds."""
        uid = (body.get("metadata") or {}).get("uid")

        def assign(pod: Obj) -> Obj:
            if uid and uid != pod["metadata"].get("uid"):
                raise errors.conflict("pods/binding", "", name, "Precondition failed: UID in precondition: "
                                      f"{uid}, UID in object meta: {pod['metadata'].get('uid')}")
            return pods.bind(pod, body)

        await self.deps.stores[("", "v1", "pods")].mutate(namespace, name, assign, opts)
        return success()
