"""Server-side field validation of custom resources (test/e2e/apimachinery/field_validation.go): unknown
fields at the root, in metadata and in embedded resources, and duplicate fields, reported per the
`fieldValidation` directive on create, update, patch and server-side apply."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

GROUP = "fieldval.pyk8s.io"
PORTS = {"type": "array", "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
         "x-kubernetes-list-type": "map", "items": {"type": "object", "required": ["containerPort", "protocol"],
                                                    "properties": {
                                                        "containerPort": {"type": "integer", "format": "int32"},
                                                        "name": {"type": "string"},
                                                        "protocol": {"type": "string"}}}}
SPEC = {"type": "object", "properties": {"foo": {"type": "string"}, "cronSpec": {"type": "string"},
                                         "ports": PORTS}}
EMBEDDED = {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
    "template": {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
        "spec": {"type": "object"}}},
    "foo": {"type": "string"}, "cronSpec": {"type": "string"}, "ports": PORTS}}
SCHEMAS = {
    "strictthings": {"type": "object", "properties": {"spec": SPEC}},
    "openthings": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    "embeddedthings": {"type": "object", "properties": {"spec": EMBEDDED}},
}
APPLY = {"content-type": "application/apply-patch+yaml"}
STRICT = {"fieldManager": "field_validation_mgr", "fieldValidation": "Strict"}


@pytest.fixture(scope="module")
def crds(apiserver: str) -> dict[str, str]:
    paths = {}
    for plural, schema in SCHEMAS.items():
        kind = plural[:-1].capitalize()
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": f"{plural}.{GROUP}"},
               "spec": {"group": GROUP, "scope": "Cluster",
                        "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
                        "versions": [{"name": "v1", "served": True, "storage": True,
                                      "schema": {"openAPIV3Schema": schema}}]}}
        r = httpx.post(f"{apiserver}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
        assert r.status_code == 201, r.text
        paths[plural] = f"{apiserver}/apis/{GROUP}/v1/{plural}"
    deadline = time.monotonic() + 20
    while any(httpx.get(p).status_code != 200 for p in paths.values()):
        assert time.monotonic() < deadline, "CRDs never served"
        time.sleep(0.1)
    return paths


def _yaml(kind: str, name: str, body: str) -> str:
    return f"\napiVersion: {GROUP}/v1\nkind: {kind}\nmetadata:\n  name: {name}\n  finalizers:\n  - test-finalizer\n" \
        + body


def _cleanup(path: str, name: str) -> None:
    httpx.patch(f"{path}/{name}", json={"metadata": {"finalizers": None}},
                headers={"content-type": "application/merge-patch+json"})
    httpx.delete(f"{path}/{name}")


PORTS_YAML = "  cronSpec: \"* * * * */5\"\n  ports:\n  - name: x\n    containerPort: 80\n    protocol: TCP\n"


def test_apply_valid_cr_strict(crds: dict[str, str]) -> None:
    body = _yaml("Strictthing", "valid", "spec:\n  foo: foo1\n" + PORTS_YAML)
    r = httpx.patch(f"{crds['strictthings']}/valid", content=body, headers=APPLY, params=STRICT)
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["ports"] == [{"name": "x", "containerPort": 80, "protocol": "TCP"}]
    _cleanup(crds["strictthings"], "valid")


def test_apply_unknown_fields_without_schema(crds: dict[str, str]) -> None:
    body = _yaml("Openthing", "open", "spec:\n  unknown: uk1\n" + PORTS_YAML)
    r = httpx.patch(f"{crds['openthings']}/open", content=body, headers=APPLY, params=STRICT)
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["unknown"] == "uk1"
    _cleanup(crds["openthings"], "open")


def test_apply_unknown_root_field_strict(crds: dict[str, str]) -> None:
    body = _yaml("Strictthing", "extra", "unknownField: unknown\nspec:\n  foo: foo1\n" + PORTS_YAML)
    r = httpx.patch(f"{crds['strictthings']}/extra", content=body, headers=APPLY, params=STRICT)
    assert r.status_code >= 400
    assert ".unknownField: field not declared in schema" in r.text
    assert httpx.get(f"{crds['strictthings']}/extra").status_code == 404


def test_apply_unknown_metadata_root_and_embedded(crds: dict[str, str]) -> None:
    body = _yaml("Embeddedthing", "meta", "spec:\n  template:\n    apiversion: foo/v1\n    kind: Sub\n"
                 "    metadata:\n        unknownSubMeta: unknown\n        name: subobject\n        namespace: x\n"
                 "  foo: foo1\n" + PORTS_YAML).replace("  name: meta\n", "  name: meta\n  unknownMeta: unknown\n")
    r = httpx.patch(f"{crds['embeddedthings']}/meta", content=body, headers=APPLY, params=STRICT)
    assert r.status_code >= 400, r.text
    assert ".metadata.unknownMeta: field not declared in schema" in r.text \
        or ".spec.template.metadata.unknownSubMeta: field not declared in schema" in r.text


def test_apply_duplicate_field_preserving_unknown(crds: dict[str, str]) -> None:
    body = _yaml("Embeddedthing", "dup", "spec:\n  unknown: uk1\n  foo: foo1\n  foo: foo2\n" + PORTS_YAML)
    r = httpx.patch(f"{crds['embeddedthings']}/dup", content=body, headers=APPLY, params=STRICT)
    assert r.status_code == 400, r.text
    assert 'line 11: key \\"foo\\" already set in map' in r.text
    assert httpx.get(f"{crds['embeddedthings']}/dup").status_code == 404


def _obj(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Embeddedthing", "metadata": {"name": name}, **extra}


def test_create_unknown_metadata_fields_per_directive(crds: dict[str, str]) -> None:
    path = crds["embeddedthings"]
    body = _obj("m1", spec={"template": {"apiVersion": "v1", "kind": "Sub",
                                         "metadata": {"name": "s", "bogus": 1}}})
    body["metadata"]["unknownMeta"] = "x"
    r = httpx.post(path, json=body, params={"fieldValidation": "Strict"})
    assert r.status_code == 400, r.text
    assert 'strict decoding error: unknown field "metadata.unknownMeta", unknown field ' \
           '"spec.template.metadata.bogus"' in r.json()["message"]
    r = httpx.post(path, json=body, params={"fieldValidation": "Warn"})
    assert r.status_code == 201, r.text
    assert r.headers["warning"] == ('299 - "unknown field \\"metadata.unknownMeta\\"", '
                                    '299 - "unknown field \\"spec.template.metadata.bogus\\""')
    assert "unknownMeta" not in r.json()["metadata"]
    assert r.json()["spec"]["template"]["metadata"] == {"name": "s"}
    body["metadata"]["name"] = "m2"
    r = httpx.post(path, json=body, params={"fieldValidation": "Ignore"})
    assert r.status_code == 201 and "warning" not in r.headers
    assert "unknownMeta" not in r.json()["metadata"]


def test_patch_unknown_and_duplicate_fields_per_directive(crds: dict[str, str]) -> None:
    path = crds["strictthings"]
    obj = {"apiVersion": f"{GROUP}/v1", "kind": "Strictthing", "metadata": {"name": "p"}, "spec": {"foo": "a"}}
    assert httpx.post(path, json=obj).status_code == 201
    merge = {"content-type": "application/merge-patch+json"}
    r = httpx.patch(f"{path}/p", content=b'{"spec":{"foo":"b","bar":1}}', headers=merge,
                    params={"fieldValidation": "Strict"})
    assert r.status_code == 422, r.text
    status = r.json()
    assert status["message"].startswith(' "" is invalid: patch: Invalid value: "{')
    assert status["message"].endswith('}": strict decoding error: unknown field "spec.bar"')
    assert status["details"]["causes"][0]["field"] == "patch"
    assert httpx.get(f"{path}/p").json()["spec"] == {"foo": "a"}
    r = httpx.patch(f"{path}/p", content=b'{"spec":{"foo":"b","foo":"c"}}', headers=merge,
                    params={"fieldValidation": "Strict"})
    assert r.status_code == 422, r.text
    assert r.json()["message"].endswith('strict decoding error: duplicate field "spec.foo"')
    r = httpx.patch(f"{path}/p", content=b'{"spec":{"foo":"b","bar":1}}', headers=merge,
                    params={"fieldValidation": "Warn"})
    assert r.status_code == 200, r.text
    assert r.headers["warning"] == '299 - "unknown field \\"spec.bar\\""'
    assert r.json()["spec"] == {"foo": "b"}
    r = httpx.patch(f"{path}/p", content=json.dumps([{"op": "add", "path": "/spec/baz", "value": 2}]),
                    headers={"content-type": "application/json-patch+json"}, params={"fieldValidation": "Ignore"})
    assert r.status_code == 200 and "warning" not in r.headers
    assert r.json()["spec"] == {"foo": "b"}


def test_status_patch_reports_unknown_fields(apiserver: str, unique_ns: str) -> None:
    base = f"{apiserver}/api/v1/namespaces/{unique_ns}/services"
    assert httpx.post(base, json={"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}).status_code == 201
    merge = {"content-type": "application/merge-patch+json"}
    r = httpx.patch(f"{base}/s/status", content=b'{"status":{"bogus":1}}', headers=merge,
                    params={"fieldValidation": "Strict"})
    assert r.status_code == 422 and r.json()["message"].endswith('strict decoding error: unknown field "status.bogus"')
    r = httpx.patch(f"{base}/s/status", content=b'{"status":{"bogus":1}}', headers=merge)
    assert r.status_code == 200 and r.headers["warning"] == '299 - "unknown field \\"status.bogus\\""'
    assert "bogus" not in httpx.get(f"{base}/s").json()["status"]
