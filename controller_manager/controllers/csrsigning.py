"""CSR signing controller: issues certificates for approved CertificateSigningRequests of the built-in
signers with the cluster CA (--cluster-signing-cert-file/--cluster-signing-key-file), as upstream's
csrsigning does. Each signer signs only what it may: kube-apiserver-client-kubelet a node's client
certificate, kubelet-serving a node's serving certificate, kube-apiserver-client any client
certificate; kubernetes.io/legacy-unknown is never signed. A request a signer refuses gets a Failed
condition (SignerValidationFailure). The certificate lives for --cluster-signing-duration, or the
request's expirationSeconds when shorter (at least 10 minutes), never past the CA's own expiry.
"""

from __future__ import annotations

import argparse
import base64
import copy
import datetime
from collections.abc import Callable
from pathlib import Path

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from controller_manager import certificates as certs
from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from services.api.meta import now_rfc3339
from services.client import Conflict, NotFound
from services.runtime import pki
from services.runtime.durations import duration_flag

log = structlog.get_logger(__name__)

NAME = "csrsigning"
MIN_DURATION = datetime.timedelta(minutes=10)

#: signer name -> what it refuses in a request ("" signs it); legacy-unknown is absent: never signed
VALIDATORS: dict[str, Callable[[x509.CertificateSigningRequest, set[str]], str]] = {
    certs.KUBE_APISERVER_CLIENT_KUBELET: certs.kubelet_client_error,
    certs.KUBELET_SERVING: certs.kubelet_serving_error,
    certs.KUBE_APISERVER_CLIENT: certs.kube_apiserver_client_error,
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster-signing-cert-file", default="",
                        help="PEM CA certificate the built-in signers issue cluster certificates with")
    parser.add_argument("--cluster-signing-key-file", default="", help="the CA's PEM private key")
    parser.add_argument("--cluster-signing-duration", type=duration_flag, default=8760 * 3600.0,
                        help="longest validity of a signed certificate (default 8760h0m0s)")


def new(ctx: ControllerContext) -> CSRSigningController | Idle:
    cert_file, key_file = ctx.options.cluster_signing_cert_file, ctx.options.cluster_signing_key_file
    if not cert_file or not key_file:
        return Idle()
    return CSRSigningController(ctx, pki.CertKey.load(Path(cert_file), Path(key_file)),
                                datetime.timedelta(seconds=float(ctx.options.cluster_signing_duration)))


class Idle:
    """Without a signing CA nothing can be signed; upstream starts no signer then either."""

    async def run(self) -> None:
        log.info("no --cluster-signing-cert-file/--cluster-signing-key-file; not signing certificates",
                 controller=NAME)


def certificate_duration(maximum: datetime.timedelta, expiration_seconds: int | None) -> datetime.timedelta:
    """The requested duration when it is shorter than the signer's, but never under 10 minutes."""
    if expiration_seconds is None:
        return maximum
    requested = max(datetime.timedelta(seconds=expiration_seconds), MIN_DURATION)
    return min(requested, maximum)


class CSRSigningController(QueueController):
    def __init__(self, ctx: ControllerContext, ca: pki.CertKey, duration: datetime.timedelta) -> None:
        self.client = ctx.client
        self.ca = ca
        self.duration = duration
        self.csrs = ctx.informer(certs.CSRS)
        super().__init__(NAME, [self.csrs])
        self.csrs.add_event_handler(self._changed, lambda old, new: self._changed(new), None)

    def _changed(self, csr: certs.Obj) -> None:
        if self._pending(csr):
            self.enqueue(csr)

    @staticmethod
    def _pending(csr: certs.Obj) -> bool:
        signer = (csr.get("spec") or {}).get("signerName")
        return (signer in VALIDATORS and certs.has_condition(csr, certs.APPROVED)
                and not certs.has_condition(csr, certs.FAILED) and not certs.certificate(csr))

    async def sync(self, key: str) -> None:
        csr = self.csrs.get(key)
        if csr is None or not self._pending(csr):
            return
        spec = csr.get("spec") or {}
        signer = spec["signerName"]
        bound = log.bind(kind="CertificateSigningRequest", name=key, signer=signer)
        body = copy.deepcopy(csr)
        status = body.setdefault("status", {})
        try:
            request = certs.parse_request(csr)
            refusal = VALIDATORS[signer](request, certs.usages(csr))
        except ValueError as exc:
            refusal = f"unable to parse csr: {exc}"
        if refusal:
            now = now_rfc3339()
            status.setdefault("conditions", []).append({
                "type": certs.FAILED, "status": "True", "reason": "SignerValidationFailure", "message": refusal,
                "lastUpdateTime": now, "lastTransitionTime": now})
            bound.info("refused to sign", reason=refusal)
        else:
            duration = certificate_duration(self.duration, spec.get("expirationSeconds"))
            try:
                cert = pki.sign_request(self.ca, request, spec.get("usages") or [], duration)
            except ValueError as exc:
                bound.info("refused to sign", reason=str(exc))
                return
            status["certificate"] = base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()
            bound.info("signed certificate", subject=cert.subject.rfc4514_string(),
                       not_after=cert.not_valid_after_utc.isoformat())
        try:
            await self.client.replace(certs.CSRS, body, subresource="status")
        except (NotFound, Conflict):
            return
