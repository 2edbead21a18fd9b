"""PKI: certs verify against their CA, carry the right names, and work in a real mutual-TLS handshake."""

import asyncio
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from deploy.bootstrap import PkiDir, ensure_pki
from deploy.processes import _apiserver_argv
from deploy.state import Settings, State
from services.runtime import pki


@pytest.fixture(scope="module")
def ca() -> pki.CertKey:
    return pki.create_ca("test-ca")


def test_ca_is_a_self_signed_ca(ca: pki.CertKey) -> None:
    assert ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ca.cert.verify_directly_issued_by(ca.cert)


def test_serving_cert_has_dns_and_ip_sans(ca: pki.CertKey) -> None:
    leaf = pki.issue_serving_cert(ca, ["localhost", "127.0.0.1", "api.example", "::1", "localhost"])
    leaf.cert.verify_directly_issued_by(ca.cert)
    san = leaf.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "api.example"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    eku = leaf.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not leaf.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_serving_cert_needs_a_host(ca: pki.CertKey) -> None:
    with pytest.raises(ValueError):
        pki.issue_serving_cert(ca, [])


def test_client_cert_carries_user_and_groups(ca: pki.CertKey) -> None:
    leaf = pki.issue_client_cert(ca, "alice", ["system:masters", "devs"])
    leaf.cert.verify_directly_issued_by(ca.cert)
    subject = leaf.cert.subject
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == ["alice"]
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters",
        "devs",
    ]
    eku = leaf.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_write_and_load_round_trip_with_private_key_mode(tmp_path: Path, ca: pki.CertKey) -> None:
    leaf = pki.issue_client_cert(ca, "bob")
    leaf.write(tmp_path / "sub" / "bob.crt", tmp_path / "sub" / "bob.key")
    assert stat.S_IMODE((tmp_path / "sub" / "bob.key").stat().st_mode) == 0o600
    loaded = pki.CertKey.load(tmp_path / "sub" / "bob.crt", tmp_path / "sub" / "bob.key")
    assert loaded.cert == leaf.cert
    assert loaded.key_pem() == leaf.key_pem()


def test_load_rejects_a_key_of_another_cert(tmp_path: Path, ca: pki.CertKey) -> None:
    a, b = pki.issue_client_cert(ca, "a"), pki.issue_client_cert(ca, "b")
    a.write(tmp_path / "a.crt", tmp_path / "a.key")
    b.write(tmp_path / "b.crt", tmp_path / "b.key")
    with pytest.raises(ValueError):
        pki.CertKey.load(tmp_path / "a.crt", tmp_path / "b.key")


def test_load_or_create_ca_reuses(tmp_path: Path) -> None:
    first = pki.load_or_create_ca(tmp_path / "ca.crt", tmp_path / "ca.key")
    second = pki.load_or_create_ca(tmp_path / "ca.crt", tmp_path / "ca.key")
    assert first.cert == second.cert


def test_ensure_self_signed_generates_once(tmp_path: Path) -> None:
    cert_path, key_path = pki.ensure_self_signed(tmp_path / "certs", ["localhost", "127.0.0.1"])
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    chain = x509.load_pem_x509_certificates(cert_path.read_bytes())
    assert len(chain) == 2
    chain[0].verify_directly_issued_by(chain[1])
    before = cert_path.read_bytes(), key_path.read_bytes()
    assert pki.ensure_self_signed(tmp_path / "certs", ["localhost"]) == (cert_path, key_path)
    assert (cert_path.read_bytes(), key_path.read_bytes()) == before


def test_ensure_self_signed_replaces_a_broken_pair(tmp_path: Path) -> None:
    cert_path, key_path = pki.ensure_self_signed(tmp_path, ["localhost"])
    key_path.write_bytes(b"garbage")
    pki.ensure_self_signed(tmp_path, ["localhost"])
    pki.CertKey.load(cert_path, key_path)


async def test_mutual_tls_handshake(tmp_path: Path, ca: pki.CertKey) -> None:
    """The certs must satisfy OpenSSL's real verification: hostname, IP SAN, EKU, client auth."""
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem())
    pki.issue_serving_cert(ca, ["localhost", "127.0.0.1"]).write(tmp_path / "srv.crt", tmp_path / "srv.key")
    pki.issue_client_cert(ca, "admin", ["system:masters"]).write(tmp_path / "cli.crt", tmp_path / "cli.key")

    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tmp_path / "ca.crt")
    server_ctx.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    peers: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert")
        peers.append(dict(x[0] for x in peer["subject"])["commonName"])
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cafile=tmp_path / "ca.crt")
    client_ctx.load_cert_chain(tmp_path / "cli.crt", tmp_path / "cli.key")
    try:
        for host in ("127.0.0.1", "localhost"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname=host)
            writer.write(b"ping\n")
            assert await reader.readline() == b"ping\n"
            writer.close()
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="other.example")
    finally:
        server.close()
        await server.wait_closed()
    assert peers == ["admin", "admin"]


def test_each_cluster_pki_has_its_own_service_account_key(tmp_path: Path) -> None:
    """`pyk8s up` and `pyk8s pki` keep sa.key/sa.pub in the cluster's PKI; the apiserver is pointed at them."""
    keys = []
    for name in ("one", "two"):
        pki_dir = PkiDir(tmp_path / name / "pki")
        ensure_pki(pki_dir, ["127.0.0.1"])
        public, private = pki_dir.service_account
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
        key = serialization.load_pem_private_key(private.read_bytes(), password=None)
        assert serialization.load_pem_public_key(public.read_bytes()).public_numbers() == \
            key.public_key().public_numbers()
        ensure_pki(pki_dir, ["127.0.0.1"])
        assert serialization.load_pem_private_key(private.read_bytes(), password=None).private_numbers() == \
            key.private_numbers(), "a second `up` keeps the key, so issued tokens stay valid"
        keys.append(key.private_numbers())
        argv = _apiserver_argv(State(tmp_path / name, Settings(nodes=0, etcd_client_port=1,
                                                         component_ports={"scheduler": 1, "controller-manager": 2})))
        assert f"--service-account-signing-key-file={private}" in argv
        assert f"--service-account-key-file={public}" in argv
    assert keys[0] != keys[1]
