"""Cluster PKI and kubeconfigs, laid out like kubeadm's /etc/kubernetes/pki so the same files serve
`pyk8s up`, the `pyk8s pki` command and the systemd units."""

from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509

from services.runtime import pki

SERVICE_CIDR = "10.96.0.0/12"
CLUSTER_CIDR = "10.244.0.0/16"
CLUSTER_NAME = "pyk8s"


@dataclass(frozen=True)
class ClientIdentity:
    """A client cert to issue: `name` names the files, `user` and `groups` are what the apiserver sees."""

    name: str
    user: str
    groups: tuple[str, ...] = ()


ADMIN = ClientIdentity("admin", "kubernetes-admin", ("system:masters",))
KUBELET_CLIENT = ClientIdentity("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
SCHEDULER = ClientIdentity("scheduler", "system:kube-scheduler")
CONTROLLER_MANAGER = ClientIdentity("controller-manager", "system:kube-controller-manager")
PROXY = ClientIdentity("kube-proxy", "system:kube-proxy")
CLIENTS = (ADMIN, KUBELET_CLIENT, SCHEDULER, CONTROLLER_MANAGER, PROXY)
#: The name the aggregator's client certificate carries; extension apiservers allow only it (kubeadm's).
FRONT_PROXY_CLIENT = "front-proxy-client"


def node_client(node: str) -> ClientIdentity:
    """A kubelet's identity, `system:node:<name>` in `system:nodes`: what the Node authorizer and
    NodeRestriction know it by (kubeadm issues it to a control-plane node's kubelet directly)."""
    return ClientIdentity(f"kubelet-{node}", f"system:node:{node}", ("system:nodes",))


def apiserver_hosts(extra: Sequence[str] = (), service_cidr: str = SERVICE_CIDR) -> list[str]:
    """SANs the apiserver answers to: loopback, the in-cluster `kubernetes` Service names and its IP."""
    service_ip = str(ipaddress.ip_network(service_cidr)[1])
    names = [
        "localhost",
        "127.0.0.1",
        "::1",
        service_ip,
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    return list(dict.fromkeys([*extra, *names]))


@dataclass(frozen=True)
class PkiDir:
    """File names inside one PKI directory."""

    root: Path

    @property
    def ca(self) -> tuple[Path, Path]:
        return self.root / "ca.crt", self.root / "ca.key"

    @property
    def apiserver(self) -> tuple[Path, Path]:
        return self.root / "apiserver.crt", self.root / "apiserver.key"

    @property
    def service_account(self) -> tuple[Path, Path]:
        """The service-account token key pair, named as kubeadm names it: (sa.pub, sa.key)."""
        return self.root / "sa.pub", self.root / "sa.key"

    def client(self, identity: ClientIdentity) -> tuple[Path, Path]:
        return self.root / f"{identity.name}.crt", self.root / f"{identity.name}.key"

    def etcd(self, name: str) -> tuple[Path, Path]:
        """etcd's own CA and certs, as kubeadm's pki/etcd: `ca`, `server`, `peer`, `healthcheck-client`."""
        return self.root / "etcd" / f"{name}.crt", self.root / "etcd" / f"{name}.key"

    @property
    def front_proxy_ca(self) -> tuple[Path, Path]:
        """The CA extension apiservers trust to name users in request headers (kubeadm's front-proxy-ca)."""
        return self.root / "front-proxy-ca.crt", self.root / "front-proxy-ca.key"

    @property
    def front_proxy_client(self) -> tuple[Path, Path]:
        """What the apiserver presents when it proxies to an extension apiserver."""
        return self.root / "front-proxy-client.crt", self.root / "front-proxy-client.key"

    @property
    def apiserver_etcd_client(self) -> tuple[Path, Path]:
        return self.root / "apiserver-etcd-client.crt", self.root / "apiserver-etcd-client.key"

    @property
    def encryption_config(self) -> Path:
        """The apiserver's EncryptionConfiguration, which holds the key that encrypts Secrets in etcd."""
        return self.root / "encryption-config.yaml"


def _covers(cert: pki.CertKey, hosts: Sequence[str]) -> bool:
    san = cert.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(pki.split_hosts(hosts)) <= set(san)


def ensure_pki(pki_dir: PkiDir, hosts: Sequence[str]) -> None:
    """Create what is missing and keep what exists, so kubeconfigs handed out earlier stay valid.

    The serving cert is reissued when it no longer covers `hosts` or was signed by another CA.
    """
    ca = pki.load_or_create_ca(*pki_dir.ca)
    public, private = pki_dir.service_account
    pki.load_or_create_service_account_key(private, public)
    front_proxy = pki.load_or_create_ca(*pki_dir.front_proxy_ca, common_name="front-proxy-ca")
    if not _signed_by(pki_dir.front_proxy_client, front_proxy):
        pki.issue_client_cert(front_proxy, FRONT_PROXY_CLIENT).write(*pki_dir.front_proxy_client)
    try:
        serving = pki.CertKey.load(*pki_dir.apiserver)
        serving.cert.verify_directly_issued_by(ca.cert)
        fresh = _covers(serving, hosts)
    except (OSError, ValueError, TypeError):
        fresh = False
    if not fresh:
        pki.issue_serving_cert(ca, hosts, common_name="kube-apiserver").write(*pki_dir.apiserver)
    for identity in CLIENTS:
        ensure_client_cert(pki_dir, identity, ca)


def ensure_client_cert(pki_dir: PkiDir, identity: ClientIdentity, ca: pki.CertKey | None = None) -> None:
    """Issue `identity`'s client cert unless one signed by the cluster CA exists."""
    ca = ca or pki.CertKey.load(*pki_dir.ca)
    try:
        pki.CertKey.load(*pki_dir.client(identity)).cert.verify_directly_issued_by(ca.cert)
    except (OSError, ValueError, TypeError):
        pki.issue_client_cert(ca, identity.user, identity.groups).write(*pki_dir.client(identity))


def _signed_by(pair: tuple[Path, Path], ca: pki.CertKey, hosts: Sequence[str] = ()) -> bool:
    try:
        cert = pki.CertKey.load(*pair)
        cert.cert.verify_directly_issued_by(ca.cert)
        return not hosts or _covers(cert, hosts)
    except (OSError, ValueError, TypeError, x509.ExtensionNotFound):
        return False


def ensure_etcd_pki(pki_dir: PkiDir, hosts: Sequence[str] = ("localhost", "127.0.0.1", "::1")) -> None:
    """etcd's CA (apart from the cluster's: only what it signs may talk to etcd), its member certs and
    the two clients etcd admits, the health check and the apiserver; what exists and fits is kept."""
    ca = pki.load_or_create_ca(*pki_dir.etcd("ca"), common_name="etcd-ca")
    for name in ("server", "peer"):
        if not _signed_by(pki_dir.etcd(name), ca, hosts):
            pki.issue_peer_cert(ca, hosts, common_name=f"pyk8s-etcd-{name}").write(*pki_dir.etcd(name))
    clients = ((pki_dir.etcd("healthcheck-client"), "kube-etcd-healthcheck-client"),
               (pki_dir.apiserver_etcd_client, "kube-apiserver-etcd-client"))
    for pair, user in clients:
        if not _signed_by(pair, ca):
            pki.issue_client_cert(ca, user).write(*pair)


def ensure_encryption_config(pki_dir: PkiDir) -> Path:
    """An EncryptionConfiguration that encrypts Secrets with a fresh secretbox key (identity second, so
    Secrets written before it existed still read); an existing file is kept, with its keys."""
    path = pki_dir.encryption_config
    if not path.exists():
        secret = base64.b64encode(os.urandom(32)).decode()
        config = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
                  "resources": [{"resources": ["secrets"], "providers": [
                      {"secretbox": {"keys": [{"name": "key1", "secret": secret}]}}, {"identity": {}}]}]}
        pki.write_file(path, yaml.safe_dump(config, sort_keys=False).encode(), 0o600)
    return path


def kubeconfig(server: str, pki_dir: PkiDir, identity: ClientIdentity = ADMIN) -> dict:
    """A self-contained kubeconfig (certs embedded as *-data) with one context named `pyk8s`."""

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    crt, key = pki_dir.client(identity)
    user = {"client-certificate-data": b64(crt), "client-key-data": b64(key)}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": b64(pki_dir.ca[0])},
            }
        ],
        "users": [{"name": identity.user, "user": user}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": identity.user}}],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }


def token_kubeconfig(server: str, pki_dir: PkiDir, user: str, token_file: Path) -> dict:
    """A kubeconfig that authenticates with the bearer token in `token_file` (reread as it is replaced)."""
    config = kubeconfig(server, pki_dir)
    config["users"] = [{"name": user, "user": {"tokenFile": str(token_file)}}]
    config["contexts"][0]["context"]["user"] = user
    return config


def write_kubeconfig(path: Path, server: str, pki_dir: PkiDir, identity: ClientIdentity = ADMIN) -> None:
    """Kubeconfigs hold private keys, so they get mode 0600 like the keys themselves."""
    body = yaml.safe_dump(kubeconfig(server, pki_dir, identity), sort_keys=False)
    pki.write_file(path, body.encode(), 0o600)
