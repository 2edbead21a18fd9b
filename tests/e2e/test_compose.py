"""docker-compose.yml against a real Docker engine, as a new user runs it: Debian's dockerd (started
here with its own data root, exec root and socket, and --iptables=false --ip-masq=false so the host's
firewall is left alone) and Debian's docker-compose 1.29, on a copy of the checkout owned by a
non-root user with the project's files unchanged.

No registry is reachable, so the base images the Dockerfiles name are built here, once per data root:
`debian:bookworm-slim` by debootstrap from the mirror apt uses, and `python:3.11-slim-bookworm` from it
with Debian's python3 and a wheelhouse of requirements.lock (pip inside a build cannot reach an index).
Then: `docker-compose up -d --build`, two nodes Ready, a busybox Deployment spread over both and
reached through its Service and cluster DNS from another pod, kubectl as the checkout's owner, no
key, .git or .pyk8s in any image, components under their own identities, `down` + `up` keeping the
objects and a service-account token, and `down -v` leaving no container, network or volume.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from tests.conftest import KUBECTL, REPO, eventually

#: Kept between runs (base images, build cache, wheelhouse); the test removes everything of the project.
CACHE = Path("/var/tmp/pyk8s-compose-e2e")
PROJECT = "pyk8s"
#: The checkout's owner in the test: nobody, so kubectl runs as a user that is not root.
OWNER_UID = 65534
NODES = 2
HOLLOW_NODES = 3
PYTHON_IMAGE = "python:3.11-slim-bookworm"
DEBIAN_IMAGE = "debian:bookworm-slim"
LOCK = REPO / "deploy" / "images" / "requirements.lock"
IMAGES = ("pyk8s-control-plane:latest", "pyk8s-node:latest", "pyk8s-etcd:latest")
COMPONENT_USERS = {"scheduler": ("scheduler", "system:kube-scheduler"),
                   "controller-manager": ("controller-manager", "system:kube-controller-manager"),
                   "dns": ("kube-proxy", "system:kube-proxy")}

pytestmark = pytest.mark.timeout(1500)


async def run(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None, check: bool = True,
              limit: float = 600.0, stdin: bytes | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    async with asyncio.timeout(limit):
        out, _ = await proc.communicate(stdin)
    text = out.decode(errors="replace")
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}:\n{text[-4000:]}")
    return text


def debian_mirror() -> str:
    """The first http(s) Debian mirror apt's sources name for bookworm (deb822 or one-line style)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for source in sources:
        with contextlib.suppress(OSError):
            text = source.read_text()
            one_line = re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", text, re.M)
            for uri in re.findall(r"^URIs:\s*(\S+)", text, re.M) + one_line:
                if uri.rstrip("/").endswith("/debian"):
                    return uri
    return "http://deb.debian.org/debian"


class Docker:
    """A dockerd of the test's own, and the environment the docker tools need to reach it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.pidfile = root / "dockerd.pid"
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{self.socket}",
                    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DOCKER_BUILDKIT": "0"}
        self.env.pop("KUBECONFIG", None)
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        log = (self.root / "dockerd.log").open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            "/usr/sbin/dockerd", f"--data-root={self.root / 'data'}", f"--exec-root={self.root / 'exec'}",
            f"--pidfile={self.pidfile}", f"--host=unix://{self.socket}", "--iptables=false", "--ip-masq=false",
            "--bridge=none", stdout=log, stderr=log, start_new_session=True)
        await eventually(self.ready, limit=60, what="dockerd to answer")

    async def ready(self) -> bool:
        return "Server Version" in await run("docker", "info", env=self.env, check=False, limit=20)

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(60):
                await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        # dockerd leaves the bind mount of its default network namespace behind
        exec_root = f"{self.root / 'exec'}/"
        for line in (await asyncio.to_thread(Path("/proc/self/mounts").read_text)).splitlines():
            if line.split()[1].startswith(exec_root):
                await run("umount", "-l", line.split()[1], check=False)

    async def docker(self, *argv: str, **kwargs: object) -> str:
        return await run("docker", *argv, env=self.env, **kwargs)  # type: ignore[arg-type]

    async def has_image(self, ref: str, label: str = "", value: str = "") -> bool:
        out = await self.docker("image", "inspect", ref, check=False)
        if not out.lstrip().startswith("["):
            return False
        return not label or (json.loads(out)[0]["Config"].get("Labels") or {}).get(label) == value


async def build_base_images(docker: Docker) -> None:
    """debian:bookworm-slim from debootstrap, then the python image with a wheelhouse of the lock file."""
    if not await docker.has_image(DEBIAN_IMAGE):
        rootfs = CACHE / "rootfs"
        shutil.rmtree(rootfs, ignore_errors=True)
        await run("debootstrap", "--variant=minbase", "bookworm", str(rootfs), debian_mirror(), limit=900)
        tar = await asyncio.create_subprocess_exec("tar", "-C", str(rootfs), "-c", ".", stdout=subprocess.PIPE)
        assert tar.stdout is not None
        imported = await asyncio.create_subprocess_exec("docker", "import", "-", DEBIAN_IMAGE, stdin=tar.stdout,
                                                        env=docker.env, stdout=subprocess.DEVNULL)
        assert await imported.wait() == 0 and await tar.wait() == 0
        shutil.rmtree(rootfs)
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16]
    if await docker.has_image(PYTHON_IMAGE, "pyk8s.wheelhouse", digest):
        return
    build = CACHE / f"python-{digest}"
    wheels = build / "wheels"
    if not (build / "complete").exists():
        shutil.rmtree(build, ignore_errors=True)
        await run("python3", "-m", "pip", "download", "-q", "--no-deps", "-r", str(LOCK), "-d", str(wheels),
                  limit=900)
        (build / "complete").write_text(digest)
    (build / "Dockerfile").write_text(
        f"FROM {DEBIAN_IMAGE}\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates"
        " && rm -rf /var/lib/apt/lists/* && python3 -m venv /usr/local\n"
        "COPY wheels /wheels\n"
        "RUN printf '[global]\\nno-index = true\\nfind-links = /wheels\\n' > /etc/pip.conf\n"
        f"LABEL pyk8s.wheelhouse={digest}\n")
    await docker.docker("build", "-q", "--network=host", "-t", PYTHON_IMAGE, str(build), limit=900)


def copy_checkout(dest: Path) -> None:
    """The checkout's files as a clone has them, owned by OWNER_UID, plus what must stay out of images:
    a git directory, a venv and a `pyk8s up` state dir with a CA key."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    for leak in (".pyk8s/pki/ca.key", ".venv/pyvenv.cfg"):
        (dest / leak).parent.mkdir(parents=True, exist_ok=True)
        (dest / leak).write_text("must not be in an image\n")
    for path in [dest, *dest.rglob("*")]:
        os.lchown(path, OWNER_UID, OWNER_UID)


@pytest.fixture
async def compose() -> AsyncIterator[tuple[Docker, Path, dict[str, str]]]:
    docker = Docker(CACHE / "docker")
    iptables_before = await host_rules()
    await docker.start()
    # not under pytest's tmp dir, which only root may enter
    work = CACHE / "run"
    shutil.rmtree(work, ignore_errors=True)
    checkout = work / PROJECT
    os.makedirs(checkout)
    for directory in (CACHE, work):
        os.chmod(directory, 0o755)
    copy_checkout(checkout)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**docker.env, "PYK8S_PORT": str(port), "PYK8S_NODES": str(NODES), "PYK8S_HOLLOW_NODES": str(HOLLOW_NODES)}
    try:
        started = time.monotonic()
        await build_base_images(docker)
        print(f"base images ready in {time.monotonic() - started:.0f}s")
        await run("docker-compose", "--profile", "hollow", "down", "-v", "--remove-orphans", env=env, cwd=checkout)
        await docker.docker("volume", "prune", "-f")  # what an earlier, failed run left; this dockerd is ours
        yield docker, checkout, env
    finally:
        with contextlib.suppress(Exception):
            await run("docker-compose", "--profile", "hollow", "down", "-v", "--remove-orphans", env=env,
                      cwd=checkout, check=False)
        await docker.stop()
        shutil.rmtree(work, ignore_errors=True)
    assert await host_rules() == iptables_before, "the host's iptables rules changed"


async def host_rules() -> str:
    """The host's iptables rules without counters."""
    out = await run("iptables-save", check=False)
    return "\n".join(re.sub(r"\[\d+:\d+\]", "", line) for line in out.splitlines() if not line.startswith("#"))


class Cluster:
    def __init__(self, checkout: Path, env: dict[str, str]) -> None:
        self.checkout, self.env = checkout, env
        self.kubeconfig = checkout / ".pyk8s" / "compose" / "admin.conf"
        self.home = checkout.parent / "home"
        self.home.mkdir(exist_ok=True)
        os.chown(self.home, OWNER_UID, OWNER_UID)

    async def compose(self, *argv: str, limit: float = 600.0) -> str:
        return await run("docker-compose", *argv, env=self.env, cwd=self.checkout, limit=limit)

    async def kubectl(self, *argv: str, check: bool = True, stdin: bytes | None = None) -> str:
        """kubectl as the checkout's owner (not root) with the kubeconfig compose wrote."""
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home)}
        return await run("setpriv", f"--reuid={OWNER_UID}", f"--regid={OWNER_UID}", "--clear-groups", KUBECTL,
                         f"--kubeconfig={self.kubeconfig}", *argv, env=env, check=check, stdin=stdin, limit=60)

    async def json(self, *argv: str) -> dict:
        return json.loads(await self.kubectl(*argv, "-o", "json"))

    async def ready_nodes(self, count: int = NODES) -> list[str]:
        nodes = (await self.json("get", "nodes"))["items"]
        ready = [n["metadata"]["name"] for n in nodes
                 if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))]
        return sorted(ready) if len(ready) == count else []

    async def cat(self, container: str, path: str) -> str:
        """A file inside a container, read with `docker exec` (the name is compose v1's)."""
        return await run("docker", "exec", f"{PROJECT}_{container}", "cat", path, env=self.env)

    async def cert_subject(self, container: str, kubeconfig: str) -> tuple[str, list[str]]:
        user = yaml.safe_load(await self.cat(container, kubeconfig))["users"][0]["user"]
        pem = (base64.b64decode(user["client-certificate-data"]) if "client-certificate-data" in user
               else (await self.cat(container, user["client-certificate"])).encode())
        subject = x509.load_pem_x509_certificate(pem).subject
        return (subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value,
                [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)])


WEB = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: web}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: web
        image: busybox
        command: [httpd, -f, -p, "8080", -h, /etc]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
"""

CLIENT = """printf 'GET /hostname HTTP/1.0\\r\\n\\r\\n' | nc -w 5 web.default.svc.cluster.local 80 | tail -n 1"""


async def served_by(cluster: Cluster, pod: str) -> set[str]:
    """Which web pods answered 20 requests through the Service's DNS name from pod `pod`."""
    script = f"for i in $(seq 20); do {CLIENT}; done"
    out = await cluster.kubectl("exec", pod, "--", "sh", "-c", script, check=False)
    return {line.strip() for line in out.splitlines() if line.startswith("web-")}


async def test_compose_cluster(compose: tuple[Docker, Path, dict[str, str]]) -> None:
    docker, checkout, env = compose
    cluster = Cluster(checkout, env)
    started = time.monotonic()
    await cluster.compose("up", "-d", "--build", limit=1200)
    print(f"docker-compose up -d --build: {time.monotonic() - started:.0f}s")

    info = cluster.kubeconfig.stat()
    assert (info.st_uid, info.st_mode & 0o777) == (OWNER_UID, 0o600)
    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert server == f"https://127.0.0.1:{env['PYK8S_PORT']}"
    # every image: no key, git directory, venv, cluster state or tests (while the nodes start)
    for image in IMAGES:
        found = await docker.docker("run", "--rm", "--network=none", "--entrypoint=sh", image, "-c",
                                    "find / -xdev \\( -name .git -o -name .pyk8s -o -name .venv -o -name ca.key "
                                    "-o -name '*.key' -path '/opt/*' \\) -print; ls /opt/pyk8s 2>/dev/null; true")
        assert not [line for line in found.splitlines() if line.startswith("/")], f"{image}: {found}"
        assert "tests" not in found.split(), f"{image} holds the tests"
    for image, user in ((IMAGES[0], "pyk8s"), (IMAGES[2], "etcd")):
        assert (await docker.docker("image", "inspect", "-f", "{{.Config.User}}", image)).strip() == user

    nodes = await eventually(cluster.ready_nodes, limit=180, interval=1, what="both nodes Ready")
    assert nodes == [f"{PROJECT}-node-{i}" for i in range(1, NODES + 1)]
    cidrs = {(await cluster.json("get", "node", n))["spec"]["podCIDR"] for n in nodes}
    assert len(cidrs) == NODES

    # each component as its own user, none of them system:masters; kubelets as system:node:<name>
    for service, (volume, user) in COMPONENT_USERS.items():
        assert await cluster.cert_subject(f"{service}_1", f"/var/lib/pyk8s/{volume}/kubeconfig") == (user, [])
    for i in range(1, NODES + 1):
        assert await cluster.cert_subject(f"node_{i}", "/var/lib/pyk8s-node/kubelet.conf") == (
            f"system:node:{PROJECT}-node-{i}", ["system:nodes"])

    await cluster.kubectl("apply", "-f", "-", stdin=WEB.encode())
    await cluster.kubectl("wait", "--for=condition=Available", "deployment/web", "--timeout=120s")
    pods = (await cluster.json("get", "pods", "-l", "app=web"))["items"]
    assert {p["spec"]["nodeName"] for p in pods} == set(nodes)
    await cluster.kubectl("run", "client", "--image=busybox", "--restart=Never", "--", "sleep", "3600")
    await cluster.kubectl("wait", "--for=condition=Ready", "pod/client", "--timeout=120s")
    # the hollow profile: simulated nodes next to the real ones (started once the pods above are placed)
    await cluster.compose("--profile", "hollow", "up", "-d", "hollow")
    names = {p["metadata"]["name"] for p in pods}
    assert await eventually(lambda: _all_served(cluster, names), limit=60, what="both pods through the Service")

    assert await eventually(lambda: cluster.ready_nodes(NODES + HOLLOW_NODES), limit=120, interval=1,
                            what="hollow nodes Ready")
    await cluster.compose("--profile", "hollow", "rm", "-sf", "hollow")
    for i in range(HOLLOW_NODES):
        await cluster.kubectl("delete", "node", f"hollow-{i}")

    before = {kind: (await cluster.json("get", kind, "web"))["metadata"]["uid"] for kind in ("deployment", "service")}
    token = (await cluster.kubectl("create", "token", "default", "--duration=2h")).strip()
    ca_file = checkout.parent / "ca.crt"
    ca = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["certificate-authority-data"]
    ca_file.write_bytes(base64.b64decode(ca))
    ca_file.chmod(0o644)
    assert await whoami(cluster, server, ca_file, token) == "system:serviceaccount:default:default"

    started = time.monotonic()
    await cluster.compose("down")
    await cluster.compose("up", "-d")
    assert await eventually(cluster.ready_nodes, limit=180, interval=1, what="nodes Ready after down + up") == nodes
    print(f"down + up: {time.monotonic() - started:.0f}s")
    after = {kind: (await cluster.json("get", kind, "web"))["metadata"]["uid"] for kind in ("deployment", "service")}
    assert after == before
    assert await whoami(cluster, server, ca_file, token) == "system:serviceaccount:default:default"
    await cluster.kubectl("wait", "--for=condition=Available", "deployment/web", "--timeout=180s")

    await cluster.compose("down", "-v")
    assert (await docker.docker("ps", "-aq")).strip() == ""
    assert (await docker.docker("volume", "ls", "-q")).strip() == ""
    networks = (await docker.docker("network", "ls", "--format", "{{.Name}}")).split()
    assert sorted(networks) == ["host", "none"]


async def _all_served(cluster: Cluster, names: set[str]) -> bool:
    return await served_by(cluster, "client") == names


async def whoami(cluster: Cluster, server: str, ca_file: Path, token: str) -> str:
    """Who the apiserver says `token` is, asked without the admin kubeconfig."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cluster.home)}
    out = await run("setpriv", f"--reuid={OWNER_UID}", f"--regid={OWNER_UID}", "--clear-groups", KUBECTL,
                    "--kubeconfig=/dev/null", f"--server={server}", f"--certificate-authority={ca_file}",
                    f"--token={token}", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", env=env,
                    limit=60)
    return out.strip()
