"""`kubectl debug` with ephemeral containers on a real containerd: the debugger joins the target
container's PID namespace, runs once, and `kubectl debug -it` attaches to it (real kubectl, real kubelet,
containerd in a test netns)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KUBECTL, Kubectl
from tests.e2e.containerd_fixture import Containerd, containerd  # noqa: F401 - fixture
from tests.e2e.kubelet_fixture import loopback_kubelet, wait

NODE = "e2e-debug-0"


@pytest.fixture(scope="module")
def node(kubeconfig: Path, containerd: Containerd, kubectl: Kubectl) -> Iterator[int]:  # noqa: F811
    with loopback_kubelet(kubeconfig, containerd, kubectl, NODE) as port:
        yield port


def run_pod(kubectl: Kubectl, ns: str, name: str) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [
               {"name": "app", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "exec sleep 3601"]}]}}
    kubectl.run("apply", "-f", "-", stdin=json.dumps(pod))
    wait(lambda: kubectl.run("-n", ns, "get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running")


def ephemeral_state(kubectl: Kubectl, ns: str, pod: str, name: str) -> dict[str, Any]:
    p = kubectl.json("-n", ns, "get", "pod", pod)
    found = [s for s in p["status"].get("ephemeralContainerStatuses") or [] if s["name"] == name]
    return found[0]["state"] if found else {}


def test_debug_shares_target_pid_namespace(node: int, kubectl: Kubectl, unique_ns: str) -> None:
    run_pod(kubectl, unique_ns, "target")
    out = kubectl.run("-n", unique_ns, "debug", "target", "--image=busybox", "--image-pull-policy=IfNotPresent",
                      "--target=app", "--", "sh", "-c", "ps; echo debug-done")
    match = re.search(r"Defaulting debug container name to (debugger-\w+)", out.stdout + out.stderr)
    assert match, out.stderr
    name = match.group(1)
    state = wait(lambda: ephemeral_state(kubectl, unique_ns, "target", name).get("terminated"), 60)
    assert state["exitCode"] == 0 and state["reason"] == "Completed"
    logs = kubectl.run("-n", unique_ns, "logs", "target", "-c", name).stdout
    assert "sleep 3601" in logs and logs.rstrip().endswith("debug-done")
    spec = kubectl.json("-n", unique_ns, "get", "pod", "target")["spec"]
    [eph] = spec["ephemeralContainers"]
    assert eph["name"] == name and eph["targetContainerName"] == "app" and eph["imagePullPolicy"] == "IfNotPresent"
    # Without a target the debugger gets its own PID namespace and does not see the app.
    out = kubectl.run("-n", unique_ns, "debug", "target", "--image=busybox", "--image-pull-policy=IfNotPresent",
                      "--container=alone", "--", "sh", "-c", "ps; echo alone-done")
    wait(lambda: ephemeral_state(kubectl, unique_ns, "target", "alone").get("terminated"), 60)
    logs = kubectl.run("-n", unique_ns, "logs", "target", "-c", "alone").stdout
    assert "alone-done" in logs and "sleep 3601" not in logs
    # The finished debugger is not restarted, and the pod keeps running.
    time.sleep(2)
    assert ephemeral_state(kubectl, unique_ns, "target", name)["terminated"]["exitCode"] == 0
    p = kubectl.json("-n", unique_ns, "get", "pod", "target")
    assert p["status"]["phase"] == "Running"
    assert all(s["restartCount"] == 0 for s in p["status"]["ephemeralContainerStatuses"])


def test_debug_interactive_attaches(node: int, kubectl: Kubectl, unique_ns: str) -> None:
    run_pod(kubectl, unique_ns, "shell")
    command = (f"{KUBECTL} --kubeconfig {kubectl.kubeconfig} -n {unique_ns} debug -it shell --image=busybox "
               "--image-pull-policy=IfNotPresent --target=app --container=dbg -- sh")
    # `script` gives kubectl the terminal -it needs; what we type waits in it until kubectl attaches.
    result = subprocess.run(["script", "-qec", command, "/dev/null"], input="echo answer-$((40+2)); tty; exit 5\n",
                            capture_output=True, text=True, timeout=90)
    assert "answer-42" in result.stdout, result.stdout + result.stderr
    assert "/dev/pts/" in result.stdout
    state = wait(lambda: ephemeral_state(kubectl, unique_ns, "shell", "dbg").get("terminated"), 30)
    assert state["exitCode"] == 5
