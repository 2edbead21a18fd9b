"""CustomResourceDefinitions end to end with real kubectl: served, validated, printed, scaled, deleted."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.conftest import Kubectl

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.pyk8s.io"},
    "spec": {
        "group": "test.pyk8s.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wdg"],
                  "categories": ["all"]},
        "versions": [
            {
                "name": "v1", "served": True, "storage": True,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size",
                                                         "statusReplicasPath": ".status.size"}},
                "additionalPrinterColumns": [
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["color"], "properties": {
                            "color": {"type": "string", "enum": ["red", "blue"]},
                            "size": {"type": "integer", "minimum": 0, "maximum": 100, "default": 1},
                            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        }},
                        "status": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    },
                }},
            },
            {"name": "v1beta1", "served": True, "storage": False,
             "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}},
        ],
    },
}


def _widget(name: str, **spec: object) -> str:
    return json.dumps({"apiVersion": "test.pyk8s.io/v1", "kind": "Widget", "metadata": {"name": name},
                       "spec": spec})


@pytest.fixture(scope="module")
def crd(kubectl: Kubectl) -> str:
    kubectl.run("apply", "-f", "-", stdin=json.dumps(CRD))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = kubectl.json("get", "crd", "widgets.test.pyk8s.io").get("status", {})
        conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
        if conditions.get("Established") == "True":
            return "widgets.test.pyk8s.io"
        time.sleep(0.2)
    raise AssertionError("CRD never became Established")


def test_crd_is_established_and_discoverable(crd: str, kubectl: Kubectl) -> None:
    status = kubectl.json("get", "crd", crd)["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"NamesAccepted": "True",
                                                                      "Established": "True"}
    assert status["acceptedNames"]["kind"] == "Widget" and status["storedVersions"] == ["v1"]
    resources = kubectl.run("api-resources", "--api-group", "test.pyk8s.io").stdout
    assert "widgets" in resources and "wdg" in resources and "Widget" in resources


def test_objects_are_defaulted_pruned_and_printed(crd: str, kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("-n", unique_ns, "create", "--validate=false", "-f", "-",
                stdin=_widget("w1", color="red", bogus=1, extra={"anything": [1, 2]}))
    obj = kubectl.json("-n", unique_ns, "get", "widget", "w1")
    assert obj["spec"] == {"color": "red", "size": 1, "extra": {"anything": [1, 2]}}
    assert obj["metadata"]["generation"] == 1
    table = kubectl.run("-n", unique_ns, "get", "wdg").stdout.splitlines()
    assert table[0].split() == ["NAME", "COLOR", "SIZE"]
    assert table[1].split() == ["w1", "red", "1"]


def test_strict_validation_and_schema_errors(crd: str, kubectl: Kubectl, unique_ns: str) -> None:
    r = kubectl.run("-n", unique_ns, "create", "-f", "-", stdin=_widget("w2", color="red", bogus=1), check=False)
    assert r.returncode != 0 and 'unknown field "spec.bogus"' in r.stderr
    r = kubectl.run("-n", unique_ns, "create", "-f", "-", stdin=_widget("w3", color="green", size=101), check=False)
    assert r.returncode != 0
    assert 'spec.color: Unsupported value: "green": supported values: "red", "blue"' in r.stderr
    assert "spec.size: Invalid value: 101: spec.size in body should be less than or equal to 100" in r.stderr
    r = kubectl.run("-n", unique_ns, "create", "-f", "-", stdin=_widget("w4"), check=False)
    assert "spec.color: Required value" in r.stderr


def test_scale_status_and_other_versions(crd: str, kubectl: Kubectl, unique_ns: str, apiserver: str) -> None:
    kubectl.run("-n", unique_ns, "create", "-f", "-", stdin=_widget("w5", color="blue", size=2))
    kubectl.run("-n", unique_ns, "scale", "widget/w5", "--replicas=7")
    assert kubectl.json("-n", unique_ns, "get", "widget", "w5")["spec"]["size"] == 7
    base = f"{apiserver}/apis/test.pyk8s.io"
    r = httpx.patch(f"{base}/v1/namespaces/{unique_ns}/widgets/w5/status", json={"status": {"size": 7},
                    "spec": {"size": 50}}, headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == {"size": 7} and r.json()["spec"]["size"] == 7
    other = httpx.get(f"{base}/v1beta1/namespaces/{unique_ns}/widgets/w5").json()
    assert other["apiVersion"] == "test.pyk8s.io/v1beta1" and other["spec"]["color"] == "blue"


def test_deleting_the_crd_deletes_its_objects(kubectl: Kubectl, unique_ns: str, apiserver: str) -> None:
    crd = dict(CRD, metadata={"name": "gadgets.test.pyk8s.io"})
    crd["spec"] = dict(CRD["spec"], names={"plural": "gadgets", "singular": "gadget", "kind": "Gadget"})
    kubectl.run("apply", "-f", "-", stdin=json.dumps(crd))
    path = f"{apiserver}/apis/test.pyk8s.io/v1/namespaces/{unique_ns}/gadgets"
    deadline = time.monotonic() + 10
    while httpx.get(path).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    body = {"apiVersion": "test.pyk8s.io/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"color": "red"}}
    assert httpx.post(path, json=body).status_code == 201
    kubectl.run("delete", "crd", "gadgets.test.pyk8s.io", "--timeout=20s")
    assert kubectl.run("get", "crd", "gadgets.test.pyk8s.io", check=False).returncode != 0
    assert httpx.get(path).status_code == 404
    kubectl.run("apply", "-f", "-", stdin=json.dumps(crd))
    deadline = time.monotonic() + 10
    while httpx.get(path).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert httpx.get(path).json()["items"] == []
