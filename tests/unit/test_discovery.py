"""Token discovery's checks: the CA pin is what kubeadm's documented openssl pipeline prints, and a
cluster-info without a signature for the token, with a forged one, or with changed content is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from deploy import discovery
from deploy.clusterinfo import cluster_info_kubeconfig
from services.auth import bootstraptoken as bt
from services.runtime import pki

TOKEN_ID, SECRET = "abcdef", "0123456789abcdef"


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    pki.create_ca("discovery-ca").write(tmp_path / "ca.crt", tmp_path / "ca.key")
    return tmp_path / "ca.crt"


def test_ca_hash_is_the_sha256_of_the_public_key_as_openssl_computes_it(ca_file: Path) -> None:
    der = subprocess.run(["openssl", "x509", "-pubkey", "-noout", "-in", str(ca_file)], capture_output=True,
                         check=True).stdout
    spki = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=der, capture_output=True,
                          check=True).stdout
    digest = subprocess.run(["openssl", "dgst", "-sha256", "-hex"], input=spki, capture_output=True,
                            check=True).stdout.decode().split()[-1]
    assert discovery.ca_cert_hash(x509.load_pem_x509_certificate(ca_file.read_bytes())) == f"sha256:{digest}"


def _config_map(content: str, signature: str | None) -> dict:
    data = {bt.KUBECONFIG_KEY: content}
    if signature is not None:
        data[bt.JWS_PREFIX + TOKEN_ID] = signature
    return {"data": data}


def test_signed_cluster_info_yields_server_and_ca(ca_file: Path) -> None:
    content = cluster_info_kubeconfig("https://10.0.0.1:6443", ca_file)
    _, info = discovery._parse(_config_map(content, bt.detached_jws(content, TOKEN_ID, SECRET)), TOKEN_ID, SECRET)
    assert info.server == "https://10.0.0.1:6443" and info.ca_pem == ca_file.read_bytes()


def test_unsigned_forged_or_altered_cluster_info_is_refused(ca_file: Path) -> None:
    content = cluster_info_kubeconfig("https://10.0.0.1:6443", ca_file)
    with pytest.raises(discovery.NotYet, match="token id 'abcdef' is invalid"):
        discovery._parse(_config_map(content, None), TOKEN_ID, SECRET)
    with pytest.raises(discovery.DiscoveryError, match="failed to verify JWS signature"):
        discovery._parse(_config_map(content, bt.detached_jws(content, TOKEN_ID, "x" * 16)), TOKEN_ID, SECRET)
    altered = yaml.safe_load(content)
    altered["clusters"][0]["cluster"]["server"] = "https://evil:6443"
    with pytest.raises(discovery.DiscoveryError, match="failed to verify JWS signature"):
        discovery._parse(_config_map(yaml.safe_dump(altered), bt.detached_jws(content, TOKEN_ID, SECRET)),
                         TOKEN_ID, SECRET)
