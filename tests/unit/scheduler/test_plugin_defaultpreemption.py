"""DefaultPreemption through the real framework: victims, PDBs, node choice, eviction and messages."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.framework.cycle_state import CycleState
from scheduler.framework.interface import Code, NodeToStatus, Status
from scheduler.framework.queue import Nominator
from scheduler.framework.runtime import Framework, ProfileConfig
from scheduler.framework.snapshot import Snapshot
from scheduler.framework.types import NodeInfo, PodInfo
from scheduler.plugins.defaultpreemption.default_preemption import (
    Candidate,
    filter_pods_with_pdb_violation,
    pick_one_node_for_preemption,
)
from services.client import NotFound

HOST = "kubernetes.io/hostname"
_uid = iter(range(1, 10**6))


class FakeInformer:
    def __init__(self) -> None:
        self.objs: list[dict] = []

    def get(self, name: str, namespace: str | None = None) -> dict | None:
        return next((o for o in self.objs if o["metadata"]["name"] == name), None)

    def list(self, namespace: str | None = None) -> list[dict]:
        return list(self.objs)


class Factory:
    def __init__(self) -> None:
        self.informers: dict[str, FakeInformer] = {}

    def informer_for(self, resource: Any, **kw: Any) -> FakeInformer:
        return self.informers.setdefault(resource.plural, FakeInformer())


class Client:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.missing: set[str] = set()

    async def patch_status(self, resource: Any, name: str, body: Any, namespace: str | None = None,
                           **kw: Any) -> dict:
        self.calls.append(("patch_status", name, body, kw.get("patch_type", "merge")))
        return {}

    async def delete(self, resource: Any, name: str, namespace: str | None = None, **kw: Any) -> dict:
        if name in self.missing:
            raise NotFound(404, "NotFound", f'pods "{name}" not found')
        self.calls.append(("delete", name, kw.get("grace_period_seconds")))
        return {}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def eventf(self, regarding: dict, related: dict | None, eventtype: str, reason: str, action: str,
               note: str) -> None:
        self.events.append((regarding["metadata"]["name"], eventtype, reason, action, note))


def node(name: str, cpu: str = "4", **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": {HOST: name, **labels}},
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}}


def pod(name: str, cpu: str, prio: int = 0, node_name: str = "", labels: dict | None = None,
        start: str = "2024-01-01T00:00:00Z", **spec: Any) -> dict:
    s: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], "priority": prio,
                         "schedulerName": "default-scheduler", **spec}
    if node_name:
        s["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}-{next(_uid)}",
                         "labels": labels or {}},
            "spec": s, "status": {"startTime": start}}


class World:
    def __init__(self, nodes: list[dict], pods: list[dict], pdbs: list[dict] = (), **args: Any) -> None:  # type: ignore[assignment]
        infos = {n["metadata"]["name"]: NodeInfo(n) for n in nodes}
        for p in pods:
            infos[p["spec"]["nodeName"]].add_pod(p)
        self.snapshot = Snapshot(infos.values())
        self.factory = Factory()
        self.factory.informer_for(type("R", (), {"plural": "poddisruptionbudgets"})).objs.extend(pdbs)
        self.client = Client()
        self.recorder = Recorder()
        self.nominator = Nominator()
        plugins = {
            "preFilter": [("NodeResourcesFit", 0), ("InterPodAffinity", 0)],
            "filter": [("NodeResourcesFit", 0), ("InterPodAffinity", 0)],
            "postFilter": [("DefaultPreemption", 0)],
            "queueSort": [("PrioritySort", 0)],
        }
        profile = ProfileConfig("default-scheduler", plugins, {"DefaultPreemption": args} if args else {})
        self.fw = Framework(profile, client=self.client, informer_factory=self.factory,  # type: ignore[arg-type]
                            event_recorder=self.recorder, nominator=self.nominator,
                            snapshot=lambda: self.snapshot, namespace_labels=lambda ns: {})

    async def schedule(self, p: dict) -> tuple[Any, Status | None, NodeToStatus]:
        state = CycleState()
        _, st, _ = self.fw.run_pre_filter_plugins(state, p, self.snapshot.list())
        assert st is None
        statuses = NodeToStatus()
        for ni in self.snapshot.list():
            r = self.fw.run_filter_plugins(state, p, ni)
            assert r is not None, f"{ni.name} unexpectedly fits"
            statuses.set(ni.name, r)
        result, status = await self.fw.run_post_filter_plugins(state, p, statuses)
        return result, status, statuses


async def test_preempts_lowest_priority_pod_and_nominates_node() -> None:
    low = pod("low", "3", prio=1, node_name="n1")
    high_existing = pod("mid", "3", prio=100, node_name="n2")
    w = World([node("n1"), node("n2")], [low, high_existing])
    p = pod("p", "2", prio=50)
    result, status, _ = await w.schedule(p)
    assert status is None
    assert result.nominating_info.nominated_node_name == "n1" and result.nominating_info.mode == "override"
    cond_patch = w.client.calls[0]
    assert cond_patch[0] == "patch_status" and cond_patch[1] == "low" and cond_patch[3] == "strategic"
    cond = cond_patch[2]["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionTarget", "True", "PreemptionByScheduler")
    assert cond["message"] == "default-scheduler: preempting to accommodate a higher priority pod"
    assert w.client.calls[1] == ("delete", "low", 30)
    assert w.recorder.events == [("low", "Normal", "Preempted", "Preempting",
                                  f"Preempted by pod {p['metadata']['uid']} on node n1")]


async def test_keeps_victims_that_still_fit_and_uses_their_grace_period() -> None:
    a = pod("a", "1", prio=1, node_name="n1", start="2024-01-01T00:00:00Z")
    b = pod("b", "1", prio=2, node_name="n1", terminationGracePeriodSeconds=5)
    c = pod("c", "2", prio=1, node_name="n1", start="2024-01-02T00:00:00Z")
    w = World([node("n1")], [a, b, c])
    _, status, _ = await w.schedule(pod("p", "2", prio=10))
    assert status is None
    # Reprieve order: b (prio 2), a (older), c. Keeping b and a leaves 2 cpu free: only c goes.
    assert [call[1] for call in w.client.calls if call[0] == "delete"] == ["c"]


async def test_no_victims_message_and_unresolvable_nodes() -> None:
    w = World([node("n1"), node("n2", cpu="1")], [pod("big", "3", prio=100, node_name="n1")])
    p = pod("p", "2", prio=50, nodeSelector={"x": "y"})
    state = CycleState()
    w.fw.run_pre_filter_plugins(state, p, w.snapshot.list())
    statuses = NodeToStatus({"n1": Status.unschedulable("Insufficient cpu"),
                             "n2": Status.unresolvable("node(s) didn't match Pod's node affinity/selector")})
    result, status = await w.fw.run_post_filter_plugins(state, p, statuses)
    assert status.code == Code.UNSCHEDULABLE
    assert status.message() == ("preemption: 0/2 nodes are available: 1 No preemption victims found for incoming "
                                "pod, 1 Preemption is not helpful for scheduling.")
    assert result.nominating_info.nominated_node_name == "" and not w.client.calls


async def test_pod_that_does_not_fit_even_without_victims() -> None:
    w = World([node("n1", cpu="2")], [pod("low", "1", prio=1, node_name="n1")])
    _, status, _ = await w.schedule(pod("p", "3", prio=50))
    assert status.message() == "preemption: 0/1 nodes are available: 1 Insufficient cpu."


async def test_preemption_policy_never() -> None:
    w = World([node("n1")], [pod("low", "4", prio=1, node_name="n1")])
    result, status, _ = await w.schedule(pod("p", "2", prio=50, preemptionPolicy="Never"))
    assert status.message() == "preemption: not eligible due to preemptionPolicy=Never."
    assert not w.client.calls


async def test_not_eligible_while_a_victim_on_the_nominated_node_terminates() -> None:
    victim = pod("low", "4", prio=1, node_name="n1")
    victim["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    victim["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                       "reason": "PreemptionByScheduler"}]
    w = World([node("n1")], [victim])
    p = pod("p", "2", prio=50)
    p["status"]["nominatedNodeName"] = "n1"
    _, status, _ = await w.schedule(p)
    assert status.message() == "preemption: not eligible due to a terminating pod on the nominated node."


async def test_pdb_protected_pods_are_evicted_last() -> None:
    pdb = {"metadata": {"name": "pdb", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "db"}}}, "status": {"disruptionsAllowed": 0}}
    guarded = pod("guarded", "3", prio=1, node_name="n1", labels={"app": "db"})
    free = pod("free", "3", prio=1, node_name="n2", labels={"app": "web"})
    w = World([node("n1"), node("n2")], [guarded, free], [pdb])
    result, status, _ = await w.schedule(pod("p", "2", prio=50))
    assert status is None and result.nominating_info.nominated_node_name == "n2"


def test_filter_pods_with_pdb_violation_counts_budget_and_disrupted_pods() -> None:
    pdb = {"metadata": {"name": "pdb", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "db"}}},
           "status": {"disruptionsAllowed": 1, "disruptedPods": {"d0": "2024-01-01T00:00:00Z"}}}
    empty = {"metadata": {"name": "all", "namespace": "default"}, "spec": {"selector": {}},
             "status": {"disruptionsAllowed": 0}}
    pods = [PodInfo(pod(n, "1", labels={"app": "db"})) for n in ("d0", "d1", "d2")]
    violating, ok = filter_pods_with_pdb_violation(pods, [pdb, empty])
    assert [p.pod["metadata"]["name"] for p in ok] == ["d0", "d1"]
    assert [p.pod["metadata"]["name"] for p in violating] == ["d2"]


def _cand(name: str, prios: list[int], violations: int = 0, start: str = "2024-01-01T00:00:00Z") -> Candidate:
    return Candidate(name, [PodInfo(pod(f"{name}-{i}", "1", prio=p, start=start)) for i, p in enumerate(prios)],
                     violations)


@pytest.mark.parametrize(("candidates", "expected"), [
    ([_cand("a", [1], 1), _cand("b", [5, 5])], "b"),
    ([_cand("a", [10]), _cand("b", [5, 5])], "b"),
    ([_cand("a", [5, 4]), _cand("b", [5, 1])], "b"),
    ([_cand("a", [5, -2, -2]), _cand("b", [5, -2])], "b"),
    ([_cand("a", [5, 1]), _cand("b", [5, 1], start="2024-02-01T00:00:00Z")], "b"),
    ([_cand("a", [5]), _cand("b", [5])], "a"),
])
def test_pick_one_node_for_preemption(candidates: list[Candidate], expected: str) -> None:
    chosen = pick_one_node_for_preemption(candidates)
    assert chosen is not None and chosen.name == expected


async def test_clears_lower_priority_nominations_on_the_chosen_node() -> None:
    w = World([node("n1")], [pod("low", "4", prio=1, node_name="n1")])
    loser = pod("loser", "1", prio=5)
    w.nominator.add_nominated_pod(PodInfo(loser), None)
    loser["status"]["nominatedNodeName"] = "n1"
    w.nominator.add_nominated_pod(PodInfo(loser), None)
    _, status, _ = await w.schedule(pod("p", "2", prio=50))
    assert status is None
    assert ("patch_status", "loser", {"status": {"nominatedNodeName": None}}, "merge") in w.client.calls


async def test_victim_already_gone_is_not_an_error() -> None:
    w = World([node("n1")], [pod("low", "4", prio=1, node_name="n1")])
    w.client.missing.add("low")
    result, status, _ = await w.schedule(pod("p", "2", prio=50))
    assert status is None and result.nominating_info.nominated_node_name == "n1"
