"""NetworkPolicy compilation: upstream's semantics resolved to addresses and ports per pod of one node,
and the rulesets rendered from them (checked by the kernel's own tools where they are installed)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from typing import Any

import pytest

from proxy_agent.networkpolicy.compiler import Allow, PortMatch, block_nets, compile_node
from proxy_agent.networkpolicy.rules import render_iptables, render_nftables

NODE = "node-1"


def pod(ns: str, name: str, ip: str, labels: dict[str, str], node: str = NODE,
        ports: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "ports": ports or []}], **spec},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}}


def policy(ns: str, name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("podSelector", {})
    return {"metadata": {"namespace": ns, "name": name}, "spec": spec}


NAMESPACES = [namespace("x", team="a"), namespace("y", team="b"), namespace("z", team="a")]
PODS = [
    pod("x", "a", "10.244.1.2", {"pod": "a"}, ports=[{"name": "http", "containerPort": 8080}]),
    pod("x", "b", "10.244.1.3", {"pod": "b"}),
    pod("y", "a", "10.244.2.2", {"pod": "a"}, node="node-2",
        ports=[{"name": "http", "containerPort": 9090}, {"name": "dns", "containerPort": 53, "protocol": "UDP"}]),
    pod("y", "b", "10.244.1.4", {"pod": "b"}),
    pod("z", "a", "10.244.2.3", {"pod": "a"}, node="node-2"),
]


def compiled(*policies: dict[str, Any], pods: list[dict[str, Any]] = PODS) -> Any:
    return compile_node(list(policies), pods, NAMESPACES, NODE)


def test_pods_selected_by_no_policy_are_open() -> None:
    programs = compiled(policy("x", "only-a", podSelector={"matchLabels": {"pod": "a"}}))
    assert set(programs.ingress) == {"10.244.1.2"}
    assert programs.egress == {}


def test_default_deny_ingress_selects_every_local_pod_of_its_namespace_and_allows_nothing() -> None:
    programs = compiled(policy("x", "deny", policyTypes=["Ingress"]))
    assert set(programs.ingress) == {"10.244.1.2", "10.244.1.3"}
    assert all(p.allows == () for p in programs.ingress.values())


def test_pods_of_other_nodes_are_theirs_to_enforce() -> None:
    programs = compiled(policy("y", "deny"))
    assert set(programs.ingress) == {"10.244.1.4"}


def test_default_policy_types_are_ingress_plus_egress_when_it_has_egress_rules() -> None:
    programs = compiled(policy("x", "both", egress=[{}]))
    assert set(programs.ingress) == set(programs.egress) == {"10.244.1.2", "10.244.1.3"}
    assert programs.egress["10.244.1.2"].allows == (Allow(None, None),)
    egress_only = compiled(policy("x", "e", policyTypes=["Egress"], ingress=[{}]))
    assert egress_only.ingress == {} and egress_only.egress["10.244.1.3"].allows == ()


def test_pod_selector_peers_are_pods_of_the_policy_namespace() -> None:
    programs = compiled(policy("x", "from-b", podSelector={"matchLabels": {"pod": "a"}},
                               ingress=[{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]))
    assert programs.ingress["10.244.1.2"].allows == (Allow(("10.244.1.3/32",), None),)


def test_namespace_selector_peers_are_every_pod_of_the_matching_namespaces() -> None:
    team_a = {"namespaceSelector": {"matchLabels": {"team": "a"}}}
    programs = compiled(policy("x", "team-a", ingress=[{"from": [team_a]}]))
    assert programs.ingress["10.244.1.2"].allows == (
        Allow(("10.244.1.2/31", "10.244.2.3/32"), None),)


def test_namespace_and_pod_selector_in_one_peer_is_their_intersection() -> None:
    both = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"pod": "b"}}}
    programs = compiled(policy("x", "b-anywhere", ingress=[{"from": [both]}]))
    assert programs.ingress["10.244.1.3"].allows == (Allow(("10.244.1.3/32", "10.244.1.4/32"), None),)
    # two peers are a union instead
    split = [{"namespaceSelector": {"matchLabels": {"team": "b"}}}, {"podSelector": {"matchLabels": {"pod": "b"}}}]
    union = compiled(policy("x", "either", ingress=[{"from": split}]))
    assert union.ingress["10.244.1.3"].allows == (Allow(("10.244.1.3/32", "10.244.1.4/32", "10.244.2.2/32"), None),)


def test_a_peer_list_matching_no_pod_allows_nothing() -> None:
    programs = compiled(policy("x", "nobody", ingress=[{"from": [{"podSelector": {"matchLabels": {"pod": "q"}}}]}]))
    assert programs.ingress["10.244.1.2"].allows == ()


def test_ip_block_is_its_cidr_minus_the_excepts() -> None:
    nets = block_nets({"cidr": "10.0.0.0/8", "except": ["10.244.0.0/16", "10.96.0.0/12"]})
    assert "10.244.0.0/16" not in [str(n) for n in nets]
    assert not any(ipaddress.ip_address("10.244.3.4") in n for n in nets)
    assert not any(ipaddress.ip_address("10.100.0.1") in n for n in nets)
    assert any(ipaddress.ip_address("10.1.2.3") in n for n in nets)
    assert block_nets({"cidr": "192.168.0.0/24", "except": ["192.168.0.0/16"]}) == []
    everywhere = [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]
    programs = compiled(policy("x", "ext", policyTypes=["Egress"], egress=everywhere))
    assert programs.egress["10.244.1.2"].allows == (Allow(("0.0.0.0/0",), None),)


def test_ports_numeric_ranges_and_protocols() -> None:
    rule = {"ports": [{"port": 80}, {"protocol": "UDP", "port": 5000, "endPort": 5010}, {"protocol": "SCTP"}]}
    programs = compiled(policy("x", "ports", ingress=[rule]))
    assert programs.ingress["10.244.1.3"].allows == (
        Allow(None, (PortMatch("SCTP"), PortMatch("TCP", 80, 80), PortMatch("UDP", 5000, 5010))),)


def test_named_ingress_port_is_the_selected_pods_own_container_port() -> None:
    programs = compiled(policy("x", "http", ingress=[{"ports": [{"port": "http"}]}]))
    assert programs.ingress["10.244.1.2"].allows == (Allow(None, (PortMatch("TCP", 8080, 8080),)),)
    assert programs.ingress["10.244.1.3"].allows == ()  # b has no port of that name


def test_named_egress_port_is_the_destination_pods_port() -> None:
    rule = {"to": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}],
            "ports": [{"port": "http"}, {"port": "dns", "protocol": "UDP"}]}
    programs = compiled(policy("x", "out", policyTypes=["Egress"], egress=[rule]))
    assert programs.egress["10.244.1.2"].allows == (
        Allow(("10.244.2.2/32",), (PortMatch("TCP", 9090, 9090), PortMatch("UDP", 53, 53))),)
    anywhere = compiled(policy("x", "out", policyTypes=["Egress"], egress=[{"ports": [{"port": "http"}]}]))
    assert anywhere.egress["10.244.1.3"].allows == (
        Allow(("10.244.1.2/32",), (PortMatch("TCP", 8080, 8080),)),
        Allow(("10.244.2.2/32",), (PortMatch("TCP", 9090, 9090),)))


def test_policies_selecting_one_pod_add_up() -> None:
    programs = compiled(
        policy("x", "p1", ingress=[{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]),
        policy("x", "p2", podSelector={"matchLabels": {"pod": "a"}}, ingress=[{"ports": [{"port": 81}]}]),
    )
    assert set(programs.ingress["10.244.1.2"].allows) == {
        Allow(("10.244.1.3/32",), None), Allow(None, (PortMatch("TCP", 81, 81),))}
    assert programs.ingress["10.244.1.3"].allows == (Allow(("10.244.1.3/32",), None),)


def test_host_network_finished_and_address_less_pods_are_left_alone() -> None:
    pods = [pod("x", "h", "172.30.0.2", {}, hostNetwork=True),
            {**pod("x", "done", "10.244.1.9", {}), "status": {"phase": "Succeeded", "podIP": "10.244.1.9"}},
            {**pod("x", "new", "", {}), "status": {"phase": "Pending"}}]
    assert compiled(policy("x", "deny"), pods=pods).ingress == {}


def test_pods_with_the_same_program_share_one_chain() -> None:
    programs = compiled(policy("x", "deny", policyTypes=["Ingress", "Egress"]))
    text = render_nftables(programs)
    assert text.count("add chain ip kube-network-policies ingress-") == 1
    assert text.count("add chain ip kube-network-policies egress-") == 1


def _sample() -> Any:
    return compiled(
        policy("x", "mixed", podSelector={"matchLabels": {"pod": "a"}}, policyTypes=["Ingress", "Egress"],
               ingress=[{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.244.2.0/24"]}}],
                         "ports": [{"port": 80, "endPort": 90}, {"port": 85}, {"protocol": "UDP"}]}],
               egress=[{"to": [{"namespaceSelector": {}}], "ports": [{"port": "http"}]}]),
        policy("x", "deny"),
    )


def test_nftables_text() -> None:
    text = render_nftables(_sample())
    assert text.startswith("add table ip kube-network-policies\ndelete table ip kube-network-policies\n")
    assert "ct state established,related accept" in text
    assert "meta l4proto tcp th dport { 80-90 } return" in text  # 85 lies inside 80-90: merged
    assert "meta l4proto udp return" in text
    assert "10.244.1.2 : jump ingress-" in text and "10.244.1.3 : jump ingress-" in text
    assert "ip daddr { 10.244.2.2/32 } meta l4proto tcp th dport { 9090 } return" in text


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nft"), reason="nft --check needs root")
def test_nftables_text_is_accepted_by_nft() -> None:
    result = subprocess.run(["nft", "--check", "-f", "-"], input=render_nftables(_sample()), text=True,
                            capture_output=True, check=False)
    assert result.returncode == 0, result.stderr


def test_iptables_text_deletes_chains_it_no_longer_needs() -> None:
    text = render_iptables(_sample(), {"KUBE-NWPLCY-I-000000000000"})
    assert ":KUBE-NWPLCY-I-000000000000 - [0:0]" in text and "-X KUBE-NWPLCY-I-000000000000" in text
    assert "-A KUBE-NWPLCY-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN" in text
    assert "-p tcp -m tcp --dport 80:90 -j RETURN" in text
    egress_jump = text.index("-A KUBE-NWPLCY-FORWARD -s 10.244.1.2/32 -j KUBE-NWPLCY-E-")
    ingress_jump = text.index("-A KUBE-NWPLCY-FORWARD -d 10.244.1.2/32 -j KUBE-NWPLCY-I-")
    assert egress_jump < ingress_jump
    assert "-A KUBE-NWPLCY-INPUT -s 10.244.1.2/32 -j KUBE-NWPLCY-E-" in text


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("iptables-restore"), reason="needs root and iptables")
def test_iptables_text_is_accepted_by_iptables_restore() -> None:
    result = subprocess.run(["iptables-restore", "--test", "--noflush"], input=render_iptables(_sample(), set()),
                            text=True, capture_output=True, check=False)
    assert result.returncode == 0, result.stderr
