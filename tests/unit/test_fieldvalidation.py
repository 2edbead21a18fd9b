"""Server-side field validation against upstream's wording, paths and ordering."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import orjson
import pytest
import yaml

from apiserver.endpoints.serialization import fieldvalidation as fv

# The bodies of upstream's test/integration/apiserver/field_validation_test.go.
INVALID_DEPLOYMENT_JSON = b"""
{
  "apiVersion": "apps/v1",
  "kind": "Deployment",
  "metadata": {
    "name": "dupename",
    "name": "test-dep",
    "labels": {"app": "nginx"},
    "unknownMeta": "metaVal"
  },
  "spec": {
    "unknown1": "val1",
    "unknownDupe": "valDupe",
    "unknownDupe": "valDupe2",
    "paused": true,
    "paused": false,
    "selector": {"matchLabels": {"app": "nginx"}},
    "template": {
      "metadata": {"labels": {"app": "nginx"}},
      "spec": {
        "containers": [{
          "name":  "nginx",
          "image": "nginx:latest",
          "unknownNested": "val1",
          "imagePullPolicy": "Always",
          "imagePullPolicy": "Never"
        }]
      }
    }
  }
}
"""

INVALID_DEPLOYMENT_YAML = b"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: dupename
  name: test-dep
  unknownMeta: metaVal
  labels:
    app: nginx
spec:
  unknown1: val1
  unknownDupe: valDupe
  unknownDupe: valDupe2
  paused: true
  paused: false
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:latest
        unknownNested: val1
        imagePullPolicy: Always
        imagePullPolicy: Never"""

UPSTREAM_JSON_FINDINGS = [
    'duplicate field "metadata.name"',
    'unknown field "metadata.unknownMeta"',
    'unknown field "spec.unknown1"',
    'unknown field "spec.unknownDupe"',
    'duplicate field "spec.paused"',
    'unknown field "spec.template.spec.containers[0].unknownNested"',
    'duplicate field "spec.template.spec.containers[0].imagePullPolicy"',
]


def header(text: str) -> str:
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def pod(containers: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "containers": [
                {
                    "name": f"c{i}",
                    "image": "nginx",
                    "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}],
                    "env": [
                        {"name": "A", "value": "1"},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    ],
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": 0.5}},
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
                    "readinessProbe": {"tcpSocket": {"port": 80}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}, "runAsUser": 1000},
                }
                for i in range(containers)
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            **extra,
        },
    }


# -- unknown fields -------------------------------------------------------------------------------


def test_pod_unknown_fields_are_pruned_in_document_order() -> None:
    obj = pod(2)
    obj["metadata"]["labelz"] = {"a": "b"}
    obj["spec"]["foo"] = 1
    obj["spec"]["containers"][0]["bar"] = True
    obj["spec"]["containers"][1]["ports"][0]["hostPortz"] = 1
    obj["spec"]["containers"][1]["livenessProbe"]["httpGet"]["schema"] = "HTTP"
    obj["status"] = {"phase": "Pending", "phaze": "x"}
    expected = copy.deepcopy(pod(2))
    expected["status"] = {"phase": "Pending"}

    found = fv.prune_unknown_fields("v1", "Pod", obj)

    assert found == [
        "metadata.labelz",
        "spec.containers[0].bar",
        "spec.containers[1].ports[0].hostPortz",
        "spec.containers[1].livenessProbe.httpGet.schema",
        "spec.foo",
        "status.phaze",
    ]
    assert obj == expected


def test_clean_objects_are_left_untouched() -> None:
    obj = pod(3)
    before = copy.deepcopy(obj)
    assert fv.prune_unknown_fields("v1", "Pod", obj) == []
    assert obj == before


def test_field_names_are_case_sensitive() -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"Name": "x"}, "Spec": {}}
    assert fv.prune_unknown_fields("v1", "Pod", obj) == ["metadata.Name", "Spec"]
    assert obj == {"apiVersion": "v1", "kind": "Pod", "metadata": {}}


def test_pruning_a_pod_with_ten_containers_is_fast() -> None:
    template = pod(10)
    template["spec"]["containers"][9]["bar"] = 1
    fv.prune_unknown_fields("v1", "Pod", copy.deepcopy(template))  # compile outside the timing
    objs = [copy.deepcopy(template) for _ in range(50)]
    timings = []
    for obj in objs:
        start = time.perf_counter()
        found = fv.prune_unknown_fields("v1", "Pod", obj)
        timings.append(time.perf_counter() - start)
        assert found == ["spec.containers[9].bar"]
    assert sorted(timings)[len(timings) // 2] < 0.001


def test_deployment_template_paths() -> None:
    obj = json.loads(INVALID_DEPLOYMENT_JSON)
    found = fv.prune_unknown_fields("apps/v1", "Deployment", obj)
    assert found == [
        "metadata.unknownMeta",
        "spec.unknown1",
        "spec.unknownDupe",
        "spec.template.spec.containers[0].unknownNested",
    ]
    assert obj["spec"]["template"]["spec"]["containers"][0] == {
        "name": "nginx", "image": "nginx:latest", "imagePullPolicy": "Never",
    }
    assert obj["spec"]["paused"] is False


def test_configmap_data_and_annotations_take_any_key() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "cm",
            "annotations": {"example.com/some.key": "v", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "labels": {"app.kubernetes.io/name": "x"},
        },
        "data": {"any.key-1": "x", "spec": "y", "metadata": "z"},
        "binaryData": {"blob.bin": "AAEC"},
        "immutable": True,
        "datas": {"oops": "1"},
    }
    assert fv.prune_unknown_fields("v1", "ConfigMap", obj) == ["datas"]
    assert obj["data"] == {"any.key-1": "x", "spec": "y", "metadata": "z"}
    assert obj["metadata"]["annotations"]["example.com/some.key"] == "v"


def test_service_int_or_string_ports() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc"},
        "spec": {
            "selector": {"app": "web"},
            "ports": [
                {"port": 80, "targetPort": "http", "protocol": "TCP"},
                {"port": 443, "targetPort": 8443, "nodePortz": 1},
            ],
            "type": "ClusterIP",
        },
    }
    assert fv.prune_unknown_fields("v1", "Service", obj) == ["spec.ports[1].nodePortz"]
    assert obj["spec"]["ports"] == [
        {"port": 80, "targetPort": "http", "protocol": "TCP"},
        {"port": 443, "targetPort": 8443},
    ]


def test_raw_extensions_and_managed_fields_are_kept_whole() -> None:
    revision = {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": "rev",
            "managedFields": [{
                "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}},
            }],
        },
        "data": {"spec": {"template": {"anything": ["goes", {"here": 1}]}}},
        "revision": 3,
    }
    before = copy.deepcopy(revision)
    assert fv.prune_unknown_fields("apps/v1", "ControllerRevision", revision) == []
    assert revision == before


def test_crd_schemas_preserve_json_and_walk_property_maps() -> None:
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "subresources": {"status": {"extra": 1}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {
                        "spec": {
                            "type": "object",
                            "default": {"free": {"form": True}},
                            "bogus": 1,
                            "items": {"type": "string", "whatever": 2},
                        },
                    },
                }},
            }],
        },
    }
    found = fv.prune_unknown_fields("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    assert found == [
        "spec.versions[0].subresources.status.extra",
        "spec.versions[0].schema.openAPIV3Schema.properties.spec.bogus",
    ]
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec_schema["default"] == {"free": {"form": True}}
    assert spec_schema["items"] == {"type": "string", "whatever": 2}
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_custom_resources_and_unknown_kinds_are_left_alone() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"x": 1}}
    before = copy.deepcopy(obj)
    assert fv.prune_unknown_fields("example.com/v1", "Widget", obj) == []
    assert obj == before
    assert fv.prune_unknown_fields("v2", "Pod", {"spec": {"foo": 1}}) == []


def test_wrong_shapes_are_left_to_the_decoder() -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": None, "spec": {"containers": {"name": "x"}}}
    assert fv.prune_unknown_fields("v1", "Pod", obj) == []
    assert obj["spec"]["containers"] == {"name": "x"}


def test_known_kinds() -> None:
    kinds = fv.known_kinds()
    assert {("v1", "Pod"), ("apps/v1", "Deployment"), ("v1", "ConfigMap"), ("batch/v1", "Job")} <= kinds
    assert ("example.com/v1", "Widget") not in kinds


# -- duplicate fields ----------------------------------------------------------------------------


def test_no_duplicates_takes_the_fast_path() -> None:
    found = fv.duplicate_fields(orjson.dumps(pod(3)), False)
    assert found == [] and found.ordered is None and not found.yaml


def test_upstream_json_body_strict_error_and_warnings() -> None:
    obj = json.loads(INVALID_DEPLOYMENT_JSON)
    unknown = fv.prune_unknown_fields("apps/v1", "Deployment", obj)
    dups = fv.duplicate_fields(INVALID_DEPLOYMENT_JSON, False)
    assert dups == ["metadata.name", "spec.paused", "spec.template.spec.containers[0].imagePullPolicy"]

    err = fv.field_validation_error(unknown, dups, kind="Deployment", api_version="apps/v1")
    assert (err.code, err.reason) == (400, "BadRequest")
    assert err.message == (
        'Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: '
        + ", ".join(UPSTREAM_JSON_FINDINGS)
    )
    assert err.to_status()["code"] == 400
    assert fv.warnings(unknown, dups) == [header(text) for text in UPSTREAM_JSON_FINDINGS]


def test_upstream_yaml_body_strict_error_and_warnings() -> None:
    obj = yaml.safe_load(INVALID_DEPLOYMENT_YAML)
    unknown = fv.prune_unknown_fields("apps/v1", "Deployment", obj)
    dups = fv.duplicate_fields(INVALID_DEPLOYMENT_YAML, True)
    lines = [
        'line 5: key "name" already set in map',
        'line 12: key "unknownDupe" already set in map',
        'line 14: key "paused" already set in map',
        'line 28: key "imagePullPolicy" already set in map',
    ]
    assert dups == lines
    sorted_unknown = [
        'unknown field "metadata.unknownMeta"',
        'unknown field "spec.template.spec.containers[0].unknownNested"',
        'unknown field "spec.unknown1"',
        'unknown field "spec.unknownDupe"',
    ]
    assert fv.field_validation_error(unknown, dups).message == (
        "strict decoding error: yaml: unmarshal errors:\n  " + "\n  ".join(lines) + ", " + ", ".join(sorted_unknown)
    )
    assert fv.warnings(unknown, dups) == [header(t) for t in lines + sorted_unknown]


def test_yaml_without_duplicates_still_sorts_unknown_fields() -> None:
    body = b"apiVersion: v1\nkind: Pod\nmetadata:\n  zeta: 1\n  name: x\nspec:\n  b: 1\n  a: 2\n"
    obj = yaml.safe_load(body)
    unknown = fv.prune_unknown_fields("v1", "Pod", obj)
    dups = fv.duplicate_fields(body, True)
    assert unknown == ["metadata.zeta", "spec.b", "spec.a"]
    assert dups == [] and dups.yaml
    assert fv.warnings(unknown, dups) == [
        header('unknown field "metadata.zeta"'), header('unknown field "spec.a"'), header('unknown field "spec.b"'),
    ]


def test_yaml_keys_compare_as_values() -> None:
    body = b"metadata:\n  labels:\n    true: a\n    yes: b\n    1: c\n    '1': d\n    0x1: e\n"
    assert fv.duplicate_fields(body, True) == [
        "line 4: key true already set in map",
        "line 7: key 1 already set in map",
    ]


def test_yaml_nested_repeats_come_first() -> None:
    body = b"spec:\n  a: 1\n  spec2:\n    x: 1\n    x: 2\nspec:\n  c: 1\n  c: 2\n"
    assert fv.duplicate_fields(body, True) == [
        "line 5: key \"x\" already set in map",
        "line 8: key \"c\" already set in map",
        "line 7: key \"spec\" already set in map",
    ]


def test_repeats_in_maps_lists_and_thrice() -> None:
    body = (
        b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"app":"a","app":"b","app":"c"}},'
        b'"spec":{"containers":[{"name":"a"},{"name":"b","name":"c"}]}}'
    )
    dups = fv.duplicate_fields(body, False)
    assert dups == ["metadata.labels.app", "spec.containers[1].name"]
    assert dups.ordered == ['duplicate field "metadata.labels.app"', 'duplicate field "spec.containers[1].name"']


def test_repeats_inside_unknown_or_opaque_fields_are_not_reported_for_built_in_kinds() -> None:
    body = (
        b'{"apiVersion":"apps/v1","kind":"ControllerRevision","metadata":{"name":"r"},'
        b'"data":{"x":1,"x":2},"bogus":{"y":1,"y":2},"bogus":3,"revision":1}'
    )
    dups = fv.duplicate_fields(body, False)
    assert dups == []
    assert dups.ordered == ['unknown field "bogus"']


def test_custom_resource_repeats_are_reported_everywhere() -> None:
    body = b'{"apiVersion":"example.com/v1","kind":"Widget","spec":{"list":[{"k":1,"k":2}],"m":{"a":1,"a":1}}}'
    dups = fv.duplicate_fields(body, False)
    assert dups == ["spec.list[0].k", "spec.m.a"]
    assert dups.ordered is None
    assert fv.field_validation_error(["spec.zzz"], dups).message == (
        'strict decoding error: unknown field "spec.zzz", duplicate field "spec.list[0].k", '
        'duplicate field "spec.m.a"'
    )


def test_explicit_kind_overrides_the_body() -> None:
    body = b'{"metadata":{"name":"a","name":"b"},"spec":{"foo":1}}'
    assert fv.duplicate_fields(body, False).ordered is None
    dups = fv.duplicate_fields(body, False, api_version="v1", kind="Pod")
    assert dups.ordered == ['duplicate field "metadata.name"', 'unknown field "spec.foo"']


def test_malformed_bodies_report_nothing() -> None:
    assert fv.duplicate_fields(b'{"a":', False) == []
    assert fv.duplicate_fields(b"a: [", True) == []


# -- reporting -----------------------------------------------------------------------------------


def test_paths_are_quoted_like_go() -> None:
    body = '{"apiVersion":"v1","kind":"ConfigMap","data":{"a\\"b":"1","a\\"b":"2","é\\n":"1","é\\n":"2"}}'
    dups = fv.duplicate_fields(body.encode(), False)
    assert dups.ordered == ['duplicate field "data.a\\"b"', 'duplicate field "data.é\\n"']
    values = fv.warnings([], dups)
    assert values[0] == '299 - "duplicate field \\"data.a\\\\\\"b\\""'
    assert values[1].encode("latin-1").decode("utf-8") == '299 - "duplicate field \\"data.é\\\\n\\""'


def test_error_without_kind_and_plain_lists() -> None:
    err = fv.field_validation_error(["spec.foo", "spec.foo"], ["metadata.name"])
    assert err.message == 'strict decoding error: unknown field "spec.foo", duplicate field "metadata.name"'
    assert err.to_status()["reason"] == "BadRequest"


def test_at_most_a_hundred_findings() -> None:
    unknown = [f"spec.f{i}" for i in range(150)]
    assert len(fv.warnings(unknown, [])) == 100
    assert fv.field_validation_error(unknown, []).message.count("unknown field") == 100


def test_warnings_are_truncated_past_the_header_budget() -> None:
    unknown = [f"spec.{'x' * 300}{i}" for i in range(20)]
    values = fv.warnings(unknown, [])
    assert len(values) == 16  # 16 cut to 256 runes fill the 4096-rune budget; the rest are dropped
    assert all(v == header(f'unknown field "spec.{"x" * 300}{i}"'[:256]) for i, v in enumerate(values))
    short = fv.warnings(["spec.a", "spec.b"], [])
    assert short == [header('unknown field "spec.a"'), header('unknown field "spec.b"')]


def test_directive() -> None:
    assert fv.directive(None) == "Warn"
    assert fv.directive("") == "Warn"
    assert fv.directive("Strict") == "Strict"
    assert fv.directive("Ignore", "UpdateOptions") == "Ignore"
    with pytest.raises(fv.StatusError) as caught:
        fv.directive("strict", "PatchOptions")
    assert caught.value.code == 422
    assert caught.value.message == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "strict": '
        'supported values: "", "Ignore", "Strict", "Warn"'
    )
