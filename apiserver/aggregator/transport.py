"""How this apiserver talks to extension apiservers: TLS verified against the APIService's caBundle
(for the name `<service>.<namespace>.svc`) or not at all with insecureSkipTLSVerify, presenting the
front-proxy client certificate (--proxy-client-cert-file/--proxy-client-key-file); one pooled HTTP
client per distinct TLS setting."""

from __future__ import annotations

import base64
import binascii
import ssl
from dataclasses import dataclass, field
from typing import Any

import httpx

Obj = dict[str, Any]


@dataclass
class ProxyClientConfig:
    cert_file: str = ""
    key_file: str = ""
    connect_timeout: float = 30.0
    _clients: dict[tuple[bool, str], httpx.AsyncClient] = field(default_factory=dict, init=False, repr=False)

    def _context(self, skip_verify: bool, ca_bundle: str) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            try:
                pem = base64.b64decode(ca_bundle, validate=True).decode() if ca_bundle else ""
            except (binascii.Error, UnicodeDecodeError):
                pem = ""
            if pem:
                ctx.load_verify_locations(cadata=pem)
            else:
                ctx.load_default_certs()
        if self.cert_file and self.key_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def client(self, apiservice: Obj) -> httpx.AsyncClient:
        """The pooled client for this APIService's TLS setting (a new caBundle gets a new client)."""
        spec = apiservice.get("spec") or {}
        key = (bool(spec.get("insecureSkipTLSVerify")), str(spec.get("caBundle") or ""))
        found = self._clients.get(key)
        if found is None:
            timeout = httpx.Timeout(self.connect_timeout, read=None)
            found = httpx.AsyncClient(verify=self._context(*key), timeout=timeout,
                                      limits=httpx.Limits(max_keepalive_connections=20))
            self._clients[key] = found
        return found

    async def close(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


def server_name(apiservice: Obj) -> str:
    """The name an extension apiserver's certificate must carry, as upstream verifies it."""
    service = (apiservice.get("spec") or {}).get("service") or {}
    return f"{service.get('name')}.{service.get('namespace')}.svc"
