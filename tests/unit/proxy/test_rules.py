"""Rule generation per mode: golden outputs for representative Services, plus the properties that
matter (chain names as upstream hashes them, fallbacks, policies, partial sync)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from proxy_agent.__main__ import choose_iptables
from proxy_agent.backends import b32_hash
from proxy_agent.backends.iptables import LARGE_CLUSTER_ENDPOINTS, IptablesBackend, sep_chain, svc_chain
from proxy_agent.backends.ipvs import IpvsBackend
from proxy_agent.backends.nftables import PICK_MAX, NftablesBackend, chain_base, endpoint_base
from proxy_agent.tracker import ChangeTracker, Endpoint, ProxyState, ServicePort, ServicePortName, usable
from tests.unit.proxy.fixtures import endpoint_slice, representative, service

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("backend", [IptablesBackend, NftablesBackend, IpvsBackend])
def test_golden_output(backend: type) -> None:
    _, state = representative()
    text = backend().render(state, None).text
    path = GOLDEN / f"{backend.mode}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_chain_names_match_upstream() -> None:
    # Values from a real upstream cluster's iptables-save.
    assert b32_hash("default/kubernetes:https" + "tcp") == "NPX46M4PTMTKRN6Y"
    assert b32_hash("kube-system/kube-dns:dns" + "udp") == "TCOU7JCQXEZGVUNU"
    sp = ServicePort(ServicePortName("kube-system", "kube-dns", "dns-tcp", "TCP"), "10.96.0.10", 53, "TCP")
    assert svc_chain(sp) == "KUBE-SVC-ERIFXISQEP7F7OF4"
    assert sep_chain(sp, Endpoint("10.244.0.5", 53)).startswith("KUBE-SEP-")
    assert sep_chain(sp, Endpoint("10.244.0.5", 53)) != sep_chain(sp, Endpoint("10.244.0.6", 53))
    assert chain_base(sp).endswith("-kube-system/kube-dns/tcp/dns-tcp")
    assert endpoint_base(sp, Endpoint("10.244.0.5", 53)).endswith(
        "-kube-system/kube-dns/tcp/dns-tcp__10.244.0.5/53"
    )


def test_iptables_clusterip_three_endpoints() -> None:
    _, state = representative()
    text = IptablesBackend().render(state, None).text
    svc = [line for line in text.splitlines() if line.startswith("-A KUBE-SVC-") and "ns/web:http ->" in line]
    assert len(svc) == 3
    assert "--probability 0.3333333333" in svc[0] and "--probability 0.5000000000" in svc[1]
    assert "statistic" not in svc[2]
    assert re.search(
        r"-A KUBE-SEP-\S+ -m comment --comment ns/web:http -m tcp -p tcp -j DNAT "
        r"--to-destination 10.244.0.2:8080",
        text,
    )
    assert "-d 10.96.0.10/32 --dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ" in text


def test_iptables_policies_affinity_and_reject() -> None:
    _, state = representative()
    text = IptablesBackend().render(state, None).text
    assert "-m recent --name KUBE-SEP-" in text and "--rcheck --seconds 600 --reap" in text
    assert '"ns/empty has no endpoints" -m tcp -p tcp -d 10.96.0.15/32 --dport 80 -j REJECT' in text
    # internalTrafficPolicy Local with only a remote endpoint: dropped, not sent across.
    assert '"ns/iloc has no local endpoints" -m tcp -p tcp -d 10.96.0.14/32 --dport 80 -j DROP' in text
    assert "--dport 30081 -j KUBE-EXT-" in text and "-j KUBE-SVL-" in text
    assert '"ns/loc health check node port" -m tcp -p tcp --dport 32000 -j ACCEPT' in text
    assert "10.96.0.0" not in text and "headless" not in text and "ns/ext" not in text


def test_terminating_fallback() -> None:
    eps = [
        Endpoint("10.0.0.1", 80, ready=False, serving=True, terminating=True),
        Endpoint("10.0.0.2", 80, ready=False, serving=False, terminating=True),
    ]
    assert [e.ip for e in usable(eps)] == ["10.0.0.1"]
    assert [e.ip for e in usable([*eps, Endpoint("10.0.0.3", 80)])] == ["10.0.0.3"]


def test_masquerade_all_and_nodeport_addresses() -> None:
    _, state = representative()
    state.masquerade_all = True
    state.nodeport_addresses = ("192.168.50.0/24",)
    text = IptablesBackend().render(state, None).text
    assert "-d 10.96.0.10/32 --dport 80 -j KUBE-MARK-MASQ" in text
    assert "-d 192.168.50.2/32 -j KUBE-NODEPORTS" in text and "--dst-type LOCAL -j KUBE-NODEPORTS" not in text
    nft = NftablesBackend().render(state, None).text
    assert "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports" in nft
    assert "add element ip kube-proxy nodeport-ips { 192.168.50.2 }" in nft


def test_nftables_structure() -> None:
    _, state = representative()
    text = NftablesBackend().render(state, None).text
    lines = text.splitlines()
    assert "delete table ip kube-proxy" in text
    assert "type nat hook output priority -100" in text
    # no anonymous maps (each costs the kernel a scan of every set), and no chain per plain Service:
    # its dispatch goes to the shared chain for its endpoint count, which looks the endpoint up
    assert " map {" not in text and "vmap {" not in text
    assert not any(line.startswith("add chain ip kube-proxy service-Y6QD5CCT-ns/web/") for line in lines)
    assert "10.96.0.10 . tcp . 80 : goto pick-3" in text
    assert (
        "10.96.0.10 . tcp . 80 . 0 : 10.244.0.2 . 8080, 10.96.0.10 . tcp . 80 . 1 : 10.244.0.3 . 8080, "
        "10.96.0.10 . tcp . 80 . 2 : 10.244.1.2 . 8080" in text
    )
    assert [line for line in lines if line.startswith("add rule ip kube-proxy pick-3 ")] == [
        "add rule ip kube-proxy pick-3 dnat to ip daddr . meta l4proto . th dport . numgen random mod 3 "
        "map @service-endpoints",
        "add rule ip kube-proxy pick-3 dnat to meta l4proto . th dport . numgen random mod 3 map @nodeport-endpoints",
    ]
    # a NodePort: its external chain masquerades and picks by NodePort in nodeport-endpoints
    assert "tcp . 30080 . 1 : 10.244.0.3 . 8080" in text
    assert "add rule ip kube-proxy external-2EDQ4YIA-ns/np/tcp/ goto pick-2" in lines
    # externalTrafficPolicy Local: external traffic only to this node's endpoint, by one DNAT rule
    assert [line for line in lines if line.startswith("add rule ip kube-proxy local-XU3LWRNP-ns/loc/tcp/ ")] == [
        "add rule ip kube-proxy local-XU3LWRNP-ns/loc/tcp/ meta l4proto tcp dnat to 10.244.0.2:8080"
    ]
    endpoint_chains = [line for line in lines if line.startswith("add chain ip kube-proxy endpoint-")]
    assert len(endpoint_chains) == 2 and all("-ns/aff/" in line for line in endpoint_chains)  # affinity only
    assert "10.96.0.15 . tcp . 80 : goto reject-chain" in text
    assert "10.96.0.14 . tcp . 80 : drop" in text
    assert "timeout 600s" in text and "update @affinity-" in text
    assert re.search(r"service-Z73KPFGJ-ns/aff/tcp/ ip saddr @affinity-\S+ goto endpoint-", text)
    assert "ip saddr != 10.244.0.0/16 ip daddr @cluster-ips jump mark-for-masquerade" in text
    assert "ct status dnat ip saddr . ip daddr @hairpin-endpoints meta mark set" in text
    # 10.244.1.2 runs on n2: its traffic is DNATed there, so only n1's pods can hairpin here
    assert "hairpin-endpoints { 10.244.0.2 . 10.244.0.2, 10.244.0.3 . 10.244.0.3 }\n" in text


def test_nftables_many_endpoints_use_a_chain_of_their_own() -> None:
    tracker, state = representative()
    many = [(f"10.244.2.{i}", "n2") for i in range(1, PICK_MAX + 2)]
    tracker.slice_update(endpoint_slice("web-a", "web", many, port_name="http"))
    tracker.apply(state, tracker.take())
    text = NftablesBackend().render(state, None).text
    web = "add rule ip kube-proxy service-Y6QD5CCT-ns/web/tcp/http "
    rules = [line[len(web) :] for line in text.splitlines() if line.startswith(web)]
    assert len(rules) == PICK_MAX + 1
    assert rules[0] == f"numgen random mod {PICK_MAX + 1} == 0 meta l4proto tcp dnat to 10.244.2.1:8080"
    assert rules[-1] == f"meta l4proto tcp dnat to 10.244.2.{PICK_MAX + 1}:8080"
    assert "10.96.0.10 . tcp . 80 : goto service-Y6QD5CCT-ns/web/tcp/http" in text


def test_ipvs_output() -> None:
    _, state = representative()
    text = IpvsBackend().render(state, None).text
    assert "-A -t 10.96.0.10:80 -s rr\n" in text
    assert "-a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1" in text
    assert "-A -t 10.96.0.12:80 -s rr -p 600" in text
    assert "-A -t 192.168.50.2:30080 -s rr" in text
    assert "add KUBE-CLUSTER-IP 10.96.0.10,tcp:80 comment" in text
    assert "add KUBE-NODE-PORT-LOCAL-TCP 30081" in text
    assert "-m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ" in text
    assert "addr add 10.96.0.10/32 dev kube-ipvs0" in text


def _change(tracker: ChangeTracker, state: ProxyState) -> set[str]:
    changed = tracker.take()
    tracker.apply(state, changed)
    return changed


def test_iptables_partial_sync_rewrites_only_changed_chains() -> None:
    tracker, state = representative()
    b = IptablesBackend()
    b.render(state, None)
    tracker.slice_update(endpoint_slice("web-a", "web", [("10.244.0.2", "n1")], port_name="http"))
    assert _change(tracker, state) == {"ns/web"}
    partial = b.render(state, {"ns/web"})
    assert not partial.full
    text = partial.text
    lines = text.splitlines()
    assert f":{svc_chain(state.services[ServicePortName('ns', 'web', 'http')])} - [0:0]" in lines
    assert not any(line.startswith(":KUBE-SVC-") and "np" in line for line in lines)
    assert text.count("-X KUBE-SEP-") == 2  # two endpoints went away
    # the endpoint that stays keeps its chain as it is in the kernel: not declared, not rewritten
    web = state.services[ServicePortName("ns", "web", "http")]
    kept = sep_chain(web, state.endpoints[web.name][0])
    assert f"-j {kept}" in text and f":{kept} " not in text and f"-A {kept} " not in text
    # the dispatch rules did not change, so the top-level chains (10,000 rules at scale) are left alone
    assert ":KUBE-SERVICES" not in text and "*filter" not in text and "ns/np" not in text
    assert partial.counts == b.render(state, None).counts
    # the last endpoint goes: KUBE-SERVICES now rejects, so it is rewritten, with every Service
    b.render(state, None)
    tracker.slice_update(endpoint_slice("web-a", "web", [], port_name="http"))
    text = b.render(state, _change(tracker, state)).text
    assert ":KUBE-SERVICES - [0:0]" in text and "ns/np cluster IP" in text
    assert '"ns/web:http has no endpoints" -m tcp -p tcp -d 10.96.0.10/32 --dport 80 -j REJECT' in text
    assert text.count("-X KUBE-SEP-") == 1 and "-X KUBE-SVC-" in text
    # a deleted Service drops its chains in the next partial sync
    tracker.service_update(service("np", clusterIP="10.96.0.11"), None)
    text = b.render(state, _change(tracker, state)).text
    assert "-X KUBE-SVC-" in text and "-X KUBE-EXT-" in text and "ns/np" not in text.replace("-X", "")


def test_iptables_large_cluster_mode_drops_endpoint_comments() -> None:
    tracker, state = representative()
    b = IptablesBackend()
    small = b.render(state, None).text
    assert '-m comment --comment "ns/web:http -> 10.244.0.2:8080"' in small
    assert re.search(r"-A KUBE-SEP-\S+ -m comment --comment ns/web:http -s 10.244.0.2/32", small)
    many = [(f"10.244.{2 + i // 250}.{i % 250 + 1}", "n1") for i in range(LARGE_CLUSTER_ENDPOINTS)]
    tracker.slice_update(endpoint_slice("big-a", "web", many, port_name="http"))
    changed = _change(tracker, state)
    large = b.render(state, changed)
    # crossing the threshold rewrites every Service's chains without the comments: a full sync
    assert large.full and ":KUBE-SERVICES - [0:0]" in large.text
    text = large.text
    assert re.search(r"-A KUBE-SVC-\S+ -m statistic --mode random --probability \S+ -j KUBE-SEP-", text)
    assert re.search(r"-A KUBE-SEP-\S+ -s 10.244.0.2/32 -j KUBE-MARK-MASQ", text)
    assert re.search(r"-A KUBE-SEP-\S+ -m tcp -p tcp -j DNAT --to-destination 10.244.0.3:8080", text)
    assert "-> 10.244" not in text and "--comment ns/np -s" not in text
    assert '"ns/web:http cluster IP"' in text  # dispatch rules keep theirs, as upstream
    tracker.slice_update(endpoint_slice("big-a", "web", many[:10], port_name="http"))
    assert b.render(state, _change(tracker, state)).full


def test_nftables_partial_sync_touches_only_changed_objects() -> None:
    tracker, state = representative()
    b = NftablesBackend()
    b.render(state, None)
    tracker.slice_update(endpoint_slice("web-a", "web", [("10.244.0.2", "n1")], port_name="http"))
    partial = b.render(state, _change(tracker, state))
    assert not partial.full
    # an endpoint change is element updates only: the dispatch moves to the one-endpoint chain
    assert partial.text.splitlines() == [
        "add table ip kube-proxy",
        "delete element ip kube-proxy service-ips { 10.96.0.10 . tcp . 80 }",
        "delete element ip kube-proxy service-endpoints { 10.96.0.10 . tcp . 80 . 1, 10.96.0.10 . tcp . 80 . 2 }",
        "add element ip kube-proxy service-ips { 10.96.0.10 . tcp . 80 : goto pick-1 }",
    ]
    # the endpoints go away: only the map elements of this Service change, in one transaction
    tracker.slice_update(endpoint_slice("web-a", "web", [], port_name="http"))
    text = b.render(state, _change(tracker, state)).text
    assert text.splitlines() == [
        "add table ip kube-proxy",
        "delete element ip kube-proxy service-ips { 10.96.0.10 . tcp . 80 }",
        "delete element ip kube-proxy service-endpoints { 10.96.0.10 . tcp . 80 . 0 }",
        "add element ip kube-proxy no-endpoint-services { 10.96.0.10 . tcp . 80 : goto reject-chain }",
    ]
    # an affinity Service losing an endpoint drops that endpoint's chain and affinity set
    tracker.slice_update(endpoint_slice("aff-a", "aff", [("10.244.0.2", "n1")]))
    text = b.render(state, _change(tracker, state)).text
    assert text.count("delete chain ip kube-proxy endpoint-") == 1
    assert text.count("delete set ip kube-proxy affinity-") == 1
    assert "add element" not in text and "delete element" not in text
    assert "hairpin-endpoints" not in text  # 10.244.0.3 still backs ns/np
    # ns/np was the last Service backed by 10.244.0.3: its hairpin element goes too
    tracker.service_update(service("np", clusterIP="10.96.0.11"), None)
    text = b.render(state, _change(tracker, state)).text
    assert "delete element ip kube-proxy hairpin-endpoints { 10.244.0.3 . 10.244.0.3 }" in text
    assert "delete element ip kube-proxy service-nodeports { tcp . 30080 }" in text
    assert "delete element ip kube-proxy nodeport-endpoints { tcp . 30080 . 0, tcp . 30080 . 1 }" in text
    assert "delete chain ip kube-proxy external-2EDQ4YIA-ns/np/tcp/" in text
    assert "pick-" not in text.replace("goto pick-", "")  # the shared chains stay


def test_tracker_ignores_irrelevant_service_updates() -> None:
    tracker, _ = representative()
    svc = service("web", clusterIP="10.96.0.10", ports=[{"name": "http", "port": 80}])
    svc["metadata"]["labels"] = {"new": "label"}
    assert not tracker.service_update(tracker.services["ns/web"], svc)
    assert not tracker.pending()


def test_iptables_flavour_follows_existing_rules() -> None:
    nat = "*nat\n:PREROUTING ACCEPT [0:0]\n"
    assert choose_iptables({"iptables-legacy": nat, "iptables-nft": nat}) == "iptables-legacy"
    kube = nat + ":KUBE-SERVICES - [0:0]\n"
    assert choose_iptables({"iptables-legacy": nat, "iptables-nft": kube}) == "iptables-nft"
    hint = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\n"
    assert choose_iptables({"iptables-legacy": nat, "iptables-nft": hint}) == "iptables-nft"
    # kube-proxy's own chains outrank kubelet's hint
    assert choose_iptables({"iptables-legacy": kube, "iptables-nft": hint}) == "iptables-legacy"
    assert choose_iptables({"iptables-nft": nat}) == "iptables-nft"


def test_load_balancer_ingress_ips_are_answered_like_external_ips() -> None:
    from proxy_agent.tracker import service_ports

    lb = service("lb", type="LoadBalancer", clusterIP="10.96.0.40", externalIPs=["192.168.7.1"],
                 ports=[{"port": 80, "nodePort": 30080}])
    lb["status"] = {"loadBalancer": {"ingress": [{"ip": "172.30.0.2", "ipMode": "VIP"}, {"ip": "192.168.7.1"},
                                                 {"ip": "172.30.0.9", "ipMode": "Proxy"}, {"hostname": "lb.example"}]}}
    (sp,) = service_ports(lb).values()
    assert sp.external_ips == ("192.168.7.1", "172.30.0.2")
    state = ProxyState(node_name="n1")
    tracker = ChangeTracker()
    tracker.service_update(None, lb)
    tracker.slice_update(endpoint_slice("lb-1", "lb", [("10.244.0.2", "n1")]))
    tracker.apply(state, None)
    assert "172.30.0.2 . tcp . 80 : goto external-" in NftablesBackend().render(state, None).text
    assert re.search(r"-A KUBE-SERVICES .* -d 172.30.0.2/32 --dport 80 -j KUBE-EXT-",
                     IptablesBackend().render(state, None).text)
    not_lb = {**lb, "spec": {**lb["spec"], "type": "NodePort"}}
    assert next(iter(service_ports(not_lb).values())).external_ips == ("192.168.7.1",)
