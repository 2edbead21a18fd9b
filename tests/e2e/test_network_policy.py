"""NetworkPolicy enforced on real nodes, checked as upstream's netpol e2e does: a truth table, once per
proxy mode (the agent writes nftables or iptables rules as kube-proxy does).

Three namespaces x, y, z with pods a, b, c each (a and c on node-1, b on node-2, so every case has
same-node and cross-node pairs), each pod serving its own name on TCP 80 and 81. For every case the
test applies policies, then probes every (source pod, destination pod, port) pair with nc from inside
the source pod (`kubectl exec`) and compares with the reachability the case expects, retrying until
they agree or the deadline passes, then prints the table with the mismatches marked. A pod reaching
its own IP stays on its loopback, so it is always allowed, as upstream's tables assume.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import KUBECTL, free_port
from tests.e2e.test_cluster_up import UP_TIMEOUT, Cluster, pyk8s, short_state_dir, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("containerd"), reason="real nodes need root and containerd"
)

NAMESPACES = ("x", "y", "z")
PODS = {"a": "node-1", "b": "node-2", "c": "node-1"}
PORTS = (80, 81)
CASE_TIMEOUT = 30.0
SERVE = "mkdir -p /www && echo $POD > /www/index.html && httpd -p 80 -h /www && exec httpd -f -p 81 -h /www"
PROBE = r"""
for t in $TARGETS; do for p in $PORTS; do
  ( got=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 1 "${t#*=}" "$p" 2>/dev/null | tail -n 1); echo "${t%%=*} $p $got" ) &
done; done; wait
"""

Peer = str  # "x/a"
Expect = Callable[[Peer, Peer, int], bool]


@dataclass
class Matrix:
    cluster: Cluster
    ips: dict[Peer, str]
    mode: str = "nftables"

    def rules(self, node: str | None) -> tuple[int, str]:
        """(exit code, text) of the policy rules in `node`'s namespace, or the host's when None."""
        where = ["nsenter", f"--net=/var/run/netns/pyk8s-{self.cluster.state.cluster_id}-{node}"] if node else []
        if self.mode == "nftables":
            argv = ["nft", "list", "table", "ip", "kube-network-policies"]
        else:  # the wrapper pyk8s up gives the node runs iptables-legacy where it is installed
            argv = ["iptables-legacy-save" if shutil.which("iptables-legacy-save") else "iptables-save", "-t", "filter"]
        result = subprocess.run([*where, *argv], capture_output=True, text=True, timeout=30, check=False)
        if self.mode != "nftables" and "KUBE-NWPLCY" not in result.stdout:
            return 1, result.stdout
        return result.returncode, result.stdout

    def isolated(self, node: str, ip: str) -> bool:
        """Whether `node`'s rules send new connections to `ip` through an ingress program."""
        _, text = self.rules(node)
        wanted = f"{ip} : jump ingress-" if self.mode == "nftables" else f"-d {ip}/32 -j KUBE-NWPLCY-I-"
        return wanted in text

    def probe(self, targets: dict[Peer, str] | None = None) -> dict[tuple[Peer, Peer, int], bool]:
        """Every pair once, each source pod probing all targets and ports in parallel."""
        targets = targets or self.ips
        listing = " ".join(f"{peer}={ip}" for peer, ip in targets.items())

        def run(src: Peer) -> dict[tuple[Peer, Peer, int], bool]:
            ns, pod = src.split("/")
            result = subprocess.run(
                [KUBECTL, "--kubeconfig", str(self.cluster.state_dir / "kubeconfig"), "exec", "-n", ns, pod, "--",
                 "env", f"TARGETS={listing}", f"PORTS={' '.join(map(str, PORTS))}", "sh", "-c", PROBE],
                capture_output=True, text=True, timeout=60, check=False)
            out = {}
            for line in result.stdout.splitlines():
                parts = line.split()
                if len(parts) >= 2:
                    dst, port = parts[0], int(parts[1])
                    out[(src, dst, port)] = len(parts) == 3 and parts[2] == dst
            return out

        with ThreadPoolExecutor(len(self.ips)) as pool:
            results: dict[tuple[Peer, Peer, int], bool] = {}
            for part in pool.map(run, self.ips):
                results.update(part)
        return results

    def check(self, expect: Expect, timeout: float = CASE_TIMEOUT) -> float:
        """Probe until the table is `expect`; the seconds that took. Fails with the table."""
        started = time.monotonic()
        got: dict[tuple[Peer, Peer, int], bool] = {}

        def agrees() -> bool:
            got.clear()
            got.update(self.probe())
            return all(got.get((s, d, p)) == (s == d or expect(s, d, p)) for s in self.ips for d in self.ips
                       for p in PORTS)

        assert wait_for(agrees, timeout, interval=0.2), self.table(got, expect)
        return time.monotonic() - started

    def table(self, got: dict[tuple[Peer, Peer, int], bool], expect: Expect) -> str:
        """Upstream's layout: rows are sources, columns destinations; . reaches, X is blocked, * marks a
        cell that differs from the expectation."""
        lines = []
        for port in PORTS:
            lines.append(f"port {port}: " + " ".join(f"{d:>4}" for d in self.ips))
            for s in self.ips:
                cells = []
                for d in self.ips:
                    ok = got.get((s, d, port))
                    mark = "?" if ok is None else "." if ok else "X"
                    wrong = ok != (s == d or expect(s, d, port))
                    cells.append(f"{mark + ('*' if wrong else ''):>4}")
                lines.append(f"{s:>8} " + " ".join(cells))
        return "\n".join(lines)


def serving_pod(ns: str, name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"pod": name}},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "serve", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                                 "command": ["sh", "-c", SERVE], "env": [{"name": "POD", "value": f"{ns}/{name}"}],
                                 "ports": [{"name": "serve-80", "containerPort": 80},
                                           {"name": "serve-81", "containerPort": 81}]}]},
    }


def netpol(ns: str, name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("podSelector", {})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def pods(pod: str) -> dict[str, Any]:
    return {"podSelector": {"matchLabels": {"pod": pod}}}


def namespaces(*names: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(names)}]}}


@pytest.fixture(scope="module", params=["nftables", "iptables"])
def matrix(request: pytest.FixtureRequest) -> Iterator[Matrix]:
    """A cluster per proxy mode: the agent writes its rules with the same tool as kube-proxy."""
    state_dir = short_state_dir()
    started = time.monotonic()
    result = pyk8s("up", "--state-dir", str(state_dir), "--port", str(free_port()), "--nodes", "2",
                   "--proxy-mode", request.param, timeout=UP_TIMEOUT)
    try:
        assert result.returncode == 0, f"pyk8s up failed:\n{result.stdout}\n{result.stderr}"
        cluster = Cluster(state_dir, time.monotonic() - started, result.stdout)
        for ns in NAMESPACES:
            cluster.kubectl("create", "namespace", ns)
            cluster.kubectl("label", "namespace", ns, f"ns={ns}")
            for name, node in PODS.items():
                cluster.apply(serving_pod(ns, name, node))
        ips = {}
        for ns in NAMESPACES:
            for name in PODS:
                pod = cluster.wait_pod(ns, name, ("Running",))
                ips[f"{ns}/{name}"] = pod["status"]["podIP"]
        yield Matrix(cluster, ips, request.param)
    finally:
        pyk8s("down", "--state-dir", str(state_dir), timeout=UP_TIMEOUT)
        shutil.rmtree(state_dir.parent, ignore_errors=True)


@pytest.fixture
def policies(matrix: Matrix) -> Iterator[Callable[..., None]]:
    """Apply policies for one case; every policy is deleted afterwards and the table is open again."""

    def apply(*objs: dict[str, Any]) -> None:
        for obj in objs:
            matrix.cluster.apply(obj)

    yield apply
    for ns in NAMESPACES:
        matrix.cluster.kubectl("delete", "networkpolicy", "--all", "-n", ns, "--wait=false")
    matrix.check(lambda s, d, p: True)


def test_without_policies_every_pod_reaches_every_pod(matrix: Matrix) -> None:
    matrix.check(lambda s, d, p: True)


def test_the_rules_are_in_each_nodes_namespace_not_the_hosts(matrix: Matrix, policies: Callable[..., None]) -> None:
    policies(netpol("x", "deny"))
    matrix.check(lambda s, d, p: not d.startswith("x/"))
    for node in ("node-1", "node-2"):
        local = [ip for peer, ip in matrix.ips.items() if peer.startswith("x/") and PODS[peer[2:]] == node]
        assert all(matrix.isolated(node, ip) for ip in local), matrix.rules(node)[1]
    assert matrix.rules(None)[0] != 0, "the host got the nodes' policy rules"
    other = Matrix(matrix.cluster, matrix.ips, "iptables" if matrix.mode == "nftables" else "nftables")
    assert other.rules("node-1")[0] != 0, f"{other.mode} rules next to the {matrix.mode} ones"


def test_default_deny_ingress_still_lets_replies_in(matrix: Matrix, policies: Callable[..., None]) -> None:
    """x's pods reach everything (the replies pass x's ingress deny), nothing new reaches them."""
    policies(netpol("x", "deny-ingress", policyTypes=["Ingress"]))
    matrix.check(lambda s, d, p: not d.startswith("x/"))


def test_pod_selector_admits_the_named_pods_of_the_same_namespace(matrix: Matrix,
                                                                  policies: Callable[..., None]) -> None:
    policies(netpol("x", "a-from-b", podSelector=pods("a")["podSelector"], ingress=[{"from": [pods("b")]}]))
    matrix.check(lambda s, d, p: d != "x/a" or s == "x/b")


def test_namespace_selector_admits_every_pod_of_the_namespaces(matrix: Matrix, policies: Callable[..., None]) -> None:
    policies(netpol("x", "from-y", ingress=[{"from": [namespaces("y")]}]))
    matrix.check(lambda s, d, p: not d.startswith("x/") or s.startswith("y/"))


def test_namespace_and_pod_selector_in_one_peer_need_both(matrix: Matrix, policies: Callable[..., None]) -> None:
    policies(netpol("x", "y-c", podSelector=pods("a")["podSelector"],
                    ingress=[{"from": [{**namespaces("y"), **pods("c")}]}]))
    matrix.check(lambda s, d, p: d != "x/a" or s == "y/c")


def test_two_peers_are_either(matrix: Matrix, policies: Callable[..., None]) -> None:
    policies(netpol("x", "y-or-c", podSelector=pods("a")["podSelector"],
                    ingress=[{"from": [namespaces("y"), pods("c")]}]))
    matrix.check(lambda s, d, p: d != "x/a" or s.startswith("y/") or s == "x/c")


def test_numeric_port(matrix: Matrix, policies: Callable[..., None]) -> None:
    policies(netpol("x", "only-81", ingress=[{"ports": [{"port": 81}]}]))
    matrix.check(lambda s, d, p: not d.startswith("x/") or p == 81)


def test_named_port_is_the_destination_pods(matrix: Matrix, policies: Callable[..., None]) -> None:
    policies(netpol("x", "serve-80", ingress=[{"ports": [{"port": "serve-80"}]}]))
    matrix.check(lambda s, d, p: not d.startswith("x/") or p == 80)


def test_end_port_range(matrix: Matrix, policies: Callable[..., None]) -> None:
    policies(netpol("x", "75-80", ingress=[{"from": [namespaces("z")], "ports": [{"port": 75, "endPort": 80}]}]))
    matrix.check(lambda s, d, p: not d.startswith("x/") or (s.startswith("z/") and p == 80))


def test_default_deny_egress_still_lets_replies_out(matrix: Matrix, policies: Callable[..., None]) -> None:
    policies(netpol("x", "deny-egress", policyTypes=["Egress"]))
    matrix.check(lambda s, d, p: not s.startswith("x/"))


def test_egress_to_ip_block_with_except(matrix: Matrix, policies: Callable[..., None]) -> None:
    """x/a may reach node-2's pod CIDR but y/b in it, on port 81 only."""
    node2 = matrix.cluster.get("node", "node-2")["spec"]["podCIDR"]
    block = {"ipBlock": {"cidr": node2, "except": [f"{matrix.ips['y/b']}/32"]}}
    policies(netpol("x", "a-out", podSelector=pods("a")["podSelector"], policyTypes=["Egress"],
                    egress=[{"to": [block], "ports": [{"port": 81}]}]))
    on_node2 = {peer for peer in matrix.ips if peer.endswith("/b")}
    matrix.check(lambda s, d, p: s != "x/a" or (d in on_node2 and d != "y/b" and p == 81))


def test_ingress_and_egress_in_one_policy(matrix: Matrix, policies: Callable[..., None]) -> None:
    """x/b talks only with z, both ways, and z's pods answer it (egress to z, ingress from z)."""
    policies(netpol("x", "b-z", podSelector=pods("b")["podSelector"], policyTypes=["Ingress", "Egress"],
                    ingress=[{"from": [namespaces("z")]}], egress=[{"to": [namespaces("z")]}]))
    matrix.check(lambda s, d, p: (s != "x/b" or d.startswith("z/")) and (d != "x/b" or s.startswith("z/")))


def test_a_change_takes_effect_within_a_second(matrix: Matrix, policies: Callable[..., None]) -> None:
    """From the API write to the kernel: the time until node-1's rules isolate x/a."""
    ip = matrix.ips["x/a"]
    assert not matrix.isolated("node-1", ip)
    started = time.monotonic()
    policies(netpol("x", "deny-a", podSelector=pods("a")["podSelector"]))
    assert wait_for(lambda: matrix.isolated("node-1", ip), 5, interval=0.02)
    elapsed = time.monotonic() - started
    print(f"{matrix.mode}: network policy in the kernel {elapsed:.3f}s after kubectl apply returned")
    assert elapsed < 1.0, elapsed
    matrix.check(lambda s, d, p: d != "x/a")


def test_a_service_does_not_bypass_the_policy(matrix: Matrix, policies: Callable[..., None]) -> None:
    """The ClusterIP is DNATed before the policy looks: y/a reaches x/a through it only while allowed."""
    matrix.cluster.kubectl("expose", "pod", "a", "-n", "x", "--port", "80", "--name", "a")
    cluster_ip = matrix.cluster.get("service", "a", "-n", "x")["spec"]["clusterIP"]

    def via_service() -> bool:
        got = Matrix(matrix.cluster, {"y/a": matrix.ips["y/a"]}).probe({"x/a": cluster_ip})
        return got.get(("y/a", "x/a", 80)) is True

    assert wait_for(via_service, CASE_TIMEOUT), "the Service never answered"
    policies(netpol("x", "deny-a", podSelector=pods("a")["podSelector"]))
    assert wait_for(lambda: not via_service(), CASE_TIMEOUT), "the Service still reaches the isolated pod"
    matrix.cluster.apply(netpol("x", "deny-a", podSelector=pods("a")["podSelector"],
                                ingress=[{"from": [namespaces("y")]}]))
    assert wait_for(via_service, CASE_TIMEOUT), "allowed again, the Service did not answer"


def test_traffic_from_outside_through_a_node_port_is_filtered_too(matrix: Matrix,
                                                                 policies: Callable[..., None]) -> None:
    """The host reaches x/a through a NodePort on the other node (DNATed and masquerade-marked there, which
    kube-proxy's own forward rules accept) until a policy isolates x/a; an ipBlock then lets it in again."""
    matrix.cluster.kubectl("expose", "pod", "a", "-n", "x", "--port", "80", "--name", "a-np", "--type", "NodePort")
    node_port = matrix.cluster.get("service", "a-np", "-n", "x")["spec"]["ports"][0]["nodePort"]
    node2 = next(a["address"] for a in matrix.cluster.get("node", "node-2")["status"]["addresses"]
                 if a["type"] == "InternalIP")

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://{node2}:{node_port}/", timeout=2) as response:  # noqa: S310
                return bool(response.read().decode().strip() == "x/a")
        except OSError:
            return False

    assert wait_for(answers, CASE_TIMEOUT), "the NodePort never answered"
    policies(netpol("x", "deny-a", podSelector=pods("a")["podSelector"]))
    assert wait_for(lambda: not answers(), CASE_TIMEOUT), "the NodePort still reaches the isolated pod"
    matrix.cluster.apply(netpol("x", "deny-a", podSelector=pods("a")["podSelector"],
                                ingress=[{"from": [{"ipBlock": {"cidr": f"{node2}/32"}}]}]))
    assert wait_for(answers, CASE_TIMEOUT), "allowed from node-2's address, the NodePort did not answer"
