"""InterPodAffinity: filter messages and codes, the first-pod rule, namespaces, preemption updates, score."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import Code, NodeScore
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import NodeInfo, PodInfo
from scheduler.plugins.interpodaffinity import (
    ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    InterPodAffinity,
)

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
_uid = iter(range(1, 10**6))


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {HOST: name, **labels}}, "status": {"allocatable": {}}}


def pod(name: str, labels: dict[str, str] | None = None, ns: str = "default", affinity: dict | None = None,
        node_name: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if affinity:
        spec["affinity"] = affinity
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": ns, "uid": f"u{next(_uid)}", "labels": labels or {}},
            "spec": spec}


def term(labels: dict[str, str], key: str = ZONE, **extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key, **extra}


def required(kind: str, *terms: dict) -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def preferred(kind: str, *weighted: tuple[int, dict]) -> dict[str, Any]:
    return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": w, "podAffinityTerm": t} for w, t in weighted]}}


def cluster(nodes: list[dict], pods: list[dict]) -> Snapshot:
    infos = {n["metadata"]["name"]: NodeInfo(n) for n in nodes}
    for p in pods:
        infos[p["spec"]["nodeName"]].add_pod(p)
    return Snapshot(infos.values())


def plugin(snapshot: Snapshot, ns_labels: dict[str, dict[str, str]] | None = None,
           **args: Any) -> InterPodAffinity:
    handle = SimpleNamespace(snapshot_shared_lister=lambda: snapshot,
                             namespace_labels=lambda ns: (ns_labels or {}).get(ns, {}))
    return InterPodAffinity(args, handle)  # type: ignore[arg-type]


def run_filter(snapshot: Snapshot, p: dict, **kw: Any) -> dict[str, tuple[Code, list[str]]]:
    pl = plugin(snapshot, **kw)
    state = CycleState()
    _, st = pl.pre_filter(state, p, snapshot.list())
    if st is not None and st.code == Code.SKIP:
        return {ni.name: (Code.SUCCESS, []) for ni in snapshot.list()}
    out = {}
    for ni in snapshot.list():
        res = pl.filter(state, p, ni)
        out[ni.name] = (Code.SUCCESS, []) if res is None else (res.code, res.reasons)
    return out


NODES = [node("a1", **{ZONE: "a"}), node("a2", **{ZONE: "a"}), node("b1", **{ZONE: "b"}), node("nozone")]


def test_prefilter_skips_pods_without_required_terms_when_no_existing_anti_affinity() -> None:
    snap = cluster(NODES, [pod("x", {"app": "web"}, node_name="a1")])
    _, st = plugin(snap).pre_filter(CycleState(), pod("p"), snap.list())
    assert st is not None and st.code == Code.SKIP


def test_required_affinity_follows_topology_domain() -> None:
    snap = cluster(NODES, [pod("db", {"app": "db"}, node_name="a1")])
    p = pod("web", {"app": "web"}, affinity=required("podAffinity", term({"app": "db"})))
    res = run_filter(snap, p)
    assert res["a1"] == (Code.SUCCESS, []) and res["a2"] == (Code.SUCCESS, [])
    assert res["b1"] == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_AFFINITY_RULES_NOT_MATCH])
    # A node without the topology key can never satisfy the term.
    assert res["nozone"] == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_AFFINITY_RULES_NOT_MATCH])


def test_first_pod_of_a_self_affine_group_may_go_anywhere_with_the_key() -> None:
    snap = cluster(NODES, [])
    p = pod("web-0", {"app": "web"}, affinity=required("podAffinity", term({"app": "web"})))
    res = run_filter(snap, p)
    assert res["a1"][0] == res["b1"][0] == Code.SUCCESS
    assert res["nozone"][0] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    # Not self-matching: stays pending when nothing matches.
    q = pod("web-0", {"app": "other"}, affinity=required("podAffinity", term({"app": "web"})))
    assert run_filter(snap, q)["a1"] == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_AFFINITY_RULES_NOT_MATCH])


def test_required_anti_affinity_by_hostname_and_zone() -> None:
    snap = cluster(NODES, [pod("w0", {"app": "web"}, node_name="a1")])
    by_host = pod("w1", {"app": "web"}, affinity=required("podAntiAffinity", term({"app": "web"}, HOST)))
    res = run_filter(snap, by_host)
    assert res["a1"] == (Code.UNSCHEDULABLE, [ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH])
    assert res["a2"][0] == res["b1"][0] == res["nozone"][0] == Code.SUCCESS
    by_zone = pod("w1", {"app": "web"}, affinity=required("podAntiAffinity", term({"app": "web"})))
    res = run_filter(snap, by_zone)
    assert res["a2"] == (Code.UNSCHEDULABLE, [ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH])
    assert res["b1"][0] == Code.SUCCESS and res["nozone"][0] == Code.SUCCESS


def test_existing_pods_anti_affinity_rejects_incoming_pod() -> None:
    guard = pod("guard", {"app": "db"}, node_name="b1",
                affinity=required("podAntiAffinity", term({"app": "web"})))
    snap = cluster(NODES, [guard])
    res = run_filter(snap, pod("web", {"app": "web"}))
    assert res["b1"] == (Code.UNSCHEDULABLE, [ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH])
    assert res["a1"][0] == Code.SUCCESS
    # A pod that does not match the guard's selector is unaffected.
    assert run_filter(snap, pod("other", {"app": "cache"}))["b1"][0] == Code.SUCCESS


def test_namespaces_default_to_own_and_namespace_selector_uses_namespace_labels() -> None:
    snap = cluster(NODES, [pod("db", {"app": "db"}, ns="data", node_name="a1")])
    own_ns = pod("web", affinity=required("podAffinity", term({"app": "db"})))
    assert run_filter(snap, own_ns)["a1"][0] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    listed = pod("web", affinity=required("podAffinity", term({"app": "db"}, namespaces=["data"])))
    assert run_filter(snap, listed)["a1"][0] == Code.SUCCESS
    selected = pod("web", affinity=required(
        "podAffinity", term({"app": "db"}, namespaceSelector={"matchLabels": {"team": "storage"}})))
    assert run_filter(snap, selected, ns_labels={"data": {"team": "storage"}})["a1"][0] == Code.SUCCESS
    assert run_filter(snap, selected, ns_labels={"data": {"team": "x"}})["a1"][0] \
        == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    everywhere = pod("web", affinity=required("podAffinity", term({"app": "db"}, namespaceSelector={})))
    assert run_filter(snap, everywhere)["a2"][0] == Code.SUCCESS


def test_match_label_keys_narrow_the_selector_to_the_pods_own_values() -> None:
    snap = cluster(NODES, [pod("old", {"app": "web", "rev": "1"}, node_name="a1")])
    p = pod("new", {"app": "web", "rev": "2"},
            affinity=required("podAntiAffinity", term({"app": "web"}, HOST, matchLabelKeys=["rev"])))
    assert run_filter(snap, p)["a1"][0] == Code.SUCCESS
    q = pod("new", {"app": "web", "rev": "1"},
            affinity=required("podAntiAffinity", term({"app": "web"}, HOST, matchLabelKeys=["rev"])))
    assert run_filter(snap, q)["a1"][0] == Code.UNSCHEDULABLE


def test_add_and_remove_pod_update_prefilter_state_for_preemption() -> None:
    victim = pod("w0", {"app": "web"}, node_name="a1")
    snap = cluster(NODES, [victim])
    pl = plugin(snap)
    p = pod("w1", {"app": "web"}, affinity=required("podAntiAffinity", term({"app": "web"}, HOST)))
    state = CycleState()
    pl.pre_filter(state, p, snap.list())
    ni = snap.get("a1").clone()
    assert pl.filter(state, p, ni).code == Code.UNSCHEDULABLE
    copy = state.clone()
    ni.remove_pod(victim)
    pl.remove_pod(copy, p, PodInfo(victim), ni)
    assert pl.filter(copy, p, ni) is None
    assert pl.filter(state, p, ni).code == Code.UNSCHEDULABLE, "the original state is untouched by the clone"
    # Adding a pod whose own anti-affinity rejects the incoming pod.
    guard = pod("g", {"app": "x"}, node_name="b1", affinity=required("podAntiAffinity", term({"app": "web"})))
    b1 = snap.get("b1").clone()
    b1.add_pod(guard)
    pl.add_pod(copy, p, PodInfo(guard), b1)
    assert pl.filter(copy, p, b1).reasons == [ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH]


def score_all(snapshot: Snapshot, p: dict, **args: Any) -> dict[str, int] | None:
    pl = plugin(snapshot, **args)
    state = CycleState()
    st = pl.pre_score(state, p, snapshot.list())
    if st is not None and st.code == Code.SKIP:
        return None
    scores = [NodeScore(ni.name, pl.score(state, p, ni)[0]) for ni in snapshot.list()]
    pl.normalize_score(state, p, scores)
    return {s.name: s.score for s in scores}


def test_preferred_affinity_and_anti_affinity_scores_are_normalized() -> None:
    snap = cluster(NODES, [pod("db", {"app": "db"}, node_name="a1"), pod("c", {"app": "cache"}, node_name="b1")])
    p = pod("web", affinity={**preferred("podAffinity", (10, term({"app": "db"}))),
                             **preferred("podAntiAffinity", (5, term({"app": "cache"})))})
    scores = score_all(snap, p)
    assert scores == {"a1": 100, "a2": 100, "b1": 0, "nozone": 33}


def test_existing_pods_required_affinity_counts_with_hard_pod_affinity_weight() -> None:
    existing = pod("e", {"app": "x"}, node_name="b1", affinity=required("podAffinity", term({"app": "web"})))
    snap = cluster(NODES, [existing])
    p = pod("web", {"app": "web"})
    assert score_all(snap, p) == {"a1": 0, "a2": 0, "b1": 100, "nozone": 0}
    assert score_all(snap, p, hardPodAffinityWeight=0) is None


def test_prescore_skips_without_any_terms() -> None:
    snap = cluster(NODES, [pod("x", {"app": "web"}, node_name="a1")])
    assert score_all(snap, pod("p")) is None


def test_ignore_preferred_terms_of_existing_pods() -> None:
    existing = pod("e", {"app": "x"}, node_name="b1", affinity=preferred("podAffinity", (50, term({"app": "web"}))))
    snap = cluster(NODES, [existing])
    assert score_all(snap, pod("web", {"app": "web"}))["b1"] == 100
    assert score_all(snap, pod("web", {"app": "web"}), ignorePreferredTermsOfExistingPods=True) is None


def test_invalid_hard_pod_affinity_weight() -> None:
    with pytest.raises(ValueError, match="hardPodAffinityWeight"):
        plugin(cluster(NODES, []), hardPodAffinityWeight=101)
