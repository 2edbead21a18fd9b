"""Where the kubelet keeps its client certificate, as upstream's certificate file store: each issued pair
as `<prefix>-<timestamp>.pem` (certificate, then key), and `<prefix>-current.pem`, a symlink swapped
atomically to the newest, which the kubelet's kubeconfig names."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from services.runtime import pki

CLIENT_PREFIX = "kubelet-client"
SERVER_PREFIX = "kubelet-server"


@dataclass(frozen=True)
class Pair:
    """A certificate and the key it was issued for."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def valid_at(self, when: datetime.datetime) -> bool:
        return self.cert.not_valid_before_utc <= when < self.cert.not_valid_after_utc


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The key as upstream writes it, EC PRIVATE KEY (SEC1)."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


@dataclass(frozen=True)
class FileStore:
    cert_dir: Path
    prefix: str = CLIENT_PREFIX

    @property
    def current(self) -> Path:
        return self.cert_dir / f"{self.prefix}-current.pem"

    def load(self) -> Pair | None:
        """The current pair, or None when there is none or it does not parse or match."""
        try:
            data = self.current.read_bytes()
            cert = x509.load_pem_x509_certificates(data)[0]
            key = serialization.load_pem_private_key(data, password=None)
        except (OSError, ValueError, IndexError):
            return None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            return None
        if cert.public_key().public_numbers() != key.public_key().public_numbers():  # type: ignore[union-attr]
            return None
        return Pair(cert, key)

    def update(self, cert_pem: bytes, key: ec.EllipticCurvePrivateKey) -> Path:
        """Write a new pair and point `-current` at it; the old files stay, as upstream leaves them."""
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d-%H-%M-%S-%f")
        path = self.cert_dir / f"{self.prefix}-{stamp}.pem"
        pki.write_file(path, cert_pem + key_pem(key), 0o600)
        link = self.cert_dir / f".{self.prefix}-current.pem.new"
        link.unlink(missing_ok=True)
        os.symlink(path.name, link)
        os.replace(link, self.current)
        return path
