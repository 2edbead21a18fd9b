"""The certificate controllers' pure rules: what each built-in signer refuses, how long a certificate
lives, what the approver recognizes, and when the cleaner deletes a request."""

from __future__ import annotations

import base64
import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from controller_manager import certificates as certs
from controller_manager.controllers.csrcleaner import stale
from controller_manager.controllers.csrsigning import certificate_duration
from services.runtime import pki

NODE = ("system:node:n1", ["system:nodes"])


def request(cn: str, orgs: list[str], sans: list[x509.GeneralName] = ()) -> x509.CertificateSigningRequest:
    names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([*names, x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256())


@pytest.mark.parametrize(("req", "usages", "error"), [
    (request(*NODE), {"digital signature", "client auth"}, ""),
    (request(*NODE), {"digital signature", "key encipherment", "client auth"}, ""),
    (request("system:node:n1", ["evil"]), {"digital signature", "client auth"},
     "subject organization is not system:nodes"),
    (request("n1", ["system:nodes"]), {"digital signature", "client auth"},
     "subject common name does not begin with system:node:"),
    (request(*NODE, [x509.DNSName("n1")]), {"digital signature", "client auth"}, "DNS subjectAltNames are not allowed"),
    (request(*NODE), {"digital signature", "server auth"},
     "usages did not match ['client auth', 'digital signature', 'key encipherment']"),
])
def test_kubelet_client(req: x509.CertificateSigningRequest, usages: set[str], error: str) -> None:
    assert certs.kubelet_client_error(req, usages) == error


@pytest.mark.parametrize(("req", "usages", "error"), [
    (request(*NODE, [x509.DNSName("n1"), x509.IPAddress(ipaddress.ip_address("10.0.0.1"))]),
     {"digital signature", "server auth"}, ""),
    (request(*NODE), {"digital signature", "server auth"}, "DNS or IP subjectAltName is required"),
    (request(*NODE, [x509.DNSName("n1"), x509.RFC822Name("a@b.c")]), {"digital signature", "server auth"},
     "Email subjectAltNames are not allowed"),
    (request("n1", ["system:nodes"], [x509.DNSName("n1")]), {"digital signature", "server auth"},
     "subject common name does not begin with system:node:"),
    (request(*NODE, [x509.DNSName("n1")]), {"digital signature", "client auth"},
     "usages did not match ['digital signature', 'key encipherment', 'server auth']"),
])
def test_kubelet_serving(req: x509.CertificateSigningRequest, usages: set[str], error: str) -> None:
    assert certs.kubelet_serving_error(req, usages) == error


def test_kube_apiserver_client_takes_any_subject_but_only_client_usages() -> None:
    assert certs.kube_apiserver_client_error(request("anyone", ["any"]), {"client auth", "digital signature"}) == ""
    assert certs.kube_apiserver_client_error(request("anyone", []), {"client auth", "server auth"}) == (
        "invalid usage for client certificate: server auth")


def test_duration_honours_expiration_seconds_within_bounds() -> None:
    year = datetime.timedelta(hours=8760)
    assert certificate_duration(year, None) == year
    assert certificate_duration(year, 3600) == datetime.timedelta(hours=1)
    assert certificate_duration(year, 60) == datetime.timedelta(minutes=10)
    assert certificate_duration(datetime.timedelta(hours=1), 7200) == datetime.timedelta(hours=1)


def test_signed_certificate_carries_subject_sans_and_usages() -> None:
    ca = pki.create_ca("t")
    req = request(*NODE, [x509.DNSName("n1")])
    cert = pki.sign_request(ca, req, ["digital signature", "server auth"], datetime.timedelta(hours=2))
    cert.verify_directly_issued_by(ca.cert)
    assert cert.subject == req.subject
    assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == ["n1"]
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == datetime.timedelta(hours=2, minutes=5)


def test_node_client_recognized_only_for_the_kubelet_client_signer() -> None:
    req = request(*NODE)
    csr = {"spec": {"signerName": certs.KUBE_APISERVER_CLIENT_KUBELET, "usages": ["digital signature", "client auth"]}}
    assert certs.is_node_client(csr, req)
    assert not certs.is_node_client({"spec": {**csr["spec"], "signerName": certs.KUBE_APISERVER_CLIENT}}, req)


def _ts(delta: datetime.timedelta) -> str:
    return (datetime.datetime.now(datetime.UTC) - delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_cleaner_rules() -> None:
    now = datetime.datetime.now(datetime.UTC)
    hour, day = datetime.timedelta(hours=1, minutes=1), datetime.timedelta(hours=24, minutes=1)
    pending = {"metadata": {"creationTimestamp": _ts(hour)}}
    assert not stale(pending, now)
    assert stale({"metadata": {"creationTimestamp": _ts(day)}}, now)
    for ctype in ("Approved", "Denied", "Failed"):
        assert stale({**pending, "status": {"conditions": [{"type": ctype, "lastUpdateTime": _ts(hour)}]}}, now)
        assert not stale({**pending, "status": {"conditions": [{"type": ctype, "lastUpdateTime": _ts(
            datetime.timedelta(minutes=5))}]}}, now)
    ca = pki.create_ca("t")
    short = pki.sign_request(ca, request(*NODE), ["client auth"], datetime.timedelta(minutes=10))
    pem = base64.b64encode(short.public_bytes(serialization.Encoding.PEM)).decode()
    fresh = {"metadata": {"creationTimestamp": _ts(datetime.timedelta(0))},
             "status": {"certificate": pem, "conditions": [{"type": "Approved", "lastUpdateTime": _ts(
                 datetime.timedelta(0))}]}}
    assert not stale(fresh, now)
    assert stale(fresh, now + datetime.timedelta(minutes=11))
