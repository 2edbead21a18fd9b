"""Subresources that write part of the parent object with the strategy's own rules: `status` (upstream's
StatusREST), a CertificateSigningRequest's `approval` (ApprovalREST), a Namespace's `finalize`
(FinalizeREST)."""

from __future__ import annotations

from typing import Any, ClassVar

from apiserver.registry.store import WriteOptions
from apiserver.registry.strategy import Obj
from apiserver.registry.subresources.base import Check, SubresourceREST


class StatusREST(SubresourceREST):
    """Reads the whole object; writes go through the store with the subresource's name, so the
    strategy keeps every other part as it was."""

    name: ClassVar[str] = "status"
    verbs: ClassVar[tuple[str, ...]] = ("get", "update", "patch")

    async def get(self, namespace: str | None, name: str) -> Obj:
        return await self.store.get(namespace, name)

    async def update(self, namespace: str | None, name: str, body: Obj, opts: WriteOptions) -> Obj:
        obj, _ = await self.store.update(namespace, name, body, opts, subresource=self.name)
        return obj

    async def patch(
        self, namespace: str | None, name: str, patch_type: str, patch: Any, opts: WriteOptions, check: Check
    ) -> Obj:
        if patch_type == "apply":
            obj, _ = await self.store.apply(namespace, name, patch, opts, subresource=self.name, check=check)
            return obj
        return await self.store.patch(namespace, name, patch_type, patch, opts, subresource=self.name, check=check)


class ApprovalREST(StatusREST):
    """certificatesigningrequests/approval: only the Approved and Denied conditions change."""

    name: ClassVar[str] = "approval"


class FinalizeREST(StatusREST):
    """namespaces/finalize: only spec.finalizers changes; written with PUT only, as upstream."""

    name: ClassVar[str] = "finalize"
    verbs: ClassVar[tuple[str, ...]] = ("update",)
