"""`--use-service-account-credentials`: each controller talks to the apiserver as its own service
account in kube-system, as upstream's SAControllerClientBuilder/DynamicControllerClientBuilder do.

The manager's own identity (system:kube-controller-manager) creates the account when it is missing
and asks the TokenRequest API for a token, which is replaced well before it expires; the controller's
client reads the current token on every request, so a refresh needs no new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from datetime import UTC, datetime

import structlog

from services.client import AlreadyExists, Client, NotFound, TokenSource, gvr

log = structlog.get_logger(__name__)

SERVICE_ACCOUNTS = gvr("v1", "serviceaccounts")
NAMESPACE = "kube-system"
#: lifetime asked for; upstream's DynamicControllerClientBuilder asks one hour
TOKEN_EXPIRATION_SECONDS = 3600
#: refresh once this share of the lifetime has passed (upstream: at 80 %)
REFRESH_AT = 0.8
RETRY_SECONDS = 5.0


class ServiceAccountCredentials:
    """Builds one client per controller service account and keeps its token fresh."""

    def __init__(self, root: Client) -> None:
        self.root = root
        self._clients: dict[str, Client] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def client_for(self, account: str) -> Client:
        """The client of `kube-system/<account>`, created (with the account) on first use."""
        client = self._clients.get(account)
        if client is not None:
            return client
        await self._ensure_account(account)
        source = TokenSource()
        lifetime = await self._refresh(account, source)
        config = dataclasses.replace(
            self.root.config, token=None, token_file=None, cert_file=None, key_file=None, cert_data=None,
            key_data=None, username=None, password=None, token_source=source,
            user_agent=f"{self.root.config.user_agent}/{account}")
        client = Client(config)
        self._clients[account] = client
        self._tasks.append(asyncio.create_task(self._keep_fresh(account, source, lifetime)))
        return client

    async def _ensure_account(self, account: str) -> None:
        try:
            await self.root.get(SERVICE_ACCOUNTS, account, NAMESPACE)
        except NotFound:
            body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": NAMESPACE}}
            with contextlib.suppress(AlreadyExists):
                await self.root.create(SERVICE_ACCOUNTS, body, NAMESPACE)

    async def _refresh(self, account: str, source: TokenSource) -> float:
        """Put a new token in `source`; returns how long it lives, in seconds."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS}}
        answer = await self.root.create(SERVICE_ACCOUNTS, body, NAMESPACE, name=account, subresource="token")
        status = answer.get("status") or {}
        source.token = status["token"]
        expires = datetime.strptime(status["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        return max(expires.timestamp() - time.time(), RETRY_SECONDS)

    async def _keep_fresh(self, account: str, source: TokenSource, lifetime: float) -> None:
        delay = lifetime * REFRESH_AT
        while True:
            await asyncio.sleep(delay)
            try:
                lifetime = await self._refresh(account, source)
                delay = lifetime * REFRESH_AT
            except Exception as exc:  # noqa: BLE001 - the old token still works; try again soon
                log.warning("service account token refresh failed", account=account, error=repr(exc))
                delay = RETRY_SECONDS

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
        self._tasks.clear()
