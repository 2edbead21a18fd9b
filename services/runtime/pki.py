"""Certificates for the cluster: a CA, serving certs for the apiserver, client certs for users and components.

ECDSA P-256 keeps generation in the millisecond range, so `pyk8s up` and an apiserver without
`--tls-cert-file` can create what they need on every first start without a noticeable wait.
Client identity follows upstream's x509 authenticator: CN is the user name, each O is a group.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 365
_CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def write(self, cert_path: Path, key_path: Path, chain: Sequence[x509.Certificate] = ()) -> None:
        """Write the key (0600) before the cert, so a reader that finds the cert also finds its key."""
        write_file(key_path, self.key_pem(), 0o600)
        pem = self.cert_pem() + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
        write_file(cert_path, pem, 0o644)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertKey:
        """Load a pair written by `write`; raise ValueError if the key does not belong to the cert."""
        cert = x509.load_pem_x509_certificates(cert_path.read_bytes())[0]
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path}: expected an EC private key")
        if cert.public_key().public_numbers() != key.public_key().public_numbers():
            raise ValueError(f"{key_path} does not match {cert_path}")
        return cls(cert, key)


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Write atomically (temp file + rename) so concurrent readers never see half a PEM."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, days: int
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def create_ca(common_name: str = "pyk8s-ca", days: int = CA_DAYS) -> CertKey:
    """A self-signed root that signs every serving and client cert of one cluster."""
    key = _new_key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    return CertKey(cert, key)


def split_hosts(hosts: Iterable[str]) -> list[x509.GeneralName]:
    """Turn host strings into SAN entries: IP literals become IPAddress, the rest DNSName."""
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _issue(
    ca: CertKey, subject: x509.Name, usage: x509.ObjectIdentifier | Sequence[x509.ObjectIdentifier],
    sans: list[x509.GeneralName], days: int,
) -> CertKey:
    usages = [usage] if isinstance(usage, x509.ObjectIdentifier) else list(usage)
    key = _new_key()
    builder = (
        _builder(subject, ca.cert.subject, key, days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return CertKey(builder.sign(ca.key, hashes.SHA256()), key)


def issue_serving_cert(
    ca: CertKey, hosts: Sequence[str], common_name: str | None = None, days: int = LEAF_DAYS
) -> CertKey:
    """A TLS server cert valid for every DNS name and IP in `hosts`; the CN defaults to the first host."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host")
    subject = _name(common_name or hosts[0])
    return _issue(ca, subject, ExtendedKeyUsageOID.SERVER_AUTH, split_hosts(hosts), days)


def issue_peer_cert(ca: CertKey, hosts: Sequence[str], common_name: str, days: int = LEAF_DAYS) -> CertKey:
    """A cert for both ends of TLS, as etcd's members use theirs: serving clients and dialling peers."""
    return _issue(ca, _name(common_name), (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
                  split_hosts(hosts), days)


def issue_client_cert(ca: CertKey, common_name: str, groups: Sequence[str] = (), days: int = LEAF_DAYS) -> CertKey:
    """A TLS client cert that the apiserver maps to user `common_name` in `groups`."""
    return _issue(ca, _name(common_name, groups), ExtendedKeyUsageOID.CLIENT_AUTH, [], days)


def load_or_create_ca(cert_path: Path, key_path: Path, common_name: str = "pyk8s-ca") -> CertKey:
    """Reuse an existing CA so certs issued earlier stay valid; create one the first time."""
    if cert_path.exists() and key_path.exists():
        return CertKey.load(cert_path, key_path)
    ca = create_ca(common_name)
    ca.write(cert_path, key_path)
    return ca


def ensure_self_signed(cert_dir: Path, hosts: list[str]) -> tuple[Path, Path]:
    """Serving cert for an apiserver started without --tls-cert-file, like upstream's --cert-dir.

    Generated once (a private CA plus a leaf, written as a bundle) and reused on later starts; a lock
    keeps replicas sharing the directory from writing mismatched halves.
    """
    hosts = hosts or ["localhost", "127.0.0.1"]
    cert_path, key_path = cert_dir / "apiserver.crt", cert_dir / "apiserver.key"
    cert_dir.mkdir(parents=True, exist_ok=True)
    with open(cert_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            CertKey.load(cert_path, key_path)
        except (OSError, ValueError):
            ca = create_ca(f"{hosts[0]}-ca@{int(datetime.datetime.now().timestamp())}")
            issue_serving_cert(ca, hosts).write(cert_path, key_path, chain=[ca.cert])
    return cert_path, key_path
