"""services/proxy and pods/proxy on a real cluster: the apiserver on the host reaches a busybox httpd pod on a
real node, through the pod network routes `pyk8s up` gives the host, by `kubectl get --raw` and `kubectl proxy`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import KUBECTL, free_port
from tests.e2e.test_cluster_up import UP_TIMEOUT, Cluster, pyk8s, short_state_dir, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("containerd"), reason="real nodes need root and containerd"
)

PAGE = "hello through the apiserver proxy"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    state_dir = short_state_dir()
    started = time.monotonic()
    result = pyk8s("up", "--state-dir", str(state_dir), "--port", str(free_port()), "--nodes", "1",
                   timeout=UP_TIMEOUT)
    try:
        assert result.returncode == 0, f"pyk8s up failed:\n{result.stdout}\n{result.stderr}"
        yield Cluster(state_dir, time.monotonic() - started, result.stdout)
    finally:
        pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
        shutil.rmtree(state_dir.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def web(cluster: Cluster) -> str:
    """A busybox httpd pod behind the Service `web` (port 80 to 8080); its name once the endpoint is ready."""
    cluster.apply({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "httpd", "image": "busybox", "imagePullPolicy": "IfNotPresent",
            "ports": [{"name": "http", "containerPort": 8080}],
            "command": ["sh", "-c", f"mkdir -p /www && echo '{PAGE}' > /www/index.html && "
                                    "exec httpd -f -p 8080 -h /www"]}]},
    })
    cluster.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
                   "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}})
    cluster.wait_pod("default", "web-0", ("Running",))

    def ready() -> bool:
        subsets = cluster.get("endpoints", "web", "-n", "default").get("subsets") or []
        return any(s.get("addresses") for s in subsets)

    assert wait_for(ready, 60), cluster.get("endpoints", "web", "-n", "default")
    return "web-0"


def test_service_proxy_through_get_raw(cluster: Cluster, web: str) -> None:
    body = cluster.kubectl("get", "--raw", "/api/v1/namespaces/default/services/web:80/proxy/")
    assert body.strip() == PAGE
    body = cluster.kubectl("get", "--raw", "/api/v1/namespaces/default/services/http:web:80/proxy/index.html?x=1")
    assert body.strip() == PAGE


def test_pod_proxy_through_get_raw(cluster: Cluster, web: str) -> None:
    body = cluster.kubectl("get", "--raw", f"/api/v1/namespaces/default/pods/{web}:8080/proxy/")
    assert body.strip() == PAGE
    # Without a port, upstream picks the first container port the pod declares.
    body = cluster.kubectl("get", "--raw", f"/api/v1/namespaces/default/pods/{web}/proxy/index.html")
    assert body.strip() == PAGE


def test_kubectl_proxy_reaches_the_service(cluster: Cluster, web: str) -> None:
    port = free_port()
    proc = subprocess.Popen([KUBECTL, "--kubeconfig", str(cluster.state_dir / "kubeconfig"), "proxy",
                             f"--port={port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/api/v1/namespaces/default/services/web:80/proxy/"

        def answered() -> bool:
            try:
                return httpx.get(url, timeout=10).status_code == 200
            except httpx.HTTPError:
                return False

        assert wait_for(answered, 30), "kubectl proxy never answered"
        r = httpx.get(url, timeout=10)
        assert r.text.strip() == PAGE
        missing = httpx.get(url + "nope.html", timeout=10)
        assert missing.status_code == 404
    finally:
        proc.terminate()
        proc.wait(10)


def test_runtime_class_handler_reaches_containerd(cluster: Cluster) -> None:
    """The kubelet passes the RuntimeClass's handler to RunPodSandbox: `runc` (what `pyk8s up` configures)
    runs the pod; a handler containerd does not know fails the sandbox with containerd's own error."""
    for name, handler in (("runc", "runc"), ("unknown", "nosuchruntime")):
        cluster.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
                       "handler": handler})
    for name in ("runc", "unknown"):
        cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"rc-{name}", "namespace": "default"},
                       "spec": {"runtimeClassName": name, "terminationGracePeriodSeconds": 1, "containers": [{
                           "name": "main", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                           "command": ["sleep", "3600"]}]}})
    cluster.wait_pod("default", "rc-runc", ("Running",))

    def sandbox_failed() -> bool:
        events = cluster.get("events", "-n", "default", "--field-selector", "involvedObject.name=rc-unknown")
        return any(e.get("reason") == "FailedCreatePodSandBox" and "nosuchruntime" in e.get("message", "")
                   for e in events.get("items") or [])

    assert wait_for(sandbox_failed, 60), cluster.get("events", "-n", "default")
    assert cluster.get("pod", "rc-unknown", "-n", "default")["status"].get("phase") == "Pending"
