"""node.k8s.io/v1 RuntimeClass and the RuntimeClass admission plugin against a real apiserver and etcd."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Kubectl

RC = "/apis/node.k8s.io/v1/runtimeclasses"


@pytest.fixture
def api(apiserver: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=apiserver, timeout=30) as client:
        yield client


def _rc(name: str, handler: Any = "runc", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
                            **extra}
    if handler is not None:
        body["handler"] = handler
    return body


def _pod(name: str, runtime_class: str | None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name},
                            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}
    if runtime_class:
        body["spec"]["runtimeClassName"] = runtime_class
    return body


def _causes(r: httpx.Response) -> list[tuple[str, str]]:
    return [(c["field"], c["reason"]) for c in r.json()["details"]["causes"]]


def _create_pod(api: httpx.Client, ns: str, body: dict[str, Any]) -> httpx.Response:
    """Admission reads classes from the watch cache: a class created a moment ago may not be there yet."""
    deadline = time.monotonic() + 10
    while True:
        r = api.post(f"/api/v1/namespaces/{ns}/pods", json=body)
        if r.status_code != 403 or "not found" not in r.text or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_runtimeclass_validation(api: httpx.Client, kubectl: Kubectl) -> None:
    r = api.post(RC, json=_rc("rc-nohandler", handler=None))
    assert r.status_code == 422 and ("handler", "FieldValueInvalid") in _causes(r), r.text
    r = api.post(RC, json=_rc("rc-bad", handler="Not_A_Label"))
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "handler", r.text
    r = api.post(RC, json=_rc("rc-bad", overhead={"podFixed": {"cpu": "-1"}}))
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "overhead.podFixed[cpu]", r.text
    r = api.post(RC, json=_rc("rc-bad", scheduling={"tolerations": [{"operator": "Bogus"}]}))
    assert r.status_code == 422, r.text
    assert api.get(f"{RC}/rc-bad").status_code == 404
    r = api.post(RC, json=_rc("rc-valid"))
    assert r.status_code == 201, r.text
    current = r.json()
    r = api.put(f"{RC}/rc-valid", json={**current, "handler": "crun"})
    assert r.status_code == 422 and ("handler", "FieldValueInvalid") in _causes(r), r.text
    assert "field is immutable" in r.text
    assert api.get(f"{RC}/rc-valid").json()["handler"] == "runc"
    lines = kubectl.run("get", "runtimeclass", "rc-valid").stdout.splitlines()
    assert lines[0].split() == ["NAME", "HANDLER", "AGE"]
    assert lines[1].split()[:2] == ["rc-valid", "runc"]


def test_admission_sets_overhead_and_merges_scheduling(api: httpx.Client, unique_ns: str) -> None:
    r = api.post(RC, json=_rc("rc-sched", overhead={"podFixed": {"cpu": "250m", "memory": "64Mi"}}, scheduling={
        "nodeSelector": {"sandbox": "gvisor"},
        "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]}))
    assert r.status_code == 201, r.text
    pod = _pod("p1", "rc-sched", nodeSelector={"zone": "a"},
               tolerations=[{"key": "sandbox", "operator": "Equal", "value": "x", "effect": "NoSchedule"}])
    r = _create_pod(api, unique_ns, pod)
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    assert spec["overhead"] == {"cpu": "250m", "memory": "64Mi"}
    assert spec["nodeSelector"] == {"zone": "a", "sandbox": "gvisor"}
    sandbox = [t for t in spec["tolerations"] if t.get("key") == "sandbox"]
    assert sandbox == [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}], spec["tolerations"]
    # The same overhead written out by the user (in other units) is accepted; a different one is not.
    r = _create_pod(api, unique_ns, _pod("p2", "rc-sched", overhead={"cpu": "0.25", "memory": "64Mi"}))
    assert r.status_code == 201, r.text
    r = _create_pod(api, unique_ns, _pod("p3", "rc-sched", overhead={"cpu": "1"}))
    assert r.status_code == 403, r.text
    assert r.json()["message"] == ('pods "p3" is forbidden: pod rejected: '
                                   "Pod's Overhead doesn't match RuntimeClass's defined Overhead")
    r = _create_pod(api, unique_ns, _pod("p4", "rc-sched", nodeSelector={"sandbox": "kata"}))
    assert r.status_code == 403 and "conflict: runtimeClass.scheduling.nodeSelector[sandbox] = gvisor; " \
        "pod.spec.nodeSelector[sandbox] = kata" in r.json()["message"], r.text


def test_admission_refuses_missing_class_and_unowned_overhead(api: httpx.Client, unique_ns: str) -> None:
    r = api.post(f"/api/v1/namespaces/{unique_ns}/pods", json=_pod("p1", "no-such-class"))
    assert r.status_code == 403, r.text
    assert r.json()["message"] == 'pods "p1" is forbidden: pod rejected: RuntimeClass "no-such-class" not found'
    r = api.post(f"/api/v1/namespaces/{unique_ns}/pods", json=_pod("p2", None, overhead={"cpu": "1"}))
    assert r.status_code == 403 and "Pod Overhead set without corresponding RuntimeClass defined Overhead" \
        in r.json()["message"], r.text
    assert api.post(RC, json=_rc("rc-plain")).status_code == 201
    r = _create_pod(api, unique_ns, _pod("p3", "rc-plain"))
    assert r.status_code == 201 and "overhead" not in r.json()["spec"], r.text
    assert api.get(f"/api/v1/namespaces/{unique_ns}/pods/p1").status_code == 404
    listed = json.loads(api.get(RC).text)
    assert {"rc-plain"} <= {i["metadata"]["name"] for i in listed["items"]}
