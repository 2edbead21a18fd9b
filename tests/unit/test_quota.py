"""Quota evaluation shared by admission and the controller (services/api/quota.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from services.api import quota as q


def pod(*containers: dict[str, Any], phase: str = "", meta: dict[str, Any] | None = None, **spec: Any) -> dict:
    return {"metadata": meta or {}, "spec": {"containers": list(containers), **spec},
            "status": {"phase": phase} if phase else {}}


def c(name: str = "c", requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict:
    return {"name": name, "resources": {"requests": requests or {}, "limits": limits or {}}}


PODS = q.evaluator_for("", "pods")


def test_sums_keep_the_format_of_the_first_non_zero_term() -> None:
    assert q.add({"memory": "0"}, {"memory": "64Mi"}) == {"memory": "64Mi"}
    assert q.add({"memory": "64Mi"}, {"memory": "64Mi"}) == {"memory": "128Mi"}
    assert q.add({"cpu": "600m"}, {"cpu": "0.4", "pods": "1"}) == {"cpu": "1", "pods": "1"}
    assert q.equals({"memory": "1Gi"}, {"memory": "1024Mi"}) and not q.equals({"a": "1"}, {"a": "1", "b": "0"})
    assert q.exceeded({"pods": "3", "cpu": "1"}, {"pods": "2", "cpu": "1", "memory": "1"}) == ["pods"]
    assert q.pretty({"pods": "1", "limits.cpu": "0.5"}) == "limits.cpu=500m,pods=1"


def test_pod_usage_counts_compute_resources_until_the_pod_is_done() -> None:
    assert PODS is not None
    running = pod(c(requests={"cpu": "100m", "memory": "64Mi", "hugepages-2Mi": "4Mi", "example.com/gpu": "1"},
                    limits={"cpu": "200m"}))
    assert PODS.usage(running) == {
        "count/pods": "1", "pods": "1", "cpu": "100m", "requests.cpu": "100m", "limits.cpu": "200m",
        "memory": "64Mi", "requests.memory": "64Mi", "hugepages-2Mi": "4Mi", "requests.hugepages-2Mi": "4Mi",
        "requests.example.com/gpu": "1"}
    assert PODS.usage({**running, "status": {"phase": "Succeeded"}}) == {"count/pods": "1"}
    now = datetime.now(UTC)
    stuck = {"deletionTimestamp": (now - timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "deletionGracePeriodSeconds": 30}
    assert not q.pod_counts(pod(meta=stuck), now)
    assert q.pod_counts(pod(meta={**stuck, "deletionGracePeriodSeconds": 120}), now)
    assert PODS.frees_usage(running, {**running, "status": {"phase": "Failed"}})
    assert not PODS.frees_usage(running, running)


def test_overhead_counts_toward_requests_and_set_limits_only() -> None:
    spec = {"containers": [c(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1"})],
            "overhead": {"cpu": "250m", "memory": "120Mi"}}
    assert q.pod_requests(spec) == {"cpu": "1250m", "memory": "1144Mi"}
    assert q.pod_limits(spec) == {"cpu": "1250m"}


def test_matching_resources_and_evaluators_for_a_quota() -> None:
    hard = {"pods": "1", "requests.nvidia.com/gpu": "2", "requests.hugepages-1Gi": "1Gi", "services": "1",
            "gold.storageclass.storage.k8s.io/requests.storage": "1Gi", "count/deployments.apps": "1",
            "count/widgets.example.com": "3", "secrets": "2", "bogus": "1"}
    evaluators = q.evaluators_for(hard)
    assert [(e.group, e.resource) for e in evaluators] == [
        ("", "pods"), ("", "services"), ("", "persistentvolumeclaims"), ("", "secrets"), ("apps", "deployments"),
        ("example.com", "widgets")]
    assert evaluators[0].matching_resources(hard) == ["pods", "requests.nvidia.com/gpu", "requests.hugepages-1Gi"]
    assert q.evaluator_for("", "events") is None
    assert q.evaluator_for("", "configmaps").usage({}) == {"count/configmaps": "1", "configmaps": "1"}  # type: ignore


def test_scopes() -> None:
    assert PODS is not None
    be, sized = pod(c()), pod(c(requests={"memory": "1Mi"}))
    exists = {"operator": "Exists"}
    assert PODS.matches_scope({"scopeName": "BestEffort", **exists}, be)
    assert PODS.matches_scope({"scopeName": "NotBestEffort", **exists}, sized)
    assert PODS.matches_scope({"scopeName": "Terminating", **exists}, pod(activeDeadlineSeconds=0))
    assert PODS.matches_scope({"scopeName": "NotTerminating", **exists}, be)
    high = pod(priorityClassName="high")
    assert PODS.matches_scope({"scopeName": "PriorityClass", "operator": "NotIn", "values": ["low"]}, high)
    assert not PODS.matches_scope({"scopeName": "PriorityClass", "operator": "In", "values": ["low"]}, high)
    assert not PODS.matches_scope({"scopeName": "PriorityClass", **exists}, be)
    cross = pod(affinity={"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "zone", "namespaceSelector": {}}}]}})
    assert PODS.matches_scope({"scopeName": "CrossNamespacePodAffinity", **exists}, cross)
    assert not q.evaluator_for("", "secrets").matches_scope({"scopeName": "BestEffort", **exists}, {})  # type: ignore
    quota = {"spec": {"hard": {"pods": "5", "requests.memory": "1Gi"}, "scopes": ["NotBestEffort"]}}
    done = pod(c(requests={"memory": "2Mi"}), phase="Failed")
    assert q.total_usage(quota, PODS, [be, sized, sized, done]) == {"pods": "2", "requests.memory": "2Mi"}


def test_must_specify_names_each_missing_resource_and_container() -> None:
    assert PODS is not None
    p = pod(c("a"), c("b", requests={"cpu": "1"}), initContainers=[c("init", limits={"memory": "1Mi"})])
    assert PODS.constraints(["pods", "requests.cpu", "limits.memory"], p) == (
        "must specify limits.memory for: a,b; requests.cpu for: a,init")
    assert PODS.constraints(["pods", "requests.storage"], p) == ""
