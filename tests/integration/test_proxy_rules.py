"""kube-proxy against the real apiserver, writing its ruleset to --dry-run-output."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO


def create(apiserver: str, path: str, body: dict) -> dict:
    r = httpx.post(apiserver + path, json=body, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()


def slice_body(svc: str, ips: list[str], node: str = "node-a") -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"{svc}-abc", "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}, "nodeName": node} for ip in ips],
    }


def wait_file(path: Path, predicate: Callable[[str], bool], timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if predicate(text):
            return text
        time.sleep(0.05)
    raise AssertionError(f"rules never matched:\n{text[-3000:]}")


@pytest.mark.parametrize("mode", ["iptables", "nftables", "ipvs"])
def test_rules_follow_the_api(mode: str, apiserver: str, workdir: Path, unique_ns: str) -> None:
    ns = unique_ns
    svc = create(
        apiserver,
        f"/api/v1/namespaces/{ns}/services",
        {
            "metadata": {"name": "web"},
            "spec": {
                "type": "NodePort",
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        },
    )
    create(
        apiserver,
        f"/api/v1/namespaces/{ns}/services",
        {
            "metadata": {"name": "headless"},
            "spec": {"clusterIP": "None", "selector": {"app": "x"}, "ports": [{"port": 80}]},
        },
    )
    create(
        apiserver,
        f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
        slice_body("web", ["10.244.1.2", "10.244.1.3", "10.244.2.2"]),
    )
    cip, node_port = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["nodePort"]
    out = workdir / f"rules-{mode}-{ns}.txt"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy_agent",
            "--master",
            apiserver,
            "--hostname-override",
            "node-a",
            "--proxy-mode",
            mode,
            "--cluster-cidr",
            "10.244.0.0/16",
            "--min-sync-period",
            "0.05",
            "--dry-run-output",
            str(out),
            "--healthz-bind-address",
            "127.0.0.1:0",
            "--metrics-bind-address",
            "127.0.0.1:-1",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        if mode == "iptables":
            text = wait_file(out, lambda t: f"{ns}/web:http cluster IP" in t)
            assert f"-d {cip}/32 --dport 80 -j KUBE-SVC-" in text
            assert text.count(f'"{ns}/web:http -> ') == 3
            assert f"--dport {node_port} -j KUBE-EXT-" in text
            assert f"{ns}/headless" not in text
        elif mode == "nftables":
            text = wait_file(out, lambda t: f"{ns}/web/tcp/http" in t)
            assert f"{cip} . tcp . 80 : goto pick-3" in text
            assert f"{cip} . tcp . 80 . 0 : 10.244.1.2 . 8080" in text
            assert f"tcp . {node_port} : goto external-" in text
            assert f"tcp . {node_port} . 0 : 10.244.1.2 . 8080" in text
        else:
            text = wait_file(out, lambda t: f"-A -t {cip}:80" in t)
            assert f"-a -t {cip}:80 -r 10.244.2.2:8080 -m -w 1" in text
            assert f"add KUBE-NODE-PORT-TCP {node_port}" in text
        r = httpx.put(
            f"{apiserver}/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/web-abc",
            json={
                **slice_body("web", []),
                "metadata": {**slice_body("web", [])["metadata"], "namespace": ns},
            },
            timeout=10,
        )
        assert r.status_code == 200, r.text
        if mode == "iptables":
            text = wait_file(out, lambda t: f"{ns}/web:http has no endpoints" in t)
            assert f"-d {cip}/32 --dport 80 -j REJECT" in text
        elif mode == "nftables":
            wait_file(out, lambda t: f"{cip} . tcp . 80 : goto reject-chain" in t)
        else:
            wait_file(out, lambda t: f"-a -t {cip}:80" not in t and f"-A -t {cip}:80" in t)
    finally:
        proc.terminate()
        proc.wait(10)
