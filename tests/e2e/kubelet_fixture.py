"""A real kubelet on the test's containerd whose API listens on loopback, registered as a Node whose
address (127.0.0.1) the session's apiserver can dial for logs, exec, attach and port-forward."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.conftest import REPO, Kubectl, free_port
from tests.e2e.containerd_fixture import Containerd


def wait(fn: Callable[[], Any], timeout: float = 60.0, interval: float = 0.5) -> Any:
    """Poll `fn` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out; last: {last!r}")


def node_port(kubectl: Kubectl, node: str) -> int | None:
    """The kubelet port the Node reports, None while the Node does not exist."""
    result = kubectl.run("get", "node", node, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)["status"].get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port")


@contextlib.contextmanager
def loopback_kubelet(kubeconfig: Path, containerd: Containerd, kubectl: Kubectl, node: str) -> Iterator[int]:
    """Run the kubelet until the block ends; yields its API port once its Node reports it."""
    port = free_port()
    log_path = containerd.base / f"kubelet-{node}.log"
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubelet_agent", "--kubeconfig", str(kubeconfig), "--hostname-override", node,
         "--container-runtime-endpoint", containerd.endpoint, "--cni-conf-dir", str(containerd.cni_conf_dir),
         "--node-netns", containerd.netns_path, "--node-ip", "127.0.0.1",
         "--root-dir", str(containerd.base / f"kubelet-{node}"), "--address", "127.0.0.1", "--port", str(port),
         "--healthz-port", "0", "--log-format", "console",
         # The session's apiserver dials kubelets without a client certificate.
         "--anonymous-auth"],
        cwd=REPO, stdout=log, stderr=log)

    def registered() -> bool:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise AssertionError(f"kubelet exited with {proc.returncode}:\n{tail}")
        return node_port(kubectl, node) == port

    try:
        wait(registered, 60)
        yield port
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
