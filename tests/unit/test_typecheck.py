"""Wrong JSON types in built-in objects get upstream's decoder errors, word for word."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from apiserver.endpoints.serialization.typecheck import decode, type_error

_CONTAINER = {"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}
_TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [_CONTAINER]}}
_QUANTITY_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


def pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [copy.deepcopy(_CONTAINER)], **spec}}


def container(**fields: Any) -> dict[str, Any]:
    return pod(containers=[{**_CONTAINER, **fields}])


def struct_field(value: str, field: str, go: str) -> str:
    return f"json: cannot unmarshal {value} into Go struct field {field} of type {go}"


VALID = [
    ("v1", "Pod", pod()),
    ("v1", "Pod", container(ports=[{"containerPort": 80, "protocol": "TCP"}],
                            resources={"limits": {"cpu": "500m", "memory": 1073741824}, "requests": {"cpu": 0.5}},
                            readinessProbe={"httpGet": {"port": "http"}, "periodSeconds": 3})),
    ("apps/v1", "Deployment", {"spec": {"replicas": 3, "selector": {"matchLabels": {"app": "x"}},
                                        "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                                        "template": _TEMPLATE}}),
    ("v1", "Service", {"spec": {"ports": [{"port": 80, "targetPort": "http"}, {"port": 81, "targetPort": 8081}]}}),
    ("v1", "ConfigMap", {"data": {"a": "1"}, "binaryData": {"b": "AAEC"}, "immutable": False}),
    ("v1", "Secret", {"data": {"k": "dg==", "wrapped": "YWJj\nZGVm", "empty": ""}, "stringData": {"s": "x"}}),
    ("v1", "Secret", {"data": {"k": [1, 2, 255]}}),  # Go fills a []byte from an array of numbers too
    ("v1", "Node", {"spec": {"podCIDR": "10.0.0.0/24", "unschedulable": True,
                             "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "2024-01-01T00:00:00Z"}]}}),
    ("batch/v1", "Job", {"spec": {"backoffLimit": 6, "activeDeadlineSeconds": 9223372036854775807,
                                  "template": _TEMPLATE}}),
    ("v1", "PersistentVolumeClaim", {"spec": {"accessModes": ["ReadWriteOnce"],
                                              "resources": {"requests": {"storage": "1Gi"}}}}),
    ("v1", "Pod", {"metadata": {"creationTimestamp": "2024-02-29T23:59:59.123456789+05:30",
                                "deletionTimestamp": None, "labels": {"a": None}}}),
    ("events.k8s.io/v1", "Event", {"eventTime": "2024-01-01T00:00:00.000000Z"}),
    ("autoscaling/v2", "HorizontalPodAutoscaler", {"spec": {"metrics": [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50,
                                                                    "averageValue": "100m"}}}]}}),
]


@pytest.mark.parametrize(("api_version", "kind", "obj"), VALID)
def test_well_typed_objects_pass(api_version: str, kind: str, obj: dict[str, Any]) -> None:
    assert type_error(api_version, kind, obj) is None


NULLS = [
    ("v1", "Pod", {"metadata": None, "spec": None, "status": None}),
    ("v1", "Pod", pod(containers=None, volumes=None, securityContext=None, nodeName=None, hostNetwork=None)),
    ("v1", "Pod", container(ports=[None, {"containerPort": None}], resources={"limits": {"cpu": None}})),
    ("apps/v1", "Deployment", {"spec": {"replicas": None, "strategy": {"rollingUpdate": {"maxSurge": None}}}}),
    ("v1", "Service", {"spec": {"ports": [{"port": 80, "targetPort": None}], "selector": None}}),
    ("v1", "ConfigMap", {"data": {"a": None}, "binaryData": {"b": None}}),
    ("v1", "Secret", {"data": {"k": None}, "type": None}),
]


@pytest.mark.parametrize(("api_version", "kind", "obj"), NULLS)
def test_null_decodes_to_the_zero_value(api_version: str, kind: str, obj: dict[str, Any]) -> None:
    assert decode(api_version, kind, obj) is None


WRONG = [
    # scalars in structs: the innermost struct, then every JSON field name on the way (no indexes, no map keys)
    ("apps/v1", "Deployment", {"spec": {"replicas": "3"}},
     struct_field("string", "DeploymentSpec.spec.replicas", "int32")),
    ("apps/v1", "Deployment", {"spec": {"replicas": 1.5}},
     struct_field("number 1.5", "DeploymentSpec.spec.replicas", "int32")),
    ("apps/v1", "Deployment", {"spec": {"replicas": 3.0}},
     struct_field("number 3.0", "DeploymentSpec.spec.replicas", "int32")),
    ("apps/v1", "Deployment", {"spec": {"replicas": True}},
     struct_field("bool", "DeploymentSpec.spec.replicas", "int32")),
    ("apps/v1", "Deployment", {"spec": {"paused": "true"}},
     struct_field("string", "DeploymentSpec.spec.paused", "bool")),
    ("v1", "ReplicationController", {"spec": {"replicas": [1]}},
     struct_field("array", "ReplicationControllerSpec.spec.replicas", "int32")),
    ("batch/v1", "Job", {"spec": {"backoffLimit": 3000000000}},
     struct_field("number 3000000000", "JobSpec.spec.backoffLimit", "int32")),
    ("batch/v1", "Job", {"spec": {"activeDeadlineSeconds": {"x": 1}}},
     struct_field("object", "JobSpec.spec.activeDeadlineSeconds", "int64")),
    ("batch/v1", "Job", {"spec": {"template": {"spec": {"restartPolicy": 1}}}},
     struct_field("number", "PodSpec.spec.template.spec.restartPolicy", "v1.RestartPolicy")),
    ("v1", "Node", {"spec": {"unschedulable": "yes"}},
     struct_field("string", "NodeSpec.spec.unschedulable", "bool")),
    ("v1", "Node", {"spec": {"taints": [{"key": "k", "effect": 7}]}},
     struct_field("number", "Taint.spec.taints.effect", "v1.TaintEffect")),
    ("v1", "Pod", {"metadata": {"uid": 5}}, struct_field("number", "ObjectMeta.metadata.uid", "types.UID")),
    ("v1", "Pod", container(image=["busybox"]), struct_field("array", "Container.spec.containers.image", "string")),
    ("v1", "Pod", container(ports=[{"containerPort": "80"}]),
     struct_field("string", "ContainerPort.spec.containers.ports.containerPort", "int32")),
    ("v1", "Pod", container(imagePullPolicy=5),
     struct_field("number", "Container.spec.containers.imagePullPolicy", "v1.PullPolicy")),
    # composite values of the wrong shape: Go's names for slices, maps and named types
    ("v1", "Pod", pod(containers="x"), struct_field("string", "PodSpec.spec.containers", "[]v1.Container")),
    ("v1", "Pod", pod(containers=["x"]), struct_field("string", "PodSpec.spec.containers", "v1.Container")),
    ("v1", "Pod", {"spec": "x"}, struct_field("string", "Pod.spec", "v1.PodSpec")),
    ("v1", "Pod", {"metadata": {"labels": ["a"]}},
     struct_field("array", "ObjectMeta.metadata.labels", "map[string]string")),
    ("v1", "Pod", {"metadata": {"labels": {"a": 1}}}, struct_field("number", "ObjectMeta.metadata.labels", "string")),
    ("v1", "Pod", container(resources={"limits": "x"}),
     struct_field("string", "ResourceRequirements.spec.containers.resources.limits", "v1.ResourceList")),
    ("v1", "Pod", container(securityContext={"capabilities": {"add": "NET_ADMIN"}}),
     struct_field("string", "Capabilities.spec.containers.securityContext.capabilities.add", "[]v1.Capability")),
    ("v1", "PersistentVolumeClaim", {"spec": {"accessModes": [1]}},
     struct_field("number", "PersistentVolumeClaimSpec.spec.accessModes", "v1.PersistentVolumeAccessMode")),
    ("v1", "PersistentVolumeClaim", {"spec": {"resources": {"requests": ["1Gi"]}}},
     struct_field("array", "VolumeResourceRequirements.spec.resources.requests", "v1.ResourceList")),
    ("v1", "Pod", [], "json: cannot unmarshal array into Go value of type v1.Pod"),
    # maps of strings and bytes
    ("v1", "ConfigMap", {"data": {"a": 1}}, struct_field("number", "ConfigMap.data", "string")),
    ("v1", "ConfigMap", {"data": {"a": "ok", "b": {"c": "d"}}}, struct_field("object", "ConfigMap.data", "string")),
    ("v1", "ConfigMap", {"binaryData": {"b": 1}}, struct_field("number", "ConfigMap.binaryData", "[]uint8")),
    ("v1", "ConfigMap", {"binaryData": {"b": "not base64"}}, "illegal base64 data at input byte 3"),
    ("v1", "Secret", {"data": {"k": "v"}}, "illegal base64 data at input byte 0"),
    ("v1", "Secret", {"data": {"k": "dg="}}, "illegal base64 data at input byte 3"),
    ("v1", "Secret", {"data": {"k": "dg==x"}}, "illegal base64 data at input byte 4"),
    ("v1", "Secret", {"data": {"k": "dg=x"}}, "illegal base64 data at input byte 2"),
    ("v1", "Secret", {"data": {"k": [300]}}, struct_field("number 300", "Secret.data", "uint8")),
    ("v1", "Secret", {"stringData": {"k": False}}, struct_field("bool", "Secret.stringData", "string")),
    # IntOrString: Go's int decoder, inside IntOrString's own, still names the field
    ("v1", "Service", {"spec": {"ports": [{"port": 80, "targetPort": True}]}},
     struct_field("bool", "ServicePort.spec.ports.targetPort", "int32")),
    ("v1", "Service", {"spec": {"ports": [{"port": 80, "targetPort": 1.5}]}},
     struct_field("number 1.5", "ServicePort.spec.ports.targetPort", "int32")),
    ("apps/v1", "Deployment", {"spec": {"strategy": {"rollingUpdate": {"maxSurge": {"x": 1}}}}},
     struct_field("object", "RollingUpdateDeployment.spec.strategy.rollingUpdate.maxSurge", "int32")),
    ("v1", "Service", {"spec": {"ports": [{"port": "80"}]}}, struct_field("string", "ServicePort.spec.ports.port",
                                                                          "int32")),
    # quantities and times answer with their parsers' own words
    ("v1", "Pod", container(resources={"limits": {"cpu": "lots"}}),
     f"quantities must match the regular expression '{_QUANTITY_RE}'"),
    ("v1", "Pod", container(resources={"requests": {"memory": True}}),
     f"quantities must match the regular expression '{_QUANTITY_RE}'"),
    ("v1", "Pod", container(resources={"requests": {"memory": "1Mm"}}), "unable to parse quantity's suffix"),
    ("v1", "Pod", {"metadata": {"creationTimestamp": "yesterday"}},
     'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"'),
    ("v1", "Pod", {"metadata": {"creationTimestamp": "2024-01-01 00:00:00Z"}},
     'parsing time "2024-01-01 00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 00:00:00Z" as "T"'),
    ("v1", "Pod", {"metadata": {"creationTimestamp": "2024-01-01T00:00:00"}},
     'parsing time "2024-01-01T00:00:00" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "Z07:00"'),
    ("v1", "Pod", {"metadata": {"creationTimestamp": "2024-13-01T00:00:00Z"}},
     'parsing time "2024-13-01T00:00:00Z": month out of range'),
    ("v1", "Pod", {"metadata": {"creationTimestamp": "2023-02-29T00:00:00Z"}},
     'parsing time "2023-02-29T00:00:00Z": day out of range'),
    ("v1", "Pod", {"metadata": {"creationTimestamp": "2024-01-01T24:00:00Z"}},
     'parsing time "2024-01-01T24:00:00Z": hour out of range'),
    ("v1", "Pod", {"metadata": {"creationTimestamp": "2024-01-01T00:00:00+25:00"}},
     'parsing time "2024-01-01T00:00:00+25:00": time zone offset hour out of range'),
    ("v1", "Pod", {"metadata": {"creationTimestamp": "2024-01-01T00:00:00Zjunk"}},
     'parsing time "2024-01-01T00:00:00Zjunk": extra text: "junk"'),
    ("v1", "Pod", {"metadata": {"creationTimestamp": 1704067200}},
     struct_field("number", "ObjectMeta.metadata.creationTimestamp", "string")),
    ("events.k8s.io/v1", "Event", {"eventTime": "2024-01-01T00:00:00Z"},
     'parsing time "2024-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"'),
]


@pytest.mark.parametrize(("api_version", "kind", "obj", "message"), WRONG)
def test_wrong_types_get_upstreams_message(api_version: str, kind: str, obj: Any, message: str) -> None:
    assert decode(api_version, kind, obj) == message


def test_status_is_upstreams_bad_request() -> None:
    error = type_error("apps/v1", "Deployment", {"spec": {"replicas": "3"}})
    assert error is not None
    assert error.to_status() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "BadRequest",
        "code": 400,
        "message": 'Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal string '
                   "into Go struct field DeploymentSpec.spec.replicas of type int32",
    }
    error = type_error("v1", "ConfigMap", {"data": {"a": 1}})
    assert error is not None and error.message == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: '
        "json: cannot unmarshal number into Go struct field ConfigMap.data of type string")


def test_first_mismatch_in_document_order() -> None:
    obj = {"metadata": {"labels": {"a": 1}}, "spec": {"replicas": "3"}}
    assert decode("apps/v1", "Deployment", obj) == struct_field(
        "number", "ObjectMeta.metadata.labels", "string")
    obj = {"spec": {"replicas": "3"}, "metadata": {"labels": {"a": 1}}}
    assert decode("apps/v1", "Deployment", obj) == struct_field(
        "string", "DeploymentSpec.spec.replicas", "int32")


def test_own_decoders_stop_the_decode_and_win_over_an_earlier_mismatch() -> None:
    obj = {"spec": {"replicas": "3", "template": {"metadata": {"creationTimestamp": "soon"}}}}
    assert decode("apps/v1", "Deployment", obj) == (
        'parsing time "soon" as "2006-01-02T15:04:05Z07:00": cannot parse "soon" as "2006"')


def test_unknown_fields_and_custom_resources_are_not_checked() -> None:
    assert decode("v1", "Pod", {"bogus": 1, "spec": {"Containers": 1, "nope": {"x": []}}}) is None
    assert type_error("example.com/v1", "Widget", {"spec": {"replicas": "3"}}) is None
    assert decode("v1", "Pod", {"metadata": {"managedFields": [{"fieldsV1": "anything"}]}}) is None


def test_ten_container_pod_is_checked_well_under_a_millisecond() -> None:
    many = container(ports=[{"containerPort": 80, "protocol": "TCP"}],
                     resources={"limits": {"cpu": "100m", "memory": "64Mi"}, "requests": {"cpu": "50m"}},
                     env=[{"name": "A", "value": "b"}], volumeMounts=[{"name": "v", "mountPath": "/x"}],
                     readinessProbe={"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 5})
    many["spec"]["containers"] = [dict(many["spec"]["containers"][0], name=f"c{i}") for i in range(10)]
    many["metadata"].update(labels={"app": "x"}, creationTimestamp="2024-01-01T00:00:00Z")
    assert type_error("v1", "Pod", many) is None
    rounds = 200
    started = time.perf_counter()
    for _ in range(rounds):
        type_error("v1", "Pod", many)
    assert (time.perf_counter() - started) / rounds < 0.001


def test_nulls_are_read_as_go_reads_them() -> None:
    """Optional fields that are null are dropped; required scalars, and null list and map elements, get their
    type's zero value, a struct's being its required scalars zeroed; opaque values keep their nulls."""
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "creationTimestamp": None, "annotations": None, "labels": {"a": None},
                        "finalizers": [None], "ownerReferences": [None]},
           "spec": {"containers": [None, {"name": "c", "image": None, "args": ["x", None], "ports": [None],
                                          "resources": {"limits": {"cpu": None}}}],
                    "tolerations": [None], "nodeSelector": None},
           "unknown": None}
    assert decode("v1", "Pod", obj) is None
    assert obj == {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "labels": {"a": ""}, "finalizers": [""],
                                "ownerReferences": [{"apiVersion": "", "kind": "", "name": "", "uid": ""}]},
                   "spec": {"containers": [{"name": ""}, {"name": "c", "args": ["x", ""],
                                                          "ports": [{"containerPort": 0}],
                                                          "resources": {"limits": {"cpu": "0"}}}],
                            "tolerations": [{}]},
                   "unknown": None}  # unknown fields stay for field validation to name
    service = {"spec": {"ports": [{"port": None, "targetPort": None, "name": None}]}}
    assert decode("v1", "Service", service) is None
    assert service == {"spec": {"ports": [{"port": 0}]}}
    revision = {"data": None, "revision": None}
    assert decode("apps/v1", "ControllerRevision", revision) is None
    assert revision == {"revision": 0}
    raw = {"data": {"x": [None]}}
    assert decode("apps/v1", "ControllerRevision", raw) is None
    assert raw == {"data": {"x": [None]}}  # inside a RawExtension nothing is typed


def test_a_type_error_is_still_found_among_nulls() -> None:
    obj = container(ports=[None, {"containerPort": "80"}])
    assert decode("v1", "Pod", obj) == struct_field("string", "ContainerPort.spec.containers.ports.containerPort",
                                                    "int32")
