"""LoadBalancer Services on real nodes, once per kube-proxy mode: pyk8s-service-lb gives them the nodes'
addresses as k3s's ServiceLB does, kube-proxy answers there, and the host reaches them.

One backend runs on node-1. A Cluster-policy Service answers on both nodes' addresses; a Local-policy
one is announced on node-1 only, whose healthCheckNodePort says 200 where node-2's says 503; one
without node ports still answers on its address; a Service of another loadBalancerClass and one whose
port is already taken get no address; a Service turned into a ClusterIP one gives its address back. The
cluster also ships the default IngressClass `pyk8s`, the host reaches pod IPs and ClusterIPs, and `down`
leaves the host's routes and tables as they were before `up`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.nodes import bridge_name
from deploy.state import State
from tests.conftest import free_port
from tests.e2e.test_cluster_up import POD_TIMEOUT, UP_TIMEOUT, Cluster, pyk8s, short_state_dir, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("containerd"), reason="real nodes need root and containerd"
)

NS = "lb-e2e"
WEB = "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"


@dataclass
class Setup:
    cluster: Cluster
    node_ips: dict[str, str]
    backend: str


def get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """(status, body) of a GET from the host; (0, error) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - our own test addresses
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


def lb_service(name: str, port: int, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
            "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                     "ports": [{"port": port, "targetPort": 8080, "protocol": "TCP"}], **spec}}


def ingress(cluster: Cluster, name: str) -> list[str]:
    svc = cluster.get("service", name, "-n", NS)
    return [i["ip"] for i in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []]


def host_tables() -> set[str]:
    """The host's routes (every table), rules and firewall tables, line by line, to compare before `up`
    and after `down` (iptables-save's comments and counters left out)."""
    out = set()
    for argv in (["ip", "-4", "route", "show", "table", "all"], ["ip", "rule"], ["nft", "list", "ruleset"],
                 ["iptables-legacy-save"], ["iptables-nft-save"]):
        if shutil.which(argv[0]):
            result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            out |= {f"{argv[0]}: {line.strip()}" for line in result.stdout.splitlines()
                    if not line.startswith(("#", ":"))}
    return out


def ours(lines: set[str], state_dir: Path) -> list[str]:
    """The lines that name this cluster's bridge, node segment or CIDRs, or a pyk8s component's rules."""
    state = State.load(state_dir)
    marks = (bridge_name(state), state.settings.node_subnet.rsplit(".", 1)[0] + ".", "proto 77", "10.96.0.0/12",
             "10.244.", "KUBE-", "kube-proxy", "kube-network-policies", "PYK8S")
    return sorted(line for line in lines if any(m in line for m in marks))


@pytest.fixture(scope="module", params=["iptables", "nftables"])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    state_dir = short_state_dir()
    before = host_tables()
    started = time.monotonic()
    result = pyk8s("up", "--state-dir", str(state_dir), "--port", str(free_port()), "--nodes", "2",
                   "--proxy-mode", request.param, timeout=UP_TIMEOUT)
    try:
        assert result.returncode == 0, f"pyk8s up failed:\n{result.stdout}\n{result.stderr}"
        cluster = Cluster(state_dir, time.monotonic() - started, result.stdout)
        cluster.kubectl("create", "namespace", NS)
        cluster.apply({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": "node-1"}, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "web", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", WEB], "ports": [{"containerPort": 8080}]}]}})
        cluster.wait_pod(NS, "web", ("Running",))
        node_ips = {n["metadata"]["name"]: next(a["address"] for a in n["status"]["addresses"]
                                                if a["type"] == "InternalIP")
                    for n in cluster.get("nodes")["items"]}
        yield Setup(cluster, node_ips, "web")
    finally:
        pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
    changed = ours(host_tables() ^ before, state_dir)
    shutil.rmtree(state_dir.parent, ignore_errors=True)
    assert not changed, f"pyk8s down left the host's routes or tables changed: {changed}"


def test_cluster_policy_service_answers_on_every_node_address(setup: Setup) -> None:
    cluster = setup.cluster
    cluster.apply(lb_service("cluster", 80))
    want = sorted(setup.node_ips.values())
    assert wait_for(lambda: sorted(ingress(cluster, "cluster")) == want, POD_TIMEOUT), ingress(cluster, "cluster")
    row = cluster.kubectl("get", "service", "cluster", "-n", NS, "--no-headers")
    assert ",".join(want) in row or all(ip in row for ip in want), row
    for ip in want:
        assert wait_for(lambda ip=ip: get(f"http://{ip}/") == (200, "web\n"), 30), get(f"http://{ip}/")


def test_local_policy_service_is_announced_where_its_endpoint_is(setup: Setup) -> None:
    cluster = setup.cluster
    cluster.apply(lb_service("local", 81, externalTrafficPolicy="Local"))
    node1, node2 = setup.node_ips["node-1"], setup.node_ips["node-2"]
    assert wait_for(lambda: ingress(cluster, "local") == [node1], POD_TIMEOUT), ingress(cluster, "local")
    assert wait_for(lambda: get(f"http://{node1}:81/") == (200, "web\n"), 30), get(f"http://{node1}:81/")
    health = cluster.get("service", "local", "-n", NS)["spec"]["healthCheckNodePort"]
    assert wait_for(lambda: get(f"http://{node1}:{health}/")[0] == 200, 30), get(f"http://{node1}:{health}/")
    status, body = get(f"http://{node2}:{health}/")
    assert status == 503, (status, body)
    assert json.loads(body)["localEndpoints"] == 0
    assert json.loads(get(f"http://{node1}:{health}/")[1])["localEndpoints"] == 1


def test_without_node_ports_it_still_answers_on_its_address(setup: Setup) -> None:
    cluster = setup.cluster
    cluster.apply(lb_service("no-node-ports", 82, allocateLoadBalancerNodePorts=False))
    spec = cluster.get("service", "no-node-ports", "-n", NS)["spec"]
    assert "nodePort" not in spec["ports"][0], spec
    ip = setup.node_ips["node-2"]
    assert wait_for(lambda: ip in ingress(cluster, "no-node-ports"), POD_TIMEOUT)
    assert wait_for(lambda: get(f"http://{ip}:82/") == (200, "web\n"), 30), get(f"http://{ip}:82/")


def test_other_classes_and_taken_ports_get_no_address(setup: Setup) -> None:
    cluster = setup.cluster
    cluster.apply(lb_service("cluster", 80))
    assert wait_for(lambda: bool(ingress(cluster, "cluster")), POD_TIMEOUT)
    cluster.apply(lb_service("other-class", 83, loadBalancerClass="example.com/lb"))
    cluster.apply(lb_service("taken", 80))
    cluster.apply(lb_service("after", 84))
    assert wait_for(lambda: bool(ingress(cluster, "after")), POD_TIMEOUT)

    def warned() -> bool:
        events = cluster.get("events", "-n", NS, "--field-selector", "involvedObject.name=taken")["items"]
        return any(e.get("reason") == "SyncLoadBalancerFailed" and "80" in e.get("message", "") for e in events)

    assert wait_for(warned, 30)
    assert ingress(cluster, "other-class") == [] and ingress(cluster, "taken") == []
    row = cluster.kubectl("get", "service", "taken", "-n", NS, "--no-headers")
    assert "<pending>" in row, row


def test_a_service_that_stops_being_a_load_balancer_gives_the_address_back(setup: Setup) -> None:
    cluster = setup.cluster
    cluster.apply(lb_service("brief", 85))
    ip = setup.node_ips["node-1"]
    assert wait_for(lambda: get(f"http://{ip}:85/") == (200, "web\n"), POD_TIMEOUT), get(f"http://{ip}:85/")
    cluster.kubectl("patch", "service", "brief", "-n", NS, "--type", "merge", "-p",
                    json.dumps({"spec": {"type": "ClusterIP", "externalTrafficPolicy": None,
                                         "allocateLoadBalancerNodePorts": None}}))
    assert wait_for(lambda: ingress(cluster, "brief") == [], 30), ingress(cluster, "brief")
    assert wait_for(lambda: get(f"http://{ip}:85/")[0] == 0, 30), get(f"http://{ip}:85/")


def test_up_ships_the_default_ingress_class(setup: Setup) -> None:
    """`pyk8s` is the default IngressClass, so DefaultIngressClass gives it to an Ingress without one."""
    cluster = setup.cluster
    cls = cluster.get("ingressclass", "pyk8s")
    assert cls["metadata"]["annotations"]["ingressclass.kubernetes.io/is-default-class"] == "true"
    cluster.kubectl("create", "ingress", "web", "-n", NS, "--rule", "web.example/*=cluster:80")
    assert cluster.get("ingress", "web", "-n", NS)["spec"]["ingressClassName"] == "pyk8s"


def test_the_host_reaches_pod_ips_and_cluster_ips(setup: Setup) -> None:
    """`up` routes the pod CIDRs and the Service CIDR from the host to the nodes."""
    cluster = setup.cluster
    pod_ip = cluster.get("pod", "web", "-n", NS)["status"]["podIP"]
    assert get(f"http://{pod_ip}:8080/") == (200, "web\n")
    cluster.kubectl("expose", "pod", "web", "-n", NS, "--name", "plain", "--port", "80", "--target-port", "8080")
    cluster_ip = cluster.get("service", "plain", "-n", NS)["spec"]["clusterIP"]
    assert wait_for(lambda: get(f"http://{cluster_ip}/") == (200, "web\n"), 30), get(f"http://{cluster_ip}/")
    routes = subprocess.run(["ip", "-4", "route", "show", "10.96.0.0/12"], capture_output=True, text=True,
                            timeout=30, check=True).stdout
    assert "via" in routes and "proto 77" in routes, routes
