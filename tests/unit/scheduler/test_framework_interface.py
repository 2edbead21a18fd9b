"""Framework types: Status, resource accounting (init containers, sidecars, overhead), NodeInfo, host ports."""

from __future__ import annotations

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.events import ActionType, ClusterEvent, EventResource
from scheduler.framework.interface import Code, NodeToStatus, Status
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import HostPortInfo, NodeInfo, PodInfo, normalized_image_name, pod_requests
from tests.unit.scheduler.util import make_node, make_pod


def test_status_message_and_codes() -> None:
    st = Status(Code.UNSCHEDULABLE, "Insufficient cpu", "Insufficient memory")
    assert st.message() == "Insufficient cpu, Insufficient memory"
    assert st.is_rejected() and not st.is_success()
    assert Status(Code.PENDING).is_rejected()
    assert not Status.error("boom").is_rejected()
    assert Status.error("boom").message() == "boom"
    assert str(Code.UNSCHEDULABLE_AND_UNRESOLVABLE) == "UnschedulableAndUnresolvable"


def test_pod_requests_init_container_max_rule() -> None:
    pod = make_pod("p", cpu="500m", memory="1Gi")
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}]
    r = pod_requests(pod)
    assert r.milli_cpu == 2000
    assert r.memory == 1024**3


def test_pod_requests_sidecars_add_to_app_and_to_later_init_containers() -> None:
    pod = make_pod("p", cpu="500m")
    pod["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "300m"}}},
        {"name": "init", "resources": {"requests": {"cpu": "1"}}},
    ]
    # app (500m) + sidecar (300m) = 800m; init step = sidecar 300m + 1 = 1300m -> max 1300m
    assert pod_requests(pod).milli_cpu == 1300
    pod["spec"]["initContainers"][1]["resources"]["requests"]["cpu"] = "100m"
    assert pod_requests(pod).milli_cpu == 800


def test_pod_requests_overhead_and_non_zero_defaults() -> None:
    pod = make_pod("p", cpu="1")
    pod["spec"]["overhead"] = {"cpu": "250m", "memory": "10Mi"}
    r = pod_requests(pod)
    assert (r.milli_cpu, r.memory) == (1250, 10 * 1024**2)
    empty = make_pod("e")
    nz = pod_requests(empty, non_missing=True)
    assert (nz.milli_cpu, nz.memory) == (100, 200 * 1024**2)
    assert pod_requests(empty).milli_cpu == 0


def test_extended_and_hugepages_are_scalars() -> None:
    pod = make_pod("p")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"example.com/gpu": "2", "hugepages-2Mi": "4Mi"}}
    r = pod_requests(pod)
    assert r.scalar == {"example.com/gpu": 2, "hugepages-2Mi": 4 * 1024**2}


def test_node_info_accounting_add_remove() -> None:
    ni = NodeInfo(make_node("n", cpu="4", memory="8Gi"))
    p = make_pod("p", cpu="1", memory="1Gi")
    p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    ni.add_pod(p)
    assert ni.requested.milli_cpu == 1000 and ni.allocatable.milli_cpu == 4000
    assert ni.used_ports.check_conflict("0.0.0.0", "TCP", 8080)
    gen = ni.generation
    assert ni.remove_pod(p)
    assert ni.requested.milli_cpu == 0 and len(ni.used_ports) == 0
    assert ni.generation > gen
    assert not ni.remove_pod(p)


def test_node_info_tracks_affinity_pods_and_clone_is_independent() -> None:
    ni = NodeInfo(make_node("n"))
    p = make_pod("p", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "zone"}]}})
    ni.add_pod(p)
    assert len(ni.pods_with_affinity) == 1 and len(ni.pods_with_required_anti_affinity) == 1
    c = ni.clone()
    c.add_pod(make_pod("q", cpu="1"))
    assert len(ni.pods) == 1 and ni.requested.milli_cpu == 0


def test_affinity_term_defaults_to_pod_namespace_and_match_label_keys() -> None:
    pod = make_pod("p", namespace="ns1", labels={"app": "web", "rev": "7"}, affinity={"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "web"}},
                                                            "topologyKey": "zone", "matchLabelKeys": ["rev"]}]}})
    term = PodInfo(pod).required_affinity_terms[0]
    assert term.namespaces == frozenset({"ns1"})
    assert term.matches(make_pod("a", namespace="ns1", labels={"app": "web", "rev": "7"}), {})
    assert not term.matches(make_pod("b", namespace="ns1", labels={"app": "web", "rev": "8"}), {})
    assert not term.matches(make_pod("c", namespace="ns2", labels={"app": "web", "rev": "7"}), {})


def test_host_port_info_wildcard_ip_conflicts() -> None:
    h = HostPortInfo()
    h.add("127.0.0.1", "TCP", 80)
    assert h.check_conflict("0.0.0.0", "TCP", 80)
    assert h.check_conflict("127.0.0.1", "TCP", 80)
    assert not h.check_conflict("10.0.0.1", "TCP", 80)
    assert not h.check_conflict("127.0.0.1", "UDP", 80)
    h.add("0.0.0.0", "UDP", 53)
    assert h.check_conflict("10.0.0.1", "UDP", 53)


def test_cycle_state_clone_copies_cloneable_values() -> None:
    state = CycleState()
    ni = NodeInfo(make_node("n"))
    state.write("k", ni)
    state.skip_filter_plugins.add("X")
    c = state.clone()
    assert c.read("k") is not ni and c.read("k").name == "n"
    assert c.skip_filter_plugins == {"X"}


def test_cluster_event_matching() -> None:
    reg = ClusterEvent(EventResource.POD, ActionType.DELETE)
    assert reg.matches(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE))
    assert not reg.matches(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD))
    node = ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
    assert node.matches(ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT))
    assert not node.matches(ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT))
    assert ClusterEvent(EventResource.WILDCARD, ActionType.ALL).matches(node)


def test_node_to_status_absent_nodes() -> None:
    snap = Snapshot([NodeInfo(make_node(n)) for n in ("a", "b", "c")])
    m = NodeToStatus({"a": Status.unschedulable("x")}, Status.unresolvable("y"))
    assert [n.name for n in m.nodes_for_status_code(snap, Code.UNSCHEDULABLE)] == ["a"]
    assert sorted(n.name for n in m.nodes_for_status_code(snap, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)) == ["b", "c"]


def test_normalized_image_name() -> None:
    assert normalized_image_name("nginx") == "nginx:latest"
    assert normalized_image_name("registry:5000/nginx") == "registry:5000/nginx:latest"
    assert normalized_image_name("nginx:1.2") == "nginx:1.2"
