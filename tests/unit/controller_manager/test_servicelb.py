"""The service load-balancer controller: which address each LoadBalancer Service gets (node addresses
or a pool), the classes it leaves alone, and the status it writes."""

from __future__ import annotations

from typing import Any

import pytest

from controller_manager.controllers import servicelb
from controller_manager.controllers.servicelb import LB_CLASS, SERVICES, allocate, parse_pool
from controller_manager.registry import discover, enabled
from controller_manager.resources import NODES
from tests.unit.controller_manager.harness import harness


def service(name: str, *ports: int, created: str = "2026-01-01T00:00:00Z", **spec: Any) -> dict[str, Any]:
    status = spec.pop("status", {})
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
            "spec": {"type": "LoadBalancer", "ports": [{"port": p, "protocol": "TCP"} for p in ports or (80,)],
                     **spec},
            "status": status}


def node(name: str, ip: str, ready: bool = True) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def endpoints_on(svc: str, *nodes: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{svc}-x", "namespace": "ns", "labels": {"kubernetes.io/service-name": svc}},
            "endpoints": [{"addresses": ["10.244.0.9"], "nodeName": n, "conditions": {"ready": True}} for n in nodes]}


NODES_ = [node("n1", "172.30.0.3"), node("n2", "172.30.0.2"), node("n3", "172.30.0.4", ready=False)]


def test_node_addresses_of_every_ready_node() -> None:
    assert allocate([service("web")], NODES_, [], []) == {"ns/web": ["172.30.0.2", "172.30.0.3"]}


def test_local_traffic_policy_only_lists_nodes_with_an_endpoint() -> None:
    plan = allocate([service("web", externalTrafficPolicy="Local")], NODES_, [endpoints_on("web", "n1")], [])
    assert plan == {"ns/web": ["172.30.0.3"]}


def test_node_address_ports_go_to_the_oldest_service() -> None:
    older = service("a", 80, 443, created="2026-01-01T00:00:00Z")
    newer = service("b", 443, created="2026-01-02T00:00:00Z")
    other = service("c", 8080, created="2026-01-03T00:00:00Z")
    plan = allocate([newer, other, older], NODES_, [], [])
    assert plan["ns/a"] == ["172.30.0.2", "172.30.0.3"] and plan["ns/c"] == ["172.30.0.2", "172.30.0.3"]
    assert plan["ns/b"] == "the node addresses' port TCP/443 of ns/a is taken"


def test_other_classes_and_types_are_left_alone() -> None:
    services = [service("mine", loadBalancerClass=LB_CLASS), service("theirs", loadBalancerClass="example.com/lb"),
                {**service("plain"), "spec": {"type": "ClusterIP", "ports": [{"port": 80}]}}]
    assert set(allocate(services, NODES_, [], [])) == {"ns/mine"}


def test_pool_keeps_addresses_honours_requests_and_runs_out() -> None:
    pool = parse_pool("192.168.9.10-192.168.9.12")
    assert [str(ip) for ip in pool] == ["192.168.9.10", "192.168.9.11", "192.168.9.12"]
    keeps = service("keeps", created="2026-01-05T00:00:00Z",
                    status={"loadBalancer": {"ingress": [{"ip": "192.168.9.11"}]}})
    asks = service("asks", loadBalancerIP="192.168.9.12", created="2026-01-01T00:00:00Z")
    first = service("first", created="2026-01-02T00:00:00Z")
    late = service("late", created="2026-01-03T00:00:00Z")
    outside = service("outside", loadBalancerIP="10.1.1.1", created="2026-01-04T00:00:00Z")
    plan = allocate([keeps, asks, first, late, outside], NODES_, [], pool)
    assert plan == {"ns/keeps": ["192.168.9.11"], "ns/asks": ["192.168.9.12"], "ns/first": ["192.168.9.10"],
                    "ns/late": "no address left in the pool",
                    "ns/outside": "loadBalancerIP 10.1.1.1 is not in the pool"}
    assert [str(ip) for ip in parse_pool("10.0.0.0/30")] == ["10.0.0.1", "10.0.0.2"]


def test_off_unless_asked_for() -> None:
    available = discover()
    assert servicelb.NAME not in enabled(["*"], available)
    assert servicelb.NAME in enabled(["*", servicelb.NAME], available)


@pytest.mark.asyncio
async def test_sync_writes_the_ingress_and_takes_it_back() -> None:
    seed = [(NODES, n) for n in NODES_] + [(SERVICES, service("web"))]
    async with harness(servicelb, seed) as env:
        await env.sync("ns/web")
        stored = env.api.get(SERVICES, "web", "ns")
        assert stored["status"]["loadBalancer"]["ingress"] == [
            {"ip": "172.30.0.2", "ipMode": "VIP"}, {"ip": "172.30.0.3", "ipMode": "VIP"}]
        stored["spec"] = {"type": "ClusterIP", "ports": [{"port": 80}]}
        env.update(SERVICES, stored)
        await env.sync("ns/web")
        assert env.api.get(SERVICES, "web", "ns")["status"].get("loadBalancer", {}).get("ingress") is None
