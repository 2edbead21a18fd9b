"""Service networking across two real nodes (issue 7's Done-when, as far as the pieces go), once per
kube-proxy mode: a 3-replica Deployment spread over both nodes and `kubectl expose`d; from a client pod
on each node the ClusterIP reaches several backends, the NodePort answers on each node's IP, a pod on the
other node answers by pod IP, a ClientIP-affine Service keeps each client on one backend, and the
cluster DNS, asked from inside the pods, resolves the Service's name to its ClusterIP, a headless
Service's name to its pods' IPs and a StatefulSet pod's stable name to that pod's IP.

Every client pod prints what it got; the test reads the kubelet's container log files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import free_port
from tests.e2e.test_cluster_up import (
    POD_TIMEOUT,
    UP_TIMEOUT,
    Cluster,
    container_log,
    pyk8s,
    short_state_dir,
    wait_for,
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("containerd"), reason="real nodes need root and containerd"
)

NS = "svc-e2e"
NODES = ("node-1", "node-2")
CLIENT_SCRIPT = r"""
req() { printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 "$1" "$2" 2>/dev/null | tail -n 1; }
for i in $(seq 1 12); do echo "clusterip $(req "$SVC_IP" 80)"; done
for i in $(seq 1 3); do echo "byname $(req "web.$NS.svc.cluster.local" 80)"; done
for ip in $NODE_IPS; do for i in $(seq 1 6); do echo "nodeport-$ip $(req "$ip" "$NODE_PORT")"; done; done
echo "podip $(req "$REMOTE_POD_IP" 8080)"
for i in $(seq 1 8); do echo "sticky $(req "$STICKY_IP" 80)"; done
nslookup "web.$NS.svc.cluster.local" 2>&1 | sed 's/^/dns /'
nslookup "web-headless.$NS.svc.cluster.local" 2>&1 | sed 's/^/headless /'
nslookup "db-0.db.$NS.svc.cluster.local" 2>&1 | sed 's/^/sts /'
echo DONE
"""
_IPV4 = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b")
WEB_COMMAND = "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"


@dataclass
class Setup:
    cluster: Cluster
    mode: str
    backends: dict[str, str]  # pod name -> node
    backend_ips: dict[str, str]  # pod name -> pod IP
    node_ips: dict[str, str]
    cluster_ip: str
    node_port: int
    db_ip: str
    results: dict[str, dict[str, list[str]]]  # client node -> prefix -> values
    logs: dict[str, str]


def web_deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "httpd", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", WEB_COMMAND], "ports": [{"containerPort": 8080}],
                    # Requests let the scheduler's least-allocated scoring spread the replicas.
                    "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}},
                }]},
            },
        },
    }


def db_statefulset() -> dict[str, Any]:
    """One replica behind its headless governing Service: the pod's DNS name is db-0.db.<ns>.svc."""
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": NS},
        "spec": {
            "replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "db", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", WEB_COMMAND], "ports": [{"containerPort": 8080}]}]},
            },
        },
    }


def headless_service(name: str, app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterIP": "None", "selector": {"app": app}, "ports": [{"port": 8080}]}}


def client_pod(node: str, env: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"client-{node}", "namespace": NS},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
                 "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "client", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                                 "command": ["sh", "-c", CLIENT_SCRIPT],
                                 "env": [{"name": k, "value": v} for k, v in env.items()]}]},
    }


def parse(log: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in log.splitlines():
        prefix, _, value = line.partition(" ")
        out.setdefault(prefix, []).append(value.strip())
    return out


def running_backends(cluster: Cluster) -> list[dict[str, Any]]:
    pods = cluster.get("pods", "-n", NS, "-l", "app=web")["items"]
    return [p for p in pods if p.get("status", {}).get("phase") == "Running" and p["status"].get("podIP")]


def ready_endpoints(cluster: Cluster, service: str) -> int:
    slices = cluster.get("endpointslices", "-n", NS, "-l", f"kubernetes.io/service-name={service}")["items"]
    return sum(1 for s in slices for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready"))


@pytest.fixture(scope="module", params=["iptables", "nftables"])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    mode = request.param
    state_dir = short_state_dir()
    started = time.monotonic()
    result = pyk8s("up", "--state-dir", str(state_dir), "--port", str(free_port()), "--nodes", "2",
                   "--proxy-mode", mode, timeout=UP_TIMEOUT)
    try:
        assert result.returncode == 0, f"pyk8s up failed:\n{result.stdout}\n{result.stderr}"
        cluster = Cluster(state_dir, time.monotonic() - started, result.stdout)
        cluster.kubectl("create", "namespace", NS)
        cluster.apply(web_deployment())
        assert wait_for(lambda: len(running_backends(cluster)) == 3, POD_TIMEOUT), \
            cluster.kubectl("get", "pods", "-n", NS, "-o", "wide")
        cluster.kubectl("expose", "deployment", "web", "-n", NS, "--port", "80", "--target-port", "8080")
        cluster.kubectl("expose", "deployment", "web", "-n", NS, "--name", "web-np", "--type", "NodePort",
                        "--port", "80", "--target-port", "8080")
        cluster.kubectl("expose", "deployment", "web", "-n", NS, "--name", "web-sticky", "--port", "80",
                        "--target-port", "8080", "--session-affinity", "ClientIP")
        cluster.apply(headless_service("web-headless", "web"))
        cluster.apply(headless_service("db", "db"))
        cluster.apply(db_statefulset())
        db = cluster.wait_pod(NS, "db-0", ("Running",))
        for service in ("web", "web-np", "web-sticky", "web-headless"):
            assert wait_for(lambda s=service: ready_endpoints(cluster, s) == 3, 30), f"{service} has no endpoints"
        pods = running_backends(cluster)
        backends = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        backend_ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
        node_ips = {n["metadata"]["name"]: next(a["address"] for a in n["status"]["addresses"]
                                                if a["type"] == "InternalIP")
                    for n in cluster.get("nodes")["items"]}
        cluster_ip = cluster.get("service", "web", "-n", NS)["spec"]["clusterIP"]
        node_port = int(cluster.get("service", "web-np", "-n", NS)["spec"]["ports"][0]["nodePort"])
        sticky_ip = cluster.get("service", "web-sticky", "-n", NS)["spec"]["clusterIP"]
        assert wait_for(lambda: ready_endpoints(cluster, "db") == 1, 30), "db has no endpoints"
        for node in NODES:
            remote = next((name for name, n in backends.items() if n != node), "")
            env = {"NS": NS, "SVC_IP": cluster_ip, "NODE_PORT": str(node_port),
                   "NODE_IPS": " ".join(node_ips[n] for n in NODES), "REMOTE_POD_IP": backend_ips.get(remote, ""),
                   "STICKY_IP": sticky_ip}
            cluster.apply(client_pod(node, env))
        results, logs = {}, {}
        for node in NODES:
            pod = cluster.wait_pod(NS, f"client-{node}", ("Succeeded", "Failed"))
            assert wait_for(lambda p=pod: "DONE" in container_log(p, "client"), 10), container_log(pod, "client")
            logs[node] = container_log(pod, "client")
            results[node] = parse(logs[node])
        yield Setup(cluster, mode, backends, backend_ips, node_ips, cluster_ip, node_port, db["status"]["podIP"],
                    results, logs)
    finally:
        pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
        shutil.rmtree(state_dir.parent, ignore_errors=True)


def test_proxy_runs_in_the_requested_mode(setup: Setup) -> None:
    """The rules really are iptables or nftables ones, inside the node's namespace and not the host's."""
    for node in NODES:
        netns = f"--net=/var/run/netns/pyk8s-{setup.cluster.state.cluster_id}-{node}"
        if setup.mode == "nftables":
            tool = ["nsenter", netns, "nft", "list", "table", "ip", "kube-proxy"]
        else:  # pyk8s up runs kube-proxy on iptables-legacy where it is installed
            save = "iptables-legacy-save" if shutil.which("iptables-legacy-save") else "iptables-save"
            tool = ["nsenter", netns, save, "-t", "nat"]
        out = subprocess.run(tool, capture_output=True, text=True, timeout=30, check=False).stdout
        assert setup.cluster_ip in out, f"{node}: no rule for the ClusterIP in\n{out}"


def test_backends_spread_over_both_nodes(setup: Setup) -> None:
    assert set(setup.backends.values()) == set(NODES), setup.backends


@pytest.mark.parametrize("node", NODES)
def test_cluster_ip_reaches_several_backends(setup: Setup, node: str) -> None:
    got = setup.results[node].get("clusterip", [])
    answered = [g for g in got if g]
    assert len(answered) == len(got) == 12, setup.logs[node]
    assert set(answered) <= set(setup.backends), setup.logs[node]
    assert len(set(answered)) >= 2, f"one backend only from {node}: {answered}"


@pytest.mark.parametrize("node", NODES)
def test_node_port_answers_on_each_node_ip(setup: Setup, node: str) -> None:
    for target, ip in setup.node_ips.items():
        got = setup.results[node].get(f"nodeport-{ip}", [])
        assert got and all(g in setup.backends for g in got), f"{node} -> {target} {ip}:{setup.node_port}: {got}"


@pytest.mark.parametrize("node", NODES)
def test_pod_reaches_pod_on_the_other_node_by_ip(setup: Setup, node: str) -> None:
    remote = [name for name, n in setup.backends.items() if n != node]
    assert remote, f"no backend on the node other than {node}"
    assert setup.results[node].get("podip") == [remote[0]], setup.logs[node]


@pytest.mark.parametrize("node", NODES)
def test_dns_name_resolves_to_the_cluster_ip(setup: Setup, node: str) -> None:
    dns = setup.results[node].get("dns", [])
    name_at = next((i for i, line in enumerate(dns) if line.startswith("Name:")), None)
    assert name_at is not None, setup.logs[node]
    assert f"web.{NS}.svc.cluster.local" in dns[name_at]
    assert any(setup.cluster_ip in line for line in dns[name_at + 1:]), setup.logs[node]
    by_name = setup.results[node].get("byname", [])
    assert by_name and all(g in setup.backends for g in by_name), setup.logs[node]


@pytest.mark.parametrize("node", NODES)
def test_session_affinity_pins_the_client(setup: Setup, node: str) -> None:
    got = setup.results[node].get("sticky", [])
    assert len(got) == 8 and got[0] in setup.backends, setup.logs[node]
    assert set(got) == {got[0]}, f"ClientIP affinity let {node}'s client reach {set(got)}"


def _addresses(lines: list[str]) -> set[str]:
    """The answer addresses busybox's nslookup printed after the first `Name:` line."""
    name_at = next((i for i, line in enumerate(lines) if line.startswith("Name:")), len(lines))
    return {ip for line in lines[name_at:] if line.startswith("Address") for ip in _IPV4.findall(line)}


@pytest.mark.parametrize("node", NODES)
def test_headless_service_resolves_to_its_pod_ips(setup: Setup, node: str) -> None:
    got = _addresses(setup.results[node].get("headless", []))
    assert got == set(setup.backend_ips.values()), setup.logs[node]


@pytest.mark.parametrize("node", NODES)
def test_statefulset_pod_name_resolves_to_its_ip(setup: Setup, node: str) -> None:
    assert _addresses(setup.results[node].get("sts", [])) == {setup.db_ip}, setup.logs[node]
