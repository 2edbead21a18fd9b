"""A cluster of three machines built as deploy/systemd/README.md tells an operator to: `pyk8s init` on m1,
then on m2 and m3 the `pyk8s join` command init printed, and nothing else copied between them. Each
machine is simulated (tests/e2e/machines.py: its own network, mount, UTS and PID namespaces, /etc/pyk8s,
/var/lib/pyk8s and /run), and each unit runs its ExecStart as systemd would. Checked: three nodes Ready,
each kubelet authenticated as its own node through TLS bootstrap, a Deployment spread over m2 and m3, a
Service reached by DNS from a pod on the other machine; measured: init to Ready, join to node Ready."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from apiserver.auth import authz
from deploy import machine
from kubelet_agent.images import build_busybox, build_pause
from tests.conftest import KUBECTL
from tests.e2e.machines import Machine, ip

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="machines need root (namespaces, mounts)")

PREFIX = 24
SUBNET = "172.29.13"
GATEWAY = f"{SUBNET}.254"
BRIDGE = "pm-br0"
NAMES = ("m1", "m2", "m3")
PYK8S = "/opt/pyk8s/.venv/bin/pyk8s"
CTR = ("ctr", "--address", str(machine.Layout().containerd_socket), "-n", "k8s.io")


@dataclass
class Cluster:
    machines: dict[str, Machine]
    root: Path
    timings: dict[str, float]

    @property
    def admin(self) -> Path:
        return self.machines["m1"].etc / "admin.conf"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run([KUBECTL, "--kubeconfig", str(self.admin), *args], capture_output=True, text=True,
                                input=stdin, timeout=60, env={**os.environ, "KUBECACHEDIR": str(self.root / "cache")})
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def node_client(self, name: str) -> httpx.Client:
        """The kubelet's own credentials on machine `name`, as its kubeconfig names them."""
        m = self.machines[name]
        config = yaml.safe_load((m.etc / "kubelet.conf").read_text())
        cert = Path(config["users"][0]["user"]["client-certificate"])
        pem = m.var / cert.relative_to("/var/lib/pyk8s")
        ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
        context = ssl.create_default_context(cadata=ca)
        context.load_cert_chain(str(pem.parent / os.readlink(pem)))
        return httpx.Client(base_url=config["clusters"][0]["cluster"]["server"], verify=context, timeout=15)


def eventually(check: Callable[[], Any], timeout: float = 90, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except AssertionError as exc:
            last = str(exc)
        else:
            if last:
                return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def wait_line(log: Path, needle: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    def found() -> str:
        if proc.poll() is not None and needle not in log.read_text():
            raise RuntimeError(f"{log.name} exited {proc.returncode}:\n{log.read_text()}")
        return needle if needle in log.read_text() else ""

    return str(eventually(found, timeout, f"{needle!r} in {log}"))


def ready_nodes(cluster: Cluster) -> set[str]:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json", check=False) or '{"items": []}')
    return {n["metadata"]["name"] for n in nodes["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))}


def import_images(m: Machine, archives: list[Path]) -> None:
    eventually(lambda: m.run(*CTR, "version").returncode == 0, 60, f"{m.name}'s containerd")
    for archive in archives:
        result = m.run(*CTR, "images", "import", str(archive))
        assert result.returncode == 0, result.stderr


def start_node_units(m: Machine, archives: list[Path]) -> None:
    m.start_unit("pyk8s-containerd")
    import_images(m, archives)
    for unit in ("pyk8s-kubelet", "pyk8s-proxy", "pyk8s-noderoutes"):
        m.start_unit(unit)


#: the Node authorizer and per-controller service accounts, which init's env files ask for
LEAST_PRIVILEGE = "Node" in authz.MODES


def stand_in_for_least_privilege(m1: Machine) -> None:
    """On a tree without the Node authorizer and --use-service-account-credentials, RBAC alone and the
    admin's credentials for the controller-manager stand in (and system:node is bound to the nodes)."""
    edits = {"apiserver.env": ("--authorization-mode=Node,RBAC", "--authorization-mode=RBAC"),
             "controller-manager.env": ("--use-service-account-credentials=true", "")}
    for name, (old, new) in edits.items():
        env = m1.etc / name
        env.write_text(env.read_text().replace(old, new))
    env = m1.etc / "controller-manager.env"
    env.write_text(env.read_text().replace('EXTRA_ARGS=""', 'EXTRA_ARGS="--kubeconfig=/etc/pyk8s/admin.conf"'))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("machines")
    archives = asyncio.run(_images(root / "images"))
    ip("link", "delete", BRIDGE, check=False)
    ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "add", f"{GATEWAY}/{PREFIX}", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    machines = {name: Machine(name, f"{SUBNET}.{i}", root / name, f"pm-{name}", f"pm-{name}-h")
                for i, name in enumerate(NAMES, start=1)}
    timings: dict[str, float] = {}
    cluster = Cluster(machines, root, timings)
    try:
        for m in machines.values():
            ip("netns", "delete", m.netns, check=False)
            ip("link", "delete", m.host_link, check=False)
            m.boot(BRIDGE, GATEWAY, PREFIX)
            # the README's prerequisite, as kubeadm's preflight demands: the machine forwards packets
            assert m.run("sysctl", "-qew", "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"
                         ).returncode == 0
        m1 = machines["m1"]
        started = time.monotonic()
        init = m1.popen([PYK8S, "init"], root / "init.log")
        wait_line(root / "init.log", "[start]", init)
        if not LEAST_PRIVILEGE:
            stand_in_for_least_privilege(m1)
        for unit in machine.CONTROL_PLANE_UNITS:
            m1.start_unit(unit)
        start_node_units(m1, archives)
        assert init.wait(180) == 0, (root / "init.log").read_text()
        if not LEAST_PRIVILEGE:
            cluster.kubectl("create", "clusterrolebinding", "test-system-nodes", "--clusterrole=system:node",
                            "--group=system:nodes")
        eventually(lambda: "m1" in ready_nodes(cluster), 120, "m1 Ready")
        timings["init to m1 Ready"] = time.monotonic() - started
        command = next(line for line in (root / "init.log").read_text().splitlines() if line.startswith("pyk8s join"))
        joins = {}
        for name in ("m2", "m3"):
            m = machines[name]
            argv = shlex.split(command)
            joins[name] = (time.monotonic(), m.popen([PYK8S, *argv[1:]], root / f"join-{name}.log"))
            wait_line(root / f"join-{name}.log", "[start]", joins[name][1])
            start_node_units(m, archives)
        for name, (begun, proc) in joins.items():
            assert proc.wait(120) == 0, (root / f"join-{name}.log").read_text()
            eventually(lambda name=name: name in ready_nodes(cluster), 120, f"{name} Ready")  # type: ignore[misc]
            timings[f"join to {name} Ready"] = time.monotonic() - begun
        print("\nmachine timings:", {k: round(v, 1) for k, v in timings.items()})
        yield cluster
    finally:
        for m in machines.values():
            m.shutdown()
        ip("link", "delete", BRIDGE, check=False)


async def _images(out: Path) -> list[Path]:
    return [await build_pause(out), await build_busybox(out)]


def test_three_machines_join_and_every_kubelet_is_its_own_node(cluster: Cluster) -> None:
    assert ready_nodes(cluster) == set(NAMES)
    for name in NAMES:
        with cluster.node_client(name) as node:
            review = node.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                               json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert review.status_code == 201, review.text
        user = review.json()["status"]["userInfo"]
        assert user["username"] == f"system:node:{name}" and "system:nodes" in user["groups"]
    # only the printed command crossed machines: m2 has the CA and its own cert, no key of the cluster
    assert (cluster.machines["m2"].etc / "pki" / "ca.crt").read_bytes() == (
        cluster.machines["m1"].etc / "pki" / "ca.crt").read_bytes()
    assert not (cluster.machines["m2"].etc / "pki" / "ca.key").exists()
    assert not (cluster.machines["m2"].etc / "admin.conf").exists()
    csrs = json.loads(cluster.kubectl("get", "csr", "-o", "json"))["items"]
    assert sum(c["spec"]["username"].startswith("system:bootstrap:") for c in csrs) == 3
    taints = json.loads(cluster.kubectl("get", "node", "m1", "-o", "json"))["spec"].get("taints", [])
    assert {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"} in taints


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
        image: busybox:latest
        imagePullPolicy: Never
        command: ["sh", "-c", "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 80 -h /www"]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeSelector: {kubernetes.io/hostname: m2}
  containers:
  - name: client
    image: busybox:latest
    imagePullPolicy: Never
    command: ["sleep", "3600"]
"""


def test_deployment_spreads_over_the_joined_machines_and_its_service_answers_across_them(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=WEB)

    def running() -> dict[str, str]:
        pods = json.loads(cluster.kubectl("get", "pods", "-o", "json"))["items"]
        up = {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods
              if p["status"].get("phase") == "Running"}
        return up if len(up) == 3 else {}

    pods = eventually(running, 120, "web and client Running")
    web = {name: node for name, node in pods.items() if name.startswith("web-")}
    assert sorted(web.values()) == ["m2", "m3"]
    remote = next(name for name, node in web.items() if node == "m3")
    request = "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 web.default.svc.cluster.local 80"

    def reached_m3() -> bool:
        out = cluster.kubectl("exec", "client", "--", "sh", "-c", request, check=False)
        return remote in out

    assert eventually(reached_m3, 90, f"{remote} on m3 through the Service by DNS from m2")


def test_node_credentials_cannot_read_another_nodes_secret_or_patch_its_node(cluster: Cluster) -> None:
    cluster.kubectl("create", "secret", "generic", "m3-only", "--from-literal=k=v")
    cluster.kubectl("apply", "-f", "-", stdin="""
apiVersion: v1
kind: Pod
metadata: {name: m3-secret-user}
spec:
  nodeSelector: {kubernetes.io/hostname: m3}
  volumes: [{name: s, secret: {secretName: m3-only}}]
  containers: [{name: c, image: busybox:latest, imagePullPolicy: Never, command: [sleep, "3600"],
                volumeMounts: [{name: s, mountPath: /s}]}]
""")
    with cluster.node_client("m3") as m3:
        eventually(lambda: m3.get("/api/v1/namespaces/default/secrets/m3-only").status_code == 200, 60,
                   "m3 reading the secret of its own pod")
    with cluster.node_client("m2") as m2:
        assert m2.get("/api/v1/namespaces/default/secrets/m3-only").status_code == 403
        patch = m2.patch("/api/v1/nodes/m3", content=b'{"metadata":{"labels":{"x":"y"}}}',
                         headers={"Content-Type": "application/merge-patch+json"})
        assert patch.status_code == 403, patch.text
