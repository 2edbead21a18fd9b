"""The routes pyk8s-noderoutes keeps: in each node every other node's pod CIDR, on the host every pod
CIDR, the Service CIDR via one node and pool LoadBalancer addresses via a node that answers them; and
`up`'s check of the pool it is given."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from deploy.local import Request, UpError, _apply
from deploy.noderoutes import desired_for, host_routes, lb_routes, route_batch, routes_by_node
from deploy.state import State

SEGMENT = ipaddress.IPv4Network("172.30.5.0/24")


def node(name: str, ip: str, cidr: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}


TABLE = routes_by_node([node("node-2", "172.30.5.3", "10.244.1.0/24"), node("node-1", "172.30.5.2", "10.244.0.0/24"),
                        node("elsewhere", "192.168.1.4", "10.244.2.0/24")], SEGMENT)


def test_nodes_route_each_others_pod_cidrs() -> None:
    assert set(TABLE) == {"node-1", "node-2"}
    assert desired_for("node-1", TABLE) == {"10.244.1.0/24": "172.30.5.3"}


def test_the_host_routes_pod_cidrs_and_the_service_cidr_via_the_first_node() -> None:
    assert host_routes(TABLE) == {"10.244.0.0/24": "172.30.5.2", "10.244.1.0/24": "172.30.5.3"}
    assert host_routes(TABLE, "10.96.0.0/12")["10.96.0.0/12"] == "172.30.5.2"
    assert host_routes({}, "10.96.0.0/12") == {}
    assert route_batch({"10.96.0.0/12": "172.30.5.9"}, host_routes(TABLE, "10.96.0.0/12")) == [
        "route replace 10.244.0.0/24 via 172.30.5.2 proto 77", "route replace 10.244.1.0/24 via 172.30.5.3 proto 77",
        "route replace 10.96.0.0/12 via 172.30.5.2 proto 77"]


def lb(name: str, *ips: str, local: bool = False) -> dict[str, Any]:
    spec = {"type": "LoadBalancer", **({"externalTrafficPolicy": "Local"} if local else {})}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec,
            "status": {"loadBalancer": {"ingress": [{"ip": ip} for ip in ips]}}}


def test_pool_addresses_go_to_a_node_that_answers_them() -> None:
    slices = [{"metadata": {"name": "local-x", "namespace": "ns", "labels": {"kubernetes.io/service-name": "local"}},
               "endpoints": [{"addresses": ["10.244.1.5"], "nodeName": "node-2", "conditions": {"ready": True}}]}]
    services = [lb("cluster", "198.18.0.10"), lb("local", "198.18.0.11", local=True),
                lb("nowhere", "198.18.0.12", local=True), lb("on-nodes", "172.30.5.2", "172.30.5.3"),
                {"metadata": {"name": "plain", "namespace": "ns"}, "spec": {"type": "ClusterIP"}}]
    assert lb_routes(services, slices, TABLE) == {"198.18.0.10": "172.30.5.2", "198.18.0.11": "172.30.5.3"}


def test_up_refuses_a_pool_it_cannot_read_and_remembers_a_good_one(tmp_path: Path) -> None:
    state = State.load(tmp_path)
    with pytest.raises(UpError, match="'10.0.0.300/24' is neither"):
        _apply(state, Request(service_lb_pool="198.18.0.10-198.18.0.12,10.0.0.300/24"))
    assert state.settings.service_lb_pool == ""
    _apply(state, Request(service_lb_pool="198.18.0.10-198.18.0.12,192.0.2.64/28"))
    assert state.settings.service_lb_pool == "198.18.0.10-198.18.0.12,192.0.2.64/28"
