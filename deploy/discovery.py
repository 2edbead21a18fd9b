"""kubeadm's token discovery: a joining machine knows only the apiserver's address, a bootstrap token and
the hash of the cluster CA's public key. It reads kube-public/cluster-info without trusting the server
yet, checks the ConfigMap's signature for its token (so the content came from someone who knows the
token) and the CA's public-key hash (so the CA is the one the operator meant), then reads it again over
TLS verified with that CA and expects the same answer."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ssl
from dataclasses import dataclass

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from services.auth import bootstraptoken as bt

HASH_PREFIX = "sha256:"
TIMEOUT = 10.0
PATH = f"/api/v1/namespaces/{bt.CLUSTER_INFO_NAMESPACE}/configmaps/{bt.CLUSTER_INFO}"


class DiscoveryError(Exception):
    """cluster-info could not be fetched or did not prove itself; the message says which check failed."""


class NotYet(DiscoveryError):
    """cluster-info is not there, or not signed for the token, yet: worth asking again, as kubeadm does."""


@dataclass(frozen=True)
class ClusterInfo:
    server: str
    ca_pem: bytes


def ca_cert_hash(cert: x509.Certificate) -> str:
    """`sha256:<hex>` of the certificate's SubjectPublicKeyInfo, the pin kubeadm prints and checks."""
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return HASH_PREFIX + hashlib.sha256(spki).hexdigest()


def _parse(body: dict, token_id: str, token_secret: str) -> tuple[str, ClusterInfo]:
    data = body.get("data") or {}
    content = data.get(bt.KUBECONFIG_KEY)
    if not content:
        raise DiscoveryError(f"there is no {bt.KUBECONFIG_KEY} key in the {bt.CLUSTER_INFO} ConfigMap")
    signature = data.get(bt.JWS_PREFIX + token_id)
    if not signature:
        raise NotYet(f"token id {token_id!r} is invalid for this cluster or it has expired: the "
                             f"{bt.CLUSTER_INFO} ConfigMap has no signature for it")
    if not hmac.compare_digest(signature, bt.detached_jws(content, token_id, token_secret)):
        raise DiscoveryError(f"failed to verify JWS signature of received cluster info object, can't trust this "
                             f"API Server (token id {token_id!r})")
    try:
        config = yaml.safe_load(content)
        cluster = config["clusters"][0]["cluster"]
        ca_pem = base64.b64decode(cluster["certificate-authority-data"])
        server = cluster["server"]
    except (yaml.YAMLError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise DiscoveryError(f"the {bt.CLUSTER_INFO} kubeconfig is not usable: {exc}") from None
    return content, ClusterInfo(server, ca_pem)


async def discover(address: str, token: str, ca_hashes: list[str]) -> ClusterInfo:
    """The verified server URL and CA of the cluster at `address` (host:port)."""
    match = bt.TOKEN_RE.match(token)
    if match is None:
        raise DiscoveryError(f'the bootstrap token "{token}" was not of the form "{bt.TOKEN_RE.pattern}"')
    if not ca_hashes:
        raise DiscoveryError("--discovery-token-ca-cert-hash is required (sha256:<hex> of the CA's public key)")
    token_id, token_secret = match.groups()
    url = f"https://{address}{PATH}"
    try:
        async with httpx.AsyncClient(verify=False, timeout=TIMEOUT) as insecure:  # noqa: S501 - checked below
            first = await insecure.get(url)
    except httpx.HTTPError as exc:
        raise NotYet(f"reading {url}: {exc}") from None
    if first.status_code != 200:
        raise NotYet(f"reading {url}: {first.status_code} {first.text.strip()}")
    content, info = _parse(first.json(), token_id, token_secret)
    certs = x509.load_pem_x509_certificates(info.ca_pem)
    pins = {h.strip().lower() for h in ca_hashes}
    if not any(ca_cert_hash(cert) in pins for cert in certs):
        found = ", ".join(ca_cert_hash(c) for c in certs)
        raise DiscoveryError(f"cluster CA found in cluster-info ConfigMap is invalid: none of the public keys "
                             f"[{found}] are pinned")
    context = ssl.create_default_context(cadata=info.ca_pem.decode())
    try:
        async with httpx.AsyncClient(verify=context, timeout=TIMEOUT) as secure:
            second = await secure.get(url)
    except httpx.HTTPError as exc:
        raise DiscoveryError(f"reading {url} with the pinned CA: {exc}") from None
    if second.status_code != 200 or (second.json().get("data") or {}).get(bt.KUBECONFIG_KEY) != content:
        raise DiscoveryError("cluster-info changed between the insecure and the verified read")
    return info
