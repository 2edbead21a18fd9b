"""A CRD's status.storedVersions as upstream keeps it: the storage version is recorded on create and
when it changes, and a version objects may still be stored in cannot leave spec.versions until it
has been removed from storedVersions through the status subresource."""

from __future__ import annotations

from typing import Any

import httpx

GROUP = "storedversions.pyk8s.io"
SCHEMA = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}


def _version(name: str, storage: bool) -> dict[str, Any]:
    return {"name": name, "served": True, "storage": storage, "schema": SCHEMA}


def _set_versions(url: str, versions: list[dict[str, Any]]) -> httpx.Response:
    """PUT new spec.versions, retrying on conflicts with the controller that writes the CRD's status."""
    for _ in range(50):
        current = httpx.get(url).json()
        current["spec"]["versions"] = versions
        r = httpx.put(url, json=current)
        if r.status_code != 409:
            return r
    raise AssertionError("the CRD kept changing")


def test_stored_versions_follow_the_storage_version(apiserver: str) -> None:
    url = f"{apiserver}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"things.{GROUP}"},
           "spec": {"group": GROUP, "scope": "Cluster", "names": {"plural": "things", "kind": "Thing"},
                    "versions": [_version("v1", True)]}}
    r = httpx.post(url, json=crd)
    assert r.status_code == 201, r.text
    assert r.json()["status"]["storedVersions"] == ["v1"]

    r = _set_versions(f"{url}/things.{GROUP}", [_version("v1", False), _version("v2", True)])
    assert r.status_code == 200, r.text
    assert r.json()["status"]["storedVersions"] == ["v1", "v2"]

    r = _set_versions(f"{url}/things.{GROUP}", [_version("v2", True)])
    assert r.status_code == 422, r.text
    assert r.json()["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "status.storedVersions[0]",
                                              "message": 'Invalid value: "v1": must appear in spec.versions'}]

    r = httpx.patch(f"{url}/things.{GROUP}/status", json={"status": {"storedVersions": ["v2"]}},
                    headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    r = _set_versions(f"{url}/things.{GROUP}", [_version("v2", True)])
    assert r.status_code == 200, r.text
    assert r.json()["status"]["storedVersions"] == ["v2"]
