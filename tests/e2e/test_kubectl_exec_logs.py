"""kubectl logs, exec, cp, attach and port-forward against pods on a real containerd, through the
apiserver's proxy and the kubelet API (real kubectl, real kubelet, containerd in a test netns)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import KUBECTL, Kubectl, free_port
from tests.e2e.containerd_fixture import Containerd, containerd  # noqa: F401 - fixture
from tests.e2e.kubelet_fixture import loopback_kubelet, wait

NODE = "e2e-exec-0"


@pytest.fixture(scope="module")
def node(kubeconfig: Path, containerd: Containerd, kubectl: Kubectl) -> Iterator[int]:  # noqa: F811
    with loopback_kubelet(kubeconfig, containerd, kubectl, NODE) as port:
        yield port


def run_pod(kubectl: Kubectl, ns: str, name: str, command: str, *, ready: bool = True) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [
               {"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", command]}]}}
    kubectl.run("apply", "-f", "-", stdin=json.dumps(pod))
    if ready:
        wait(lambda: kubectl.run("-n", ns, "get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running")


COUNTER = "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.5; done"


def test_logs_tail_and_follow(node: int, kubectl: Kubectl, unique_ns: str) -> None:
    run_pod(kubectl, unique_ns, "counter", COUNTER)
    wait(lambda: "line 3" in kubectl.run("-n", unique_ns, "logs", "counter").stdout)
    out = kubectl.run("-n", unique_ns, "logs", "counter").stdout.splitlines()
    assert out[:3] == ["line 0", "line 1", "line 2"]
    tail = kubectl.run("-n", unique_ns, "logs", "counter", "--tail", "2").stdout.splitlines()
    assert len(tail) == 2 and tail[0].startswith("line ")
    stamped = kubectl.run("-n", unique_ns, "logs", "counter", "--tail", "1", "--timestamps").stdout
    assert stamped[:4].isdigit() and "Z line " in stamped
    assert kubectl.run("-n", unique_ns, "logs", "counter", "--limit-bytes", "4").stdout == "line"
    last = int(tail[-1].split()[1])
    follow = subprocess.Popen([KUBECTL, "--kubeconfig", str(kubectl.kubeconfig), "-n", unique_ns, "logs", "-f",
                               "counter", "--tail", "1"], stdout=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        seen = [int(follow.stdout.readline().split()[1]) for _ in range(4)]
    finally:
        follow.kill()
        follow.wait(5)
    assert seen == sorted(seen) and seen[-1] >= last + 2
    bad = kubectl.run("-n", unique_ns, "logs", "counter", "-c", "nope", check=False)
    assert bad.returncode != 0 and "container nope is not valid for pod counter" in bad.stderr


def test_logs_previous_after_restart(node: int, kubectl: Kubectl, unique_ns: str) -> None:
    run_pod(kubectl, unique_ns, "crash", "echo started-at $(date +%s); sleep 1; exit 1", ready=False)
    wait(lambda: kubectl.run("-n", unique_ns, "get", "pod", "crash", "-o",
                             "jsonpath={.status.containerStatuses[0].restartCount}").stdout not in ("", "0"), 90)
    previous = kubectl.run("-n", unique_ns, "logs", "crash", "--previous").stdout
    assert previous.startswith("started-at ")
    current = wait(lambda: kubectl.run("-n", unique_ns, "logs", "crash", check=False).stdout, 60)
    assert current.startswith("started-at ") and current != previous


def test_exec_output_exit_code_and_stdin(node: int, kubectl: Kubectl, unique_ns: str) -> None:
    run_pod(kubectl, unique_ns, "shell", "sleep 3600")
    assert kubectl.run("-n", unique_ns, "exec", "shell", "--", "cat", "/etc/hostname").stdout == "shell\n"
    failed = kubectl.run("-n", unique_ns, "exec", "shell", "--", "sh", "-c", "echo oops >&2; exit 3", check=False)
    assert failed.returncode == 3 and "oops" in failed.stderr
    echoed = kubectl.run("-n", unique_ns, "exec", "-i", "shell", "--", "sh", "-c", "tr a-z A-Z", stdin="hello\n")
    assert echoed.stdout == "HELLO\n"
    missing = kubectl.run("-n", unique_ns, "exec", "shell", "--", "/no/such/binary", check=False)
    assert missing.returncode != 0 and "no/such/binary" in missing.stderr
    # -it needs a terminal: `script` gives kubectl one, and the shell in the pod must see a tty too.
    tty = subprocess.run(["script", "-qec", f"{KUBECTL} --kubeconfig {kubectl.kubeconfig} -n {unique_ns} exec -it "
                          "shell -- sh -c 'tty; exit 4'", "/dev/null"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    assert "/dev/pts/" in tty.stdout and "exit code 4" in tty.stdout


def test_cp_in_and_out(node: int, kubectl: Kubectl, unique_ns: str, tmp_path: Path) -> None:
    run_pod(kubectl, unique_ns, "files", "sleep 3600")
    src = tmp_path / "in.txt"
    src.write_bytes(os.urandom(100_000).hex().encode())
    kubectl.run("-n", unique_ns, "cp", str(src), "files:/tmp/in.txt")
    size = kubectl.run("-n", unique_ns, "exec", "files", "--", "wc", "-c", "/tmp/in.txt").stdout.split()[0]
    assert int(size) == src.stat().st_size
    dst = tmp_path / "out.txt"
    kubectl.run("-n", unique_ns, "cp", "files:/tmp/in.txt", str(dst))
    assert dst.read_bytes() == src.read_bytes()


def test_attach_streams_output(node: int, kubectl: Kubectl, unique_ns: str) -> None:
    run_pod(kubectl, unique_ns, "talker", COUNTER)
    attach = subprocess.Popen([KUBECTL, "--kubeconfig", str(kubectl.kubeconfig), "-n", unique_ns, "attach",
                               "talker"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert attach.stdout is not None
        lines = [attach.stdout.readline() for _ in range(2)]
    finally:
        attach.kill()
        attach.wait(5)
    assert all(line.startswith("line ") for line in lines)


def test_port_forward_then_http(node: int, kubectl: Kubectl, unique_ns: str) -> None:
    run_pod(kubectl, unique_ns, "web", "mkdir -p /www && echo hello-from-pod > /www/index.html && "
                                      "httpd -f -p 8080 -h /www")
    local = free_port()
    pf = subprocess.Popen([KUBECTL, "--kubeconfig", str(kubectl.kubeconfig), "-n", unique_ns, "port-forward",
                           "pod/web", f"{local}:8080"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert pf.stdout is not None
        assert "Forwarding from 127.0.0.1" in pf.stdout.readline()

        def get() -> str | None:
            try:
                return httpx.get(f"http://127.0.0.1:{local}/index.html", timeout=5).text
            except httpx.HTTPError:
                return None

        assert wait(get, 20) == "hello-from-pod\n"
        assert get() == "hello-from-pod\n"
        assert pf.poll() is None
    finally:
        pf.kill()
        pf.wait(5)


def test_node_proxy_stats_pods_and_health(node: int, kubectl: Kubectl, unique_ns: str) -> None:
    run_pod(kubectl, unique_ns, "busy", "sleep 3600")
    base = f"/api/v1/nodes/{NODE}/proxy"
    assert kubectl.run("get", "--raw", f"{base}/healthz").stdout == "ok"
    pods = json.loads(kubectl.run("get", "--raw", f"{base}/pods").stdout)
    assert any(p["metadata"]["name"] == "busy" for p in pods["items"])

    def stats() -> dict[str, Any] | None:
        summary = json.loads(kubectl.run("get", "--raw", f"{base}/stats/summary").stdout)
        pod = next((p for p in summary["pods"] if p["podRef"]["name"] == "busy"), None)
        return summary if pod and pod["containers"] else None

    summary = wait(stats, 30)
    assert summary["node"]["nodeName"] == NODE and summary["node"]["cpu"]["usageCoreNanoSeconds"] > 0
    busy = next(p for p in summary["pods"] if p["podRef"]["name"] == "busy")
    assert busy["podRef"]["namespace"] == unique_ns and busy["containers"][0]["name"] == "c"
    assert busy["containers"][0]["memory"]["workingSetBytes"] > 0
    assert "# HELP" in kubectl.run("get", "--raw", f"{base}/metrics").stdout


def test_python_client_exec_and_port_forward(node: int, kubectl: Kubectl, unique_ns: str, kubeconfig: Path) -> None:
    """The official Python client uses the older protocols: v4 channels for exec and for port-forward."""
    from kubernetes import client, config
    from kubernetes.stream import portforward, stream

    run_pod(kubectl, unique_ns, "pyweb", "mkdir -p /www && echo hello-python > /www/index.html && "
                                        "httpd -f -p 8080 -h /www")
    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    out = stream(api.connect_get_namespaced_pod_exec, "pyweb", unique_ns, command=["cat", "/etc/hostname"],
                 stderr=True, stdin=False, stdout=True, tty=False)
    assert out == "pyweb\n"
    pf = portforward(api.connect_get_namespaced_pod_portforward, "pyweb", unique_ns, ports="8080")
    sock = pf.socket(8080)
    sock.setblocking(True)
    sock.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
    reply = b""
    while chunk := sock.recv(4096):
        reply += chunk
    sock.close()
    assert reply.startswith(b"HTTP/1.") and reply.endswith(b"hello-python\n")
    assert pf.error(8080) is None
