"""kubectl's SPDY fallback for exec, attach and port-forward, and the kubelet API's authentication and
authorization, on a real containerd with real kubectl.

The module runs an apiserver of its own (on the session's etcd) that presents a kubelet client
certificate, and a kubelet that trusts the CA which signed it, checks bearer tokens with a
TokenReview and authorizes with a SubjectAccessReview, as a kubeadm cluster is set up.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.runtime import pki
from tests.conftest import KUBECTL, REPO, APIServerProcess, free_port, start_apiserver
from tests.e2e.containerd_fixture import Containerd, containerd  # noqa: F401 - fixture
from tests.e2e.test_kubectl_exec_logs import wait

NODE = "e2e-spdy-0"
NO_WS = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}


@dataclass
class Setup:
    kubeconfig: Path
    kubelet_port: int
    ca: Path
    client_cert: tuple[Path, Path]
    base: Path

    def kubectl(self, *args: str, env: dict[str, str] | None = None, stdin: str | None = None,
                check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([KUBECTL, "--kubeconfig", str(self.kubeconfig), *args], input=stdin, text=True,
                                capture_output=True, timeout=timeout,
                                env={**os.environ, "KUBECACHEDIR": str(self.base / "kubecache"), **(env or {})})
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    @property
    def kubelet(self) -> str:
        return f"https://127.0.0.1:{self.kubelet_port}"


@pytest.fixture(scope="module")
def setup(etcd_server: str, containerd: Containerd, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
          ) -> Iterator[Setup]:
    base = tmp_path_factory.mktemp("spdy-auth")
    ca = pki.create_ca("e2e-kubelet-ca")
    ca_path, ca_key = base / "ca.crt", base / "ca.key"
    ca.write(ca_path, ca_key)
    client = base / "apiserver-kubelet-client.crt", base / "apiserver-kubelet-client.key"
    pki.issue_client_cert(ca, "kube-apiserver-kubelet-client", ["system:masters"]).write(*client)
    server: APIServerProcess = start_apiserver([etcd_server], base / "apiserver",
                                               f"--kubelet-client-certificate={client[0]}",
                                               f"--kubelet-client-key={client[1]}")
    kubeconfig = base / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": server.url}}],
        "users": [{"name": "t", "user": {"token": "test"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }))
    port = free_port()
    log = open(base / "kubelet.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubelet_agent", "--kubeconfig", str(kubeconfig), "--hostname-override", NODE,
         "--container-runtime-endpoint", containerd.endpoint, "--cni-conf-dir", str(containerd.cni_conf_dir),
         "--node-netns", containerd.netns_path, "--node-ip", "127.0.0.1", "--root-dir", str(base / "kubelet"),
         "--address", "127.0.0.1", "--port", str(port), "--healthz-port", "0", "--log-format", "console",
         f"--client-ca-file={ca_path}"],
        cwd=REPO, stdout=log, stderr=log)
    s = Setup(kubeconfig, port, ca_path, client, base)

    def registered() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"kubelet exited:\n{(base / 'kubelet.log').read_text(errors='replace')[-2000:]}")
        node = s.kubectl("get", "node", NODE, "-o", "json", check=False)
        return node.returncode == 0 and \
            json.loads(node.stdout)["status"].get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port") == port

    try:
        wait(registered, 60)
        yield s
    finally:
        proc.terminate()
        proc.wait(20)
        server.stop()


@pytest.fixture
def ns(setup: Setup, request: pytest.FixtureRequest) -> str:
    name = f"spdy-{request.node.name.lower().replace('_', '-')[5:30].strip('-')}-{os.getpid() % 1000}"
    setup.kubectl("create", "namespace", name)
    return name


def run_pod(setup: Setup, ns: str, name: str, command: str) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [
               {"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", command]}]}}
    setup.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    wait(lambda: setup.kubectl("-n", ns, "get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running")


def test_exec_over_spdy_output_exit_code_and_stdin(setup: Setup, ns: str) -> None:
    run_pod(setup, ns, "shell", "sleep 3600")
    assert setup.kubectl("-n", ns, "exec", "shell", "--", "cat", "/etc/hostname", env=NO_WS).stdout == "shell\n"
    failed = setup.kubectl("-n", ns, "exec", "shell", "--", "sh", "-c", "echo oops >&2; exit 3", env=NO_WS,
                           check=False)
    assert failed.returncode == 3 and "oops" in failed.stderr
    echoed = setup.kubectl("-n", ns, "exec", "-i", "shell", "--", "cat", env=NO_WS, stdin="hello over spdy\n")
    assert echoed.stdout == "hello over spdy\n"
    missing = setup.kubectl("-n", ns, "exec", "shell", "-c", "nope", "--", "true", env=NO_WS, check=False)
    assert missing.returncode != 0 and "container nope is not valid for pod shell" in missing.stderr
    # -it over SPDY: `script` gives kubectl a terminal; the shell in the pod must see one too, and the
    # exit code still comes back through the error stream.
    tty = subprocess.run(["script", "-qec", f"env KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false {KUBECTL} --kubeconfig "
                          f"{setup.kubeconfig} -n {ns} exec -it shell -- sh -c 'tty; exit 4'", "/dev/null"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False)
    assert "/dev/pts/" in tty.stdout and "exit code 4" in tty.stdout, tty.stdout + tty.stderr
    # With the variables off kubectl speaks only SPDY (no fallback); by default it is WebSocket.
    assert setup.kubectl("-n", ns, "exec", "shell", "--", "cat", "/etc/hostname").stdout == "shell\n"


def test_attach_over_spdy(setup: Setup, ns: str) -> None:
    run_pod(setup, ns, "talker", "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.3; done")
    attach = subprocess.Popen([KUBECTL, "--kubeconfig", str(setup.kubeconfig), "-n", ns, "attach", "talker"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env={**os.environ, **NO_WS})
    try:
        assert attach.stdout is not None
        lines = [attach.stdout.readline() for _ in range(2)]
    finally:
        attach.kill()
        attach.wait(5)
    assert all(line.startswith("line ") for line in lines), lines


def test_port_forward_over_spdy(setup: Setup, ns: str) -> None:
    run_pod(setup, ns, "web", "mkdir -p /www && echo hello-spdy > /www/index.html && httpd -f -p 8080 -h /www")
    local = free_port()
    pf = subprocess.Popen([KUBECTL, "--kubeconfig", str(setup.kubeconfig), "-n", ns, "port-forward", "pod/web",
                           f"{local}:8080"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, **NO_WS})
    try:
        assert pf.stdout is not None
        assert "Forwarding from 127.0.0.1" in pf.stdout.readline()

        def get() -> str | None:
            try:
                return httpx.get(f"http://127.0.0.1:{local}/index.html", timeout=5).text
            except httpx.HTTPError:
                return None

        assert wait(get, 20) == "hello-spdy\n"
        assert get() == "hello-spdy\n"
        closed = httpx.get(f"http://127.0.0.1:{local}/missing", timeout=5)
        assert closed.status_code == 404
        assert pf.poll() is None
    finally:
        pf.kill()
        pf.wait(5)


def test_logs_through_authenticated_kubelet(setup: Setup, ns: str) -> None:
    run_pod(setup, ns, "hello", "echo hello-logs; sleep 3600")
    assert wait(lambda: setup.kubectl("-n", ns, "logs", "hello").stdout) == "hello-logs\n"


def test_kubelet_rejects_requests_without_credentials(setup: Setup) -> None:
    with httpx.Client(base_url=setup.kubelet, verify=False) as c:
        assert c.get("/healthz").text == "ok"
        anonymous = c.get("/pods")
        assert anonymous.status_code == 401 and anonymous.text == "Unauthorized"
        assert c.get("/stats/summary").status_code == 401
        unknown = c.get("/pods", headers={"Authorization": "Bearer not-a-token-the-apiserver-issued"})
        assert unknown.status_code == 401 and unknown.text == "Unauthorized"
        assert c.post("/exec/x/y/z?command=true&output=1").status_code == 401


def test_kubelet_accepts_the_apiservers_client_certificate(setup: Setup) -> None:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(*setup.client_cert)
    with httpx.Client(base_url=setup.kubelet, verify=ctx) as c:
        pods = c.get("/pods")
        assert pods.status_code == 200 and pods.json()["kind"] == "PodList"
        assert c.get("/stats/summary").json()["node"]["nodeName"] == NODE
    other = pki.create_ca("someone-else")
    stranger = pki.issue_client_cert(other, "kube-apiserver-kubelet-client", ["system:masters"])
    stranger.write(setup.base / "stranger.crt", setup.base / "stranger.key")
    bad = ssl.create_default_context()
    bad.check_hostname = False
    bad.verify_mode = ssl.CERT_NONE
    bad.load_cert_chain(setup.base / "stranger.crt", setup.base / "stranger.key")
    with pytest.raises((httpx.HTTPError, ssl.SSLError)), httpx.Client(base_url=setup.kubelet, verify=bad) as c:
        c.get("/pods").raise_for_status()


def test_kubelet_accepts_a_service_account_token(setup: Setup, ns: str) -> None:
    setup.kubectl("-n", ns, "create", "serviceaccount", "reader")
    token = setup.kubectl("-n", ns, "create", "token", "reader").stdout.strip()
    with httpx.Client(base_url=setup.kubelet, verify=False, headers={"Authorization": f"Bearer {token}"}) as c:
        pods = c.get("/pods")
        assert pods.status_code == 200 and pods.json()["kind"] == "PodList"
        assert c.get("/metrics").status_code == 200
