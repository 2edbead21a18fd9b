"""Certificate rotation, as upstream's certificate manager: at a random point between 70 % and 90 % of a
certificate's lifetime the kubelet asks, as itself, for a new one, stores it, and hands it to whoever
presents it. `--rotate-certificates` keeps the client certificate fresh (a renewal csrapproving approves
for the node's own name); `--rotate-server-certificates` gets and renews the kubelet API's serving
certificate from the kubelet-serving signer (approved by the cluster's operator or an approver of theirs)."""

from __future__ import annotations

import asyncio
import datetime
import random
from collections.abc import Callable

import structlog
from cryptography.hazmat.primitives.asymmetric import ec

from kubelet_agent.certificate.request import (
    KUBE_APISERVER_CLIENT_KUBELET,
    KUBELET_SERVING,
    SERVING_USAGES,
    RequestRefused,
    new_key,
    node_client_request,
    node_serving_request,
    request_certificate,
)
from kubelet_agent.certificate.store import FileStore, Pair
from services.client import ApiError, Client

log = structlog.get_logger("kubelet.certificate")

INITIAL_BACKOFF = 2.0
MAX_BACKOFF = 300.0


def rotation_deadline(cert: Pair, rand: Callable[[], float] = random.random) -> datetime.datetime:
    """notBefore plus a jittered 70–90 % of the lifetime, so a fleet does not renew at once."""
    start, end = cert.cert.not_valid_before_utc, cert.cert.not_valid_after_utc
    return start + (end - start) * (0.7 + 0.2 * rand())


class CertificateManager:
    """Keeps one certificate in `store` fresh for as long as the kubelet runs; `rotated` is called after
    each new one is stored."""

    def __init__(self, client: Client, store: FileStore, node_name: str,
                 request: Callable[[ec.EllipticCurvePrivateKey], bytes], signer: str, usages: tuple[str, ...],
                 rotated: Callable[[], None]) -> None:
        self.client = client
        self.store = store
        self.node_name = node_name
        self.request = request
        self.signer = signer
        self.usages = usages
        self.rotated = rotated
        self.rotations = 0

    async def run(self) -> None:
        backoff = INITIAL_BACKOFF
        while True:
            current = self.store.load()
            if current is not None:
                deadline = rotation_deadline(current)
                wait = (deadline - datetime.datetime.now(datetime.UTC)).total_seconds()
                log.info("certificate rotation deadline", node=self.node_name, signer=self.signer,
                         deadline=deadline.isoformat(), expires=current.cert.not_valid_after_utc.isoformat())
                if wait > 0:
                    await asyncio.sleep(wait)
            try:
                await self.rotate()
                backoff = INITIAL_BACKOFF
            except (ApiError, OSError, TimeoutError, RequestRefused) as exc:
                log.warning("certificate rotation failed", node=self.node_name, signer=self.signer, error=str(exc),
                            retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    async def rotate(self) -> None:
        key = new_key()
        cert = await request_certificate(self.client, self.request(key), signer=self.signer, usages=self.usages)
        path = self.store.update(cert, key)
        self.rotated()
        self.rotations += 1
        log.info("rotated the certificate", node=self.node_name, signer=self.signer, path=str(path))


def client_manager(client: Client, store: FileStore, node_name: str) -> CertificateManager:
    """The node's client certificate; the client presents a new one from its next connection on."""
    return CertificateManager(client, store, node_name, lambda key: node_client_request(key, node_name),
                              KUBE_APISERVER_CLIENT_KUBELET, ("digital signature", "client auth"),
                              client.reload_client_certificate)


def serving_manager(client: Client, store: FileStore, node_name: str, hosts: list[str],
                    rotated: Callable[[], None]) -> CertificateManager:
    """The kubelet API's serving certificate for the node's name and addresses."""
    return CertificateManager(client, store, node_name, lambda key: node_serving_request(key, node_name, hosts),
                              KUBELET_SERVING, SERVING_USAGES, rotated)
