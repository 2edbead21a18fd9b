"""One machine of a pyk8s cluster run by systemd, as `pyk8s init` and `pyk8s join` lay it out: settings
in `<config-dir>` (default /etc/pyk8s: the PKI as kubeadm's, kubeconfigs, one `<unit>.env` per unit and
containerd's config), state in /var/lib/pyk8s, sockets in /run/pyk8s. The units in deploy/systemd name
these paths; the env files carry what differs between machines (names, addresses, etcd members)."""

from __future__ import annotations

import base64
import ipaddress
import shlex
from dataclasses import dataclass
from pathlib import Path

from deploy.bootstrap import PkiDir
from deploy.nodes import containerd_config
from services.runtime import pki

CONFIG_DIR = Path("/etc/pyk8s")
STATE_DIR = Path("/var/lib/pyk8s")
RUN_DIR = Path("/run/pyk8s")
API_PORT = 6443
CONTROL_PLANE_UNITS = ("pyk8s-etcd", "pyk8s-apiserver", "pyk8s-controller-manager", "pyk8s-scheduler",
                       "pyk8s-dns")
NODE_UNITS = ("pyk8s-containerd", "pyk8s-kubelet", "pyk8s-proxy", "pyk8s-noderoutes")


@dataclass(frozen=True)
class Layout:
    config_dir: Path = CONFIG_DIR
    pki_root: Path | None = None
    state_dir: Path = STATE_DIR
    run_dir: Path = RUN_DIR

    @property
    def pki(self) -> PkiDir:
        return PkiDir(self.pki_root or self.config_dir / "pki")

    def kubeconfig(self, name: str) -> Path:
        return self.config_dir / f"{name}.conf"

    @property
    def bootstrap_kubeconfig(self) -> Path:
        return self.kubeconfig("bootstrap-kubelet")

    def env(self, unit: str) -> Path:
        return self.config_dir / f"{unit.removeprefix('pyk8s-')}.env"

    @property
    def containerd_config(self) -> Path:
        return self.config_dir / "containerd.toml"

    @property
    def containerd_socket(self) -> Path:
        return self.run_dir / "containerd" / "containerd.sock"


def env_text(values: dict[str, list[str]]) -> str:
    """systemd's EnvironmentFile syntax: one `NAME="word word"` per line; the unit splits `$NAME` into words."""
    lines = ["# written by pyk8s; set EXTRA_ARGS for flags of your own"]
    for name, words in values.items():
        for word in words:
            if any(c.isspace() or c in "\"'\\$" for c in word):
                raise ValueError(f"{name}: {word!r} cannot be passed through an EnvironmentFile word")
        lines.append(f'{name}="{" ".join(words)}"')
    return "\n".join(lines) + "\n"


def write_env(layout: Layout, unit: str, args: list[str]) -> Path:
    """`<unit>.env` with ARGS, keeping the EXTRA_ARGS an operator set in an earlier one."""
    path = layout.env(unit)
    extra: list[str] = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("EXTRA_ARGS="):
                extra = " ".join(shlex.split(line.partition("=")[2])).split()
    pki.write_file(path, env_text({"ARGS": args, "EXTRA_ARGS": extra}).encode(), 0o644)
    return path


def write_containerd_config(layout: Layout) -> Path:
    """containerd for the node: its own root, state and socket, the CNI conf dir the kubelet writes."""
    root, state = layout.state_dir / "containerd", layout.run_dir / "containerd"
    text = containerd_config(root, state, layout.containerd_socket, layout.config_dir / "cni",
                             layout.config_dir / "containerd" / "certs.d")
    pki.write_file(layout.containerd_config, text.encode(), 0o644)
    return layout.containerd_config


def node_env(layout: Layout, name: str, ip: str, proxy_kubeconfig: Path, cluster_cidr: str,
             dns_ip: str, kubelet_args: tuple[str, ...] = ()) -> list[Path]:
    """The env files of a node's units: containerd, the kubelet, kube-proxy and the route agent."""
    return [
        write_env(layout, "pyk8s-containerd", []),
        write_env(layout, "pyk8s-kubelet", [f"--hostname-override={name}", f"--node-ip={ip}",
                                            f"--cluster-dns={dns_ip}", f"--non-masquerade-cidr={cluster_cidr}",
                                            *kubelet_args]),
        write_env(layout, "pyk8s-proxy", [f"--kubeconfig={proxy_kubeconfig}", f"--hostname-override={name}",
                                          f"--cluster-cidr={cluster_cidr}"]),
        write_env(layout, "pyk8s-noderoutes", [f"--node-name={name}"]),
    ]


def bootstrap_kubeconfig(server: str, ca_pem: bytes, token: str) -> dict:
    """The kubelet's bootstrap credentials, as kubeadm's bootstrap-kubelet.conf."""
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "kubernetes", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "contexts": [{"name": "tls-bootstrap-token-user@kubernetes",
                      "context": {"cluster": "kubernetes", "user": "tls-bootstrap-token-user"}}],
        "current-context": "tls-bootstrap-token-user@kubernetes",
        "users": [{"name": "tls-bootstrap-token-user", "user": {"token": token}}],
        "preferences": {},
    }


def dns_ip(service_cidr: str) -> str:
    """The cluster DNS Service's address: the tenth of the service range, as kubeadm picks it."""
    return str(ipaddress.ip_network(service_cidr)[10])


def systemd_booted() -> bool:
    """sd_booted(): systemd is PID 1 here, so units can be started with systemctl."""
    return Path("/run/systemd/system").is_dir()
