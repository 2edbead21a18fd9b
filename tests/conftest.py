"""Shared fixtures: a real etcd and a real apiserver process per test session."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.bootstrap import PkiDir, ensure_etcd_pki
from services.client.errors import NotFound
from services.runtime.pki import load_or_create_service_account_key

REPO = Path(__file__).resolve().parent.parent
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


async def eventually(fn: Callable[[], Awaitable[Any]], limit: float = 30.0, interval: float = 0.2,
                     what: str = "") -> Any:
    """The first truthy value `fn` returns within `limit` seconds (NotFound counts as not yet)."""
    deadline = asyncio.get_running_loop().time() + limit
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        try:
            last = await fn()
        except NotFound:
            last = None
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out{' waiting for ' + what if what else ''}; last value: {last!r}")


def hollow_kubelet_args(kubeconfig: Path, prefix: str, count: int = 1, *extra: str) -> list[str]:
    """The command line of a kubelet process running `count` hollow nodes named `<prefix>-<i>`."""
    return [sys.executable, "-m", "kubelet_agent", "--kubeconfig", str(kubeconfig), "--hollow-nodes", str(count),
            "--hostname-override", prefix, "--healthz-port", "0", "--log-format", "console", *extra]


@contextlib.contextmanager
def hollow_kubelet_process(kubeconfig: Path, log_path: Path, prefix: str, count: int = 1,
                           *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    """Hollow nodes for the duration of the block (the process logs to `log_path`); `extra` are more flags."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(hollow_kubelet_args(kubeconfig, prefix, count, *extra), cwd=REPO, stdout=log,
                                stderr=log)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(15)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def etcd_pki(directory: Path) -> PkiDir:
    """etcd's CA, member certs and client certs laid out as `pyk8s up` makes them (kubeadm's pki/etcd)."""
    pki = PkiDir(directory)
    ensure_etcd_pki(pki)
    return pki


def etcd_client_tls(pki: PkiDir, client: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """Trust etcd's CA and show a client cert it admits (the health check's unless told otherwise)."""
    ctx = ssl.create_default_context(cafile=pki.etcd("ca")[0])
    ctx.load_cert_chain(*(client or pki.etcd("healthcheck-client")))
    return ctx


def etcd_apiserver_flags(pki: PkiDir) -> list[str]:
    cert, key = pki.apiserver_etcd_client
    return [f"--etcd-cafile={pki.etcd('ca')[0]}", f"--etcd-certfile={cert}", f"--etcd-keyfile={key}"]


@dataclass
class Etcd:
    """One etcd member started for tests; with `tls` its clients and peers must show certs of its CA."""

    name: str
    client_url: str
    peer_url: str
    data_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    tls: PkiDir | None = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def start_etcd_cluster(size: int, workdir: Path, tls: PkiDir | None = None) -> list[Etcd]:
    """Start `size` etcd members on loopback and wait until the cluster answers; with `tls`, client and
    peer traffic is TLS with client certificates required (kubeadm's etcd flags)."""
    members = []
    scheme = "https" if tls is not None else "http"
    for i in range(size):
        members.append(Etcd(f"m{i}", f"{scheme}://127.0.0.1:{free_port()}", f"{scheme}://127.0.0.1:{free_port()}",
                            workdir / f"etcd-{i}", tls=tls))
    initial = ",".join(f"{m.name}={m.peer_url}" for m in members)
    for m in members:
        start_member(m, initial, "new")
    try:
        wait_etcd(members[0].client_url, tls=etcd_client_tls(tls) if tls is not None else None)
    except RuntimeError:
        for m in members:
            m.kill()
        raise
    return members


def _etcd_tls_flags(pki: PkiDir) -> list[str]:
    ca = str(pki.etcd("ca")[0])
    (server_cert, server_key), (peer_cert, peer_key) = pki.etcd("server"), pki.etcd("peer")
    return ["--cert-file", str(server_cert), "--key-file", str(server_key), "--client-cert-auth",
            "--trusted-ca-file", ca, "--peer-cert-file", str(peer_cert), "--peer-key-file", str(peer_key),
            "--peer-client-cert-auth", "--peer-trusted-ca-file", ca]


def start_member(m: Etcd, initial: str, state: str) -> None:
    m.data_dir.mkdir(parents=True, exist_ok=True)
    log = open(m.data_dir.with_suffix(".log"), "ab")  # noqa: SIM115 - handed to the child
    m.proc = subprocess.Popen(
        [ETCD, "--name", m.name, "--data-dir", str(m.data_dir),
         "--listen-client-urls", m.client_url, "--advertise-client-urls", m.client_url,
         "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
         "--initial-cluster", initial, "--initial-cluster-state", state,
         "--initial-cluster-token", "pyk8s-test", "--heartbeat-interval", "50", "--election-timeout", "500",
         "--quota-backend-bytes", str(4 * 1024**3), *(_etcd_tls_flags(m.tls) if m.tls is not None else ())],
        stdout=log, stderr=log, env={**os.environ, "ETCD_UNSUPPORTED_ARCH": "arm64"},
    )


def wait_etcd(url: str, timeout: float = 20, tls: ssl.SSLContext | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/health", timeout=1, verify=tls if tls is not None else True)
            if r.status_code == 200 and r.json().get("health") == "true":
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"etcd at {url} did not become healthy")


@dataclass
class APIServerProcess:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


#: One service-account signing key for every apiserver a session starts, as replicas of one cluster share it.
SESSION_SA_DIR = Path(tempfile.mkdtemp(prefix="pyk8s-test-sa-"))
atexit.register(shutil.rmtree, SESSION_SA_DIR, True)


def session_sa_key() -> Path:
    key = SESSION_SA_DIR / "sa.key"
    load_or_create_service_account_key(key, SESSION_SA_DIR / "sa.pub")
    return key


def start_apiserver(etcd_urls: list[str], workdir: Path, *extra: str, port: int | None = None) -> APIServerProcess:
    """Run `python -m apiserver` on plain HTTP (loopback) and wait for /readyz."""
    port = port or free_port()
    if not any(arg.startswith("--service-account-signing-key-file") for arg in extra):
        extra = (f"--service-account-signing-key-file={session_sa_key()}", *extra)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"apiserver-{port}.log"
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "apiserver", "--etcd-servers", ",".join(etcd_urls), "--secure-port", "0",
         "--insecure-port", str(port), *extra],
        cwd=REPO, stdout=log, stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    server = APIServerProcess(url, proc, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"apiserver exited:\n{server.log_tail()}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200 and proc.poll() is None:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"apiserver did not become ready:\n{server.log_tail()}")


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pyk8s-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def etcd_server(workdir: Path) -> Iterator[str]:
    """The client URL of a single-member etcd shared by the session."""
    members = start_etcd_cluster(1, workdir / "etcd-session")
    yield members[0].client_url
    for m in members:
        m.kill()


@pytest.fixture(scope="session")
def apiserver_process(etcd_server: str, workdir: Path) -> Iterator[APIServerProcess]:
    server = start_apiserver([etcd_server], workdir / "apiserver")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def apiserver(apiserver_process: APIServerProcess) -> str:
    """Base URL of the session's apiserver, e.g. http://127.0.0.1:PORT."""
    return apiserver_process.url


@pytest.fixture(scope="session")
def kubeconfig(apiserver: str, workdir: Path) -> Path:
    path = workdir / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": apiserver}}],
        "users": [{"name": "test", "user": {"token": "test"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }))
    return path


@dataclass
class Kubectl:
    kubeconfig: Path

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args], input=stdin, capture_output=True, text=True,
            timeout=timeout, env={**os.environ, "KUBECACHEDIR": str(self.kubeconfig.parent / "kubecache")},
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def json(self, *args: str) -> dict:
        return json.loads(self.run(*args, "-o", "json").stdout)


@pytest.fixture(scope="session")
def kubectl(kubeconfig: Path) -> Kubectl:
    return Kubectl(kubeconfig)


@pytest.fixture
def unique_ns(kubectl: Kubectl, request: pytest.FixtureRequest) -> str:
    """A fresh namespace for one test."""
    name = f"t-{request.node.name.lower().replace('_', '-')[:40].strip('-')}-{os.getpid() % 1000}"
    name = "".join(c for c in name if c.isalnum() or c == "-")[:60].strip("-")
    kubectl.run("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": name}}))
    return name

