"""Structural-schema defaults apply to custom objects read back from etcd (get, list, watch), so objects
stored before a default was added to the schema show it, as upstream's storage decoder defaults them."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from tests.conftest import Kubectl

GROUP = "readdefaults.pyk8s.io"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _schema(default: bool) -> dict[str, Any]:
    b: dict[str, Any] = {"type": "string"}
    if default:
        b["default"] = "B"
    return {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "a": {"type": "string"}, "b": b}}}}


def _wait(fn: Any, what: str, limit: float = 20) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(what)


def test_defaults_apply_to_objects_stored_before_the_default(apiserver: str, kubectl: Kubectl,
                                                            unique_ns: str) -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"things.{GROUP}"},
           "spec": {"group": GROUP, "scope": "Namespaced",
                    "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": _schema(False)}}]}}
    r = httpx.post(f"{apiserver}{CRDS}", json=crd)
    assert r.status_code == 201, r.text
    base = f"{apiserver}/apis/{GROUP}/v1/namespaces/{unique_ns}/things"
    _wait(lambda: httpx.get(base).status_code == 200, "CRD never served")
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Thing", "metadata": {"name": "old"}, "spec": {"a": "A"}}
    created = httpx.post(base, json=body).json()
    assert created["spec"] == {"a": "A"}
    rv = created["metadata"]["resourceVersion"]

    patch = [{"op": "replace", "path": "/spec/versions/0/schema/openAPIV3Schema", "value": _schema(True)}]
    r = httpx.patch(f"{apiserver}{CRDS}/things.{GROUP}", content=json.dumps(patch),
                    headers={"content-type": "application/json-patch+json"})
    assert r.status_code == 200, r.text
    got = _wait(lambda: (o := httpx.get(f"{base}/old").json())["spec"].get("b") and o, "no default on get")
    assert got["spec"] == {"a": "A", "b": "B"}
    assert got["metadata"]["resourceVersion"] == rv, "a read must not write the object"
    assert httpx.get(f"{base}/old", params={"resourceVersion": "0"}).json()["spec"]["b"] == "B"
    assert [i["spec"] for i in httpx.get(base).json()["items"]] == [{"a": "A", "b": "B"}]
    assert kubectl.json("-n", unique_ns, "get", "thing", "old")["spec"]["b"] == "B"
    with httpx.stream("GET", base, params={"watch": "1", "resourceVersion": "0"}, timeout=10) as w:
        event = json.loads(next(w.iter_lines()))
    assert event["type"] == "ADDED" and event["object"]["spec"] == {"a": "A", "b": "B"}
    merged = httpx.patch(f"{base}/old", json={"metadata": {"labels": {"x": "y"}}},
                         headers={"content-type": "application/merge-patch+json"}).json()
    assert merged["spec"] == {"a": "A", "b": "B"}
    explicit = httpx.patch(f"{base}/old", json={"spec": {"b": "C"}},
                           headers={"content-type": "application/merge-patch+json"}).json()
    assert explicit["spec"] == {"a": "A", "b": "C"}
