"""DaemonSet node eligibility (selectors, affinity, taints and the automatic tolerations),
node pinning, and the rolling-update plans for maxUnavailable and maxSurge."""

from __future__ import annotations

from typing import Any

from controller_manager.controllers.daemonset import (
    daemon_tolerations,
    pin_to_node,
    should_run,
    surge_plan,
    target_node,
    unavailable_plan,
)


def node(name: str, labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


def test_automatic_tolerations() -> None:
    keys = {(t["key"], t["effect"]) for t in daemon_tolerations({})}
    assert keys == {
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    }
    host = {(t["key"], t["effect"]) for t in daemon_tolerations({"hostNetwork": True})}
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in host
    # Already present: not added twice.
    own = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    assert len(daemon_tolerations({"tolerations": own})) == 6


def test_selectors_and_affinity() -> None:
    spec = {"nodeSelector": {"disk": "ssd"}}
    assert should_run(node("a", {"disk": "ssd"}), spec) == (True, True)
    assert should_run(node("a", {"disk": "hdd"}), spec) == (False, False)
    affinity = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]},
                    ]
                }
            }
        }
    }
    assert should_run(node("a", {"zone": "z1"}), affinity)[0]
    assert should_run(node("b"), affinity)[0]
    assert not should_run(node("c", {"zone": "z2"}), affinity)[0]
    assert not should_run(node("a"), {"nodeName": "b"})[0]


def test_taints() -> None:
    no_schedule = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    no_execute = [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}]
    assert should_run(node("a", taints=no_schedule), {}) == (False, True)
    assert should_run(node("a", taints=no_execute), {}) == (False, False)
    tolerate = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]}
    assert should_run(node("a", taints=no_execute), tolerate) == (True, True)
    wrong_value = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "cpu"}]}
    assert should_run(node("a", taints=no_schedule), wrong_value) == (False, True)
    cordoned = [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
    ]
    assert should_run(node("a", taints=cordoned), {}) == (True, True)
    assert should_run(node("a", taints=[{"key": "x", "effect": "PreferNoSchedule"}]), {}) == (True, True)


def test_pinning() -> None:
    spec: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": []}]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}],
            }
        }
    }
    pin_to_node(spec, "n1")
    affinity = spec["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    }
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 1}]
    assert target_node({"spec": spec}) == "n1"
    assert target_node({"spec": {**spec, "nodeName": "n2"}}) == "n2"
    assert target_node({"spec": {}}) is None


def dpod(name: str, revision: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": name, "labels": {"controller-revision-hash": revision}},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_max_unavailable_plan() -> None:
    nodes = {f"n{i}": [dpod(f"p{i}", "old")] for i in range(4)}
    assert [p["metadata"]["name"] for p in unavailable_plan(nodes, "new", 1, 0)] == ["p0"]
    assert [p["metadata"]["name"] for p in unavailable_plan(nodes, "new", 2, 0)] == ["p0", "p1"]
    # A node without a pod is already unavailable; an unready old pod always goes.
    nodes["n0"] = []
    nodes["n3"] = [dpod("p3", "old", ready=False)]
    assert [p["metadata"]["name"] for p in unavailable_plan(nodes, "new", 2, 0)] == ["p3"]
    nodes = {"n0": [dpod("a", "new")], "n1": [dpod("b", "old")]}
    assert [p["metadata"]["name"] for p in unavailable_plan(nodes, "new", 1, 0)] == ["b"]


def test_max_surge_plan() -> None:
    nodes = {f"n{i}": [dpod(f"p{i}", "old")] for i in range(3)}
    create, delete = surge_plan(nodes, "new", 1, 0)
    assert create == ["n0"] and delete == []
    nodes["n0"].append(dpod("q0", "new", ready=False))
    assert surge_plan(nodes, "new", 1, 0) == ([], [])
    assert surge_plan(nodes, "new", 2, 0)[0] == ["n1"]
    nodes["n0"][1] = dpod("q0", "new")
    create, delete = surge_plan(nodes, "new", 1, 0)
    assert create == ["n1"] and [p["metadata"]["name"] for p in delete] == ["p0"]
