"""v1 ComponentStatus (`kubectl get cs`) against a real apiserver and etcd: a healthy scheduler stand-in on
loopback, a controller-manager URL nothing listens on, and the apiserver's own etcd."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import KUBECTL, start_apiserver


class Healthz(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = b"ok" if self.path == "/healthz" else b"nope"
        self.send_response(200 if self.path == "/healthz" else 500)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server(etcd_server: str, workdir: Path) -> Iterator[tuple[str, str]]:
    """(apiserver URL, the refused controller-manager URL)."""
    healthz = ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    threading.Thread(target=healthz.serve_forever, daemon=True).start()
    with socket.socket() as refused:
        refused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{refused.getsockname()[1]}/healthz"
        process = start_apiserver(
            [etcd_server], workdir / "componentstatus", "--etcd-prefix", "/componentstatus",
            "--scheduler-health-url", f"http://127.0.0.1:{healthz.server_address[1]}/healthz",
            "--controller-manager-health-url", dead)
        try:
            yield process.url, dead
        finally:
            process.stop()
            healthz.shutdown()
            healthz.server_close()


def _kubectl(url: str, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = workdir / "cs-kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": url}}], "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return subprocess.run([KUBECTL, "--kubeconfig", str(config), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "KUBECACHEDIR": str(workdir / "cs-cache")})


def test_kubectl_get_cs_probes_each_component(server: tuple[str, str], workdir: Path) -> None:
    url, dead = server
    result = _kubectl(url, workdir, "get", "cs")
    assert result.returncode == 0, result.stderr
    assert "Warning: v1 ComponentStatus is deprecated in v1.19+" in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "MESSAGE", "ERROR"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"scheduler", "controller-manager", "etcd-0"}
    assert rows["scheduler"].split()[1:] == ["Healthy", "ok"]
    assert rows["etcd-0"].split()[1:] == ["Healthy", "ok"]
    assert rows["controller-manager"].split()[1] == "Unhealthy"
    port = dead.split(":")[2].split("/")[0]
    assert f'Get "{dead}": dial tcp 127.0.0.1:{port}: connect: connection refused' in rows["controller-manager"]


def test_get_one_and_the_api_is_read_only(server: tuple[str, str]) -> None:
    url, _ = server
    r = httpx.get(f"{url}/api/v1/componentstatuses/etcd-0")
    assert r.status_code == 200 and r.headers["warning"] == '299 - "v1 ComponentStatus is deprecated in v1.19+"'
    assert r.json() == {"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": "etcd-0"},
                        "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]}
    r = httpx.get(f"{url}/api/v1/componentstatuses/controller-manager")
    assert r.json()["conditions"][0]["status"] == "Unknown"
    r = httpx.get(f"{url}/api/v1/componentstatuses/nope")
    assert r.status_code == 404 and r.json()["message"] == 'componentstatuses "nope" not found'
    assert httpx.post(f"{url}/api/v1/componentstatuses", json={"metadata": {"name": "x"}}).status_code == 405
    assert httpx.get(f"{url}/api/v1/componentstatuses?watch=true").status_code == 405
    resources = httpx.get(f"{url}/api/v1").json()["resources"]
    cs = next(r for r in resources if r["name"] == "componentstatuses")
    assert cs["verbs"] == ["get", "list"] and cs["shortNames"] == ["cs"] and cs["namespaced"] is False
