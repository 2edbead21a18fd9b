"""Request-header authentication, as upstream's extension apiservers do it: a request that carries a
client certificate issued by the front proxy's CA (--requestheader-client-ca-file), with a common name
among the allowed names (any when none are listed), is from the user its X-Remote-User, X-Remote-Group
and X-Remote-Extra-<key> headers name. The settings come from the apiserver's
`kube-system/extension-apiserver-authentication` ConfigMap."""

from __future__ import annotations

import ssl
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import orjson
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import NameOID

from services.auth.identity import UserInfo

CONFIGMAP_NAMESPACE, CONFIGMAP_NAME = "kube-system", "extension-apiserver-authentication"


def _list(data: dict[str, str], key: str) -> list[str]:
    try:
        value = orjson.loads(data.get(key) or "[]")
    except orjson.JSONDecodeError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def _certificates(pem: str) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem.encode()) if pem.strip() else []


@dataclass
class RequestHeaderConfig:
    ca_pem: str = ""
    client_ca_pem: str = ""
    allowed_names: list[str] = field(default_factory=list)
    username_headers: list[str] = field(default_factory=list)
    group_headers: list[str] = field(default_factory=list)
    extra_prefixes: list[str] = field(default_factory=list)

    @classmethod
    def from_configmap(cls, data: dict[str, str]) -> RequestHeaderConfig:
        return cls(ca_pem=data.get("requestheader-client-ca-file", ""), client_ca_pem=data.get("client-ca-file", ""),
                   allowed_names=_list(data, "requestheader-allowed-names"),
                   username_headers=_list(data, "requestheader-username-headers"),
                   group_headers=_list(data, "requestheader-group-headers"),
                   extra_prefixes=_list(data, "requestheader-extra-headers-prefix"))

    def server_context(self, cert_file: str, key_file: str) -> ssl.SSLContext:
        """A serving TLS context that asks for (but does not require) certificates of either CA."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert_file, key_file)
        bundle = "\n".join(p for p in (self.ca_pem, self.client_ca_pem) if p.strip())
        if bundle:
            ctx.load_verify_locations(cadata=bundle)
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx


class RequestHeaderAuthenticator:
    def __init__(self, config: RequestHeaderConfig) -> None:
        self.config = config
        self._cas = _certificates(config.ca_pem)

    def _front_proxy(self, der: bytes | None) -> bool:
        """Whether the TLS layer's verified peer certificate was issued by the front proxy's CA."""
        if not der or not self._cas:
            return False
        cert = x509.load_der_x509_certificate(der)
        issued = False
        for ca in self._cas:
            try:
                cert.verify_directly_issued_by(ca)
                issued = True
                break
            except (InvalidSignature, ValueError, TypeError):
                continue
        if not issued:
            return False
        if not self.config.allowed_names:
            return True
        names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        return any(n in self.config.allowed_names for n in names)

    def authenticate(self, der: bytes | None, headers: list[tuple[str, str]]) -> UserInfo | None:
        """The user the front proxy names, or None when the request did not come through it."""
        if not self._front_proxy(der):
            return None
        lower = [(k.lower(), v) for k, v in headers]
        user_headers = [h.lower() for h in self.config.username_headers]
        name = next((v for k, v in lower if k in user_headers and v), "")
        if not name:
            return None
        group_headers = [h.lower() for h in self.config.group_headers]
        groups = tuple(v for k, v in lower if k in group_headers)
        extra: dict[str, list[str]] = {}
        for prefix in (p.lower() for p in self.config.extra_prefixes):
            for k, v in lower:
                if k.startswith(prefix) and len(k) > len(prefix):
                    extra.setdefault(urllib.parse.unquote(k[len(prefix):]), []).append(v)
        return UserInfo(name, "", groups, extra)


def peer_der(transport: Any) -> bytes | None:
    """The DER of the connection's verified client certificate, from an asyncio transport."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    return ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
