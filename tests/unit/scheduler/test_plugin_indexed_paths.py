"""InterPodAffinity and PodTopologySpread read the snapshot's pod index and filter nodes in batches: over
random clusters, their PreFilter counts equal a scan of every pod, and `filter_nodes` agrees with
`filter` node by node."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import NodeInfo, PodInfo
from scheduler.plugins.interpodaffinity import InterPodAffinity
from scheduler.plugins.interpodaffinity.inter_pod_affinity import PRE_FILTER_STATE_KEY as IPA_KEY
from scheduler.plugins.interpodaffinity.inter_pod_affinity import PRE_SCORE_STATE_KEY as IPA_SCORE_KEY
from scheduler.plugins.interpodaffinity.inter_pod_affinity import PreFilterState as IpaState
from scheduler.plugins.interpodaffinity.inter_pod_affinity import _NsLabelCache
from scheduler.plugins.podtopologyspread import PodTopologySpread
from scheduler.plugins.podtopologyspread.pod_topology_spread import PRE_FILTER_STATE_KEY as PTS_KEY
from scheduler.plugins.podtopologyspread.pod_topology_spread import count_pods_match_selector

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
NS_LABELS = {"x": {"team": "red"}, "y": {"team": "blue"}}


def selector(rng: random.Random) -> dict[str, Any]:
    kind = rng.random()
    if kind < 0.5:
        return {"matchLabels": {"color": rng.choice("abc")}}
    if kind < 0.7:
        return {"matchLabels": {"color": rng.choice("abc"), "app": "web"}}
    if kind < 0.85:
        return {"matchExpressions": [{"key": "color", "operator": "In", "values": sorted(rng.sample("abc", 2))}]}
    return {"matchExpressions": [{"key": "color", "operator": "Exists"}]}


def term(rng: random.Random) -> dict[str, Any]:
    t: dict[str, Any] = {"labelSelector": selector(rng), "topologyKey": rng.choice([HOST, ZONE])}
    if rng.random() < 0.2:
        t["namespaceSelector"] = {"matchLabels": {"team": "red"}}
    elif rng.random() < 0.2:
        t["namespaces"] = ["x", "y"]
    return t


def affinity(rng: random.Random) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    if rng.random() < 0.4:
        out["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term(rng)]}
    if rng.random() < 0.3:
        out["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term(rng)]}
    if rng.random() < 0.3:
        out.setdefault("podAffinity", {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(1, 10), "podAffinityTerm": term(rng)}]
    return out or None


def random_pod(rng: random.Random, name: str, node: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": rng.choice("xy"), "uid": name,
                            "labels": {"color": rng.choice("abc"), **({"app": "web"} if rng.random() < 0.5 else {})}}
    if node and rng.random() < 0.1:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    aff = affinity(rng)
    if aff:
        spec["affinity"] = aff
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec}


def random_cluster(rng: random.Random) -> Snapshot:
    infos = []
    for i in range(rng.randint(3, 12)):
        labels = {HOST: f"n{i}"}
        if rng.random() < 0.85:
            labels[ZONE] = f"z{rng.randint(0, 3)}"
        ni = NodeInfo({"metadata": {"name": f"n{i}", "labels": labels}, "spec": {}, "status": {}})
        for j in range(rng.randint(0, 6)):
            ni.add_pod(random_pod(rng, f"e{i}-{j}", f"n{i}"))
        infos.append(ni)
    return Snapshot(infos)


def verdicts(results: list | None, n: int) -> list[tuple[int, list[str]] | None]:
    return [None if st is None else (int(st.code), st.reasons) for st in (results or [None] * n)]


@pytest.mark.parametrize("seed", range(60))
def test_interpodaffinity_index_matches_scan(seed: int) -> None:
    rng = random.Random(seed)
    snap = random_cluster(rng)
    pl = InterPodAffinity({}, SimpleNamespace(snapshot_shared_lister=lambda: snap,  # type: ignore[arg-type]
                                              namespace_labels=NS_LABELS.get))
    pod = random_pod(rng, "incoming")
    state = CycleState()
    _, st = pl.pre_filter(state, pod, snap.list())
    if st is not None:
        assert not PodInfo(pod).required_affinity_terms and not PodInfo(pod).required_anti_affinity_terms
        return
    s = state.read(IPA_KEY)
    scanned = IpaState(PodInfo(pod), _NsLabelCache(NS_LABELS.get))
    InterPodAffinity._scan(snap, scanned, scanned.pod_info.required_affinity_terms,
                           scanned.pod_info.required_anti_affinity_terms)
    for ni in snap.list():
        for existing in ni.pods:
            for t in existing.required_anti_affinity_terms:
                if t.matches(pod, NS_LABELS.get(pod["metadata"]["namespace"])) and t.topology_key in ni.labels:
                    pair = (t.topology_key, ni.labels[t.topology_key])
                    scanned.existing_anti_affinity_counts[pair] = scanned.existing_anti_affinity_counts.get(pair, 0) + 1
    assert s.affinity_counts == scanned.affinity_counts
    assert s.anti_affinity_counts == scanned.anti_affinity_counts
    assert s.existing_anti_affinity_counts == scanned.existing_anti_affinity_counts
    nodes = snap.list()
    assert verdicts(pl.filter_nodes(state, pod, nodes), len(nodes)) == verdicts(
        [pl.filter(state, pod, ni) for ni in nodes], len(nodes))


@pytest.mark.parametrize("seed", range(40))
def test_interpodaffinity_prescore_matches_scan(seed: int) -> None:
    rng = random.Random(1000 + seed)
    snap = random_cluster(rng)
    pl = InterPodAffinity({}, SimpleNamespace(snapshot_shared_lister=lambda: snap,  # type: ignore[arg-type]
                                              namespace_labels=NS_LABELS.get))
    pod = random_pod(rng, "incoming")
    state = CycleState()
    st = pl.pre_score(state, pod, snap.list())
    expected: dict[str, dict[str, int]] = {}
    pod_info = PodInfo(pod)
    pod_ns = NS_LABELS.get(pod["metadata"]["namespace"])

    def add(key: str, value: str, w: int) -> None:
        expected.setdefault(key, {})[value] = expected.get(key, {}).get(value, 0) + w

    for ni in snap.list():
        for existing in ni.pods:
            target_ns = NS_LABELS.get(existing.pod["metadata"]["namespace"])
            for wt in pod_info.preferred_affinity_terms:
                if wt.term.matches(existing.pod, target_ns) and wt.term.topology_key in ni.labels:
                    add(wt.term.topology_key, ni.labels[wt.term.topology_key], wt.weight)
            for t in existing.required_affinity_terms:
                if t.matches(pod, pod_ns) and t.topology_key in ni.labels:
                    add(t.topology_key, ni.labels[t.topology_key], 1)
            for wt in existing.preferred_affinity_terms:
                if wt.term.matches(pod, pod_ns) and wt.term.topology_key in ni.labels:
                    add(wt.term.topology_key, ni.labels[wt.term.topology_key], wt.weight)
    if not expected:
        assert st is not None and st.is_skip()
        return
    assert state.read(IPA_SCORE_KEY).topology_score == expected


def spread_pod(rng: random.Random) -> dict[str, Any]:
    pod = random_pod(rng, "incoming")
    pod["spec"].pop("affinity", None)
    pod["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": rng.randint(1, 2), "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": selector(rng)} for key in rng.sample([ZONE, HOST], rng.randint(1, 2))]
    if rng.random() < 0.3:
        pod["spec"]["nodeSelector"] = {HOST: f"n{rng.randint(0, 5)}"}
    return pod


@pytest.mark.parametrize("seed", range(60))
def test_podtopologyspread_index_matches_scan(seed: int) -> None:
    rng = random.Random(2000 + seed)
    snap = random_cluster(rng)
    handle = SimpleNamespace(snapshot_shared_lister=lambda: snap, informer_factory=None)
    pl = PodTopologySpread({"defaultingType": "List"}, handle)  # type: ignore[arg-type]
    pod = spread_pod(rng)
    state = CycleState()
    _, st = pl.pre_filter(state, pod, snap.list())
    assert st is None
    s = state.read(PTS_KEY)
    expected: dict[tuple[str, str], int] = {}
    ns = pod["metadata"]["namespace"]
    for ni in snap.list():
        if not all(c.topology_key in ni.labels for c in s.constraints):
            continue
        for c in s.constraints:
            if c.includes_node(pod, ni.node):
                pair = (c.topology_key, ni.labels[c.topology_key])
                expected[pair] = expected.get(pair, 0) + count_pods_match_selector(ni.pods, c.selector, ns)
    assert s.tp_pair_to_match_num == expected
    nodes = snap.list()
    assert verdicts(pl.filter_nodes(state, pod, nodes), len(nodes)) == verdicts(
        [pl.filter(state, pod, ni) for ni in nodes], len(nodes))
