"""The node's CNI network: a bridge with host-local IPAM over the node's pod CIDR, plus portmap
for hostPorts. containerd watches the conf dir and picks the file up."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

CONF_NAME = "10-pyk8s.conflist"


def default_pod_cidr(node_name: str) -> str:
    """A stable per-node /24 in 10.244.0.0/16 for nodes without spec.podCIDR."""
    digest = hashlib.sha256(node_name.encode()).digest()
    return f"10.244.{digest[0]}.0/24"


def conflist(pod_cidr: str, bridge: str = "cni0") -> dict[str, object]:
    return {
        "cniVersion": "0.4.0",
        "name": "pyk8s",
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def write_conf(conf_dir: str, pod_cidr: str) -> Path:
    """Write the conflist atomically (containerd may read it at any moment); returns its path."""
    path = Path(conf_dir) / CONF_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(conflist(pod_cidr), indent=2)
    if path.exists() and path.read_text() == text:
        return path
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
