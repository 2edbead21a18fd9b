"""The cache: assume, confirm, forget, expire; incremental snapshots; zone round-robin order."""

from __future__ import annotations

from types import SimpleNamespace

from scheduler.framework.cache import Cache, NodeTree
from scheduler.framework.cycle_state import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.plugins.noderesources import Fit
from tests.unit.scheduler.util import make_node, make_pod


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_assume_confirm_forget() -> None:
    cache = Cache()
    cache.add_node(make_node("n", cpu="4"))
    pod = make_pod("p", cpu="1")
    assumed = {**pod, "spec": {**pod["spec"], "nodeName": "n"}}
    cache.assume_pod(assumed, "n")
    assert cache.is_assumed(pod) and cache.nodes["n"].requested.milli_cpu == 1000
    cache.forget_pod(assumed)
    assert not cache.is_assumed(pod) and cache.nodes["n"].requested.milli_cpu == 0
    cache.assume_pod(assumed, "n")
    cache.add_pod(assumed)  # the informer confirms the binding
    assert not cache.is_assumed(pod) and cache.nodes["n"].requested.milli_cpu == 1000
    cache.remove_pod(assumed)
    assert cache.nodes["n"].requested.milli_cpu == 0


def test_assumed_pod_expires_only_after_binding_finished() -> None:
    clock = Clock()
    cache = Cache(ttl=30, clock=clock)
    cache.add_node(make_node("n"))
    pod = make_pod("p", cpu="1", node="n")
    cache.assume_pod(pod, "n")
    clock.now = 100
    assert cache.cleanup_expired_assumed_pods() == 0
    cache.finish_binding(pod)
    clock.now = 120
    assert cache.cleanup_expired_assumed_pods() == 0
    clock.now = 131
    assert cache.cleanup_expired_assumed_pods() == 1
    assert cache.nodes["n"].requested.milli_cpu == 0


def test_pod_on_unknown_node_then_node_arrives() -> None:
    cache = Cache()
    cache.add_pod(make_pod("p", cpu="1", node="late"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert snap.num_nodes() == 0
    cache.add_node(make_node("late"))
    cache.update_snapshot(snap)
    assert snap.get("late").requested.milli_cpu == 1000


def test_snapshot_is_incremental_and_isolated() -> None:
    cache = Cache()
    for i in range(3):
        cache.add_node(make_node(f"n{i}"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    before = {n: id(snap.get(n)) for n in ("n0", "n1", "n2")}
    cache.add_pod(make_pod("p", cpu="1", node="n1"))
    assert snap.get("n1").requested.milli_cpu == 0  # not until the next cycle's update
    cache.update_snapshot(snap)
    assert snap.get("n1").requested.milli_cpu == 1000
    assert {n: id(snap.get(n)) for n in before} == before
    cache.remove_node(make_node("n2"))
    cache.update_snapshot(snap)
    assert [n.name for n in snap.list()] == ["n0", "n1"]


def test_snapshot_tracks_affinity_lists() -> None:
    cache = Cache()
    cache.add_node(make_node("n"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert snap.have_pods_with_affinity_list() == []
    pod = make_pod("p", node="n", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {}, "topologyKey": "kubernetes.io/hostname"}]}})
    cache.add_pod(pod)
    cache.update_snapshot(snap)
    assert [n.name for n in snap.have_pods_with_required_anti_affinity_list()] == ["n"]


def test_node_tree_interleaves_zones() -> None:
    tree = NodeTree()
    for name, zone in [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b"), ("c1", "c"), ("c2", "c")]:
        tree.add(make_node(name, labels={"topology.kubernetes.io/zone": zone}))
    assert tree.list() == ["a1", "b1", "c1", "a2", "c2", "a3"]
    tree.remove("b1")
    assert tree.list() == ["a1", "c1", "a2", "c2", "a3"]


def test_snapshot_free_floor_and_traits_follow_node_changes() -> None:
    """Fit skips its per-node loop when every node has the floor free: the floor must drop as nodes fill."""
    cache = Cache()
    for name in ("a", "b"):
        cache.add_node(make_node(name, cpu="2", memory="4Gi"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    assert snap.free_floor[:3] == (110, 2000, 4 * 2**30)
    assert not snap.traits().taints and not snap.traits().unschedulable
    fit = Fit({}, SimpleNamespace(snapshot_shared_lister=lambda: snap))  # type: ignore[arg-type]
    pod = make_pod("p", cpu="1500m", memory="1Gi")

    def verdicts() -> list[bool]:
        state = CycleState()
        fit.pre_filter(state, pod, snap.list())
        return [st is None for st in fit.filter_nodes(state, pod, snap.list()) or [None, None]]

    assert verdicts() == [True, True]
    cache.add_pod(make_pod("x", cpu="1", node="b"))
    cache.update_snapshot(snap)
    assert snap.free_floor[1] == 1000
    assert verdicts() == [True, False]
    tainted = make_node("a", cpu="2", memory="4Gi")
    tainted["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    cache.update_node(make_node("a", cpu="2", memory="4Gi"), tainted)
    cache.update_snapshot(snap)
    assert snap.traits().taints


def test_confirmation_with_the_same_footprint_keeps_the_node_generation() -> None:
    cache = Cache()
    cache.add_node(make_node("n", cpu="4"))
    snap = Snapshot()
    cache.update_snapshot(snap)
    pod = make_pod("p", cpu="1", labels={"app": "a"})
    assumed = {**pod, "spec": {**pod["spec"], "nodeName": "n"}}
    cache.assume_pod(assumed, "n")
    cache.update_snapshot(snap)
    generation = snap.get("n").generation
    bound = {**assumed, "metadata": {**assumed["metadata"], "resourceVersion": "7"},
             "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}}
    cache.add_pod(bound)
    assert not cache.is_assumed(pod) and cache.get_pod(pod) is bound
    cache.update_snapshot(snap)
    ni = snap.get("n")
    assert ni.generation == generation and ni.requested.milli_cpu == 1000 and ni.pods[0].pod is bound
    # A relabelled pod is re-added, so the label index follows it.
    relabelled = {**bound, "metadata": {**bound["metadata"], "labels": {"app": "b"}}}
    cache.add_pod(relabelled)
    cache.update_snapshot(snap)
    assert snap.get("n").generation != generation
    assert ("default", "app", "b") in snap.pod_index.by_label
    assert ("default", "app", "a") not in snap.pod_index.by_label
    grown = {**relabelled, "spec": {**relabelled["spec"], "containers": [
        {"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "2"}}}]}}
    cache.add_pod(grown)
    cache.update_snapshot(snap)
    assert snap.get("n").requested.milli_cpu == 2000
