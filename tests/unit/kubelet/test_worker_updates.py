"""Which pod updates make a worker sync: spec and metadata changes do, its own status coming back does not."""

from __future__ import annotations

import copy

from kubelet_agent.cri.hollow import HollowRuntime
from kubelet_agent.pods.worker import NodeContext, PodWorker


def _worker(pod: dict) -> PodWorker:
    ctx = NodeContext("n", None, HollowRuntime(), None, ["1.2.3.4"], {}, "/tmp")  # type: ignore[arg-type]
    return PodWorker(ctx, pod)


def _pod() -> dict:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "1", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": {"phase": "Pending"}}


def _wakes(worker: PodWorker, pod: dict, api_status: dict | None = None) -> bool:
    worker._wake.clear()
    worker.update(pod, api_status)
    return worker._wake.is_set()


def test_status_only_update_does_not_wake() -> None:
    pod = _pod()
    w = _worker(pod)
    newer = copy.deepcopy(pod)
    newer["metadata"]["resourceVersion"] = "2"
    newer["status"] = {"phase": "Running"}
    assert not _wakes(w, newer)
    assert w.api_status == {"phase": "Running"} and w.pod is newer
    for change in (lambda p: p["metadata"]["labels"].update(b="2"),
                   lambda p: p["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
                   lambda p: p["spec"]["containers"][0].update(image="busybox:2")):
        changed = copy.deepcopy(w.pod)
        change(changed)
        assert _wakes(w, changed)


def test_readiness_gates_and_mirror_status_always_wake() -> None:
    pod = _pod()
    pod["spec"]["readinessGates"] = [{"conditionType": "x/ready"}]
    w = _worker(pod)
    newer = copy.deepcopy(pod)
    newer["status"]["conditions"] = [{"type": "x/ready", "status": "True"}]
    assert _wakes(w, newer)
    plain = _worker(_pod())
    assert _wakes(plain, plain.pod, {"phase": "Running"})
