"""The `pyk8s` command end to end: real etcd, real apiserver, real kubectl, data surviving down + up."""

import asyncio
import base64
import os
import shutil
import socket
import stat
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import orjson
import pytest

from deploy.local import enabled_specs
from deploy.state import State

REQUIRED_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}
TIME_TO_READY_LIMIT = 20.0
COMMAND_TIMEOUT = 90.0


def pyk8s_command() -> list[str]:
    """The installed entry point when this Python has one (the README's .venv), else `python -m deploy`."""
    script = Path(sys.executable).parent / "pyk8s"
    return [str(script)] if script.exists() else [sys.executable, "-m", "deploy"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def run(*argv: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    async with asyncio.timeout(COMMAND_TIMEOUT):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def pyk8s(*argv: str) -> tuple[int, str, str]:
    return await run(*pyk8s_command(), *argv)


async def kubectl(state_dir: Path, *argv: str) -> str:
    kubectl_bin = shutil.which("kubectl") or "kubectl"
    code, out, err = await run(kubectl_bin, "--kubeconfig", str(state_dir / "kubeconfig"), *argv)
    assert code == 0, f"kubectl {' '.join(argv)} failed: {err}"
    return out


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.fixture
async def state_dir(tmp_path: Path) -> AsyncIterator[Path]:
    directory = tmp_path / "state"
    yield directory
    await pyk8s("down", "--state-dir", str(directory))


def process_names(state_dir: Path) -> list[str]:
    return [spec.name for spec in enabled_specs(State.load(state_dir))]


async def up(state_dir: Path, *extra: str) -> tuple[float, str]:
    """The control plane only: real nodes have tests of their own (test_cluster_up.py)."""
    started = time.monotonic()
    code, out, err = await pyk8s("up", "--state-dir", str(state_dir), "--no-nodes", *extra)
    elapsed = time.monotonic() - started
    assert code == 0, f"pyk8s up failed:\n{out}\n{err}"
    return elapsed, out


async def etcdctl(state_dir: Path, *argv: str, client: str | None = "apiserver-etcd-client") -> tuple[int, str, str]:
    """etcdctl against the cluster's etcd, over TLS, with one of the client certs of etcd's CA."""
    settings = orjson.loads((state_dir / "cluster.json").read_bytes())
    pki = state_dir / "pki"
    tls = [f"--cacert={pki / 'etcd' / 'ca.crt'}"]
    if client is not None:
        tls += [f"--cert={pki / f'{client}.crt'}", f"--key={pki / f'{client}.key'}"]
    return await run(shutil.which("etcdctl") or "etcdctl", f"--endpoints=https://127.0.0.1:{settings['etcd_client_port']}",
                     "--command-timeout=3s", *tls, *argv)


async def check_etcd_tls_and_encryption(state_dir: Path) -> None:
    """etcd speaks TLS and wants a cert of its own CA; Secrets are stored encrypted, ConfigMaps are not."""
    async def stored(key: str) -> bytes:
        code, out, err = await etcdctl(state_dir, "get", key, "--write-out=json")
        assert code == 0, err
        return base64.b64decode(orjson.loads(out)["kvs"][0]["value"])

    secret = await stored("/registry/secrets/default/pyk8s-e2e")
    assert secret.startswith(b"k8s:enc:secretbox:v1:key1:") and b"aHVudGVyMg" not in secret
    assert (await stored("/registry/configmaps/default/pyk8s-e2e")).startswith(b"{")
    code, _, err = await etcdctl(state_dir, "get", "/registry/secrets/default/pyk8s-e2e", client=None)
    assert code != 0, "etcd answered a client without a certificate"
    password = await kubectl(state_dir, "get", "secret", "pyk8s-e2e", "-o", "jsonpath={.data.password}")
    assert password == "aHVudGVyMg=="  # base64 of hunter2
    assert stat.S_IMODE((state_dir / "pki" / "encryption-config.yaml").stat().st_mode) == 0o600


async def test_up_kubectl_down_up_keeps_data(state_dir: Path, record_property: Callable[[str, object], None]) -> None:
    port = free_port()
    elapsed, out = await up(state_dir, "--port", str(port))
    record_property("time_to_ready_s", round(elapsed, 2))
    print(f"pyk8s up: ready in {elapsed:.2f}s (target 5s)")
    assert f"https://127.0.0.1:{port}" in out
    assert f"export KUBECONFIG={state_dir / 'kubeconfig'}" in out
    assert elapsed < TIME_TO_READY_LIMIT
    assert stat.S_IMODE((state_dir / "kubeconfig").stat().st_mode) == 0o600
    assert stat.S_IMODE((state_dir / "pki" / "ca.key").stat().st_mode) == 0o600

    names = (await kubectl(state_dir, "get", "ns", "-o", "name")).split()
    assert {n.removeprefix("namespace/") for n in names} >= REQUIRED_NAMESPACES
    await kubectl(state_dir, "create", "configmap", "pyk8s-e2e", "--from-literal=answer=42", "-n", "default")
    await kubectl(state_dir, "create", "secret", "generic", "pyk8s-e2e", "--from-literal=password=hunter2")
    await check_etcd_tls_and_encryption(state_dir)

    _, again = await up(state_dir)
    assert "already up" in again

    code, status_out, _ = await pyk8s("status", "--state-dir", str(state_dir))
    assert code == 0, status_out
    rows = {line.split()[0]: line.split()[1:] for line in status_out.splitlines()[1:]}
    assert set(rows) == set(process_names(state_dir)) >= {"etcd", "apiserver", "controller-manager", "scheduler"}
    pids = [int(p.read_text()) for p in (state_dir / "run").glob("*.pid") if p.stem != "supervisor"]
    assert sorted(pids) == sorted(int(r[0]) for r in rows.values())
    assert all(r[1:] == ["yes", "yes", "0"] for r in rows.values()), status_out
    supervisor = int((state_dir / "run" / "supervisor.pid").read_text())
    assert pid_alive(supervisor)
    pids.append(supervisor)

    code, down_out, _ = await pyk8s("down", "--state-dir", str(state_dir))
    assert code == 0 and "apiserver: stopped" in down_out and "etcd: stopped" in down_out
    assert not any(pid_alive(pid) for pid in pids)
    code, status_out, _ = await pyk8s("status", "--state-dir", str(state_dir))
    assert code == 1 and "yes" not in status_out

    elapsed, out = await up(state_dir)
    print(f"pyk8s up after down: ready in {elapsed:.2f}s")
    assert f"https://127.0.0.1:{port}" in out, "the port chosen on the first up must be remembered"
    answer = await kubectl(state_dir, "get", "configmap", "pyk8s-e2e", "-n", "default", "-o", "jsonpath={.data.answer}")
    assert answer == "42"


async def test_up_refuses_a_taken_port_before_starting_anything(state_dir: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        code, out, err = await pyk8s("up", "--state-dir", str(state_dir), "--no-nodes", "--port", str(port))
    assert code == 1, out
    assert f"apiserver cannot listen on 127.0.0.1:{port}" in err
    assert not list((state_dir / "run").glob("*.pid"))


@pytest.fixture
def broken_etcd_data(state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / "etcd").write_text("a file where etcd wants its data directory")


@pytest.mark.usefixtures("broken_etcd_data")
async def test_up_reports_a_crashed_component_with_its_log(state_dir: Path) -> None:
    code, out, err = await pyk8s("up", "--state-dir", str(state_dir), "--no-nodes", "--port", str(free_port()))
    assert code == 1, out
    assert "etcd exited with code" in err
    assert f"last lines of {state_dir / 'logs' / 'etcd.log'}" in err
    assert "--data-dir=" in err, "the tail shows the log, which starts with the command line"
    assert not (state_dir / "run" / "apiserver.pid").exists(), "nothing starts after a failed dependency"


@pytest.fixture
async def second_state_dir(tmp_path: Path) -> AsyncIterator[Path]:
    directory = tmp_path / "second"
    yield directory
    await pyk8s("down", "--state-dir", str(directory))


async def test_second_apiserver_on_external_etcd_sees_the_same_data(state_dir: Path, second_state_dir: Path) -> None:
    """`--etcd-servers` skips the local etcd: a second apiserver replica shares the first one's store."""
    await up(state_dir, "--port", str(free_port()))
    await kubectl(state_dir, "create", "configmap", "shared", "--from-literal=from=first", "-n", "default")
    await kubectl(state_dir, "create", "secret", "generic", "shared", "--from-literal=from=Zmlyc3Q=", "-n", "default")
    settings = orjson.loads((state_dir / "cluster.json").read_bytes())
    etcd_url = f"https://127.0.0.1:{settings['etcd_client_port']}"
    pki = state_dir / "pki"

    await up(second_state_dir, "--port", str(free_port()), "--etcd-servers", etcd_url,
             f"--etcd-cafile={pki / 'etcd' / 'ca.crt'}", f"--etcd-certfile={pki / 'apiserver-etcd-client.crt'}",
             f"--etcd-keyfile={pki / 'apiserver-etcd-client.key'}",
             f"--encryption-provider-config={pki / 'encryption-config.yaml'}")
    code, status_out, _ = await pyk8s("status", "--state-dir", str(second_state_dir))
    listed = [line.split()[0] for line in status_out.splitlines()[1:]]
    assert code == 0 and listed == [name for name in process_names(state_dir) if name != "etcd"]
    assert not (second_state_dir / "etcd").exists()
    got = await kubectl(second_state_dir, "get", "configmap", "shared", "-n", "default", "-o", "jsonpath={.data.from}")
    assert got == "first"
    got = await kubectl(second_state_dir, "get", "secret", "shared", "-n", "default", "-o", "jsonpath={.data.from}")
    assert got == "Wm1seWMzUT0="  # written encrypted by the first replica, read with the same config
