"""A real containerd configured as `pyk8s up` configures a node's: every registry's pulls go to the image
registry first. An image the registry has pulls from it with nothing imported beforehand; a name it lacks
falls through to the real registry, which is unreachable here, and the pull fails within bounded time."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from image_registry.archive import load_archive
from image_registry.store import ImageStore
from kubelet_agent.cri.remote import RemoteRuntime
from kubelet_agent.cri.types import RuntimeError_
from kubelet_agent.images import BUSYBOX_IMAGE, build_busybox, build_pause, write_image_archive
from tests.conftest import REPO, free_port
from tests.e2e.containerd_fixture import CONTAINERD, Containerd, start_containerd, stop_containerd

#: A /30 between the host and the test's namespace, where the registry listens as it does on the node bridge.
HOST_IP, NODE_IP = "10.198.0.1", "10.198.0.2"
#: containerd's resolver gives up on an unreachable DNS server and registry in about 10 s here.
FAILED_PULL_LIMIT = 45.0
#: A registry with no hosts.toml of its own: containerd's `_default` entry sends it to the mirror too.
OTHER_IMAGE = "registry.example.test/team/app:1"


@dataclass
class Mirror:
    containerd: Containerd
    store: ImageStore
    health: str


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    if os.geteuid() != 0 or not Path(CONTAINERD).exists():
        pytest.skip("needs root and containerd")
    base = tmp_path_factory.mktemp("mirror")
    store = ImageStore(base / "store")

    async def build() -> None:
        for archive in (await build_busybox(base / "images"), await build_pause(base / "images")):
            load_archive(store, archive)
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w") as tar:
            tar.addfile(tarfile.TarInfo("app"), io.BytesIO(b""))
        load_archive(store, write_image_archive(base / "other.tar", OTHER_IMAGE, layer.getvalue(), [], ["/app"]))

    asyncio.run(build())
    port, health = free_port(), free_port()
    link = f"pkm{os.getpid() % 100000}"
    netns = f"pyk8s-mirror-{os.getpid()}"
    ctrd = start_containerd(Path("/tmp") / f"pyk8s-mirror-{os.getpid()}", netns, mirror=f"http://{HOST_IP}:{port}",
                            preload=False)
    proc = None
    try:
        subprocess.run(["ip", "link", "add", link, "type", "veth", "peer", "name", "mirror0", "netns", netns],
                       check=True, capture_output=True)
        subprocess.run(["ip", "addr", "add", f"{HOST_IP}/30", "dev", link], check=True, capture_output=True)
        subprocess.run(["ip", "link", "set", link, "up"], check=True, capture_output=True)
        subprocess.run(["ip", "-n", netns, "addr", "add", f"{NODE_IP}/30", "dev", "mirror0"], check=True,
                       capture_output=True)
        subprocess.run(["ip", "-n", netns, "link", "set", "mirror0", "up"], check=True, capture_output=True)
        log = open(base / "registry.log", "wb")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen([sys.executable, "-m", "image_registry", f"--store={store.root}",
                                 f"--address={HOST_IP}", f"--port={port}", "--bind-address=127.0.0.1",
                                 f"--secure-port={health}"], cwd=REPO, stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{health}/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (base / "registry.log").read_text()
            time.sleep(0.1)
        yield Mirror(ctrd, store, f"http://127.0.0.1:{health}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        subprocess.run(["ip", "link", "delete", link], capture_output=True)
        stop_containerd(ctrd)


async def metrics_text(mirror: Mirror) -> str:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{mirror.health}/metrics")).text


@pytest.fixture
async def runtime(mirror: Mirror) -> AsyncIterator[RemoteRuntime]:
    rt = RemoteRuntime(mirror.containerd.endpoint, timeout=120)
    await rt.start()
    yield rt
    await rt.close()


async def test_a_pull_of_an_image_the_registry_has_comes_from_it(mirror: Mirror, runtime: RemoteRuntime) -> None:
    assert await runtime.image_status(BUSYBOX_IMAGE) is None, "busybox must not be imported beforehand"
    started = time.monotonic()
    image_id = await runtime.pull_image(BUSYBOX_IMAGE)
    elapsed = time.monotonic() - started
    print(f"pull of {BUSYBOX_IMAGE} from the mirror: {elapsed:.2f}s")
    status = await runtime.image_status("busybox")
    assert status is not None and status.id == image_id
    served = {str(image.ref): image.manifest.digest for image in mirror.store.images()}
    assert status.repo_digests == [f"docker.io/library/busybox@{served[BUSYBOX_IMAGE]}"]
    assert BUSYBOX_IMAGE in status.repo_tags
    metrics = await metrics_text(mirror)
    assert 'registry_http_requests_total{code="200",method="GET",route="blobs"}' in metrics


async def test_any_other_registry_goes_through_the_mirror_too(mirror: Mirror, runtime: RemoteRuntime) -> None:
    await runtime.pull_image(OTHER_IMAGE)
    status = await runtime.image_status(OTHER_IMAGE)
    assert status is not None and OTHER_IMAGE in status.repo_tags


async def test_a_name_the_registry_lacks_fails_in_bounded_time(mirror: Mirror, runtime: RemoteRuntime) -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError_) as failure:
        await runtime.pull_image("docker.io/library/pyk8s-absent:1.0")
    elapsed = time.monotonic() - started
    print(f"failed pull: {elapsed:.2f}s: {failure.value}")
    assert elapsed < FAILED_PULL_LIMIT
    assert "docker.io/library/pyk8s-absent:1.0" in str(failure.value)
    assert await runtime.image_status("docker.io/library/pyk8s-absent:1.0") is None
    metrics = await metrics_text(mirror)
    assert 'registry_http_requests_total{code="404",method="HEAD",route="manifests"}' in metrics
