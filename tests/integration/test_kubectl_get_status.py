"""What `kubectl get` prints in its status columns, from objects whose status is written through the API
the way the kubelet and the controllers write it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.conftest import Kubectl


def _ago(seconds: int) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(kubectl: Kubectl, ns: str, name: str, status: dict[str, Any], init: int = 0, node: str = "") -> None:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox"}]}
    if init:
        spec["initContainers"] = [{"name": f"init-{i}", "image": "busybox"} for i in range(init)]
    if node:
        spec["nodeName"] = node
    kubectl.run("create", "-n", ns, "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}))
    pod = kubectl.json("get", "-n", ns, "pod", name)
    pod["status"] = status
    kubectl.run("replace", "--subresource=status", "-n", ns, "-f", "-", stdin=json.dumps(pod))


def _rows(kubectl: Kubectl, *args: str) -> dict[str, list[str]]:
    out = kubectl.run("get", *args, "--no-headers").stdout
    return {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}


def test_pod_status_ready_and_restarts_columns(kubectl: Kubectl, unique_ns: str) -> None:
    ns = unique_ns
    _pod(kubectl, ns, "crashing", {"phase": "Running", "containerStatuses": [{
        "name": "app", "image": "busybox", "imageID": "", "ready": False, "restartCount": 4,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": _ago(630)}}}]})
    _pod(kubectl, ns, "initializing", {"phase": "Pending", "initContainerStatuses": [
        {"name": "init-0", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        {"name": "init-1", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"running": {"startedAt": _ago(5)}}}]}, init=2)
    _pod(kubectl, ns, "pulling", {"phase": "Pending", "containerStatuses": [{
        "name": "app", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"waiting": {"reason": "ErrImagePull"}}}]})
    _pod(kubectl, ns, "killed", {"phase": "Failed", "containerStatuses": [{
        "name": "app", "image": "busybox", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 137, "signal": 9}}}]})
    _pod(kubectl, ns, "gated", {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]})
    _pod(kubectl, ns, "leaving", {"phase": "Running", "containerStatuses": [{
        "name": "app", "image": "busybox", "imageID": "", "ready": True, "restartCount": 0, "started": True,
        "state": {"running": {"startedAt": _ago(60)}}}]}, node="absent-node")
    kubectl.run("delete", "-n", ns, "pod", "leaving", "--wait=false")
    rows = _rows(kubectl, "pods", "-n", ns)
    assert rows["crashing"][:5] == ["0/1", "CrashLoopBackOff", "4", "(10m", "ago)"]
    assert rows["initializing"][:3] == ["0/1", "Init:1/2", "0"]
    assert rows["pulling"][:2] == ["0/1", "ErrImagePull"]
    assert rows["killed"][:2] == ["0/1", "Signal:9"]
    assert rows["gated"][:2] == ["0/1", "SchedulingGated"]
    assert rows["leaving"][:2] == ["1/1", "Terminating"]


def test_node_and_job_status_columns(kubectl: Kubectl, unique_ns: str) -> None:
    node = f"cordoned-{unique_ns}"[:60]
    kubectl.run("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                                                        "spec": {"unschedulable": True}}))
    try:
        assert _rows(kubectl, "node", node)[node][0] == "Unknown,SchedulingDisabled"
    finally:
        kubectl.run("delete", "node", node)
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=json.dumps({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "met"},
        "spec": {"completions": 2, "template": {"spec": {"restartPolicy": "Never",
                                                         "containers": [{"name": "c", "image": "busybox"}]}}}}))
    job = kubectl.json("get", "-n", unique_ns, "job", "met")
    job["status"] = {"startTime": _ago(30), "succeeded": 1, "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "reason": "SuccessPolicy", "lastTransitionTime": _ago(1)}]}
    kubectl.run("replace", "--subresource=status", "-n", unique_ns, "-f", "-", stdin=json.dumps(job))
    assert _rows(kubectl, "jobs", "-n", unique_ns)["met"][:2] == ["SuccessCriteriaMet", "1/2"]


def test_a_gated_pod_prints_scheduling_gated(kubectl: Kubectl, unique_ns: str) -> None:
    """The apiserver writes the PodScheduled=False/SchedulingGated condition at create, as upstream, since no
    scheduler looks at a gated pod; nobody writes the status by hand here."""
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gated"},
         "spec": {"schedulingGates": [{"name": "example.com/wait"}],
                  "containers": [{"name": "app", "image": "busybox"}]}}))
    assert _rows(kubectl, "pods", "-n", unique_ns)["gated"][:2] == ["0/1", "SchedulingGated"]
    pod = kubectl.json("get", "-n", unique_ns, "pod", "gated")
    assert pod["status"]["conditions"] == [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                            "message": "Scheduling is blocked due to non-empty scheduling gates"}]
