"""The snapshot's pod index: kept equal to a from-scratch rebuild as the cache adds, moves, relabels and
removes pods and nodes; selector narrowing; term signatures counted per topology pair."""

from __future__ import annotations

import random
from typing import Any

from scheduler.framework.cache import Cache
from scheduler.framework.podindex import PodIndex, term_key
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import PodInfo
from services.api.selectors import LabelSelector
from tests.unit.scheduler.util import make_node, make_pod

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def anti(labels: dict[str, str], key: str = HOST) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": key}]}}


def preferred(labels: dict[str, str], weight: int, key: str = ZONE) -> dict[str, Any]:
    return {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": weight, "podAffinityTerm": {"labelSelector": {"matchLabels": labels}, "topologyKey": key}}]}}


def digest(index: PodIndex) -> dict[str, Any]:
    """Everything the index holds, in comparable form (pods by uid)."""
    def terms(table: dict) -> dict:
        return {k: dict(tc.pairs) for k, tc in table.items()}

    return {
        "by_label": {k: {n: sorted(p.uid for p in pods) for n, pods in v.items()} for k, v in index.by_label.items()},
        "sizes": dict(index.label_sizes),
        "namespaces": dict(index.namespaces),
        "terminating": index.terminating,
        "anti": terms(index.required_anti_affinity),
        "aff": terms(index.required_affinity),
        "pref": terms(index.preferred_affinity),
        "pref_anti": terms(index.preferred_anti_affinity),
    }


def rebuilt(snap: Snapshot) -> dict[str, Any]:
    return digest(Snapshot(snap.node_info_map.values()).pod_index)


def brute(snap: Snapshot) -> dict[str, Any]:
    """The same content as `digest`, derived straight from the snapshot's pods without PodIndex."""
    by_label: dict = {}
    namespaces: dict = {}
    terminating = 0
    anti_pairs: dict = {}
    for ni in snap.node_info_map.values():
        for pi in ni.pods:
            meta = pi.pod["metadata"]
            ns = meta.get("namespace", "")
            namespaces[ns] = namespaces.get(ns, 0) + 1
            terminating += bool(meta.get("deletionTimestamp"))
            for k, v in (meta.get("labels") or {}).items():
                by_label.setdefault((ns, k, v), {}).setdefault(ni.name, []).append(pi.uid)
            for t in pi.required_anti_affinity_terms:
                if t.topology_key in ni.labels:
                    pairs = anti_pairs.setdefault(term_key(t), {})
                    pair = (t.topology_key, ni.labels[t.topology_key])
                    pairs[pair] = pairs.get(pair, 0) + 1
    return {"by_label": {k: {n: sorted(u) for n, u in v.items()} for k, v in by_label.items()},
            "sizes": {k: sum(len(u) for u in v.values()) for k, v in by_label.items()},
            "namespaces": namespaces, "terminating": terminating, "anti": anti_pairs}


def test_index_follows_cache_changes_like_a_rebuild() -> None:
    rng = random.Random(7)
    cache = Cache()
    snap = Snapshot()
    nodes = {f"n{i}": make_node(f"n{i}", labels={ZONE: f"z{i % 3}"}) for i in range(8)}
    for n in nodes.values():
        cache.add_node(n)
    placed: dict[str, dict] = {}
    for step in range(300):
        action = rng.random()
        if action < 0.5 or not placed:
            name = f"p{step}"
            node = rng.choice(sorted(nodes))
            color = rng.choice("abc")
            affinity = rng.choice([None, anti({"color": color}), preferred({"color": color}, rng.randint(1, 5))])
            pod = make_pod(name, node=node, namespace=rng.choice(["x", "y"]),
                           labels={"color": color, "app": "web"}, **({"affinity": affinity} if affinity else {}))
            if rng.random() < 0.3:
                cache.assume_pod(pod, node)
            else:
                cache.add_pod(pod)
            placed[name] = pod
        elif action < 0.65:
            pod = placed.pop(rng.choice(sorted(placed)))
            cache.remove_pod(pod)
        elif action < 0.8:
            name = rng.choice(sorted(placed))
            old = placed[name]
            new = {**old, "metadata": {**old["metadata"], "labels": {"color": rng.choice("abc")}}}
            if rng.random() < 0.2:
                new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            cache.update_pod(old, new)
            placed[name] = new
        elif action < 0.9:
            name = rng.choice(sorted(nodes))
            old = nodes[name]
            new = make_node(name, labels={ZONE: rng.choice(["z0", "z1", "z2", "z9"])})
            cache.update_node(old, new)
            nodes[name] = new
        else:
            name = rng.choice(sorted(nodes))
            if rng.random() < 0.5:
                cache.remove_node(nodes[name])
            else:
                cache.add_node(nodes[name])
        if rng.random() < 0.5:
            cache.update_snapshot(snap)
            got = digest(snap.pod_index)
            assert got == rebuilt(snap), f"step {step}"
            assert {k: got[k] for k in ("by_label", "sizes", "namespaces", "terminating", "anti")} == brute(snap)
    cache.update_snapshot(snap)
    assert digest(snap.pod_index) == rebuilt(snap)
    assert snap.pod_index.by_label, "the walk should leave pods behind"


def test_removing_everything_empties_the_index() -> None:
    cache = Cache()
    snap = Snapshot()
    cache.add_node(make_node("n", labels={ZONE: "z"}))
    pods = [make_pod(f"p{i}", node="n", labels={"app": "a"}, affinity=anti({"app": "a"})) for i in range(3)]
    for p in pods:
        cache.add_pod(p)
    cache.update_snapshot(snap)
    assert snap.pod_index.label_sizes[("default", "app", "a")] == 3
    assert list(snap.pod_index.required_anti_affinity.values())[0].pairs == {(HOST, "n"): 3}
    for p in pods:
        cache.remove_pod(p)
    cache.update_snapshot(snap)
    assert digest(snap.pod_index) == digest(PodIndex())


def test_node_relabel_moves_term_counts_to_the_new_domain() -> None:
    cache = Cache()
    snap = Snapshot()
    old = make_node("n", labels={ZONE: "z1"})
    cache.add_node(old)
    cache.add_pod(make_pod("p", node="n", labels={"app": "a"}, affinity=anti({"app": "a"}, ZONE)))
    cache.update_snapshot(snap)
    tc = next(iter(snap.pod_index.required_anti_affinity.values()))
    assert tc.pairs == {(ZONE, "z1"): 1}
    assert snap.domains(snap.nodes_with_keys((ZONE,)), ZONE) == {"z1"}
    cache.update_node(old, make_node("n", labels={ZONE: "z2"}))
    cache.update_snapshot(snap)
    tc = next(iter(snap.pod_index.required_anti_affinity.values()))
    assert tc.pairs == {(ZONE, "z2"): 1}
    assert snap.nodes_with_keys((ZONE,))["n"].labels[ZONE] == "z2"
    assert snap.domains(snap.nodes_with_keys((ZONE,)), ZONE) == {"z2"}


def test_candidates_narrow_by_the_rarest_exact_requirement() -> None:
    snap = Snapshot()
    index = snap.pod_index
    common = [PodInfo(make_pod(f"c{i}", labels={"app": "web", "tier": "x"})) for i in range(5)]
    rare = PodInfo(make_pod("r", labels={"app": "web", "tier": "y"}))
    for i, pi in enumerate([*common, rare]):
        index.add(pi, f"n{i % 2}", {})
    found, exact = index.candidates("default", LabelSelector.from_dict({"matchLabels": {"app": "web", "tier": "y"}}))
    assert exact is False
    assert found is not None and [p for pods in found.values() for p in pods] == [rare]
    found, exact = index.candidates("default", LabelSelector.from_dict({"matchLabels": {"app": "web"}}))
    assert exact is True and found is not None and sum(len(p) for p in found.values()) == 6
    assert index.candidates("other", LabelSelector.from_dict({"matchLabels": {"app": "web"}})) == ({}, True)
    only_exists = LabelSelector.from_dict({"matchExpressions": [{"key": "app", "operator": "Exists"}]})
    assert index.candidates("default", only_exists) == (None, False)
    assert index.candidates("default", LabelSelector()) == (None, False)
    assert index.candidates("default", LabelSelector.nothing()) == ({}, True)


def test_identical_terms_share_one_signature_and_weights_do_not() -> None:
    index = PodIndex()
    pods = [PodInfo(make_pod(f"p{i}", affinity=preferred({"app": "a"}, w))) for i, w in enumerate([3, 3, 5])]
    for pi in pods:
        index.add(pi, "n", {ZONE: "z"})
    assert sorted(tc.weight for tc in index.preferred_affinity.values()) == [3, 5]
    three = index.preferred_affinity[term_key(pods[0].preferred_affinity_terms[0].term, 3)]
    assert three.pairs == {(ZONE, "z"): 2}
    index.remove(pods[0], "n", {ZONE: "z"})
    assert three.pairs == {(ZONE, "z"): 1}
