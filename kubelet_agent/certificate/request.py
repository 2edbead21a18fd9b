"""One CertificateSigningRequest for the kubelet's certificate: the x509 request of a fresh ECDSA key,
submitted, then watched until the signer answers with the certificate or the request is refused."""

from __future__ import annotations

import base64
import binascii
import hashlib

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from services.client import AlreadyExists, Client, gvr
from services.runtime import pki

log = structlog.get_logger("kubelet.certificate")

CSRS = gvr("certificates.k8s.io/v1", "certificatesigningrequests", namespaced=False)
KUBE_APISERVER_CLIENT_KUBELET = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
NODES_GROUP = "system:nodes"
#: an ECDSA key signs and does not encipher: upstream asks for these two usages for it
CLIENT_USAGES = ("digital signature", "client auth")
SERVING_USAGES = ("digital signature", "server auth")


class RequestRefused(Exception):
    """The request was denied or failed, so no certificate will come for it."""


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def node_client_request(key: ec.EllipticCurvePrivateKey, node_name: str) -> bytes:
    """PEM x509 request of a node's client identity: CN system:node:<name>, O system:nodes."""
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}")])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM)


def node_serving_request(key: ec.EllipticCurvePrivateKey, node_name: str, hosts: list[str]) -> bytes:
    """PEM x509 request of the kubelet API's serving identity: the node's subject, its names and addresses."""
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}")])
    sans = pki.split_hosts([node_name, *hosts])
    csr = (x509.CertificateSigningRequestBuilder().subject_name(subject)
           .add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(key, hashes.SHA256()))
    return csr.public_bytes(serialization.Encoding.PEM)


def digest_name(key: ec.EllipticCurvePrivateKey, node_name: str) -> str:
    """`node-csr-<digest>` of the key and node, as upstream's bootstrap names its request: a kubelet that
    restarts while waiting finds the same request again instead of filing another."""
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashlib.sha512(der + node_name.encode() + b"system:node:" + NODES_GROUP.encode()).digest()
    return "node-csr-" + base64.urlsafe_b64encode(digest).decode().rstrip("=")[:43]


def _state(csr: dict) -> str:
    for cond in (csr.get("status") or {}).get("conditions") or ():
        if cond.get("type") in ("Denied", "Failed") and cond.get("status", "True") == "True":
            return f"{cond['type']}: {cond.get('reason', '')} {cond.get('message', '')}".strip()
    return ""


def _certificate(csr: dict) -> bytes:
    try:
        return base64.b64decode((csr.get("status") or {}).get("certificate") or "")
    except (binascii.Error, ValueError):
        return b""


async def request_certificate(client: Client, request_pem: bytes, *, name: str = "",
                              signer: str = KUBE_APISERVER_CLIENT_KUBELET,
                              usages: tuple[str, ...] = CLIENT_USAGES) -> bytes:
    """Submit a request (by `name`, or generated as `csr-…`) and answer the PEM certificate once issued."""
    meta = {"name": name} if name else {"generateName": "csr-"}
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": meta,
            "spec": {"request": base64.b64encode(request_pem).decode(), "signerName": signer,
                     "usages": list(usages)}}
    try:
        created = await client.create(CSRS, body)
    except AlreadyExists:
        created = await client.get(CSRS, name)
    csr_name = created["metadata"]["name"]
    log.info("waiting for the certificate", kind="CertificateSigningRequest", name=csr_name, signer=signer)
    return await _wait_issued(client, csr_name)


async def _wait_issued(client: Client, name: str) -> bytes:
    while True:
        current = await client.get(CSRS, name)
        if refusal := _state(current):
            raise RequestRefused(f"certificate signing request {name}: {refusal}")
        if cert := _certificate(current):
            return cert
        async with client.watch(CSRS, name=name, resource_version=current["metadata"]["resourceVersion"],
                                timeout_seconds=60) as events:
            async for kind, csr in events:
                if kind not in ("ADDED", "MODIFIED"):
                    continue
                if refusal := _state(csr):
                    raise RequestRefused(f"certificate signing request {name}: {refusal}")
                if cert := _certificate(csr):
                    return cert
