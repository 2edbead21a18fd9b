"""Token cleaner: deletes bootstrap token Secrets (kube-system, type bootstrap.kubernetes.io/token) once
their expiration has passed, as upstream's tokencleaner; a token not yet expired is looked at again
when it will be.
"""

from __future__ import annotations

from datetime import UTC, datetime

import structlog

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from services.auth import bootstraptoken as bt
from services.client import Conflict, NotFound, gvr

log = structlog.get_logger(__name__)

NAME = "tokencleaner"
#: off unless named, as upstream (kubeadm turns it on)
DISABLED_BY_DEFAULT = True
SECRETS = gvr("v1", "secrets")


def new(ctx: ControllerContext) -> TokenCleaner:
    return TokenCleaner(ctx)


class TokenCleaner(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.secrets = ctx.informer(SECRETS)
        super().__init__(NAME, [self.secrets])
        self.secrets.add_event_handler(self._changed, lambda old, new: self._changed(new), None)

    def _changed(self, secret: dict) -> None:
        meta = secret.get("metadata") or {}
        if meta.get("namespace") == bt.NAMESPACE and secret.get("type") == bt.SECRET_TYPE:
            self.enqueue(secret)

    async def sync(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        secret = self.secrets.get(name, namespace)
        if secret is None or secret["metadata"].get("deletionTimestamp"):
            return
        when = bt.expires_at(secret)
        if when is None and not bt.secret_data(secret, bt.EXPIRATION):
            return
        now = datetime.now(UTC)
        if when is not None and when > now:
            raise RequeueAfter((when - now).total_seconds())
        try:
            await self.client.delete(SECRETS, name, namespace, preconditions={"uid": secret["metadata"]["uid"]})
        except (NotFound, Conflict):
            return
        log.info("deleted expired bootstrap token", kind="Secret", namespace=namespace, name=name)
