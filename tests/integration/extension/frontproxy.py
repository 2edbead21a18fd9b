"""The front-proxy PKI and apiserver flags of the aggregation tests, as kubeadm lays them out."""

from __future__ import annotations

from pathlib import Path

from services.runtime import pki


def front_proxy_flags(root: Path) -> list[str]:
    """A front-proxy CA and client certificate under `root`, and the apiserver flags that use them."""
    ca = pki.create_ca("front-proxy-ca")
    ca.write(root / "front-proxy-ca.crt", root / "front-proxy-ca.key")
    pki.issue_client_cert(ca, "front-proxy-client").write(root / "front-proxy-client.crt",
                                                          root / "front-proxy-client.key")
    return [f"--requestheader-client-ca-file={root / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            f"--proxy-client-cert-file={root / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={root / 'front-proxy-client.key'}"]
