"""PodTopologySpread: skew filtering, minDomains, inclusion policies, system defaults and scoring."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import Code, NodeScore
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import NodeInfo, PodInfo
from scheduler.plugins.podtopologyspread import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread,
)

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
_uid = iter(range(1, 10**6))


def node(name: str, zone: str | None = None, taints: list | None = None, **labels: str) -> dict[str, Any]:
    lab = {HOST: name, **labels}
    if zone:
        lab[ZONE] = zone
    return {"metadata": {"name": name, "labels": lab}, "spec": {"taints": taints or []}, "status": {}}


def pod(name: str, labels: dict[str, str] | None = None, node_name: str = "", ns: str = "default",
        constraints: list[dict] | None = None, **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"containers": [{"name": "c"}], **spec}
    if node_name:
        s["nodeName"] = node_name
    if constraints:
        s["topologySpreadConstraints"] = constraints
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"u{next(_uid)}", "labels": labels or {}}
    return {"metadata": meta, "spec": s}


def tsc(key: str = ZONE, skew: int = 1, when: str = "DoNotSchedule", labels: dict | None = None,
        **extra: Any) -> dict[str, Any]:
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": labels if labels is not None else {"app": "web"}}, **extra}


class FakeInformer:
    def __init__(self, objs: list[dict]) -> None:
        self.objs = objs

    def get(self, name: str, namespace: str | None = None) -> dict | None:
        return next((o for o in self.objs if o["metadata"]["name"] == name
                     and o["metadata"].get("namespace") == namespace), None)

    def list(self, namespace: str | None = None) -> list[dict]:
        return [o for o in self.objs if namespace is None or o["metadata"].get("namespace") == namespace]


def cluster(nodes: list[dict], pods: list[dict]) -> Snapshot:
    infos = {n["metadata"]["name"]: NodeInfo(n) for n in nodes}
    for p in pods:
        infos[p["spec"]["nodeName"]].add_pod(p)
    return Snapshot(infos.values())


def plugin(snapshot: Snapshot, objects: dict[str, list[dict]] | None = None, **args: Any) -> PodTopologySpread:
    objects = objects or {}
    factory = SimpleNamespace(informer_for=lambda r: FakeInformer(objects.get(r.plural, [])))
    handle = SimpleNamespace(snapshot_shared_lister=lambda: snapshot, informer_factory=factory)
    return PodTopologySpread(args, handle)  # type: ignore[arg-type]


def run_filter(snap: Snapshot, p: dict, **kw: Any) -> dict[str, tuple[Code, list[str]]] | None:
    pl = plugin(snap, **kw)
    state = CycleState()
    _, st = pl.pre_filter(state, p, snap.list())
    if st is not None and st.code == Code.SKIP:
        return None
    out = {}
    for ni in snap.list():
        r = pl.filter(state, p, ni)
        out[ni.name] = (Code.SUCCESS, []) if r is None else (r.code, r.reasons)
    return out


NODES = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("b2", "b")]


def web(name: str, node_name: str) -> dict:
    return pod(name, {"app": "web"}, node_name)


def test_skew_filter_by_zone_and_missing_label() -> None:
    snap = cluster([*NODES, node("nozone")], [web("w1", "a1"), web("w2", "a2")])
    res = run_filter(snap, pod("new", {"app": "web"}, constraints=[tsc()]))
    assert res is not None
    assert res["a1"] == (Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH])
    assert res["b1"] == (Code.SUCCESS, [])
    assert res["nozone"] == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_NODE_LABEL_NOT_MATCH])


def test_self_match_counts_only_when_the_pod_matches_its_selector() -> None:
    snap = cluster(NODES, [web("w1", "a1")])
    res = run_filter(snap, pod("new", {"app": "other"}, constraints=[tsc()]))
    # 1 + 0 - 0 = 1 <= maxSkew everywhere.
    assert res is not None and all(code == Code.SUCCESS for code, _ in res.values())


def test_terminating_and_other_namespace_pods_do_not_count() -> None:
    gone = web("w1", "a1")
    gone["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    snap = cluster(NODES, [gone, pod("w2", {"app": "web"}, "a2", ns="other")])
    res = run_filter(snap, pod("new", {"app": "web"}, constraints=[tsc()]))
    assert res is not None and res["a1"][0] == Code.SUCCESS


def test_min_domains_treats_global_minimum_as_zero() -> None:
    snap = cluster(NODES, [web("w1", "a1"), web("w2", "b1")])
    # Two domains with one pod each: the minimum is 1, so both zones accept.
    res = run_filter(snap, pod("new", {"app": "web"}, constraints=[tsc()]))
    assert res is not None and res["a1"][0] == Code.SUCCESS
    res = run_filter(snap, pod("new", {"app": "web"}, constraints=[tsc(minDomains=3)]))
    assert res is not None and res["a1"] == (Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH])


def test_node_affinity_policy_honor_and_ignore() -> None:
    nodes = [node("a1", "a", tier="x"), node("b1", "b", tier="y")]
    snap = cluster(nodes, [web("w1", "a1")])
    # Honor (default): zone b is not eligible, so the only domain is a with 1 pod: minimum 1.
    p = pod("new", {"app": "web"}, constraints=[tsc()], nodeSelector={"tier": "x"})
    res = run_filter(snap, p)
    assert res is not None and res["a1"][0] == Code.SUCCESS
    p = pod("new", {"app": "web"}, constraints=[tsc(nodeAffinityPolicy="Ignore")], nodeSelector={"tier": "x"})
    res = run_filter(snap, p)
    assert res is not None and res["a1"][0] == Code.UNSCHEDULABLE


def test_node_taints_policy_honor_excludes_tainted_domains() -> None:
    taint = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    snap = cluster([node("a1", "a"), node("b1", "b", taints=taint)], [web("w1", "a1")])
    res = run_filter(snap, pod("new", {"app": "web"}, constraints=[tsc()]))
    assert res is not None and res["a1"][0] == Code.UNSCHEDULABLE
    res = run_filter(snap, pod("new", {"app": "web"}, constraints=[tsc(nodeTaintsPolicy="Honor")]))
    assert res is not None and res["a1"][0] == Code.SUCCESS


def test_match_label_keys_split_by_revision() -> None:
    snap = cluster(NODES, [pod("w1", {"app": "web", "rev": "1"}, "a1"), pod("w2", {"app": "web", "rev": "1"}, "a2")])
    p = pod("new", {"app": "web", "rev": "2"}, constraints=[tsc(matchLabelKeys=["rev"])])
    res = run_filter(snap, p)
    assert res is not None and res["a1"][0] == Code.SUCCESS


def test_schedule_anyway_constraints_do_not_filter() -> None:
    snap = cluster(NODES, [web("w1", "a1")])
    assert run_filter(snap, pod("new", {"app": "web"}, constraints=[tsc(when="ScheduleAnyway")])) is None


def test_add_remove_pod_move_the_critical_paths() -> None:
    victim = web("w1", "a1")
    snap = cluster(NODES, [victim, web("w2", "a2")])
    pl = plugin(snap)
    p = pod("new", {"app": "web"}, constraints=[tsc(skew=2)])
    state = CycleState()
    pl.pre_filter(state, p, snap.list())
    assert pl.filter(state, p, snap.get("a1")).code == Code.UNSCHEDULABLE
    copy = state.clone()
    ni = snap.get("a1").clone()
    ni.remove_pod(victim)
    pl.remove_pod(copy, p, PodInfo(victim), ni)
    assert pl.filter(copy, p, ni) is None
    b1 = snap.get("b1").clone()
    extra = web("w3", "b1")
    b1.add_pod(extra)
    pl.add_pod(copy, p, PodInfo(extra), b1)
    assert pl.filter(copy, p, b1) is None
    assert pl.filter(state, p, snap.get("a1")).code == Code.UNSCHEDULABLE


def score_all(snap: Snapshot, p: dict, nodes: list[str] | None = None, **kw: Any) -> dict[str, int] | None:
    pl = plugin(snap, **kw)
    state = CycleState()
    feasible = [snap.get(n) for n in nodes] if nodes else snap.list()
    st = pl.pre_score(state, p, feasible)
    if st is not None and st.code == Code.SKIP:
        return None
    scores = [NodeScore(ni.name, pl.score(state, p, ni)[0]) for ni in feasible]
    pl.normalize_score(state, p, scores)
    return {s.name: s.score for s in scores}


def test_score_prefers_emptier_zones() -> None:
    snap = cluster([*NODES, node("nozone")], [web("w1", "a1"), web("w2", "a2"), web("w3", "b1")])
    scores = score_all(snap, pod("new", {"app": "web"}, constraints=[tsc(when="ScheduleAnyway")]))
    # Raw: zone a 2*ln(4)=2.77->3, zone b ln(4)=1.39->1; max 3, min 1; nozone ignored.
    assert scores == {"a1": 33, "a2": 33, "b1": 100, "b2": 100, "nozone": 0}


def test_score_by_hostname_counts_per_node() -> None:
    snap = cluster(NODES, [web("w1", "a1"), web("w2", "a1"), web("w3", "b1")])
    scores = score_all(snap, pod("new", {"app": "web"}, constraints=[tsc(HOST, when="ScheduleAnyway")]))
    # weight ln(6)=1.79: a1 3.58->4, b1 1.79->2, others 0: max 4 min 0.
    assert scores == {"a1": 0, "a2": 100, "b1": 50, "b2": 100}


def test_system_default_constraints_use_owning_service_selector() -> None:
    svc = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"app": "web"}}}
    snap = cluster([*NODES, node("nozone")], [web("w1", "a1"), web("w2", "a1")])
    p = pod("new", {"app": "web"})
    assert run_filter(snap, p, objects={"services": [svc]}) is None, "system defaults are ScheduleAnyway"
    scores = score_all(snap, p, objects={"services": [svc]})
    assert scores is not None
    # Hostname (maxSkew 3) and zone (maxSkew 5): a1 is the most loaded, b nodes the least.
    assert scores["a1"] < scores["a2"] < scores["b1"] == scores["b2"]
    # Nodes without a zone still get hostname spreading under system defaults.
    assert scores["nozone"] > 0
    # Without a Service/controller selecting the pod there is nothing to spread.
    assert score_all(snap, p) is None


def test_default_selector_merges_replicaset_selector() -> None:
    rs = {"metadata": {"name": "rs", "namespace": "default"},
          "spec": {"selector": {"matchLabels": {"app": "web", "pod-template-hash": "h"}}}}
    p = pod("new", {"app": "web", "pod-template-hash": "h"})
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                         "controller": True, "uid": "x"}]
    pl = plugin(cluster(NODES, []), objects={"replicasets": [rs]})
    sel = pl.default_selector(p)
    assert sel.matches({"app": "web", "pod-template-hash": "h"})
    assert not sel.matches({"app": "web"})


def test_list_defaulting_with_configured_constraints_and_validation() -> None:
    svc = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"app": "web"}}}
    snap = cluster(NODES, [web("w1", "a1"), web("w2", "a2")])
    args = {"defaultingType": "List",
            "defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]}
    res = run_filter(snap, pod("new", {"app": "web"}), objects={"services": [svc]}, **args)
    assert res is not None and res["a1"][0] == Code.UNSCHEDULABLE and res["b1"][0] == Code.SUCCESS
    with pytest.raises(ValueError, match="defaultConstraints must be empty"):
        plugin(snap, defaultingType="System", defaultConstraints=args["defaultConstraints"])
