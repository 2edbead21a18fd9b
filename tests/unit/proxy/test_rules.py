"""Rule generation per mode: golden outputs for representative Services, plus the properties that
matter (chain names as upstream hashes them, fallbacks, policies, partial sync)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from proxy_agent.backends import b32_hash
from proxy_agent.backends.iptables import IptablesBackend, sep_chain, svc_chain
from proxy_agent.backends.ipvs import IpvsBackend
from proxy_agent.backends.nftables import NftablesBackend, chain_base, endpoint_base
from proxy_agent.tracker import Endpoint, ServicePort, ServicePortName, usable
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
    assert "delete table ip kube-proxy" in text
    assert "type nat hook output priority -100" in text
    assert re.search(
        r"numgen random mod 3 vmap \{ 0 : goto endpoint-\S+-ns/web/tcp/http__10.244.0.2/8080, ", text
    )
    assert "10.96.0.15 . tcp . 80 : goto reject-chain" in text
    assert "10.96.0.14 . tcp . 80 : drop" in text
    assert "timeout 600s" in text and "update @affinity-" in text


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


@pytest.mark.parametrize("backend", [IptablesBackend, NftablesBackend])
def test_partial_sync_rewrites_only_changed_service(backend: type) -> None:
    tracker, state = representative()
    b = backend()
    b.render(state, None)
    tracker.slice_update(endpoint_slice("web-a", "web", [("10.244.0.2", "n1")], port_name="http"))
    changed = tracker.take()
    assert changed == {"ns/web"}
    tracker.apply(state, changed)
    partial = b.render(state, changed)
    assert not partial.full
    text = partial.text
    assert "ns/web" in text
    # other Services' own chains are left alone, but dispatch still names them
    if backend is IptablesBackend:
        assert not any(
            line.startswith(":KUBE-SVC-")
            and line[1:].split()[0] == svc_chain(state.services[ServicePortName("ns", "np")])
            for line in text.splitlines()
        )
        assert "-X KUBE-SEP-" in text  # two endpoints went away
        assert text.count("-X KUBE-SEP-") == 2
        assert "-j KUBE-SVC-" in text and "ns/np cluster IP" in text
    else:
        assert "ns/np/tcp/__" not in text
        assert text.count("delete chain ip kube-proxy endpoint-") == 2
        assert "10.96.0.11 . tcp . 80 : goto service-" in text
    # a deleted Service drops its chains in the next partial sync
    tracker.service_update(service("np", clusterIP="10.96.0.11"), None)
    changed = tracker.take()
    tracker.apply(state, changed)
    text = b.render(state, changed).text
    assert (
        ("-X KUBE-SVC-" in text)
        if backend is IptablesBackend
        else ("delete chain ip kube-proxy service-" in text)
    )


def test_tracker_ignores_irrelevant_service_updates() -> None:
    tracker, _ = representative()
    svc = service("web", clusterIP="10.96.0.10", ports=[{"name": "http", "port": 80}])
    svc["metadata"]["labels"] = {"new": "label"}
    assert not tracker.service_update(tracker.services["ns/web"], svc)
    assert not tracker.pending()
