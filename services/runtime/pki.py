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


#: a CSR usage string (certificates.k8s.io KeyUsage) -> the x509 KeyUsage flag it sets
KEY_USAGE_FLAGS = {
    "signing": "digital_signature", "digital signature": "digital_signature",
    "content commitment": "content_commitment", "key encipherment": "key_encipherment",
    "key agreement": "key_agreement", "data encipherment": "data_encipherment", "cert sign": "key_cert_sign",
    "crl sign": "crl_sign", "encipher only": "encipher_only", "decipher only": "decipher_only",
}
#: a CSR usage string -> the extended key usage it asks for
EXTENDED_KEY_USAGES = {
    "any": x509.ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE, "server auth": ExtendedKeyUsageOID.SERVER_AUTH,
    "client auth": ExtendedKeyUsageOID.CLIENT_AUTH, "code signing": ExtendedKeyUsageOID.CODE_SIGNING,
    "email protection": ExtendedKeyUsageOID.EMAIL_PROTECTION, "s/mime": ExtendedKeyUsageOID.EMAIL_PROTECTION,
    "ipsec end system": x509.ObjectIdentifier("1.3.6.1.5.5.7.3.5"),
    "ipsec tunnel": x509.ObjectIdentifier("1.3.6.1.5.5.7.3.6"),
    "ipsec user": x509.ObjectIdentifier("1.3.6.1.5.5.7.3.7"),
    "timestamping": ExtendedKeyUsageOID.TIME_STAMPING, "ocsp signing": ExtendedKeyUsageOID.OCSP_SIGNING,
    "microsoft sgc": x509.ObjectIdentifier("1.3.6.1.4.1.311.10.3.3"),
    "netscape sgc": x509.ObjectIdentifier("2.16.840.1.113730.4.1"),
}


def sign_request(ca: CertKey, csr: x509.CertificateSigningRequest, usages: Sequence[str],
                 duration: datetime.timedelta) -> x509.Certificate:
    """A certificate for a CSR's subject, SANs and public key with the usages asked for, as upstream's
    CSR signer issues it: backdated for clock skew and never outliving the CA."""
    now = datetime.datetime.now(datetime.UTC)
    flags = {flag: False for flag in set(KEY_USAGE_FLAGS.values())}
    for usage in usages:
        if usage in KEY_USAGE_FLAGS:
            flags[KEY_USAGE_FLAGS[usage]] = True
    extended = list(dict.fromkeys(EXTENDED_KEY_USAGES[u] for u in usages if u in EXTENDED_KEY_USAGES))
    not_after = min(now + duration, ca.cert.not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(csr.subject)
        .issuer_name(ca.cert.subject)
        .public_key(csr.public_key())  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if any(flags.values()):
        builder = builder.add_extension(x509.KeyUsage(**flags), critical=True)
    if extended:
        builder = builder.add_extension(x509.ExtendedKeyUsage(extended), critical=False)
    try:
        sans = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        builder = builder.add_extension(sans, critical=False)
    except x509.ExtensionNotFound:
        pass
    return builder.sign(ca.key, hashes.SHA256())


def load_or_create_service_account_key(key_path: Path, pub_path: Path) -> ec.EllipticCurvePrivateKey:
    """The cluster's service-account signing key (`sa.key`) and its public half (`sa.pub`), as kubeadm
    lays them out: created once with the rest of the PKI, so tokens survive restarts and verify on
    every apiserver of this cluster and on no other."""
    key_path.parent.mkdir(parents=True, exist_ok=True)
    with open(key_path.parent / ".sa.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if key_path.exists():
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{key_path}: service-account signing key must be an EC key")
        else:
            key = _new_key()
            write_file(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()), 0o600)
        if not pub_path.exists():
            write_file(pub_path, key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)
    return key
