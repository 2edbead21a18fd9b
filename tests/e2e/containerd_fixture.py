"""A real containerd for tests, inside a network namespace the test creates, with its own root,
state, socket and CNI conf dir; everything it started is stopped and removed afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.nodes import containerd_config, write_registry_hosts
from kubelet_agent.images import build_busybox, build_pause, import_image

CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"


@dataclass
class Containerd:
    netns: str
    base: Path
    socket: Path
    cni_conf_dir: Path
    node_ip: str
    proc: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def netns_path(self) -> str:
        return f"/var/run/netns/{self.netns}"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _shim_pids(socket: Path) -> list[int]:
    """containerd-shim processes serving this containerd (matched by its socket address)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            if cmd and b"containerd-shim" in cmd[0] and str(socket).encode() in cmd:
                pids.append(int(entry.name))
    return pids


def _children(pid: int) -> list[int]:
    """Container processes a shim started (left running if only the shim were killed)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
    return out


async def _clean_pods(endpoint: str) -> None:
    from kubelet_agent.cri.remote import RemoteRuntime

    rt = RemoteRuntime(endpoint, timeout=20)
    await rt.start()
    try:
        for c in await rt.list_containers():
            with contextlib.suppress(Exception):
                await rt.stop_container(c.id, 0)
        for s in await rt.list_sandboxes():
            with contextlib.suppress(Exception):
                await rt.stop_sandbox(s.id)
                await rt.remove_sandbox(s.id)
    finally:
        await rt.close()


def start_containerd(base: Path, name: str, node_ip: str = "10.99.0.2", mirror: str = "",
                     preload: bool = True) -> Containerd:
    """With `mirror`, every registry's pulls try that URL first (the image registry's hosts.toml); without
    `preload`, the busybox and pause images are not imported, so they can only be pulled."""
    for d in ("root", "state", "cni"):
        (base / d).mkdir(parents=True, exist_ok=True)
    sock = base / "containerd.sock"
    cfg = base / "config.toml"
    hosts = base / "certs.d"
    if mirror:
        write_registry_hosts(hosts, mirror)
    cfg.write_text(containerd_config(base / "root", base / "state", sock, base / "cni", hosts))
    _ip("netns", "add", name)
    _ip("-n", name, "link", "set", "lo", "up")
    _ip("-n", name, "link", "add", "node0", "type", "veth", "peer", "name", "node0p")
    _ip("-n", name, "addr", "add", f"{node_ip}/24", "dev", "node0")
    _ip("-n", name, "link", "set", "node0", "up")
    _ip("-n", name, "link", "set", "node0p", "up")
    _ip("-n", name, "route", "add", "default", "dev", "node0")
    log = open(base / "containerd.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(["nsenter", f"--net=/var/run/netns/{name}", CONTAINERD, "--config", str(cfg)],
                            stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"containerd did not start: {(base / 'containerd.log').read_text()[-2000:]}")
        time.sleep(0.1)
    images = base / "images"

    async def load() -> None:
        for archive in (await build_pause(images), await build_busybox(images)):
            await import_image(archive, str(sock))

    if preload:
        asyncio.run(load())
    return Containerd(name, base, sock, base / "cni", node_ip, proc)


def stop_containerd(c: Containerd) -> None:
    with contextlib.suppress(Exception):
        asyncio.run(_clean_pods(c.endpoint))
    c.proc.send_signal(signal.SIGTERM)
    try:
        c.proc.wait(30)
    except subprocess.TimeoutExpired:
        c.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            c.proc.wait(30)
    for pid in _shim_pids(c.socket):
        for child in _children(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for mount in reversed(Path("/proc/self/mounts").read_text().splitlines()):
        target = mount.split()[1]
        if target.startswith(str(c.base)):
            subprocess.run(["umount", "-l", target], capture_output=True)
    subprocess.run(["ip", "netns", "delete", c.netns], capture_output=True)
    shutil.rmtree(c.base, ignore_errors=True)


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Containerd]:
    if os.geteuid() != 0 or not Path(CONTAINERD).exists():
        pytest.skip("needs root and containerd")
    base = Path("/tmp") / f"pyk8s-ctrd-{os.getpid()}"
    c = start_containerd(base, f"pyk8s-e2e-{os.getpid()}")
    yield c
    stop_containerd(c)
