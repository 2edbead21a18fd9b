"""Kubelet TLS bootstrap, as upstream's `--bootstrap-kubeconfig`: when `--kubeconfig` is missing or its
client certificate has expired, the kubelet authenticates with the bootstrap kubeconfig (a bootstrap
token), asks for a `kube-apiserver-client-kubelet` certificate for `system:node:<name>`, keeps it in
`--cert-dir` and writes a kubeconfig that points at it; from then on it is the node itself."""

from __future__ import annotations

import asyncio
import base64
import datetime
from pathlib import Path

import httpx
import structlog
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from kubelet_agent.certificate.request import digest_name, new_key, node_client_request, request_certificate
from kubelet_agent.certificate.store import FileStore, key_pem
from services.client import Client, ClientConfig, ConfigError, ServiceUnavailable, Unauthorized, load_kubeconfig
from services.runtime import pki

log = structlog.get_logger("kubelet.certificate")

#: the key of a request still in flight, reused after a restart so the same request is found again
PENDING_KEY = "kubelet-client.key.tmp"
#: how long the kubelet waits for its first certificate before giving up (and being restarted), as upstream
BOOTSTRAP_TIMEOUT = 3600.0
RETRY_INITIAL, RETRY_MAX = 0.2, 5.0


def _certificates(config: ClientConfig) -> list[x509.Certificate]:
    data = config.cert_data.encode() if config.cert_data else None
    if data is None and config.cert_file:
        data = Path(config.cert_file).read_bytes()
    return x509.load_pem_x509_certificates(data) if data else []


def kubeconfig_still_valid(path: Path, now: datetime.datetime | None = None) -> bool:
    """Upstream's isClientConfigStillValid: the file loads and none of its client certificates expired."""
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        config = load_kubeconfig(str(path))
        certs = _certificates(config)
    except (OSError, ValueError, KeyError, TypeError, ConfigError, yaml.YAMLError):
        return False
    return all(c.not_valid_before_utc <= now < c.not_valid_after_utc for c in certs)


def write_node_kubeconfig(path: Path, bootstrap: ClientConfig, cert_file: Path) -> None:
    """The kubeconfig upstream writes after bootstrap: the bootstrap's cluster, the rotating cert file."""
    cluster: dict = {"server": bootstrap.server}
    if bootstrap.ca_data:
        cluster["certificate-authority-data"] = base64.b64encode(bootstrap.ca_data.encode()).decode()
    elif bootstrap.ca_file:
        cluster["certificate-authority"] = str(Path(bootstrap.ca_file).resolve())
    if bootstrap.insecure_skip_tls_verify:
        cluster["insecure-skip-tls-verify"] = True
    body = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "contexts": [{"name": "default-context", "context": {"cluster": "default-cluster", "namespace": "default",
                                                             "user": "default-auth"}}],
        "current-context": "default-context",
        "users": [{"name": "default-auth", "user": {"client-certificate": str(cert_file),
                                                    "client-key": str(cert_file)}}],
        "preferences": {},
    }
    pki.write_file(path, yaml.safe_dump(body, sort_keys=False).encode(), 0o600)


def _pending_key(cert_dir: Path) -> ec.EllipticCurvePrivateKey:
    path = cert_dir / PENDING_KEY
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if isinstance(key, ec.EllipticCurvePrivateKey):
            return key
    except (OSError, ValueError):
        pass
    key = new_key()
    pki.write_file(path, key_pem(key), 0o600)
    return key


async def _request_until_served(client: Client, key: ec.EllipticCurvePrivateKey, node_name: str) -> bytes:
    """Ask until the apiserver is up and knows the token: on a machine that is booting, both may still
    be on their way (upstream's bootstrap waits for the server the same way)."""
    delay = RETRY_INITIAL
    while True:
        try:
            return await request_certificate(client, node_client_request(key, node_name),
                                             name=digest_name(key, node_name))
        except (httpx.TransportError, Unauthorized, ServiceUnavailable) as exc:
            log.info("the API server cannot take the request yet; retrying", error=str(exc) or type(exc).__name__,
                     retry_in=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)


async def load_client_cert(kubeconfig: Path, bootstrap_kubeconfig: Path, cert_dir: Path, node_name: str) -> bool:
    """Make `kubeconfig` usable for the node; True when a new certificate had to be requested.

    A valid kubeconfig is kept. Otherwise a still-valid certificate in `cert_dir` is reused, and only
    when there is none the bootstrap credentials ask for one.
    """
    if kubeconfig_still_valid(kubeconfig):
        return False
    bootstrap = load_kubeconfig(str(bootstrap_kubeconfig))
    store = FileStore(cert_dir)
    current = store.load()
    if current is not None and current.valid_at(datetime.datetime.now(datetime.UTC)):
        log.info("using the existing client certificate", path=str(store.current))
        write_node_kubeconfig(kubeconfig, bootstrap, store.current)
        return False
    key = _pending_key(cert_dir)
    log.info("requesting a client certificate with the bootstrap credentials", node=node_name)
    async with Client(bootstrap) as client, asyncio.timeout(BOOTSTRAP_TIMEOUT):
        cert = await _request_until_served(client, key, node_name)
    store.update(cert, key)
    (cert_dir / PENDING_KEY).unlink(missing_ok=True)
    write_node_kubeconfig(kubeconfig, bootstrap, store.current)
    log.info("bootstrapped the client certificate", node=node_name, path=str(store.current))
    return True
