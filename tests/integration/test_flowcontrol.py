"""flowcontrol.apiserver.k8s.io/v1: the bootstrap FlowSchemas and PriorityLevelConfigurations a fresh apiserver
creates, their Dangling conditions, upstream's spec repair, and `kubectl get` columns."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Kubectl, start_apiserver

FC = "/apis/flowcontrol.apiserver.k8s.io/v1"
FLOW_SCHEMAS = {"exempt", "catch-all", "probes", "system-leader-election", "endpoint-controller",
                "workload-leader-election", "system-node-high", "system-nodes", "kube-controller-manager",
                "kube-scheduler", "kube-system-service-accounts", "service-accounts", "global-default"}
PRIORITY_LEVELS = {"exempt", "catch-all", "system", "node-high", "leader-election", "workload-high", "workload-low",
                   "global-default"}


@pytest.fixture
def api(apiserver: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=apiserver, timeout=30) as client:
        yield client


def _wait(check: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)
    return result


def _dangling(api: httpx.Client, name: str) -> dict[str, Any] | None:
    status = api.get(f"{FC}/flowschemas/{name}").json().get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Dangling"), None)


def test_bootstrap_objects_are_upstreams(api: httpx.Client) -> None:
    schemas = {o["metadata"]["name"]: o for o in api.get(f"{FC}/flowschemas").json()["items"]}
    levels = {o["metadata"]["name"]: o for o in api.get(f"{FC}/prioritylevelconfigurations").json()["items"]}
    assert FLOW_SCHEMAS <= set(schemas) and PRIORITY_LEVELS <= set(levels)
    assert schemas["exempt"]["metadata"]["annotations"] == {"apf.kubernetes.io/autoupdate-spec": "true"}
    assert schemas["exempt"]["spec"] == {
        "priorityLevelConfiguration": {"name": "exempt"}, "matchingPrecedence": 1,
        "rules": [{"subjects": [{"kind": "Group", "group": {"name": "system:masters"}}],
                   "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True,
                                      "namespaces": ["*"]}],
                   "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}
    assert schemas["probes"]["spec"]["rules"][0]["nonResourceRules"] == [
        {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]
    assert schemas["service-accounts"]["spec"]["distinguisherMethod"] == {"type": "ByUser"}
    assert schemas["kube-scheduler"]["spec"]["matchingPrecedence"] == 800
    assert levels["exempt"]["spec"] == {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0,
                                                                     "lendablePercent": 0}}
    assert levels["catch-all"]["spec"]["limited"] == {"nominalConcurrencyShares": 5, "lendablePercent": 0,
                                                      "limitResponse": {"type": "Reject"}}
    assert levels["global-default"]["spec"]["limited"] == {
        "nominalConcurrencyShares": 20, "lendablePercent": 50,
        "limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}
    found = _wait(lambda: _dangling(api, "global-default"))
    assert found["status"] == "False" and found["reason"] == "Found" and found["lastTransitionTime"]


def test_a_flow_schema_naming_a_missing_level_is_dangling(api: httpx.Client, kubectl: Kubectl) -> None:
    body = {"metadata": {"name": "fs-dangling"}, "spec": {
        "priorityLevelConfiguration": {"name": "nope"}, "distinguisherMethod": {"type": "ByNamespace"},
        "rules": [{"subjects": [{"kind": "User", "user": {"name": "jane"}}],
                   "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/version"]}]}]}}
    r = api.post(f"{FC}/flowschemas", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["matchingPrecedence"] == 1000
    cond = _wait(lambda: (c := _dangling(api, "fs-dangling")) and c["status"] == "True" and c)
    assert cond["reason"] == "NotFound"
    assert cond["message"] == ('This FlowSchema references the PriorityLevelConfiguration object named "nope" '
                               "but there is no such object")
    lines = kubectl.run("get", "flowschemas").stdout.splitlines()
    assert lines[0].split() == ["NAME", "PRIORITYLEVEL", "MATCHINGPRECEDENCE", "DISTINGUISHERMETHOD", "AGE",
                                "MISSINGPL"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["fs-dangling"][1:4] == ["nope", "1000", "ByNamespace"] and rows["fs-dangling"][-1] == "True"
    assert rows["exempt"][1:4] == ["exempt", "1", "<none>"] and rows["exempt"][-1] == "False"
    lines = kubectl.run("get", "prioritylevelconfigurations").stdout.splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "NOMINALCONCURRENCYSHARES", "QUEUES", "HANDSIZE",
                                "QUEUELENGTHLIMIT", "AGE"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["exempt"][1:6] == ["Exempt", "<none>", "<none>", "<none>", "<none>"]
    assert rows["catch-all"][1:6] == ["Limited", "5", "<none>", "<none>", "<none>"]
    assert rows["workload-low"][1:6] == ["Limited", "100", "128", "6", "50"]


def test_validation_names_the_field(api: httpx.Client) -> None:
    r = api.post(f"{FC}/flowschemas", json={"metadata": {"name": "fs-bad"}, "spec": {
        "priorityLevelConfiguration": {"name": "x"}, "matchingPrecedence": 20000}})
    assert r.status_code == 422, r.text
    assert [c["field"] for c in r.json()["details"]["causes"]] == ["spec.matchingPrecedence"]
    r = api.post(f"{FC}/prioritylevelconfigurations", json={"metadata": {"name": "pl-bad"}, "spec": {
        "type": "Limited", "limited": {"limitResponse": {"type": "Queue",
                                                         "queuing": {"queues": 2, "handSize": 4}}}}})
    assert r.status_code == 422, r.text
    assert [c["field"] for c in r.json()["details"]["causes"]] == ["spec.limited.limitResponse.queuing.handSize"]


def test_restart_puts_mandatory_spec_back_and_keeps_opted_out_suggestions(
        etcd_server: str, workdir: Path) -> None:
    args = ("--etcd-prefix", "/flowcontrol-restart")
    process = start_apiserver([etcd_server], workdir / "flowcontrol", *args)
    try:
        with httpx.Client(base_url=process.url, timeout=30) as api:
            catch_all = api.get(f"{FC}/prioritylevelconfigurations/catch-all").json()
            catch_all["spec"]["limited"]["nominalConcurrencyShares"] = 99
            assert api.put(f"{FC}/prioritylevelconfigurations/catch-all", json=catch_all).status_code == 200
            mine = api.get(f"{FC}/prioritylevelconfigurations/workload-low").json()
            mine["metadata"]["annotations"] = {"apf.kubernetes.io/autoupdate-spec": "false"}
            mine["spec"]["limited"]["nominalConcurrencyShares"] = 7
            assert api.put(f"{FC}/prioritylevelconfigurations/workload-low", json=mine).status_code == 200
            assert api.delete(f"{FC}/flowschemas/probes").status_code == 200
    finally:
        process.stop()
    process = start_apiserver([etcd_server], workdir / "flowcontrol", *args)
    try:
        with httpx.Client(base_url=process.url, timeout=30) as api:
            limited = api.get(f"{FC}/prioritylevelconfigurations/catch-all").json()["spec"]["limited"]
            assert limited["nominalConcurrencyShares"] == 5
            limited = api.get(f"{FC}/prioritylevelconfigurations/workload-low").json()["spec"]["limited"]
            assert limited["nominalConcurrencyShares"] == 7
            assert api.get(f"{FC}/flowschemas/probes").status_code == 200
    finally:
        process.stop()
