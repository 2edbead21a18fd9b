"""Client certificate rotation, as upstream's certificate manager with `--rotate-certificates`: at a
random point between 70 % and 90 % of the certificate's lifetime the kubelet asks, as itself, for a
new one (a renewal csrapproving approves for the node's own name), stores it, and its client presents
it from the next connection on."""

from __future__ import annotations

import asyncio
import datetime
import random
from collections.abc import Callable

import structlog

from kubelet_agent.certificate.request import RequestRefused, new_key, node_client_request, request_certificate
from kubelet_agent.certificate.store import FileStore, Pair
from services.client import ApiError, Client

log = structlog.get_logger("kubelet.certificate")

INITIAL_BACKOFF = 2.0
MAX_BACKOFF = 300.0


def rotation_deadline(cert: Pair, rand: Callable[[], float] = random.random) -> datetime.datetime:
    """notBefore plus a jittered 70–90 % of the lifetime, so a fleet does not renew at once."""
    start, end = cert.cert.not_valid_before_utc, cert.cert.not_valid_after_utc
    return start + (end - start) * (0.7 + 0.2 * rand())


class ClientCertificateManager:
    """Keeps the node's client certificate fresh for as long as the kubelet runs."""

    def __init__(self, client: Client, store: FileStore, node_name: str) -> None:
        self.client = client
        self.store = store
        self.node_name = node_name
        self.rotations = 0

    async def run(self) -> None:
        backoff = INITIAL_BACKOFF
        while True:
            current = self.store.load()
            if current is not None:
                deadline = rotation_deadline(current)
                wait = (deadline - datetime.datetime.now(datetime.UTC)).total_seconds()
                log.info("certificate rotation deadline", node=self.node_name, deadline=deadline.isoformat(),
                         expires=current.cert.not_valid_after_utc.isoformat())
                if wait > 0:
                    await asyncio.sleep(wait)
            try:
                await self.rotate()
                backoff = INITIAL_BACKOFF
            except (ApiError, OSError, TimeoutError, RequestRefused) as exc:
                log.warning("certificate rotation failed", node=self.node_name, error=str(exc), retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    async def rotate(self) -> None:
        key = new_key()
        cert = await request_certificate(self.client, node_client_request(key, self.node_name))
        path = self.store.update(cert, key)
        self.client.reload_client_certificate()
        self.rotations += 1
        log.info("rotated the client certificate", node=self.node_name, path=str(path))
