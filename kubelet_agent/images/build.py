"""Building and importing the node's local images."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

BUSYBOX_IMAGE = "docker.io/library/busybox:latest"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
BUSYBOX_BIN = "/bin/busybox"

PAUSE_C = r"""
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void bye(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
    signal(SIGINT, bye); signal(SIGTERM, bye); signal(SIGCHLD, reap);
    for (;;) pause();
}
"""


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    tar.addfile(info)


def write_image_archive(path: Path, ref: str, layer: bytes, entrypoint: list[str], cmd: list[str]) -> Path:
    """A docker-archive tarball with one layer, tagged `ref`."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64", "os": "linux", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(0)),
        "config": {"Entrypoint": entrypoint or None, "Cmd": cmd or None,
                   "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "pyk8s"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.split(":")[1] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": [layer_name]}]
    with tarfile.open(path, "w") as tar:
        _add_file(tar, config_name, config_bytes)
        _add_dir(tar, diff_id.split(":")[1])
        _add_file(tar, layer_name, layer)
        _add_file(tar, "manifest.json", json.dumps(manifest).encode())
    return path


def _rootfs_base(tar: tarfile.TarFile) -> None:
    for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "root", "var", "home", "usr", "usr/bin", "sbin"):
        _add_dir(tar, d, 0o1777 if d == "tmp" else 0o755)
    _add_file(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")
    _add_file(tar, "etc/group", b"root:x:0:\nnobody:x:65534:\n")


def busybox_layer(busybox: str = BUSYBOX_BIN) -> bytes:
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _rootfs_base(tar)
        _add_file(tar, "bin/busybox", Path(busybox).read_bytes(), 0o755)
        for applet in applets:
            if applet == "busybox":
                continue
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type = tarfile.SYMTYPE
            info.linkname = "busybox"
            tar.addfile(info)
    return buf.getvalue()


def pause_layer(workdir: Path) -> bytes:
    src = workdir / "pause.c"
    out = workdir / "pause"
    src.write_text(PAUSE_C)
    subprocess.run(["gcc", "-static", "-Os", "-o", str(out), str(src)], check=True, capture_output=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_file(tar, "pause", out.read_bytes(), 0o755)
    return buf.getvalue()


def _build_busybox(out_dir: Path) -> Path:
    return write_image_archive(out_dir / "busybox.tar", BUSYBOX_IMAGE, busybox_layer(), [], ["sh"])


def _build_pause(out_dir: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        layer = pause_layer(Path(tmp))
    return write_image_archive(out_dir / "pause.tar", PAUSE_IMAGE, layer, ["/pause"], [])


async def build_busybox(out_dir: str | Path) -> Path:
    """`docker.io/library/busybox:latest` from the host's busybox-static."""
    await asyncio.to_thread(Path(out_dir).mkdir, parents=True, exist_ok=True)
    return await asyncio.to_thread(_build_busybox, Path(out_dir))


async def build_pause(out_dir: str | Path) -> Path:
    """`registry.k8s.io/pause:3.10` from a static C binary."""
    await asyncio.to_thread(Path(out_dir).mkdir, parents=True, exist_ok=True)
    return await asyncio.to_thread(_build_pause, Path(out_dir))


async def import_image(archive: str | Path, address: str, ctr: str | None = None) -> None:
    """Import a docker/OCI archive into the containerd at `address`, namespace k8s.io (where CRI looks)."""
    binary = ctr or shutil.which("ctr") or "ctr"
    proc = await asyncio.create_subprocess_exec(
        binary, "--address", address, "-n", "k8s.io", "images", "import", str(archive),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"ctr import {archive} failed: {(err or out).decode().strip()}")
