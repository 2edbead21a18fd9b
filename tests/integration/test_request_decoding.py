"""Request bodies are decoded as upstream decodes them into its Go types, whatever the verb or patch type:
a null in an optional field is not stored, a null element is a zero value that validation names (422),
and bodies, options and subresource objects of the wrong shape get upstream's 400, never a 500."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@pytest.fixture(scope="module")
def http(apiserver: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=apiserver, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def ns(http: httpx.Client) -> str:
    """This module's namespace, with the objects the subresource requests aim at."""
    name = f"decoding-{os.getpid() % 10000}"
    assert http.post("/api/v1/namespaces", json={"metadata": {"name": name}}).status_code == 201
    base = f"/api/v1/namespaces/{name}"
    assert http.post(f"{base}/configmaps", json={"metadata": {"name": "c"}}).status_code == 201
    assert http.post(f"{base}/serviceaccounts", json={"metadata": {"name": "sa"}}).status_code == 201
    assert http.post(f"{base}/pods", json=_pod()).status_code == 201
    return name


def nulls_in(value: Any, path: str = "") -> list[str]:
    """The paths of every null in `value`."""
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in nulls_in(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in nulls_in(v, f"{path}[{i}]")]
    return []


def deployment(name: str, **container: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx:1.25", **container}]}}}}


def with_nulls(name: str) -> dict[str, Any]:
    """A Deployment as kubectl's Go types write one, and then some: null in optional fields everywhere."""
    obj = deployment(name, workingDir=None, resources=None, args=None, ports=[{"containerPort": 80, "name": None}])
    obj["metadata"].update({"annotations": None, "labels": {"tier": None}})
    obj["spec"].update({"strategy": None, "minReadySeconds": None, "paused": None})
    obj["spec"]["template"]["metadata"]["creationTimestamp"] = None
    obj["spec"]["template"]["spec"].update({"nodeSelector": None, "securityContext": None, "volumes": None})
    return obj


def _write(http: httpx.Client, ns: str, name: str, how: str) -> httpx.Response:
    collection = f"/apis/apps/v1/namespaces/{ns}/deployments"
    item = f"{collection}/{name}"
    if how == "create":
        return http.post(collection, json=with_nulls(name))
    if how == "apply":
        return http.patch(item, content=json.dumps(with_nulls(name)), headers={"Content-Type": APPLY},
                          params={"fieldManager": "nulls-test"})
    assert http.post(collection, json=deployment(name)).status_code == 201
    if how == "update":
        body = with_nulls(name)
        body["metadata"]["resourceVersion"] = http.get(item).json()["metadata"]["resourceVersion"]
        return http.put(item, json=body)
    if how == "json":
        ops = [{"op": "replace", "path": "/spec/template", "value": with_nulls(name)["spec"]["template"]},
               {"op": "add", "path": "/spec/strategy", "value": None}]
        return http.patch(item, content=json.dumps(ops), headers={"Content-Type": JSON_PATCH})
    if how == "merge":
        # null means delete in a merge patch, but a list is replaced whole, nulls and all
        patch = {"spec": {"template": {"spec": {"containers": with_nulls(name)["spec"]["template"]["spec"]
                                                ["containers"]}}}}
        return http.patch(item, content=json.dumps(patch), headers={"Content-Type": MERGE})
    patch = {"spec": {"template": {"metadata": {"creationTimestamp": None},
                                   "spec": {"containers": [{"name": "c", "args": ["a", None], "workingDir": None,
                                                            "ports": [{"containerPort": 80, "name": None}]}]}}}}
    return http.patch(item, content=json.dumps(patch), headers={"Content-Type": STRATEGIC})


@pytest.mark.parametrize("how", ["create", "update", "json", "merge", "strategic", "apply"])
def test_nulls_in_optional_fields_are_not_stored(http: httpx.Client, ns: str, how: str) -> None:
    name = f"nulls-{how}"
    r = _write(http, ns, name, how)
    assert r.status_code in (200, 201), r.text
    stored = http.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}").json()
    assert nulls_in(stored) == [], stored
    assert nulls_in(r.json()) == []
    template = stored["spec"]["template"]
    assert "creationTimestamp" not in template["metadata"]
    container = template["spec"]["containers"][0]
    assert "workingDir" not in container and container["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    if how == "strategic":
        assert container["args"] == ["a", ""]  # a null string element is Go's zero value, ""
    if how in ("create", "update", "apply"):
        assert stored["metadata"]["labels"] == {"tier": ""}  # so is a null string in a map
        assert "annotations" not in stored["metadata"]


def _pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def _pod_with_container(**fields: Any) -> dict[str, Any]:
    return _pod(containers=[{"name": "c", "image": "busybox", **fields}])


NULL_ELEMENTS = [
    ("pods", _pod(containers=[None]), "spec.containers[0].name", "FieldValueRequired"),
    ("pods", {"metadata": {"name": "p"}, "spec": None}, "spec.containers", "FieldValueRequired"),
    ("pods", _pod(tolerations=[None]), "spec.tolerations[0].operator", "FieldValueInvalid"),
    ("pods", _pod(volumes=[None]), "spec.volumes[0].name", "FieldValueRequired"),
    ("pods", _pod_with_container(ports=[None]), "spec.containers[0].ports[0].containerPort", "FieldValueRequired"),
    ("pods", _pod_with_container(env=[None]), "spec.containers[0].env[0].name", "FieldValueRequired"),
    ("configmaps", {"metadata": {"name": "c", "finalizers": [None]}}, "metadata.finalizers", "FieldValueInvalid"),
    ("configmaps", {"metadata": {"name": "c", "ownerReferences": [None]}}, "metadata.ownerReferences.uid",
     "FieldValueInvalid"),
    ("services", {"metadata": {"name": "s"}, "spec": {"ports": [None]}}, "spec.ports[0].port", "FieldValueInvalid"),
    ("services", {"metadata": {"name": "s"}, "spec": None}, "spec.ports", "FieldValueRequired"),
]


@pytest.mark.parametrize(("plural", "body", "field", "reason"), NULL_ELEMENTS,
                         ids=[f"{p}:{f}" for p, _, f, _ in NULL_ELEMENTS])
def test_null_elements_are_zero_values_that_validation_names(
    http: httpx.Client, ns: str, plural: str, body: dict[str, Any], field: str, reason: str
) -> None:
    r = http.post(f"/api/v1/namespaces/{ns}/{plural}", json=body)
    assert r.status_code == 422, r.text
    causes = r.json()["details"]["causes"]
    assert {"field": field, "reason": reason} in [{"field": c["field"], "reason": c["reason"]} for c in causes], causes


@pytest.mark.parametrize("content_type", [MERGE, STRATEGIC, JSON_PATCH, APPLY])
def test_null_elements_in_patches_of_a_template_are_refused_by_name(
    http: httpx.Client, ns: str, content_type: str
) -> None:
    collection = f"/apis/apps/v1/namespaces/{ns}/deployments"
    name = f"patched-{content_type.split('/')[1].split('-')[0]}"
    assert http.post(collection, json=deployment(name)).status_code == 201
    before = http.get(f"{collection}/{name}").json()
    if content_type == JSON_PATCH:
        body: Any = [{"op": "add", "path": "/spec/template/spec/volumes", "value": [None]}]
    elif content_type == APPLY:
        body = deployment(name)
        body["spec"]["template"]["spec"]["volumes"] = [None]
    else:
        body = {"spec": {"template": {"spec": {"volumes": [None]}}}}
    r = http.patch(f"{collection}/{name}", content=json.dumps(body), headers={"Content-Type": content_type},
                   params={"fieldManager": "nulls-test"} if content_type == APPLY else None)
    assert r.status_code == 422, r.text
    # apply is typed by the structured merge first, which refuses the null element itself (upstream's words)
    assert (".spec.template.spec.volumes: element 0: associative list with keys may not have a null element"
            if content_type == APPLY else "spec.template.spec.volumes[0].name: Required value") in r.text
    assert http.get(f"{collection}/{name}").json() == before


def test_custom_resource_nulls_follow_the_schema(http: httpx.Client, ns: str) -> None:
    """apiextensions' rules: a null where the schema is not nullable is dropped, or defaulted when there is a
    default; a nullable one is kept; metadata is decoded as the built-in ObjectMeta."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "gadgets.nulls.pyk8s.io"},
           "spec": {"group": "nulls.pyk8s.io", "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "properties": {"spec": {"type": "object", "properties": {
                            "plain": {"type": "string"},
                            "kept": {"type": "string", "nullable": True},
                            "size": {"type": "integer", "default": 3},
                            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                            "items": {"type": "array", "items": {"type": "string", "default": "x"}},
                        }}}}}}]}}
    r = http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
    assert r.status_code in (201, 409), r.text
    path = f"/apis/nulls.pyk8s.io/v1/namespaces/{ns}/gadgets"
    body = {"apiVersion": "nulls.pyk8s.io/v1", "kind": "Gadget",
            "metadata": {"name": "g", "labels": {"a": None}, "annotations": None},
            "spec": {"plain": None, "kept": None, "size": None, "tags": {"t": None}, "items": [None, "y"]}}
    deadline = time.monotonic() + 15
    while (r := http.post(path, json=body)).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert r.status_code == 201, r.text
    stored = http.get(f"{path}/g").json()
    assert stored["spec"] == {"kept": None, "size": 3, "tags": {}, "items": ["x", "y"]}
    assert stored["metadata"]["labels"] == {"a": ""} and "annotations" not in stored["metadata"]


BAD_INPUT = [
    ("DELETE", "/api/v1/namespaces/{ns}/configmaps/c", {"gracePeriodSeconds": "abc"}, None, 400,
     "json: cannot unmarshal string into Go struct field DeleteOptions.gracePeriodSeconds of type int64"),
    ("DELETE", "/api/v1/namespaces/{ns}/configmaps/c", [1], None, 400, "DeleteOptions must be a JSON object"),
    ("GET", "/api/v1/namespaces/{ns}/configmaps", None, {"limit": "99999999999999999999"}, 400,
     'strconv.ParseInt: parsing "99999999999999999999": value out of range'),
    ("GET", "/api/v1/namespaces/{ns}/configmaps", None, {"limit": "1_0"}, 400,
     'strconv.ParseInt: parsing "1_0": invalid syntax'),
    ("DELETE", "/api/v1/namespaces/{ns}/configmaps/c", None, {"gracePeriodSeconds": "9223372036854775808"}, 400,
     'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
    ("POST", "/api/v1/namespaces/{ns}/pods/p/binding", {"metadata": {"name": "p"}, "target": "x"}, None, 400,
     'Binding in version "v1" cannot be handled as a Binding: json: cannot unmarshal string into Go struct field '
     "Binding.target of type v1.ObjectReference"),
    ("POST", "/api/v1/namespaces/{ns}/bindings", {"metadata": {"name": "p"}, "target": "x"}, None, 400,
     "cannot unmarshal string into Go struct field Binding.target of type v1.ObjectReference"),
    ("POST", "/api/v1/namespaces/{ns}/serviceaccounts/sa/token", {"spec": {"expirationSeconds": 2**64}}, None, 400,
     'TokenRequest in version "v1" cannot be handled as a TokenRequest: json: cannot unmarshal number'),
    ("POST", "/api/v1/namespaces/{ns}/serviceaccounts/sa/token", {"spec": {"expirationSeconds": 2**33}}, None, 422,
     "spec.expirationSeconds: Invalid value: 8589934592: may not specify a duration larger than 2^32 seconds"),
    ("POST", "/api/v1/namespaces/{ns}/pods/p/eviction", {"deleteOptions": {"gracePeriodSeconds": "1"}}, None, 400,
     "cannot unmarshal string into Go struct field DeleteOptions.deleteOptions.gracePeriodSeconds of type int64"),
    ("PATCH", "/api/v1/namespaces/{ns}/pods/applied", "apiVersion: v1\nkind: Pod\nmetadata: {name: applied}\n"
     "spec: {containers: 5}\n", {"fieldManager": "nulls-test"}, 422,
     "json: cannot unmarshal number into Go struct field PodSpec.spec.containers of type []v1.Container"),
    ("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {"spec": {"token": 5}}, None, 400,
     'TokenReview in version "v1" cannot be handled as a TokenReview: json: cannot unmarshal number into Go struct '
     "field TokenReviewSpec.spec.token of type string"),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
     {"spec": {"resourceAttributes": {"verb": ["get"]}}}, None, 400,
     "cannot unmarshal array into Go struct field ResourceAttributes.spec.resourceAttributes.verb of type string"),
    ("PATCH", "/api/v1/namespaces/{ns}/configmaps/nameless", "apiVersion: v1\nkind: ConfigMap\nmetadata: null\n",
     {"fieldManager": "nulls-test"}, 400, "the name of the object () does not match the name on the URL (nameless)"),
]


@pytest.mark.parametrize(("method", "path", "body", "params", "code", "message"), BAD_INPUT,
                         ids=[f"{m} {p.rsplit('/', 1)[-1]} {c}" for m, p, _, _, c, _ in BAD_INPUT])
def test_bad_input_gets_upstreams_status(
    http: httpx.Client, ns: str, method: str, path: str, body: Any, params: dict[str, str] | None,
    code: int, message: str,
) -> None:
    content = body.encode() if isinstance(body, str) else None if body is None else json.dumps(body).encode()
    content_type = APPLY if method == "PATCH" else "application/json"
    r = http.request(method, path.format(ns=ns), content=content, params=params,
                     headers={"Content-Type": content_type})
    base = f"/api/v1/namespaces/{ns}"
    assert r.status_code == code, r.text
    status = r.json()
    assert status["kind"] == "Status" and status["code"] == code
    assert message in status["message"], status
    assert http.get(f"{base}/configmaps/c").status_code == 200
    assert "nodeName" not in http.get(f"{base}/pods/p").json()["spec"]


def test_an_object_past_etcds_request_limit_is_413(http: httpx.Client, ns: str) -> None:
    """Under the 1 MiB ConfigMap limit and the 3 MiB body limit, but past etcd's 1.5 MiB once managedFields
    name every key: etcd's refusal is a 413 with its text, and nothing is stored."""
    data = {f"{i:05d}{'k' * 240}": "v" for i in range(4000)}
    r = http.post(f"/api/v1/namespaces/{ns}/configmaps", json={"metadata": {"name": "big"}, "data": data})
    assert r.status_code == 413, r.text[:300]
    assert r.json()["reason"] == "RequestEntityTooLarge"
    assert r.json()["message"] == "etcdserver: request is too large"
    assert http.get(f"/api/v1/namespaces/{ns}/configmaps/big").status_code == 404


def test_a_null_scale_is_gos_zero(http: httpx.Client, ns: str) -> None:
    """ScaleSpec.replicas is a plain int32: a merge patch that nulls it scales to 0, as upstream's does."""
    collection = f"/apis/apps/v1/namespaces/{ns}/deployments"
    assert http.post(collection, json=deployment("scaled")).status_code == 201
    r = http.patch(f"{collection}/scaled/scale", content=json.dumps({"spec": {"replicas": None}}),
                   headers={"Content-Type": MERGE})
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["replicas"] == 0
    assert http.get(f"{collection}/scaled").json()["spec"]["replicas"] == 0
