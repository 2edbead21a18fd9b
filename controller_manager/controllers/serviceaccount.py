"""ServiceAccounts controller: every active namespace has a `default` ServiceAccount, recreated
when deleted.
"""

from __future__ import annotations

from typing import Any

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from controller_manager.resources import NAMESPACES, SERVICE_ACCOUNTS
from services.client import AlreadyExists, Forbidden, NotFound, namespace_terminating

NAME = "serviceaccount"
DEFAULT_NAMES = ("default",)


def new(ctx: ControllerContext) -> ServiceAccountsController:
    return ServiceAccountsController(ctx)


class ServiceAccountsController(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.namespaces = ctx.informer(NAMESPACES)
        self.accounts = ctx.informer(SERVICE_ACCOUNTS)
        super().__init__("serviceaccount", [self.namespaces, self.accounts],
                         int(ctx.options.concurrent_serviceaccount_syncs))
        self.namespaces.add_event_handler(self.enqueue, lambda old, new: self.enqueue(new))
        self.accounts.add_event_handler(on_delete=self._account_deleted)

    def _account_deleted(self, account: dict[str, Any]) -> None:
        meta = account.get("metadata") or {}
        if meta.get("name") in DEFAULT_NAMES and meta.get("namespace"):
            self.queue.add(meta["namespace"])

    async def sync(self, key: str) -> None:
        namespace = self.namespaces.get(key)
        if namespace is None or (namespace.get("status") or {}).get("phase") == "Terminating" or (
            namespace["metadata"].get("deletionTimestamp")
        ):
            return
        for name in DEFAULT_NAMES:
            if self.accounts.get(name, key) is not None:
                continue
            body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": key}}
            try:
                await self.client.create(SERVICE_ACCOUNTS, body, key)
            except (AlreadyExists, NotFound):
                pass
            except Forbidden as exc:
                if not namespace_terminating(exc):
                    raise
