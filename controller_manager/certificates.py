"""What the certificate controllers (csrsigning, csrapproving, csrcleaner) share: the CSR resource, its
conditions, its parsed request, and upstream's checks of what a kubelet client or serving CSR may ask for.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from services.client import gvr

Obj = dict[str, Any]

CSRS = gvr("certificates.k8s.io/v1", "certificatesigningrequests", namespaced=False)
KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
KUBE_APISERVER_CLIENT_KUBELET = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
NODE_USER_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
APPROVED, DENIED, FAILED = "Approved", "Denied", "Failed"

#: the usages a kubelet may ask for: with key encipherment (RSA keys) or without (ECDSA)
_KUBELET_CLIENT_USAGES = ({"digital signature", "key encipherment", "client auth"},
                          {"digital signature", "client auth"})
_KUBELET_SERVING_USAGES = ({"digital signature", "key encipherment", "server auth"},
                           {"digital signature", "server auth"})
_KUBE_APISERVER_CLIENT_USAGES = {"digital signature", "key encipherment", "client auth"}


def condition(csr: Obj, ctype: str) -> Obj | None:
    for cond in (csr.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == ctype:
            return cond
    return None


def has_condition(csr: Obj, ctype: str) -> bool:
    cond = condition(csr, ctype)
    return cond is not None and cond.get("status", "True") == "True"


def certificate(csr: Obj) -> bytes:
    value = (csr.get("status") or {}).get("certificate") or ""
    try:
        return base64.b64decode(value)
    except (binascii.Error, ValueError):
        return b""


def parse_request(csr: Obj) -> x509.CertificateSigningRequest:
    """The x509 request of a CSR; ValueError when it does not parse."""
    try:
        pem = base64.b64decode((csr.get("spec") or {}).get("request") or "")
    except (binascii.Error, ValueError) as exc:
        raise ValueError(str(exc)) from None
    return x509.load_pem_x509_csr(pem)


def usages(csr: Obj) -> set[str]:
    return set((csr.get("spec") or {}).get("usages") or [])


def common_name(req: x509.CertificateSigningRequest) -> str:
    names = req.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _organizations(req: x509.CertificateSigningRequest) -> list[str]:
    return [str(a.value) for a in req.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


def _sans(req: x509.CertificateSigningRequest) -> x509.SubjectAlternativeName | None:
    try:
        return req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None


def _san_count(sans: x509.SubjectAlternativeName | None, kind: type[x509.GeneralName]) -> int:
    return len(sans.get_values_for_type(kind)) if sans is not None else 0  # type: ignore[arg-type]


def kubelet_client_error(req: x509.CertificateSigningRequest, wanted: set[str]) -> str:
    """Upstream's ValidateKubeletClientCSR: "" when the request is a proper node client request."""
    if _organizations(req) != [NODES_GROUP]:
        return "subject organization is not system:nodes"
    sans = _sans(req)
    for kind, label in ((x509.DNSName, "DNS"), (x509.RFC822Name, "Email"), (x509.IPAddress, "IP"),
                        (x509.UniformResourceIdentifier, "URI")):
        if _san_count(sans, kind):
            return f"{label} subjectAltNames are not allowed"
    if not common_name(req).startswith(NODE_USER_PREFIX):
        return "subject common name does not begin with system:node:"
    if wanted not in _KUBELET_CLIENT_USAGES:
        return f"usages did not match {sorted(_KUBELET_CLIENT_USAGES[0])}"
    return ""


def kubelet_serving_error(req: x509.CertificateSigningRequest, wanted: set[str]) -> str:
    """Upstream's ValidateKubeletServingCSR: DNS or IP names only, a node's name, server auth."""
    if _organizations(req) != [NODES_GROUP]:
        return "subject organization is not system:nodes"
    sans = _sans(req)
    if not _san_count(sans, x509.DNSName) and not _san_count(sans, x509.IPAddress):
        return "DNS or IP subjectAltName is required"
    if _san_count(sans, x509.RFC822Name):
        return "Email subjectAltNames are not allowed"
    if _san_count(sans, x509.UniformResourceIdentifier):
        return "URI subjectAltNames are not allowed"
    if wanted not in _KUBELET_SERVING_USAGES:
        return f"usages did not match {sorted(_KUBELET_SERVING_USAGES[0])}"
    if not common_name(req).startswith(NODE_USER_PREFIX):
        return "subject common name does not begin with system:node:"
    return ""


def kube_apiserver_client_error(req: x509.CertificateSigningRequest, wanted: set[str]) -> str:
    """Any subject, client usages only."""
    for usage in sorted(wanted):
        if usage not in _KUBE_APISERVER_CLIENT_USAGES:
            return f"invalid usage for client certificate: {usage}"
    return ""


def is_node_client(csr: Obj, req: x509.CertificateSigningRequest) -> bool:
    """A kubelet's client certificate request (what csrapproving may approve)."""
    return (csr.get("spec") or {}).get("signerName") == KUBE_APISERVER_CLIENT_KUBELET and not kubelet_client_error(
        req, usages(csr))
