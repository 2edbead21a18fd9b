"""The routes pyk8s-noderoutes keeps: in each node every other node's pod CIDR, on the host every pod
CIDR and the Service CIDR via one node."""

from __future__ import annotations

import ipaddress
from typing import Any

from deploy.noderoutes import desired_for, host_routes, route_batch, routes_by_node

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
