"""What `pyk8s up` runs: the state directory and one ProcessSpec per component.

A component joins the local cluster by adding one entry to SPECS: how to launch it, where it answers
health checks, and which components must be ready first.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from deploy.bootstrap import CLUSTER_CIDR, SERVICE_CIDR, PkiDir

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PORT = 6443


@dataclass
class Settings:
    """Choices that must survive `down` + `up`: ports baked into etcd's member data and the API URL."""

    port: int = DEFAULT_PORT
    etcd_servers: list[str] = field(default_factory=list)
    etcd_client_port: int = 0
    etcd_peer_port: int = 0
    #: Health/metrics ports of the components that serve one, picked once like etcd's.
    component_ports: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class State:
    """The state directory: PKI, logs, pid files, etcd data, kubeconfig and settings."""

    root: Path
    settings: Settings

    @classmethod
    def load(cls, root: Path) -> State:
        root = root.resolve()
        try:
            settings = Settings(**orjson.loads((root / "cluster.json").read_bytes()))
        except FileNotFoundError:
            settings = Settings()
        return cls(root, settings)

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "cluster.json").write_bytes(orjson.dumps(asdict(self.settings), option=orjson.OPT_INDENT_2))

    @property
    def pki(self) -> PkiDir:
        return PkiDir(self.root / "pki")

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def log_file(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def pid_file(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"

    @property
    def external_etcd(self) -> bool:
        return bool(self.settings.etcd_servers)

    @property
    def etcd_servers(self) -> list[str]:
        return self.settings.etcd_servers or [f"http://127.0.0.1:{self.settings.etcd_client_port}"]

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.settings.port}"


@dataclass(frozen=True)
class ProcessSpec:
    """One component of the local cluster.

    `argv` is built from the state so every command line names the state directory, which is how a pid
    file is told apart from an unrelated process that reused the pid. `listens` lists the ports it
    binds, checked before anything starts so a clash fails fast instead of leaving half a cluster.
    """

    name: str
    argv: Callable[[State], list[str]]
    health_url: Callable[[State], str]
    needs: tuple[str, ...] = ()
    enabled: Callable[[State], bool] = lambda state: True
    listens: Callable[[State], tuple[int, ...]] = lambda state: ()
    ready_timeout: float = 30.0
    #: The component serves /healthz on a port of its own, picked on first `up` and kept.
    health_port: bool = False


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


def etcd_binary() -> str:
    found = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)
    if found is None:
        raise FileNotFoundError("etcd not found: run deploy/install.sh, or pass --etcd-servers")
    return found


def _etcd_argv(state: State) -> list[str]:
    """A single member; a restarted member waits one election timeout before it serves, so it is short."""
    client = f"http://127.0.0.1:{state.settings.etcd_client_port}"
    peer = f"http://127.0.0.1:{state.settings.etcd_peer_port}"
    return [
        etcd_binary(),
        "--name=pyk8s",
        f"--data-dir={state.root / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=pyk8s={peer}",
        "--heartbeat-interval=100",
        "--election-timeout=500",
        "--logger=zap",
    ]


def _python(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def _apiserver_argv(state: State) -> list[str]:
    cert, key = state.pki.apiserver
    return [
        *_python("apiserver"),
        f"--etcd-servers={','.join(state.etcd_servers)}",
        f"--secure-port={state.settings.port}",
        "--bind-address=127.0.0.1",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        f"--client-ca-file={state.pki.ca[0]}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    ]


def _health_port(state: State, name: str) -> int:
    return state.settings.component_ports[name]


def _component(module: str, name: str, *extra: str) -> Callable[[State], list[str]]:
    """argv of a component that talks to the apiserver with the admin kubeconfig."""

    def argv(state: State) -> list[str]:
        return [*_python(module), f"--kubeconfig={state.kubeconfig}", "--bind-address=127.0.0.1",
                f"--secure-port={_health_port(state, name)}", *extra]

    return argv


def _controller_manager_argv(state: State) -> list[str]:
    return [*_component("controller_manager", "controller-manager")(state), "--leader-elect=true",
            f"--root-ca-file={state.pki.ca[0]}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--cluster-cidr={CLUSTER_CIDR}", "--allocate-node-cidrs=true"]


SPECS: tuple[ProcessSpec, ...] = (
    ProcessSpec(
        name="etcd",
        argv=_etcd_argv,
        health_url=lambda state: f"{state.etcd_servers[0]}/health",
        enabled=lambda state: not state.external_etcd,
        listens=lambda state: (state.settings.etcd_client_port, state.settings.etcd_peer_port),
    ),
    ProcessSpec(
        name="apiserver",
        argv=_apiserver_argv,
        health_url=lambda state: f"{state.server}/readyz",
        needs=("etcd",),
        listens=lambda state: (state.settings.port,),
    ),
    ProcessSpec(
        name="controller-manager",
        argv=_controller_manager_argv,
        health_url=lambda state: f"http://127.0.0.1:{_health_port(state, 'controller-manager')}/healthz",
        needs=("apiserver",),
        listens=lambda state: (_health_port(state, "controller-manager"),),
        health_port=True,
    ),
)


def child_env() -> dict[str, str]:
    """Make our packages importable by `python -m` children even without `pip install -e`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env
