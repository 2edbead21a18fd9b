"""Bad request options are upstream's 422 Invalid of the options kind (meta.k8s.io), naming the option,
and change nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Kubectl

MERGE = {"content-type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def client(apiserver: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=apiserver, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def ns(client: httpx.Client) -> str:
    name = f"opts-{uuid.uuid4().hex[:8]}"
    assert client.post("/api/v1/namespaces", json={"metadata": {"name": name}}).status_code == 201
    assert client.post(f"/api/v1/namespaces/{name}/configmaps",
                       json={"metadata": {"name": "cm"}, "data": {"k": "v"}}).status_code == 201
    return name


def _invalid(r: httpx.Response, kind: str, field: str, reason: str, message: str) -> None:
    assert r.status_code == 422, r.text
    status = r.json()
    assert status["reason"] == "Invalid"
    assert status["message"] == f'{kind}.meta.k8s.io "" is invalid: {field}: {message}'
    assert status["details"] == {"group": "meta.k8s.io", "kind": kind,
                                 "causes": [{"reason": reason, "message": message, "field": field}]}


def _cm(client: httpx.Client, ns: str) -> dict[str, Any]:
    r = client.get(f"/api/v1/namespaces/{ns}/configmaps/cm")
    assert r.status_code == 200, r.text
    return r.json()


def test_dry_run_value_is_checked_for_every_write(client: httpx.Client, ns: str) -> None:
    base = f"/api/v1/namespaces/{ns}/configmaps"
    unsupported = 'Unsupported value: []string{"Bogus"}: supported values: "All"'
    r = client.post(base, params={"dryRun": "Bogus"}, json={"metadata": {"name": "new"}})
    _invalid(r, "CreateOptions", "dryRun", "FieldValueNotSupported", unsupported)
    r = client.put(f"{base}/cm", params={"dryRun": "Bogus"}, json={**_cm(client, ns), "data": {"k": "x"}})
    _invalid(r, "UpdateOptions", "dryRun", "FieldValueNotSupported", unsupported)
    r = client.patch(f"{base}/cm", params={"dryRun": "Bogus"}, content=b'{"data":{"k":"x"}}', headers=MERGE)
    _invalid(r, "PatchOptions", "dryRun", "FieldValueNotSupported", unsupported)
    r = client.delete(f"{base}/cm", params={"dryRun": "Bogus"})
    _invalid(r, "DeleteOptions", "dryRun", "FieldValueNotSupported", unsupported)
    r = client.delete(base, params={"dryRun": "Bogus"})
    _invalid(r, "DeleteOptions", "dryRun", "FieldValueNotSupported", unsupported)
    r = client.request("DELETE", f"{base}/cm", json={"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["x"]})
    _invalid(r, "DeleteOptions", "dryRun", "FieldValueNotSupported", 'Unsupported value: []string{"x"}: '
                                                                     'supported values: "All"')
    r = client.post(base, params=[("dryRun", "All"), ("dryRun", "None")], json={"metadata": {"name": "new"}})
    _invalid(r, "CreateOptions", "dryRun", "FieldValueNotSupported",
             'Unsupported value: []string{"All", "None"}: supported values: "All"')
    assert client.get(f"{base}/new").status_code == 404
    assert _cm(client, ns)["data"] == {"k": "v"}


def test_field_manager_length_and_characters(client: httpx.Client, ns: str) -> None:
    base = f"/api/v1/namespaces/{ns}/configmaps"
    r = client.post(base, params={"fieldManager": "m" * 129}, json={"metadata": {"name": "new"}})
    _invalid(r, "CreateOptions", "fieldManager", "FieldValueTooLong", "Too long: may not be more than 128 bytes")
    assert client.post(base, params={"fieldManager": "m" * 128, "dryRun": "All"},
                       json={"metadata": {"name": "new"}}).status_code == 201
    r = client.patch(f"{base}/cm", params={"fieldManager": "ab\x07c"}, content=b'{"data":{"k":"x"}}', headers=MERGE)
    _invalid(r, "PatchOptions", "fieldManager", "FieldValueInvalid",
             'Invalid value: "ab\\ac": invalid character U+0007 (at position 2)')
    r = client.put(f"{base}/cm", params={"fieldManager": "é\x00"}, json=_cm(client, ns))
    _invalid(r, "UpdateOptions", "fieldManager", "FieldValueInvalid",
             'Invalid value: "é\\x00": invalid character U+0000 (at position 2)')
    assert client.get(f"{base}/new").status_code == 404
    assert _cm(client, ns)["data"] == {"k": "v"}


def test_patch_field_validation_value(client: httpx.Client, ns: str) -> None:
    r = client.patch(f"/api/v1/namespaces/{ns}/configmaps/cm", params={"fieldValidation": "Bogus"},
                     content=b'{"data":{"k":"x"}}', headers=MERGE)
    _invalid(r, "PatchOptions", "fieldValidation", "FieldValueNotSupported",
             'Unsupported value: "Bogus": supported values: "", "Ignore", "Strict", "Warn"')
    assert _cm(client, ns)["data"] == {"k": "v"}


def test_propagation_policy(client: httpx.Client, ns: str) -> None:
    item = f"/api/v1/namespaces/{ns}/configmaps/cm"
    r = client.delete(item, params={"propagationPolicy": "Bogus"})
    _invalid(r, "DeleteOptions", "propagationPolicy", "FieldValueNotSupported",
             'Unsupported value: "Bogus": supported values: "Foreground", "Background", "Orphan", "nil"')
    r = client.request("DELETE", item, json={"propagationPolicy": "Foreground", "orphanDependents": True})
    _invalid(r, "DeleteOptions", "propagationPolicy", "FieldValueInvalid",
             'Invalid value: "Foreground": orphanDependents and deletionPropagation cannot be both set')
    assert _cm(client, ns)["data"] == {"k": "v"}


def test_kubectl_shows_the_option_error(kubectl: Kubectl, ns: str) -> None:
    out = kubectl.run("create", "configmap", "from-kubectl", "-n", ns, f"--field-manager={'k' * 129}", check=False)
    assert out.returncode != 0
    assert "fieldManager: Too long: may not be more than 128 bytes" in out.stderr
    assert kubectl.run("get", "configmap", "from-kubectl", "-n", ns, check=False).returncode != 0


def test_list_and_watch_options(client: httpx.Client, ns: str) -> None:
    base = f"/api/v1/namespaces/{ns}/configmaps"
    r = client.get(base, params={"resourceVersion": "1", "resourceVersionMatch": "Bogus"})
    _invalid(r, "ListOptions", "resourceVersionMatch", "FieldValueNotSupported",
             'Unsupported value: "Bogus": supported values: "Exact", "NotOlderThan", ""')
    r = client.get(base, params={"sendInitialEvents": "true"})
    _invalid(r, "ListOptions", "sendInitialEvents", "FieldValueForbidden",
             "Forbidden: sendInitialEvents is forbidden for list")
    r = client.get(base, params={"watch": "true", "resourceVersion": "1", "resourceVersionMatch": "NotOlderThan"})
    _invalid(r, "ListOptions", "resourceVersionMatch", "FieldValueForbidden",
             "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
    client.post(base, json={"metadata": {"name": "second"}})
    token = client.get(base, params={"limit": "1"}).json()["metadata"]["continue"]
    r = client.get(base, params={"limit": "1", "continue": token, "resourceVersion": "1",
                                 "resourceVersionMatch": "NotOlderThan"})
    _invalid(r, "ListOptions", "resourceVersionMatch", "FieldValueForbidden",
             "Forbidden: resourceVersionMatch is forbidden when continue is provided")
    r = client.get(base, params={"limit": "1", "continue": token, "resourceVersion": "5"})
    assert r.status_code == 400, r.text
    assert r.json()["message"] == "specifying resource version is not allowed when using continue"
