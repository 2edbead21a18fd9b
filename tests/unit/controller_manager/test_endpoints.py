"""The Endpoints controller's pure parts: which pods count, named ports, subset repacking,
truncation at capacity, and the last-change-trigger-time tracker.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from controller_manager.controllers.endpoints import (
    desired_subsets,
    normalized_subsets,
    truncate_subsets,
)
from controller_manager.endpointutil import (
    TriggerTimeTracker,
    find_port,
    format_time,
    repack_subsets,
    services_to_update,
    should_pod_be_in_endpoints,
)

Obj = dict[str, Any]


def pod(name: str, ip: str | None, *, ready: bool = True, labels: dict[str, str] | None = None,
        ports: list[Obj] | None = None, phase: str = "Running", deleting: bool = False,
        hostname: str = "", subdomain: str = "", ready_at: str = "2024-01-01T00:00:00Z", rv: str = "1") -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {"app": "web"},
                 "resourceVersion": rv}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    spec: Obj = {"nodeName": "node-1", "containers": [{"name": "c", "ports": ports or []}]}
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    status: Obj = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                                   "lastTransitionTime": ready_at}]}
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    return {"metadata": meta, "spec": spec, "status": status}


def service(ports: list[Obj] | None = None, *, cluster_ip: str = "10.96.0.5", publish: bool = False,
            annotations: dict[str, str] | None = None) -> Obj:
    spec: Obj = {"selector": {"app": "web"}, "clusterIP": cluster_ip, "ipFamilies": ["IPv4"],
                 "ports": ports if ports is not None else [{"name": "http", "port": 80, "targetPort": 8080,
                                                            "protocol": "TCP"}]}
    if publish:
        spec["publishNotReadyAddresses"] = True
    return {"metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid", "annotations": annotations or {},
                         "creationTimestamp": "2023-12-31T00:00:00Z"}, "spec": spec}


def ips(addresses: list[Obj] | None) -> list[str]:
    return [a["ip"] for a in addresses or []]


def test_ready_and_not_ready_pods_split_into_addresses() -> None:
    pods = [pod("a", "10.0.0.2"), pod("b", "10.0.0.1"), pod("c", "10.0.0.3", ready=False)]
    (subset,) = desired_subsets(service(), pods)
    assert ips(subset["addresses"]) == ["10.0.0.1", "10.0.0.2"]
    assert ips(subset["notReadyAddresses"]) == ["10.0.0.3"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    address = subset["addresses"][0]
    assert address["targetRef"] == {"kind": "Pod", "namespace": "ns", "name": "b", "uid": "uid-b"}
    assert address["nodeName"] == "node-1"
    assert "hostname" not in address


def test_publish_not_ready_and_tolerate_annotation_make_every_address_ready() -> None:
    pods = [pod("a", "10.0.0.1", ready=False), pod("b", "10.0.0.2", deleting=True)]
    for svc in (service(publish=True),
                service(annotations={"service.alpha.kubernetes.io/tolerate-unready-endpoints": "true"})):
        (subset,) = desired_subsets(svc, pods)
        assert ips(subset["addresses"]) == ["10.0.0.1", "10.0.0.2"]
        assert "notReadyAddresses" not in subset


def test_terminating_finished_and_ipless_pods_are_left_out() -> None:
    pods = [pod("a", "10.0.0.1", deleting=True), pod("b", None), pod("c", "10.0.0.3"),
            {**pod("d", "10.0.0.4", phase="Succeeded"), "spec": {"restartPolicy": "Never", "containers": []}}]
    (subset,) = desired_subsets(service(), pods)
    assert ips(subset["addresses"]) == ["10.0.0.3"]
    assert should_pod_be_in_endpoints(pods[0], True)
    assert not should_pod_be_in_endpoints(pods[0], False)
    onfailure = {**pods[3], "spec": {"restartPolicy": "OnFailure"}, "status": {**pods[3]["status"], "phase": "Failed"}}
    assert should_pod_be_in_endpoints(onfailure, False)


def test_named_target_port_resolves_per_pod() -> None:
    svc = service([{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"}])
    pods = [pod("a", "10.0.0.1", ports=[{"name": "web", "containerPort": 8080}]),
            pod("b", "10.0.0.2", ports=[{"name": "web", "containerPort": 9090}]),
            pod("c", "10.0.0.3", ports=[{"name": "web", "containerPort": 9090, "protocol": "UDP"}])]
    subsets = desired_subsets(svc, pods)
    assert [(ips(s["addresses"]), s["ports"][0]["port"]) for s in subsets] == [
        (["10.0.0.1"], 8080), (["10.0.0.2"], 9090)]
    assert find_port(pods[2], svc["spec"]["ports"][0]) is None
    sidecar = {"spec": {"containers": [], "initContainers": [
        {"name": "s", "restartPolicy": "Always", "ports": [{"name": "web", "containerPort": 7070}]}]}}
    assert find_port(sidecar, svc["spec"]["ports"][0]) == 7070
    assert find_port(sidecar, {"port": 81}) == 81


def test_hostname_only_for_headless_service_named_by_subdomain() -> None:
    pods = [pod("a", "10.0.0.1", hostname="a", subdomain="web"), pod("b", "10.0.0.2", hostname="b", subdomain="x")]
    (subset,) = desired_subsets(service(cluster_ip="None"), pods)
    assert [a.get("hostname") for a in subset["addresses"]] == ["a", None]
    (subset,) = desired_subsets(service(), pods)
    assert all("hostname" not in a for a in subset["addresses"])


def test_headless_service_without_ports_keeps_addresses() -> None:
    (subset,) = desired_subsets(service([], cluster_ip="None"), [pod("a", "10.0.0.1")])
    assert ips(subset["addresses"]) == ["10.0.0.1"] and "ports" not in subset
    assert desired_subsets(service([]), [pod("a", "10.0.0.1")]) == []


def addr(ip: str) -> Obj:
    return {"ip": ip, "targetRef": {"kind": "Pod", "uid": f"u-{ip}"}}


def port(name: str, number: int) -> Obj:
    return {"name": name, "port": number, "protocol": "TCP"}


def test_repack_groups_addresses_sharing_ports() -> None:
    subsets = [
        {"addresses": [addr("1.1.1.2")], "ports": [port("a", 1)]},
        {"addresses": [addr("1.1.1.1")], "ports": [port("a", 1)]},
        {"addresses": [addr("1.1.1.1")], "ports": [port("b", 2)]},
        {"addresses": [addr("1.1.1.2")], "ports": [port("b", 2)]},
        {"addresses": [addr("1.1.1.3")], "ports": [port("b", 3)]},
    ]
    assert repack_subsets(subsets) == [
        {"addresses": [addr("1.1.1.1"), addr("1.1.1.2")], "ports": [port("a", 1), port("b", 2)]},
        {"addresses": [addr("1.1.1.3")], "ports": [port("b", 3)]},
    ]


def test_repack_not_ready_wins_over_ready_on_the_same_port() -> None:
    subsets = [
        {"addresses": [addr("1.1.1.1")], "ports": [port("a", 1)]},
        {"notReadyAddresses": [addr("1.1.1.1")], "ports": [port("a", 1)]},
        {"addresses": [addr("1.1.1.1")], "ports": [port("b", 2)]},
    ]
    assert repack_subsets(subsets) == [
        {"notReadyAddresses": [addr("1.1.1.1")], "ports": [port("a", 1)]},
        {"addresses": [addr("1.1.1.1")], "ports": [port("b", 2)]},
    ]


def test_repack_keeps_same_ip_of_different_pods_apart_and_is_order_independent() -> None:
    one = {"ip": "1.1.1.1", "targetRef": {"uid": "x"}}
    two = {"ip": "1.1.1.1", "targetRef": {"uid": "y"}}
    subsets = [{"addresses": [two], "ports": [port("a", 1)]}, {"addresses": [one], "ports": [port("a", 1)]}]
    assert repack_subsets(subsets) == [{"addresses": [one, two], "ports": [port("a", 1)]}]
    assert repack_subsets(list(reversed(subsets))) == repack_subsets(subsets)


def test_truncate_prefers_ready_and_spreads_proportionally() -> None:
    ready = [{"ip": f"10.0.{i // 250}.{i % 250}"} for i in range(600)]
    subsets = [{"addresses": ready[:300], "notReadyAddresses": ready[:500], "ports": [port("a", 1)]},
               {"addresses": ready[300:], "ports": [port("b", 2)]}]
    out, truncated = truncate_subsets(subsets, 1000)
    assert truncated
    assert [len(s.get("addresses") or []) for s in out] == [300, 300]
    assert sum(len(s.get("notReadyAddresses") or []) for s in out) == 400
    many = [{"addresses": ready[:450]}, {"addresses": ready[:600]}]
    out, truncated = truncate_subsets(many, 100)
    assert truncated and [len(s["addresses"]) for s in out] == [43, 57]
    assert truncate_subsets(many, 2000) == (many, False)


def test_normalized_subsets_ignore_empty_fields_and_resource_versions() -> None:
    stored = [{"addresses": [{"ip": "1.1.1.1", "hostname": "", "targetRef": {"kind": "Pod", "uid": "u",
                                                                          "resourceVersion": "7"}}],
               "notReadyAddresses": [], "ports": [{"name": "", "port": 1, "protocol": "TCP"}]}]
    fresh = [{"addresses": [{"ip": "1.1.1.1", "targetRef": {"kind": "Pod", "uid": "u"}}],
              "ports": [{"port": 1, "protocol": "TCP"}]}]
    assert normalized_subsets(stored) == normalized_subsets(fresh)


def test_trigger_time_reports_earliest_new_change_only() -> None:
    tracker = TriggerTimeTracker()
    svc = service()
    pods = [pod("a", "1.1.1.1", ready_at="2024-01-01T00:00:05Z"), pod("b", "1.1.1.2", ready_at="2024-01-01T00:00:09Z")]
    assert tracker.compute("ns", svc, pods) == datetime(2023, 12, 31, tzinfo=UTC)
    assert tracker.compute("ns", svc, pods) is None
    pods[1] = pod("b", "1.1.1.2", ready_at="2024-01-01T00:01:00Z")
    pods.append(pod("c", "1.1.1.3", ready_at="2024-01-01T00:00:30Z"))
    assert tracker.compute("ns", svc, pods) == datetime(2024, 1, 1, 0, 0, 30, tzinfo=UTC)
    tracker.forget("ns", "web")
    assert tracker.compute("ns", svc, pods) == datetime(2023, 12, 31, tzinfo=UTC)
    assert format_time(datetime(2024, 1, 1, 0, 0, 30, tzinfo=UTC)) == "2024-01-01T00:00:30Z"
    assert format_time(datetime(2024, 1, 1, 0, 0, 30, 120000, tzinfo=UTC)) == "2024-01-01T00:00:30.12Z"


def test_pod_updates_touch_services_only_when_endpoints_change() -> None:
    svc = service()
    other = {"metadata": {"name": "other", "namespace": "ns"}, "spec": {"selector": {"app": "other"}}}
    services = [svc, other]
    old = pod("a", "1.1.1.1", rv="1")
    assert services_to_update(services, old, pod("a", "1.1.1.1", rv="1", ready=False)) == set()
    assert services_to_update(services, old, pod("a", "1.1.1.1", rv="2")) == set()
    assert services_to_update(services, old, pod("a", "1.1.1.1", rv="2", ready=False)) == {"ns/web"}
    moved = pod("a", "1.1.1.1", rv="2", labels={"app": "other"})
    assert services_to_update(services, old, moved) == {"ns/web", "ns/other"}
