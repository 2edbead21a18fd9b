"""Bootstrap signer: signs the kube-public/cluster-info ConfigMap's `kubeconfig` with every bootstrap
token meant for signing, as upstream's bootstrapsigner: one `jws-kubeconfig-<token-id>` key per token
holding a detached HS256 JWS keyed by the token's secret. A joining machine that knows a token checks
the kubeconfig (and so the CA) it reads anonymously. Signatures of tokens gone or expired are removed.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import structlog

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from services.auth import bootstraptoken as bt
from services.client import Conflict, NotFound, gvr

log = structlog.get_logger(__name__)

NAME = "bootstrapsigner"
#: off unless named, as upstream (kubeadm turns it on)
DISABLED_BY_DEFAULT = True
CONFIGMAPS = gvr("v1", "configmaps")
SECRETS = gvr("v1", "secrets")
KEY = f"{bt.CLUSTER_INFO_NAMESPACE}/{bt.CLUSTER_INFO}"


def new(ctx: ControllerContext) -> BootstrapSigner:
    return BootstrapSigner(ctx)


def signatures(secrets: list[dict], content: str) -> dict[str, str]:
    """`jws-kubeconfig-<id>` -> detached JWS for each live token that may sign."""
    out = {}
    for secret in secrets:
        parts = bt.token_secret(secret)
        if parts is None or not bt.usable_for(secret, "signing") or bt.expired(secret):
            continue
        if (secret.get("metadata") or {}).get("deletionTimestamp"):
            continue
        out[bt.JWS_PREFIX + parts[0]] = bt.detached_jws(content, *parts)
    return out


class BootstrapSigner(QueueController):
    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        self.configmaps = ctx.informer(CONFIGMAPS)
        self.secrets = ctx.informer(SECRETS)
        super().__init__(NAME, [self.configmaps, self.secrets])
        self.configmaps.add_event_handler(self._configmap, lambda old, new: self._configmap(new), None)
        self.secrets.add_event_handler(self._secret, lambda old, new: self._secret(new), self._secret)

    def _configmap(self, configmap: dict) -> None:
        meta = configmap.get("metadata") or {}
        if meta.get("namespace") == bt.CLUSTER_INFO_NAMESPACE and meta.get("name") == bt.CLUSTER_INFO:
            self.queue.add(KEY)

    def _secret(self, secret: dict) -> None:
        if (secret.get("metadata") or {}).get("namespace") == bt.NAMESPACE and secret.get("type") == bt.SECRET_TYPE:
            self.queue.add(KEY)

    async def sync(self, key: str) -> None:
        configmap = self.configmaps.get(bt.CLUSTER_INFO, bt.CLUSTER_INFO_NAMESPACE)
        if configmap is None:
            return
        data = dict(configmap.get("data") or {})
        content = data.get(bt.KUBECONFIG_KEY)
        if content is None:
            return
        tokens = self.secrets.list(bt.NAMESPACE)
        wanted = {k: v for k, v in data.items() if not k.startswith(bt.JWS_PREFIX)}
        wanted.update(signatures(tokens, content))
        if wanted != data:
            await self._write(configmap, wanted)
        now = datetime.now(UTC)
        upcoming = [when for s in tokens if (when := bt.expires_at(s)) is not None and when > now]
        if upcoming:
            raise RequeueAfter((min(upcoming) - now).total_seconds())

    async def _write(self, configmap: dict, wanted: dict[str, str]) -> None:
        body = copy.deepcopy(configmap)
        body["data"] = wanted
        try:
            await self.client.replace(CONFIGMAPS, body, namespace=bt.CLUSTER_INFO_NAMESPACE)
        except (NotFound, Conflict):
            return
        log.info("signed cluster-info", kind="ConfigMap", namespace=bt.CLUSTER_INFO_NAMESPACE, name=bt.CLUSTER_INFO,
                 tokens=sorted(k[len(bt.JWS_PREFIX):] for k in wanted if k.startswith(bt.JWS_PREFIX)))
