"""The node's CNI network: a bridge with host-local IPAM over the node's pod CIDR, plus portmap
for hostPorts. containerd watches the conf dir and picks the file up.

The bridge does not masquerade (that would hide pod IPs from pods on other nodes); instead one nat
rule masquerades only what leaves the non-masquerade range (the cluster's addresses), as upstream's
kubelet did with --non-masquerade-cidr.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path

CONF_NAME = "10-pyk8s.conflist"
MASQ_CHAIN = "PYK8S-MASQUERADE"
DEFAULT_NON_MASQUERADE_CIDR = "10.0.0.0/8"


def default_pod_cidr(node_name: str) -> str:
    """A stable per-node /24 in 10.244.0.0/16 for nodes without spec.podCIDR."""
    digest = hashlib.sha256(node_name.encode()).digest()
    return f"10.244.{digest[0]}.0/24"


def conflist(pod_cidr: str, bridge: str = "cni0", data_dir: str = "") -> dict[str, object]:
    ipam: dict[str, object] = {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]],
                               "routes": [{"dst": "0.0.0.0/0"}]}
    if data_dir:
        ipam["dataDir"] = data_dir
    return {
        "cniVersion": "0.4.0",
        "name": "pyk8s",
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": ipam},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def write_conf(conf_dir: str, pod_cidr: str, data_dir: str = "") -> Path:
    """Write the conflist atomically (containerd may read it at any moment); returns its path."""
    path = Path(conf_dir) / CONF_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(conflist(pod_cidr, data_dir=data_dir), indent=2)
    if path.exists() and path.read_text() == text:
        return path
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def masquerade_rules(pod_cidr: str, non_masquerade_cidr: str) -> str:
    """iptables-restore input (--noflush) that rewrites only our chain: pods keep their IPs inside the range."""
    return (f"*nat\n:{MASQ_CHAIN} - [0:0]\n"
            f"-A {MASQ_CHAIN} -s {pod_cidr} -d {non_masquerade_cidr} -j RETURN\n"
            f"-A {MASQ_CHAIN} -s {pod_cidr} -j MASQUERADE\n"
            "COMMIT\n")


async def _run(argv: list[str], stdin: bytes | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate(stdin)
    return proc.returncode or 0, out.decode(errors="replace").strip()


async def ensure_masquerade(pod_cidr: str, non_masquerade_cidr: str, netns: str | None = None) -> None:
    """Install the masquerade chain and its jump from POSTROUTING, in the node's namespace when given."""
    prefix = ["nsenter", f"--net={netns}"] if netns else []
    code, out = await _run([*prefix, "iptables-restore", "--noflush"],
                           masquerade_rules(pod_cidr, non_masquerade_cidr).encode())
    if code != 0:
        raise OSError(f"iptables-restore: {out}")
    jump = ["-t", "nat", "POSTROUTING", "-m", "comment", "--comment", "pyk8s pod masquerade", "-j", MASQ_CHAIN]
    code, _ = await _run([*prefix, "iptables", "-w", jump[0], jump[1], "-C", *jump[2:]])
    if code != 0:
        code, out = await _run([*prefix, "iptables", "-w", jump[0], jump[1], "-A", *jump[2:]])
        if code != 0:
            raise OSError(f"iptables: {out}")
