"""CRD names as upstream validates them (ValidateCustomResourceDefinitionNames), and a CRD whose kind has
dashes, as the conformance suite's generated CRDs do, served end to end: REST, kubectl get and explain."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.conftest import Kubectl

GROUP = "crd-publish-openapi-test-foo.example.com"
KIND = "e2e-test-crd-publish-openapi-1364-crd"
PLURAL = "e2e-test-crd-publish-openapi-1364-crds"
SCHEMA = {"type": "object", "description": "Foo CRD for Testing", "properties": {
    "spec": {"type": "object", "description": "Specification of Foo", "properties": {
        "bars": {"type": "array", "description": "List of Bars and their specs.",
                 "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}},
    "status": {"type": "object", "description": "Status of Foo"}}}


def _crd(plural: str, names: dict[str, Any], group: str = GROUP, version: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced", "names": {"plural": plural, **names},
                 "versions": [{"name": version, "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": SCHEMA}}]},
    }


def _create(apiserver: str, crd: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{apiserver}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)


@pytest.fixture(scope="module")
def dashed(apiserver: str) -> str:
    r = _create(apiserver, _crd(PLURAL, {"singular": KIND, "kind": KIND, "listKind": f"{KIND}List"}))
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if httpx.get(f"{apiserver}/apis/{GROUP}/v1/{PLURAL}").status_code == 200:
            return PLURAL
        time.sleep(0.1)
    raise AssertionError("the dashed-kind CRD was never served")


def test_dashed_kind_is_served(dashed: str, apiserver: str, kubectl: Kubectl, unique_ns: str) -> None:
    body = {"apiVersion": f"{GROUP}/v1", "kind": KIND, "metadata": {"name": "foo"},
            "spec": {"bars": [{"name": "test-bar"}]}}
    base = f"{apiserver}/apis/{GROUP}/v1/namespaces/{unique_ns}/{PLURAL}"
    r = httpx.post(base, json=body)
    assert r.status_code == 201, r.text
    assert r.json()["kind"] == KIND
    assert httpx.get(f"{base}/foo").json()["spec"]["bars"] == [{"name": "test-bar"}]
    listed = httpx.get(base).json()
    assert listed["kind"] == f"{KIND}List" and [i["metadata"]["name"] for i in listed["items"]] == ["foo"]
    out = kubectl.run("-n", unique_ns, "get", PLURAL).stdout.split()
    assert out[:2] == ["NAME", "AGE"] and out[2] == "foo"
    kubectl.run("-n", unique_ns, "apply", "-f", "-", stdin=json.dumps(dict(body, metadata={"name": "bar"})))
    assert kubectl.json("-n", unique_ns, "get", f"{PLURAL}/bar")["kind"] == KIND


def test_dashed_kind_is_published_in_openapi(dashed: str, kubectl: Kubectl) -> None:
    deadline = time.monotonic() + 20
    while True:
        r = kubectl.run("explain", PLURAL, check=False)
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert r.returncode == 0, r.stderr
    assert f"KIND:       {KIND}" in r.stdout and "Foo CRD for Testing" in r.stdout
    spec = kubectl.run("explain", f"{PLURAL}.spec.bars").stdout
    assert "List of Bars and their specs." in spec


@pytest.mark.parametrize(("plural", "names", "group", "version", "field", "message"), [
    ("foos", {"singular": "foo", "kind": "Foo_Bar"}, "a.example.com", "v1", "spec.names.kind",
     'Invalid value: "Foo_Bar": may have mixed case, but should otherwise match: a DNS-1035 label must consist '
     "of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an "
     "alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
     "'[a-z]([-a-z0-9]*[a-z0-9])?')"),
    ("foos", {"singular": "foo", "kind": "9Foo"}, "a.example.com", "v1", "spec.names.kind",
     'Invalid value: "9Foo": may have mixed case'),
    ("foos", {"singular": "foo", "kind": "Foo", "listKind": "Foo"}, "a.example.com", "v1",
     "spec.names.listKind", 'Invalid value: "Foo": kind and listKind may not be the same'),
    ("1foos", {"singular": "foo", "kind": "Foo"}, "a.example.com", "v1", "spec.names.plural",
     'Invalid value: "1foos": a DNS-1035 label must consist'),
    ("foos", {"singular": "f.oo", "kind": "Foo"}, "a.example.com", "v1", "spec.names.singular",
     'Invalid value: "f.oo": a DNS-1035 label'),
    ("foos", {"singular": "foo", "kind": "Foo", "shortNames": ["ok", "Bad"]}, "a.example.com", "v1",
     "spec.names.shortNames[1]", 'Invalid value: "Bad": a DNS-1035 label'),
    ("foos", {"singular": "foo", "kind": "Foo", "categories": ["all", "9x"]}, "a.example.com", "v1",
     "spec.names.categories[1]", 'Invalid value: "9x": a DNS-1035 label'),
    ("foos", {"singular": "foo", "kind": "Foo"}, "example", "v1", "spec.group",
     'Invalid value: "example": should be a domain with at least one dot'),
    ("foos", {"singular": "foo", "kind": "Foo"}, "Ex.com", "v1", "spec.group",
     'Invalid value: "Ex.com": a lowercase RFC 1123 subdomain'),
    ("foos", {"singular": "foo", "kind": "Foo"}, "a.example.com", "1v", "spec.versions[0].name",
     'Invalid value: "1v": a DNS-1035 label'),
])
def test_name_rules(apiserver: str, plural: str, names: dict[str, Any], group: str, version: str, field: str,
                    message: str) -> None:
    r = _create(apiserver, _crd(plural, names, group, version))
    assert r.status_code == 422, r.text
    causes = {c["field"]: c["message"] for c in r.json()["details"]["causes"]}
    assert field in causes, causes
    assert causes[field].startswith(message), causes[field]


def test_crd_name_must_be_plural_dot_group(apiserver: str) -> None:
    crd = _crd("foos", {"singular": "foo", "kind": "Foo"}, "b.example.com")
    crd["metadata"]["name"] = "bars.b.example.com"
    r = _create(apiserver, crd)
    assert r.status_code == 422
    assert {"field": "metadata.name", "reason": "FieldValueInvalid",
            "message": 'Invalid value: "bars.b.example.com": must be spec.names.plural+"."+spec.group'} \
        in r.json()["details"]["causes"]


def test_accepted_names_are_validated_on_status_writes(dashed: str, apiserver: str) -> None:
    url = f"{apiserver}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}/status"
    r = httpx.patch(url, json={"status": {"acceptedNames": {"plural": PLURAL, "kind": "Bad_Kind"}}},
                    headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 422, r.text
    assert r.json()["details"]["causes"][0]["field"] == "status.acceptedNames.kind"
