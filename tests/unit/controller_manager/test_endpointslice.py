"""The EndpointSlice reconciler's planning: packing into slices of at most N, minimal churn when
pods come and go, endpoint conditions, the placeholder slice, recycling, the slice tracker, and
the mirroring controller's plan for selector-less Services.
"""

from __future__ import annotations

import itertools
from typing import Any

from controller_manager.controllers.endpointslicemirroring import mirror_plan, should_mirror
from controller_manager.endpointslice_reconciler import (
    CONTROLLER_NAME,
    Plan,
    address_types,
    reconcile,
    slice_to_fill,
)
from controller_manager.endpointslice_tracker import SliceTracker

Obj = dict[str, Any]
NODES = {"node-1": {"metadata": {"name": "node-1", "labels": {"topology.kubernetes.io/zone": "zone-a"}}},
         "node-2": {"metadata": {"name": "node-2"}}}
_names = itertools.count()


def pod(i: int, *, ready: bool = True, deleting: bool = False, node: str = "node-1", port: int | None = None) -> Obj:
    meta: Obj = {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}", "labels": {"app": "web"}}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    ports = [{"name": "web", "containerPort": port}] if port else []
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c", "ports": ports}]},
            "status": {"phase": "Running", "podIPs": [{"ip": f"10.1.{i // 250}.{i % 250}"}],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def service(**spec: Any) -> Obj:
    return {"metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid", "labels": {"team": "a"}},
            "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.0.9", "ipFamilies": ["IPv4"],
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}], **spec}}


def run(svc: Obj, pods: list[Obj], existing: list[Obj], max_endpoints: int = 100) -> tuple[Plan, list[str]]:
    return reconcile(svc, pods, NODES.get, existing, max_endpoints)


def store(plan: Plan, existing: list[Obj]) -> list[Obj]:
    """What the API holds after the plan is written (names assigned to creates)."""
    by_name = {s["metadata"]["name"]: s for s in existing}
    for slice_ in plan.delete:
        del by_name[slice_["metadata"]["name"]]
    for slice_ in plan.update:
        by_name[slice_["metadata"]["name"]] = slice_
    for slice_ in plan.create:
        slice_["metadata"]["name"] = f"{slice_['metadata']['generateName']}{next(_names)}"
        by_name[slice_["metadata"]["name"]] = slice_
    return list(by_name.values())


def sizes(slices: list[Obj]) -> list[int]:
    return sorted((len(s["endpoints"]) for s in slices), reverse=True)


def test_250_pods_make_three_slices_of_at_most_100() -> None:
    plan, problems = run(service(), [pod(i) for i in range(250)], [])
    assert not problems and not plan.update and not plan.delete
    assert sizes(plan.create) == [100, 100, 50]
    first = plan.create[0]
    assert first["metadata"]["generateName"] == "web-"
    assert first["metadata"]["labels"] == {"team": "a", "kubernetes.io/service-name": "web",
                                           "endpointslice.kubernetes.io/managed-by": CONTROLLER_NAME}
    assert first["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Service", "name": "web",
                                                     "uid": "svc-uid", "controller": True,
                                                     "blockOwnerDeletion": True}]
    assert first["addressType"] == "IPv4"
    assert first["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert sum(sizes(plan.create)) == len({e["addresses"][0] for s in plan.create for e in s["endpoints"]})


def test_endpoint_fields_and_conditions() -> None:
    pods = [pod(1), pod(2, ready=False, node="node-2"), pod(3, deleting=True), pod(4, ready=False, deleting=True)]
    plan, _ = run(service(), pods, [])
    (slice_,) = plan.create
    by_name = {e["targetRef"]["name"]: e for e in slice_["endpoints"]}
    assert by_name["p1"] == {"addresses": ["10.1.0.1"], "conditions": {"ready": True, "serving": True,
                                                                       "terminating": False},
                             "targetRef": {"kind": "Pod", "namespace": "ns", "name": "p1", "uid": "u1"},
                             "nodeName": "node-1", "zone": "zone-a"}
    assert by_name["p2"]["conditions"] == {"ready": False, "serving": False, "terminating": False}
    assert "zone" not in by_name["p2"]
    assert by_name["p3"]["conditions"] == {"ready": False, "serving": True, "terminating": True}
    assert by_name["p4"]["conditions"] == {"ready": False, "serving": False, "terminating": True}
    assert all("hints" not in e for e in slice_["endpoints"])
    plan, _ = run(service(publishNotReadyAddresses=True), pods, [])
    assert all(e["conditions"]["ready"] for e in plan.create[0]["endpoints"])


def test_pods_on_unknown_nodes_are_skipped_and_reported() -> None:
    plan, problems = run(service(), [pod(1), pod(2, node="gone")], [])
    assert [e["targetRef"]["name"] for e in plan.create[0]["endpoints"]] == ["p1"]
    assert problems and "Node gone Not Found" in problems[0]
    plan, problems = run(service(publishNotReadyAddresses=True), [pod(2, node="gone")], [])
    assert not problems and len(plan.create[0]["endpoints"]) == 1


def test_steady_state_writes_nothing() -> None:
    pods = [pod(i) for i in range(250)]
    slices = store(run(service(), pods, [])[0], [])
    plan, _ = run(service(), pods, slices)
    assert plan == Plan()


def test_removed_pod_updates_only_its_slice_and_new_pod_fills_it() -> None:
    pods = [pod(i) for i in range(250)]
    slices = store(run(service(), pods, [])[0], [])
    gone = pods.pop(10)
    holder = next(s for s in slices if any(e["targetRef"]["name"] == gone["metadata"]["name"] for e in s["endpoints"]))
    pods.append(pod(900))
    plan, _ = run(service(), pods, slices)
    assert not plan.create and not plan.delete
    (updated,) = plan.update
    assert updated["metadata"]["name"] == holder["metadata"]["name"]
    names = {e["targetRef"]["name"] for e in updated["endpoints"]}
    assert "p10" not in names and "p900" in names
    assert sizes(store(plan, slices)) == sizes(slices)


def test_added_pods_go_to_the_unchanged_slice_closest_to_full() -> None:
    pods = [pod(i) for i in range(250)]
    slices = store(run(service(), pods, [])[0], [])
    plan, _ = run(service(), [*pods, pod(500), pod(501)], slices)
    assert not plan.create and not plan.delete
    (updated,) = plan.update
    assert len(updated["endpoints"]) == 52
    assert slice_to_fill(slices, 1, 100) is not None
    assert slice_to_fill([{"endpoints": [{}] * 100}], 1, 100) is None
    plan, _ = run(service(), [*pods, *(pod(600 + i) for i in range(120))], slices)
    assert sizes(store(plan, slices)) == [100, 100, 100, 70]


def test_readiness_change_updates_in_place() -> None:
    pods = [pod(i) for i in range(5)]
    slices = store(run(service(), pods, [])[0], [])
    pods[2] = pod(2, ready=False)
    plan, _ = run(service(), pods, slices)
    (updated,) = plan.update
    assert updated["metadata"]["name"] == slices[0]["metadata"]["name"]
    assert [e["conditions"]["ready"] for e in updated["endpoints"]] == [True, True, False, True, True]


def test_no_pods_gives_one_placeholder_kept_across_syncs() -> None:
    plan, _ = run(service(), [], [])
    (placeholder,) = plan.create
    assert placeholder["endpoints"] == [] and placeholder["ports"] == []
    slices = store(plan, [])
    assert run(service(), [], slices)[0] == Plan()
    plan, _ = run(service(), [pod(1)], slices)
    assert not plan.create and not plan.delete
    (recycled,) = plan.update
    assert recycled["metadata"]["name"] == placeholder["metadata"]["name"]
    assert len(recycled["endpoints"]) == 1 and recycled["ports"][0]["port"] == 8080


def test_port_change_recycles_slices_and_named_ports_split_by_pod() -> None:
    svc = service(ports=[{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"}])
    pods = [pod(1, port=8080), pod(2, port=9090), pod(3, port=8080), pod(4)]
    plan, _ = run(svc, pods, [])
    by_port = {s["ports"][0]["port"] if s["ports"] else None: len(s["endpoints"]) for s in plan.create}
    assert by_port == {8080: 2, 9090: 1, None: 1}
    slices = store(plan, [])
    names = {s["metadata"]["name"] for s in slices}
    svc["spec"]["ports"][0]["targetPort"] = 7000
    plan, _ = run(svc, pods, slices)
    assert not plan.create and {s["metadata"]["name"] for s in plan.update} <= names
    assert len(plan.update) == 1 and len(plan.delete) == 2
    assert plan.update[0]["ports"] == [{"name": "http", "port": 7000, "protocol": "TCP"}]


def test_slices_of_another_owner_or_family_are_replaced() -> None:
    pods = [pod(1)]
    slices = store(run(service(), pods, [])[0], [])
    slices[0]["metadata"]["ownerReferences"][0]["uid"] = "old-uid"
    plan, _ = run(service(), pods, slices)
    assert len(plan.create) == 1 and [s["metadata"]["name"] for s in plan.delete] == [slices[0]["metadata"]["name"]]
    assert address_types(service(ipFamilies=["IPv6", "IPv4"])) == ["IPv6", "IPv4"]
    assert address_types(service(ipFamilies=[], clusterIP="None")) == ["IPv4", "IPv6"]
    assert address_types(service(ipFamilies=[], clusterIP="fd00::1")) == ["IPv6"]


def test_label_changes_update_slices() -> None:
    pods = [pod(1)]
    slices = store(run(service(), pods, [])[0], [])
    svc = service(clusterIP="None")
    svc["metadata"]["labels"] = {"team": "b"}
    (updated,) = run(svc, pods, slices)[0].update
    assert updated["metadata"]["labels"]["team"] == "b"
    assert updated["metadata"]["labels"]["service.kubernetes.io/headless"] == ""


def test_slice_tracker_sees_stale_cache_and_foreign_changes() -> None:
    tracker = SliceTracker()
    mine = {"metadata": {"uid": "s1", "namespace": "ns", "generation": 2,
                         "labels": {"kubernetes.io/service-name": "web"}}}
    assert tracker.should_sync(mine)
    tracker.update(mine)
    assert not tracker.should_sync(mine) and tracker.has(mine)
    older = {"metadata": {**mine["metadata"], "generation": 1}}
    assert tracker.stale("ns/web", [older]) and tracker.stale("ns/web", [])
    assert not tracker.stale("ns/web", [mine])
    assert tracker.should_sync({"metadata": {**mine["metadata"], "generation": 3}})
    tracker.expect_deletion(mine)
    assert tracker.stale("ns/web", [mine]) and not tracker.stale("ns/web", [])
    assert not tracker.handle_deletion(mine)
    tracker.update(mine)
    assert tracker.handle_deletion(mine)


def endpoints(subsets: list[Obj], **meta: Any) -> Obj:
    return {"metadata": {"name": "ext", "namespace": "ns", "uid": "ep-uid", **meta}, "subsets": subsets}


def test_mirroring_plan_for_user_endpoints() -> None:
    ep = endpoints([{"addresses": [{"ip": "192.168.1.1"}, {"ip": "fd00::1"}, {"ip": "bogus"}],
                     "notReadyAddresses": [{"ip": "192.168.1.2", "nodeName": "n", "hostname": "h"}],
                     "ports": [{"name": "db", "port": 5432, "protocol": "TCP"}]}],
                   labels={"a": "b"}, annotations={"x": "y", "endpoints.kubernetes.io/last-change-trigger-time": "t"})
    plan, invalid, skipped = mirror_plan(ep, [])
    assert (invalid, skipped) == (1, 1)
    by_type = {s["addressType"]: s for s in plan.create}
    assert set(by_type) == {"IPv4", "IPv6"}
    v4 = by_type["IPv4"]
    assert v4["metadata"]["labels"] == {"a": "b", "kubernetes.io/service-name": "ext",
                                        "endpointslice.kubernetes.io/managed-by":
                                            "endpointslicemirroring-controller.k8s.io"}
    assert v4["metadata"]["annotations"] == {"x": "y"}
    assert v4["metadata"]["ownerReferences"][0]["kind"] == "Endpoints"
    assert v4["ports"] == [{"name": "db", "port": 5432, "protocol": "TCP"}]
    assert sorted((e["addresses"][0], e["conditions"]["ready"]) for e in v4["endpoints"]) == [
        ("192.168.1.1", True), ("192.168.1.2", False)]
    not_ready = next(e for e in v4["endpoints"] if not e["conditions"]["ready"])
    assert not_ready["nodeName"] == "n" and not_ready["hostname"] == "h"
    slices = store(plan, [])
    assert mirror_plan(ep, slices)[0] == Plan()
    ep["subsets"][0]["addresses"] = [{"ip": "192.168.1.9"}]
    plan, _, _ = mirror_plan(ep, slices)
    assert not plan.create and len(plan.update) == 1 and len(plan.delete) == 1
    assert plan.update[0]["metadata"]["name"] == by_type["IPv4"]["metadata"]["name"]


def test_mirroring_caps_addresses_and_honours_skip_label() -> None:
    ep = endpoints([{"addresses": [{"ip": f"10.9.0.{i}"} for i in range(1, 11)], "ports": [{"port": 1}]}])
    plan, invalid, skipped = mirror_plan(ep, [], max_per_subset=4)
    assert (invalid, skipped) == (0, 6) and len(plan.create[0]["endpoints"]) == 4
    assert should_mirror(ep)
    assert not should_mirror(endpoints([], labels={"endpointslice.kubernetes.io/skip-mirror": "true"}))
    assert not should_mirror(endpoints([], annotations={"control-plane.alpha.kubernetes.io/leader": "{}"}))
