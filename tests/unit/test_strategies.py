"""Per-resource strategies: defaults, validation causes, allocation and field sets."""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pytest

from apiserver.registry import conversion
from apiserver.registry.apiextensions import CustomResourceStrategy
from apiserver.registry.pods import bind
from apiserver.registry.strategies import strategy_for
from services.api.catalog import BUILTIN, Resource
from services.api.errors import StatusError


def res(group: str, plural: str, version: str = "") -> Resource:
    for r in BUILTIN:
        if r.group == group and r.plural == plural and (not version or r.version == version):
            return r
    raise KeyError(plural)


def create(group: str, plural: str, obj: dict[str, Any], version: str = "") -> tuple[dict[str, Any], list]:
    s = strategy_for(res(group, plural, version))
    obj = copy.deepcopy(obj)
    obj.setdefault("metadata", {}).setdefault("uid", "uid-1")
    s.defaults(obj)
    s.prepare_for_create(obj)
    return obj, s.validate(obj)


def update(group: str, plural: str, new: dict[str, Any], old: dict[str, Any]) -> tuple[dict[str, Any], list]:
    s = strategy_for(res(group, plural))
    new = copy.deepcopy(new)
    for key in ("uid", "creationTimestamp"):  # the store carries these over, as upstream's does
        if key in old.get("metadata", {}):
            new.setdefault("metadata", {})[key] = old["metadata"][key]
    s.defaults(new)
    s.prepare_for_update(new, old)
    return new, s.validate_update(new, old)


def fields(causes: list[dict[str, str]]) -> list[str]:
    return [c["field"] for c in causes]


def pod(**spec: Any) -> dict[str, Any]:
    body = {"containers": [{"name": "c", "image": "nginx"}]}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": body}


def test_strategy_for_maps_and_caches() -> None:
    pods = res("", "pods")
    assert type(strategy_for(pods)).__name__ == "PodStrategy"
    assert strategy_for(pods) is strategy_for(pods)
    custom = Resource("example.com", "v1", "Widget", "widgets", "widget", True, custom=True)
    assert type(strategy_for(custom)) is CustomResourceStrategy


# -- pods -----------------------------------------------------------------------------


def test_pod_defaults() -> None:
    obj, causes = create("", "pods", pod())
    assert causes == []
    spec = obj["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["securityContext"] == {}
    assert spec["enableServiceLinks"] is True
    # Priority, service account and default tolerations are admission's (tests/unit/apiserver/test_admission_chain.py).
    assert not {"priority", "serviceAccountName", "serviceAccount", "tolerations"} & set(spec)
    c = spec["containers"][0]
    assert c["imagePullPolicy"] == "Always"
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "File"
    assert c["resources"] == {}
    assert obj["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


@pytest.mark.parametrize(("image", "policy"), [("nginx", "Always"), ("nginx:latest", "Always"),
                                               ("nginx:1.25", "IfNotPresent"), ("reg:5000/app", "Always"),
                                               ("app@sha256:abc", "IfNotPresent")])
def test_image_pull_policy(image: str, policy: str) -> None:
    obj, _ = create("", "pods", pod(containers=[{"name": "c", "image": image, "ports": [{"containerPort": 80}]}]))
    assert obj["spec"]["containers"][0]["imagePullPolicy"] == policy
    assert obj["spec"]["containers"][0]["ports"][0]["protocol"] == "TCP"


def test_pod_qos_classes() -> None:
    guaranteed = pod(containers=[{"name": "c", "image": "x", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}])
    obj, causes = create("", "pods", guaranteed)
    assert causes == []
    assert obj["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert obj["status"]["qosClass"] == "Guaranteed"
    burstable = pod(containers=[{"name": "c", "image": "x", "resources": {"requests": {"cpu": "100m"}}}])
    assert create("", "pods", burstable)[0]["status"]["qosClass"] == "Burstable"


def test_pod_validation_paths() -> None:
    bad = pod(
        containers=[
            {"name": "Bad", "image": "x", "ports": [{"containerPort": 70000, "protocol": "ICMP"}]},
            {"name": "dup", "image": ""},
        ],
        initContainers=[{"name": "dup", "image": "x"}],
        restartPolicy="Sometimes",
        volumes=[{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}],
    )
    _, causes = create("", "pods", bad)
    got = fields(causes)
    assert "spec.containers[0].name" in got
    assert "spec.containers[0].ports[0].containerPort" in got
    assert "spec.containers[0].ports[0].protocol" in got
    assert "spec.containers[1].name" in got  # duplicate of the init container
    assert "spec.containers[1].image" in got
    assert "spec.volumes[1].name" in got
    restart = next(c for c in causes if c["field"] == "spec.restartPolicy")
    assert restart["message"] == ('Unsupported value: "Sometimes": supported values: "Always", "OnFailure", '
                                  '"Never"')
    dup = next(c for c in causes if c["field"] == "spec.containers[1].name")
    assert dup == {"reason": "FieldValueDuplicate", "message": 'Duplicate value: "dup"',
                   "field": "spec.containers[1].name"}


def test_pod_requires_containers() -> None:
    _, causes = create("", "pods", pod(containers=[]))
    assert causes == [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}]


def test_pod_requests_above_limits() -> None:
    body = pod(containers=[{"name": "c", "image": "x",
                            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}])
    _, causes = create("", "pods", body)
    assert causes == [{"reason": "FieldValueInvalid", "field": "spec.containers[0].resources.requests[cpu]",
                       "message": 'Invalid value: "2": must be less than or equal to cpu limit of 1'}]


def test_pod_update_rules() -> None:
    old, _ = create("", "pods", pod())
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "nginx:2"
    new["spec"].setdefault("tolerations", []).append({"key": "k", "operator": "Exists", "effect": "NoSchedule"})
    _, causes = update("", "pods", new, old)
    assert causes == []
    new = copy.deepcopy(old)
    new["spec"]["restartPolicy"] = "Never"
    _, causes = update("", "pods", new, old)
    assert fields(causes) == ["spec"]
    assert causes[0]["reason"] == "FieldValueForbidden"
    assert causes[0]["message"].startswith("Forbidden: pod updates may not change fields other than")


def test_pod_field_set_and_grace() -> None:
    s = strategy_for(res("", "pods"))
    obj, _ = create("", "pods", pod(nodeName="n1"))
    obj["status"]["podIPs"] = [{"ip": "10.0.0.5"}]
    fs = s.field_set(obj)
    assert fs["spec.nodeName"] == "n1"
    assert fs["status.phase"] == "Pending"
    assert fs["status.podIP"] == "10.0.0.5"
    assert fs["spec.hostNetwork"] == "false"
    assert fs["metadata.namespace"] == "default"
    assert s.graceful
    assert s.grace_period(obj, None) == 30
    assert s.grace_period(obj, 5) == 5
    assert s.grace_period(obj, -3) == 1
    unbound, _ = create("", "pods", pod())
    assert s.grace_period(unbound, None) == 0
    obj["status"]["phase"] = "Succeeded"
    assert s.grace_period(obj, None) == 0


def test_bind() -> None:
    obj, _ = create("", "pods", pod())
    binding = {"metadata": {"name": "p", "annotations": {"a": "b"}}, "target": {"kind": "Node", "name": "n1"}}
    bound = bind(obj, binding)
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"] == {"a": "b"}
    assert bound["status"]["conditions"][0]["type"] == "PodScheduled"
    assert "nodeName" not in obj["spec"]
    with pytest.raises(StatusError) as err:
        bind(bound, binding)
    assert err.value.code == 409
    assert err.value.message == ('Operation cannot be fulfilled on pods/binding "p": pod p is already assigned '
                                 'to node "n1"')
    with pytest.raises(StatusError) as err:
        bind(obj, {"target": {"name": ""}})
    assert err.value.code == 422


# -- services -------------------------------------------------------------------------


@dataclass
class Ctx:
    service_cidr: ipaddress.IPv4Network = field(default_factory=lambda: ipaddress.IPv4Network("10.96.0.0/12"))
    node_port_range: tuple[int, int] = (30000, 32767)
    keys: set[str] = field(default_factory=set)

    async def taken(self, prefix: str) -> set[str]:
        return {k for k in self.keys if k.startswith(prefix)}


def svc(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"ports": [{"port": 80}], "selector": {"app": "web"}}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"}, "spec": body}


def test_service_defaults() -> None:
    obj, causes = create("", "services", svc())
    assert causes == []
    spec = obj["spec"]
    assert spec["type"] == "ClusterIP"
    assert spec["sessionAffinity"] == "None"
    assert spec["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}
    assert spec["internalTrafficPolicy"] == "Cluster"
    assert spec["ipFamilies"] == ["IPv4"]
    assert spec["ipFamilyPolicy"] == "SingleStack"
    assert "externalTrafficPolicy" not in spec
    assert obj["status"] == {"loadBalancer": {}}
    node_port, _ = create("", "services", svc(type="NodePort"))
    assert node_port["spec"]["externalTrafficPolicy"] == "Cluster"


async def test_service_cluster_ip_allocation() -> None:
    s = strategy_for(res("", "services"))
    ctx = Ctx()
    obj, _ = create("", "services", svc())
    alloc = await s.allocate(ctx, obj, None)
    ip = obj["spec"]["clusterIP"]
    assert obj["spec"]["clusterIPs"] == [ip]
    assert ipaddress.ip_address(ip) in ctx.service_cidr
    assert ip != "10.96.0.1"
    assert alloc.create == {f"ranges/serviceips/{ip}": b"default/web"}
    assert s.release(obj) == [f"ranges/serviceips/{ip}"]


async def test_service_requested_ip() -> None:
    s = strategy_for(res("", "services"))
    ctx = Ctx(keys={"ranges/serviceips/10.96.0.10"})
    obj, _ = create("", "services", svc(clusterIP="10.96.0.1"))
    alloc = await s.allocate(ctx, obj, None)
    assert list(alloc.create) == ["ranges/serviceips/10.96.0.1"]
    taken, _ = create("", "services", svc(clusterIP="10.96.0.10"))
    with pytest.raises(StatusError) as err:
        await s.allocate(ctx, taken, None)
    assert err.value.code == 422
    assert err.value.details["causes"][0]["field"] == "spec.clusterIPs"
    assert err.value.message.endswith("failed to allocate IP 10.96.0.10: provided IP is already allocated")
    outside, _ = create("", "services", svc(clusterIP="192.168.0.1"))
    with pytest.raises(StatusError) as err:
        await s.allocate(ctx, outside, None)
    assert "is not in the valid range. The range of valid IPs is 10.96.0.0/12" in err.value.message


async def test_service_small_range_fills_up() -> None:
    s = strategy_for(res("", "services"))
    ctx = Ctx(service_cidr=ipaddress.IPv4Network("10.0.0.0/29"))
    seen = set()
    for _ in range(6):
        obj, _ = create("", "services", svc())
        alloc = await s.allocate(ctx, obj, None)
        ctx.keys |= set(alloc.create)
        seen.add(obj["spec"]["clusterIP"])
    assert seen == {f"10.0.0.{i}" for i in range(1, 7)}
    obj, _ = create("", "services", svc())
    with pytest.raises(StatusError) as err:
        await s.allocate(ctx, obj, None)
    assert err.value.code == 500


async def test_headless_and_external_name() -> None:
    s = strategy_for(res("", "services"))
    obj, causes = create("", "services", svc(clusterIP="None", ports=[]))
    assert causes == []
    alloc = await s.allocate(Ctx(), obj, None)
    assert alloc.create == {}
    assert obj["spec"]["clusterIPs"] == ["None"]
    ext, causes = create("", "services", svc(type="ExternalName", externalName="example.com", ports=[]))
    assert causes == []
    assert "clusterIP" not in ext["spec"] and "ipFamilies" not in ext["spec"]
    assert (await s.allocate(Ctx(), ext, None)).create == {}


async def test_node_port_allocation_and_type_changes() -> None:
    s = strategy_for(res("", "services"))
    ctx = Ctx(keys={"ranges/servicenodeports/30080"})
    obj, _ = create("", "services", svc(type="NodePort", ports=[{"port": 80, "name": "http"},
                                                                {"port": 443, "name": "https", "nodePort": 30443}]))
    alloc = await s.allocate(ctx, obj, None)
    ports = obj["spec"]["ports"]
    assert ports[1]["nodePort"] == 30443
    assert 30000 <= ports[0]["nodePort"] <= 32767
    assert f"ranges/servicenodeports/{ports[0]['nodePort']}" in alloc.create
    assert "ranges/servicenodeports/30443" in alloc.create
    ctx.keys |= set(alloc.create)

    clash, _ = create("", "services", svc(type="NodePort", ports=[{"port": 80, "nodePort": 30080}]))
    with pytest.raises(StatusError) as err:
        await s.allocate(ctx, clash, None)
    assert err.value.details["causes"][0] == {
        "reason": "FieldValueInvalid", "field": "spec.ports[0].nodePort",
        "message": "Invalid value: 30080: provided port is already allocated"}
    out, _ = create("", "services", svc(type="NodePort", ports=[{"port": 80, "nodePort": 80}]))
    with pytest.raises(StatusError) as err:
        await s.allocate(ctx, out, None)
    assert "The range of valid ports is 30000-32767" in err.value.message

    # Re-applying the original manifest keeps the allocated values.
    stored = copy.deepcopy(obj)
    again, causes = update("", "services", svc(type="NodePort", ports=[{"port": 80, "name": "http"},
                                                                      {"port": 443, "name": "https"}]), stored)
    assert causes == []
    assert again["spec"]["clusterIP"] == stored["spec"]["clusterIP"]
    assert [p["nodePort"] for p in again["spec"]["ports"]] == [p["nodePort"] for p in stored["spec"]["ports"]]
    assert (await s.allocate(ctx, again, stored)).create == {}

    # NodePort -> ClusterIP releases the node ports, keeps the IP.
    to_cluster = copy.deepcopy(stored)
    to_cluster["spec"]["type"] = "ClusterIP"
    to_cluster, causes = update("", "services", to_cluster, stored)
    assert causes == []
    assert all("nodePort" not in p for p in to_cluster["spec"]["ports"])
    assert "externalTrafficPolicy" not in to_cluster["spec"]
    alloc = await s.allocate(ctx, to_cluster, stored)
    assert alloc.create == {}
    assert sorted(alloc.delete) == sorted(k for k in s.release(stored) if "nodeports" in k)


def test_service_validation() -> None:
    _, causes = create("", "services", svc(ports=[]))
    assert causes == [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.ports"}]
    _, causes = create("", "services", svc(ports=[{"port": 80}, {"port": 0, "name": "b"}]))
    assert fields(causes) == ["spec.ports[0].name", "spec.ports[1].port", "spec.ports[1].targetPort"]
    bad_name = svc()
    bad_name["metadata"]["name"] = "1web"
    _, causes = create("", "services", bad_name)
    assert fields(causes) == ["metadata.name"]
    assert "DNS-1035 label" in causes[0]["message"]


def test_service_cluster_ip_is_immutable() -> None:
    old, _ = create("", "services", svc(clusterIP="10.96.0.5"))
    new = copy.deepcopy(old)
    new["spec"]["clusterIP"] = "10.96.0.6"
    new["spec"]["clusterIPs"] = ["10.96.0.6"]
    _, causes = update("", "services", new, old)
    # Upstream's validateUpgradeDowngradeClusterIPs: the primary IP may not change once set.
    assert causes == [{"reason": "FieldValueInvalid", "field": "spec.clusterIPs[0]",
                       "message": 'Invalid value: ["10.96.0.6"]: may not change once set'}]


def test_service_field_set() -> None:
    obj, _ = create("", "services", svc(clusterIP="None"))
    fs = strategy_for(res("", "services")).field_set(obj)
    assert fs["spec.clusterIP"] == "None" and fs["spec.type"] == "ClusterIP"


# -- namespaces and nodes -----------------------------------------------------------------


def test_namespace_lifecycle() -> None:
    s = strategy_for(res("", "namespaces"))
    obj, causes = create("", "namespaces", {"metadata": {"name": "team-a"}})
    assert causes == []
    assert obj["spec"] == {"finalizers": ["kubernetes"]}
    assert obj["status"] == {"phase": "Active"}
    assert obj["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-a"}
    assert s.field_set(obj) == {"metadata.name": "team-a", "status.phase": "Active"}
    assert s.deletion_blocked(obj)
    s.prepare_for_delete(obj)
    assert obj["status"]["phase"] == "Terminating"
    new = {"metadata": {"name": "team-a"}, "spec": {"finalizers": []}, "status": {"phase": "Active"}}
    s.prepare_for_finalize(new, obj)
    assert new["spec"]["finalizers"] == [] and new["status"]["phase"] == "Terminating"
    assert not s.deletion_blocked(new)
    with pytest.raises(StatusError) as err:
        s.prepare_for_finalize({"metadata": {}, "spec": {"finalizers": ["custom"]}}, obj)
    assert err.value.details["causes"][0]["field"] == "spec.finalizers[0]"
    _, causes = create("", "namespaces", {"metadata": {"name": "a.b"}})
    assert fields(causes) == ["metadata.name"]


def test_namespace_update_keeps_spec_finalizers() -> None:
    old, _ = create("", "namespaces", {"metadata": {"name": "x"}})
    new, causes = update("", "namespaces", {"metadata": {"name": "x"}, "spec": {"finalizers": []}}, old)
    assert causes == [] and new["spec"]["finalizers"] == ["kubernetes"]


def test_node() -> None:
    s = strategy_for(res("", "nodes"))
    obj, causes = create("", "nodes", {"metadata": {"name": "node-1.example"}, "spec": {"unschedulable": True},
                                       "status": {"capacity": {"cpu": "4"}}})
    assert causes == []
    assert obj["status"]["allocatable"] == {"cpu": "4"}
    assert s.field_set(obj) == {"metadata.name": "node-1.example", "spec.unschedulable": "true"}
    _, causes = create("", "nodes", {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k", "effect": "X"}]}})
    assert fields(causes) == ["spec.taints[0].effect"]


# -- apps ---------------------------------------------------------------------------------


def deployment(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
    }
    body.update(spec)
    return {"metadata": {"name": "web", "namespace": "default"}, "spec": body}


def test_deployment_defaults_and_generation() -> None:
    s = strategy_for(res("apps", "deployments"))
    assert s.uses_generation
    obj, causes = create("apps", "deployments", deployment())
    assert causes == []
    spec = obj["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert spec["revisionHistoryLimit"] == 10 and spec["progressDeadlineSeconds"] == 600
    tspec = spec["template"]["spec"]
    assert tspec["restartPolicy"] == "Always" and tspec["containers"][0]["imagePullPolicy"] == "Always"
    assert "serviceAccountName" not in tspec and "tolerations" not in tspec
    assert obj["status"] == {}
    new = copy.deepcopy(obj)
    new["spec"]["replicas"] = 3
    assert s.spec_changed(new, obj)


def test_deployment_validation() -> None:
    body = deployment(replicas=-1)
    body["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    _, causes = create("apps", "deployments", body)
    assert fields(causes) == ["spec.replicas", "spec.template.metadata.labels"]
    assert causes[1]["message"] == ('Invalid value: {"app":"other"}: `selector` does not match template '
                                    '`labels`')
    no_selector = deployment()
    del no_selector["spec"]["selector"]
    assert fields(create("apps", "deployments", no_selector)[1]) == ["spec.selector"]
    old, _ = create("apps", "deployments", deployment())
    new = copy.deepcopy(old)
    new["spec"]["selector"] = {"matchLabels": {"app": "web", "x": "y"}}
    new["spec"]["template"]["metadata"]["labels"]["x"] = "y"
    _, causes = update("apps", "deployments", new, old)
    assert fields(causes) == ["spec.selector"]
    assert causes[0]["message"].endswith("field is immutable")


def test_other_workload_defaults() -> None:
    rs, causes = create("apps", "replicasets", deployment())
    assert causes == [] and rs["spec"]["replicas"] == 1 and rs["status"] == {"replicas": 0}
    assert strategy_for(res("apps", "replicasets")).field_set(rs)["status.replicas"] == "0"
    sts, causes = create("apps", "statefulsets", deployment(serviceName="web"))
    assert causes == []
    assert sts["spec"]["podManagementPolicy"] == "OrderedReady"
    assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    ds, causes = create("apps", "daemonsets", deployment())
    assert causes == []
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert "replicas" not in ds["spec"]


def test_replication_controller_defaults_from_template() -> None:
    body = {"metadata": {"name": "rc", "namespace": "d"},
            "spec": {"template": {"metadata": {"labels": {"app": "x"}},
                                  "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    obj, causes = create("", "replicationcontrollers", body)
    assert causes == []
    assert obj["spec"]["selector"] == {"app": "x"} and obj["metadata"]["labels"] == {"app": "x"}
    assert obj["spec"]["replicas"] == 1


# -- batch --------------------------------------------------------------------------------


def job(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "c", "image": "x"}],
                                                  "restartPolicy": "Never"}}}
    body.update(spec)
    return {"metadata": {"name": "pi", "namespace": "default"}, "spec": body}


def test_job_defaults_and_generated_selector() -> None:
    obj, causes = create("batch", "jobs", job())
    assert causes == []
    spec = obj["spec"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["completionMode"] == "NonIndexed" and spec["suspend"] is False
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": "uid-1"}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels["controller-uid"] == "uid-1" and labels["batch.kubernetes.io/job-name"] == "pi"
    assert obj["metadata"]["labels"] == labels
    parallel, _ = create("batch", "jobs", job(parallelism=3))
    assert parallel["spec"]["parallelism"] == 3 and "completions" not in parallel["spec"]


def test_job_validation() -> None:
    body = job()
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    _, causes = create("batch", "jobs", body)
    assert causes == [{"reason": "FieldValueNotSupported", "field": "spec.template.spec.restartPolicy",
                       "message": 'Unsupported value: "Always": supported values: "OnFailure", "Never"'}]
    _, causes = create("batch", "jobs", job(selector={"matchLabels": {"a": "b"}}))
    assert "spec.selector" in fields(causes)
    old, _ = create("batch", "jobs", job())
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "y"
    _, causes = update("batch", "jobs", new, old)
    assert fields(causes) == ["spec.template"]


def test_job_field_set() -> None:
    obj, _ = create("batch", "jobs", job())
    obj["status"] = {"succeeded": 2}
    assert strategy_for(res("batch", "jobs")).field_set(obj)["status.successful"] == "2"


def test_cronjob() -> None:
    body = {"metadata": {"name": "cj", "namespace": "d"},
            "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": job()["spec"]}}}
    obj, causes = create("batch", "cronjobs", body)
    assert causes == []
    spec = obj["spec"]
    assert (spec["concurrencyPolicy"], spec["suspend"], spec["successfulJobsHistoryLimit"],
            spec["failedJobsHistoryLimit"]) == ("Allow", False, 3, 1)
    bad = copy.deepcopy(body)
    bad["spec"]["schedule"] = "61 * * * *"
    _, causes = create("batch", "cronjobs", bad)
    assert causes == [{"reason": "FieldValueInvalid", "field": "spec.schedule",
                       "message": 'Invalid value: "61 * * * *": end of range (61) above maximum (59): 61'}]
    bad["spec"]["schedule"] = "* *"
    assert "expected exactly 5 fields" in create("batch", "cronjobs", bad)[1][0]["message"]
    del bad["spec"]["schedule"]
    assert fields(create("batch", "cronjobs", bad)[1]) == ["spec.schedule"]
    for ok in ("@hourly", "0 0 * * MON-FRI", "0,30 9-17 1 jan-dec *"):
        bad["spec"]["schedule"] = ok
        assert create("batch", "cronjobs", bad)[1] == []


# -- events and conversion -------------------------------------------------------------------


def test_core_event_field_set_and_create_on_update() -> None:
    s = strategy_for(res("", "events"))
    assert s.allow_create_on_update
    event = {"metadata": {"name": "e", "namespace": "d"}, "reason": "Started", "type": "Normal",
             "involvedObject": {"kind": "Pod", "name": "p", "namespace": "d", "uid": "u"},
             "source": {"component": "kubelet"}}
    assert s.validate(event) == []
    fs = s.field_set(event)
    assert fs["involvedObject.kind"] == "Pod" and fs["involvedObject.name"] == "p"
    assert fs["source"] == "kubelet" and fs["reason"] == "Started" and fs["type"] == "Normal"
    event["involvedObject"]["namespace"] = "other"
    assert fields(s.validate(event)) == ["involvedObject.namespace"]


def test_event_conversion_round_trip() -> None:
    new_style = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "d"},
                 "eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "sched",
                 "reportingInstance": "sched-1", "action": "Binding", "reason": "Scheduled", "type": "Normal",
                 "regarding": {"kind": "Pod", "name": "p"}, "note": "ok", "deprecatedCount": 2}
    events_res = res("events.k8s.io", "events")
    core = conversion.to_storage(events_res, new_style)
    assert core["apiVersion"] == "v1"
    assert core["involvedObject"] == {"kind": "Pod", "name": "p"}
    assert core["message"] == "ok" and core["reportingComponent"] == "sched" and core["count"] == 2
    assert conversion.from_storage(events_res, core) == new_style
    s = strategy_for(events_res)
    assert s.validate(new_style) == []
    assert s.field_set(new_style)["regarding.name"] == "p"
    assert fields(s.validate({"metadata": {"name": "e", "namespace": "d"}})) == [
        "eventTime", "reportingController", "reportingInstance", "action", "reason", "type"]
    pods_res = res("", "pods")
    assert conversion.to_storage(pods_res, {"a": 1}) == {"a": 1}


def test_hpa_conversion_round_trip() -> None:
    v1 = res("autoscaling", "horizontalpodautoscalers", "v1")
    body = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "namespace": "d"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 1, "maxReplicas": 5, "targetCPUUtilizationPercentage": 50},
            "status": {"currentReplicas": 1, "desiredReplicas": 2, "currentCPUUtilizationPercentage": 40}}
    v2 = conversion.to_storage(v1, body)
    assert v2["apiVersion"] == "autoscaling/v2"
    assert v2["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]
    assert v2["status"]["currentMetrics"][0]["resource"]["current"] == {"averageUtilization": 40}
    assert conversion.from_storage(v1, v2) == body
    v2["spec"]["metrics"].append({"type": "Pods", "pods": {"metric": {"name": "qps"},
                                                           "target": {"type": "AverageValue", "averageValue": "1"}}})
    as_v1 = conversion.from_storage(v1, v2)
    assert "autoscaling.alpha.kubernetes.io/metrics" in as_v1["metadata"]["annotations"]
    assert conversion.to_storage(v1, as_v1)["spec"]["metrics"] == v2["spec"]["metrics"]
    s = strategy_for(v1)
    assert not s.uses_generation
    assert s.validate(body) == []
    bad = copy.deepcopy(body)
    bad["spec"]["maxReplicas"] = 0
    assert fields(s.validate(bad)) == ["spec.maxReplicas"]


def test_hpa_v2_defaults_cpu_metric() -> None:
    obj, causes = create("autoscaling", "horizontalpodautoscalers",
                         {"metadata": {"name": "h", "namespace": "d"},
                          "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "w"}, "maxReplicas": 3}}, "v2")
    assert causes == []
    assert obj["spec"]["minReplicas"] == 1
    assert obj["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 80


# -- the rest ------------------------------------------------------------------------------


def test_secret_defaults_and_validation() -> None:
    s = strategy_for(res("", "secrets"))
    obj, causes = create("", "secrets", {"metadata": {"name": "s", "namespace": "d"}, "stringData": {"k": "v"}})
    assert causes == []
    assert obj["type"] == "Opaque" and obj["data"] == {"k": "dg=="} and "stringData" not in obj
    assert s.field_set(obj)["type"] == "Opaque"
    _, causes = create("", "secrets", {"metadata": {"name": "s", "namespace": "d"},
                                       "data": {"bad key": "dg==", "k": "not base64!"}})
    assert fields(causes) == ["data[bad key]", "data[k]"]
    _, causes = create("", "secrets", {"metadata": {"name": "s", "namespace": "d"}, "type": "kubernetes.io/tls",
                                       "data": {}})
    assert fields(causes) == ["data[tls.crt]", "data[tls.key]"]


def test_configmap_immutable() -> None:
    old, _ = create("", "configmaps", {"metadata": {"name": "c", "namespace": "d"}, "data": {"a": "1"},
                                       "immutable": True})
    new = copy.deepcopy(old)
    new["data"]["a"] = "2"
    _, causes = update("", "configmaps", new, old)
    assert fields(causes) == ["data"]


def test_pvc_rules() -> None:
    obj, causes = create("", "persistentvolumeclaims", {"metadata": {"name": "c", "namespace": "d"}, "spec": {}})
    assert fields(causes) == ["spec.accessModes", "spec.resources[storage]"]
    assert obj["status"] == {"phase": "Pending"} and obj["spec"]["volumeMode"] == "Filesystem"


def test_rbac() -> None:
    _, causes = create("rbac.authorization.k8s.io", "clusterroles",
                       {"metadata": {"name": "system:thing"}, "rules": [{"apiGroups": [""], "resources": ["pods"]}]})
    assert causes == [{"reason": "FieldValueRequired", "field": "rules[0].verbs",
                       "message": "Required value: verbs must contain at least one value"}]
    binding = {"metadata": {"name": "b", "namespace": "d"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
               "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "d"}]}
    old, causes = create("rbac.authorization.k8s.io", "rolebindings", binding)
    assert causes == []
    new = copy.deepcopy(old)
    new["roleRef"]["name"] = "other"
    _, causes = update("rbac.authorization.k8s.io", "rolebindings", new, old)
    assert fields(causes) == ["roleRef"]


def test_pdb_and_priority_class_and_storage_class() -> None:
    pdb = {"metadata": {"name": "p", "namespace": "d"},
           "spec": {"minAvailable": 1, "maxUnavailable": "50%", "selector": {"matchLabels": {"a": "b"}}}}
    _, causes = create("policy", "poddisruptionbudgets", pdb)
    assert fields(causes) == ["spec"]
    assert strategy_for(res("policy", "poddisruptionbudgets")).uses_generation
    _, causes = create("scheduling.k8s.io", "priorityclasses", {"metadata": {"name": "system-mine"}, "value": 5})
    assert fields(causes) == ["metadata.name"]
    old, causes = create("scheduling.k8s.io", "priorityclasses", {"metadata": {"name": "high"}, "value": 1000})
    assert causes == [] and old["preemptionPolicy"] == "PreemptLowerPriority"
    _, causes = update("scheduling.k8s.io", "priorityclasses", dict(old, value=1), old)
    assert fields(causes) == ["value"]
    sc, causes = create("storage.k8s.io", "storageclasses", {"metadata": {"name": "fast"}, "provisioner": "x.io/p"})
    assert causes == [] and sc["reclaimPolicy"] == "Delete" and sc["volumeBindingMode"] == "Immediate"
    _, causes = update("storage.k8s.io", "storageclasses", dict(sc, parameters={"a": "b"}), sc)
    assert fields(causes) == ["parameters"]
    assert fields(create("storage.k8s.io", "storageclasses", {"metadata": {"name": "x"}})[1]) == ["provisioner"]


def test_networking() -> None:
    np, causes = create("networking.k8s.io", "networkpolicies",
                        {"metadata": {"name": "n", "namespace": "d"}, "spec": {"egress": [{}]}})
    assert causes == [] and np["spec"]["policyTypes"] == ["Ingress", "Egress"] and np["spec"]["podSelector"] == {}
    ing = {"metadata": {"name": "i", "namespace": "d"},
           "spec": {"rules": [{"host": "a.example.com", "http": {"paths": [
               {"path": "rel", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}
           ]}}]}}
    _, causes = create("networking.k8s.io", "ingresses", ing)
    assert fields(causes) == ["spec.rules[0].http.paths[0].path"]
    _, causes = create("discovery.k8s.io", "endpointslices", {"metadata": {"name": "e", "namespace": "d"}})
    assert causes == [{"reason": "FieldValueRequired", "message": "Required value", "field": "addressType"}]


def test_every_builtin_resource_validates_a_minimal_name() -> None:
    for r in BUILTIN:
        s = strategy_for(r)
        meta = {"name": "x"} | ({"namespace": "default"} if r.namespaced else {})
        obj = {"metadata": dict(meta)}
        s.defaults(obj)
        s.prepare_for_create(obj)
        s.validate(obj)
        assert "metadata.name" in s.field_set(obj)


@pytest.mark.parametrize("expr, field", [
    ({"scopeName": "Nope", "operator": "Exists"}, "spec.scopeSelector.matchExpressions[0].scopeName"),
    ({"scopeName": "PriorityClass", "operator": "Near"}, "spec.scopeSelector.matchExpressions[0].operator"),
    ({"scopeName": "BestEffort", "operator": "In", "values": ["x"]},
     "spec.scopeSelector.matchExpressions[0].operator"),
    ({"scopeName": "PriorityClass", "operator": "In"}, "spec.scopeSelector.matchExpressions[0].values"),
    ({"scopeName": "Terminating", "operator": "Exists", "values": ["x"]},
     "spec.scopeSelector.matchExpressions[0].values"),
])
def test_quota_scope_selector_is_validated(expr: dict[str, Any], field: str) -> None:
    quota = {"metadata": {"name": "q", "namespace": "ns"},
             "spec": {"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [expr]}}}
    assert fields(create("", "resourcequotas", quota)[1]) == [field]


def test_quota_scope_selector_accepts_valid_requirements() -> None:
    quota = {"metadata": {"name": "q", "namespace": "ns"}, "spec": {"hard": {"pods": "1"}, "scopeSelector": {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]},
                             {"scopeName": "NotBestEffort", "operator": "Exists"}]}}}
    assert create("", "resourcequotas", quota)[1] == []
