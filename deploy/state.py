"""The state directory of a local cluster and the settings that must survive `down` + `up`."""

from __future__ import annotations

import hashlib
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from deploy.bootstrap import PkiDir

DEFAULT_PORT = 6443
PROXY_MODES = ("iptables", "nftables")


@dataclass
class Settings:
    """Choices that must survive `down` + `up`: ports baked into etcd's member data, the API URL, the nodes."""

    port: int = DEFAULT_PORT
    etcd_servers: list[str] = field(default_factory=list)
    etcd_client_port: int = 0
    etcd_peer_port: int = 0
    #: TLS of --etcd-servers (files given to `up`); empty: the local etcd's own PKI
    etcd_cafile: str = ""
    etcd_certfile: str = ""
    etcd_keyfile: str = ""
    #: an EncryptionConfiguration given to `up`; empty: the one `up` keeps in the PKI
    encryption_provider_config: str = ""
    #: Health/metrics ports of the components that serve one, picked once like etcd's.
    component_ports: dict[str, int] = field(default_factory=dict)
    #: Real nodes (a netns, containerd, kubelet and kube-proxy each) and simulated ones.
    nodes: int = 1
    hollow_nodes: int = 0
    proxy_mode: str = "iptables"
    #: Addresses pyk8s-service-lb gives LoadBalancer Services; empty: the nodes' own.
    service_lb_pool: str = ""
    #: The L2 segment joining the node namespaces (a /24 on a bridge of ours), picked once.
    node_subnet: str = ""
    #: Where the cluster DNS server listens on the host side of that segment.
    dns_port: int = 0
    #: Where the image registry (every node's registry mirror) listens on the host side of that segment.
    registry_port: int = 0


@dataclass(frozen=True)
class State:
    """The state directory: PKI, logs, pid files, etcd data, kubeconfig, node data and settings."""

    root: Path
    settings: Settings

    @classmethod
    def load(cls, root: Path) -> State:
        root = root.resolve()
        try:
            raw = orjson.loads((root / "cluster.json").read_bytes())
        except FileNotFoundError:
            raw = {}
        known = Settings.__dataclass_fields__
        return cls(root, Settings(**{k: v for k, v in raw.items() if k in known}))

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "cluster.json").write_bytes(orjson.dumps(asdict(self.settings), option=orjson.OPT_INDENT_2))

    @property
    def cluster_id(self) -> str:
        """Six hex digits of the state dir's path: makes host-wide names (netns, links) unique per cluster."""
        return hashlib.sha256(str(self.root).encode()).hexdigest()[:6]

    @property
    def pki(self) -> PkiDir:
        return PkiDir(self.root / "pki")

    @property
    def kubeconfig(self) -> Path:
        """The admin's, the only system:masters one."""
        return self.root / "kubeconfig"

    def component_kubeconfig(self, name: str) -> Path:
        """A component's own kubeconfig, as kubeadm's scheduler.conf or kubelet.conf."""
        return self.root / "kubeconfigs" / f"{name}.conf"

    def log_file(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def pid_file(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"

    def restarts_file(self, name: str) -> Path:
        """How often the supervisor restarted `name`."""
        return self.root / "run" / f"{name}.restarts"

    @property
    def external_etcd(self) -> bool:
        return bool(self.settings.etcd_servers)

    @property
    def etcd_servers(self) -> list[str]:
        return self.settings.etcd_servers or [f"https://127.0.0.1:{self.settings.etcd_client_port}"]

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.settings.port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False
