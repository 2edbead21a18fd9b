"""Admission on pod create: Priority resolves classes; ServiceAccount mounts the API credentials."""

from __future__ import annotations

import uuid

import httpx
import pytest


@pytest.fixture
def ns(apiserver: str) -> str:
    name = f"adm-{uuid.uuid4().hex[:6]}"
    assert httpx.post(f"{apiserver}/api/v1/namespaces", json={"metadata": {"name": name}}).status_code == 201
    return name


def _pod(name: str, **spec: object) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def test_priority_comes_from_the_class(apiserver: str, ns: str) -> None:
    path = f"{apiserver}/api/v1/namespaces/{ns}/pods"
    critical = httpx.post(path, json=_pod("crit", priorityClassName="system-node-critical")).json()
    assert critical["spec"]["priority"] == 2000001000
    assert critical["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    plain = httpx.post(path, json=_pod("plain")).json()
    assert plain["spec"]["priority"] == 0
    missing = httpx.post(path, json=_pod("nope", priorityClassName="no-such-class"))
    assert missing.status_code == 403
    assert missing.json()["message"] == 'pods "nope" is forbidden: no PriorityClass with name no-such-class was found'
    forged = httpx.post(path, json=_pod("forged", priorityClassName="system-node-critical", priority=5))
    assert forged.status_code == 403 and "must not be provided in pod spec" in forged.json()["message"]


def test_service_account_credentials_are_mounted(apiserver: str, ns: str) -> None:
    path = f"{apiserver}/api/v1/namespaces/{ns}/pods"
    before = httpx.post(path, json=_pod("early")).json()
    assert not before["spec"].get("volumes"), "no service account yet: nothing to mount"
    httpx.post(f"{apiserver}/api/v1/namespaces/{ns}/serviceaccounts", json={"metadata": {"name": "default"}})
    pod = httpx.post(path, json={**_pod("p"), "spec": {**_pod("p")["spec"],
                                                       "initContainers": [{"name": "i", "image": "busybox"}]}})
    spec = pod.json()["spec"]
    (volume,) = spec["volumes"]
    assert volume["name"].startswith("kube-api-access-") and len(volume["name"]) == len("kube-api-access-") + 5
    sources = volume["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    for container in spec["containers"] + spec["initContainers"]:
        assert {"name": volume["name"], "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"} in container["volumeMounts"]
    opted_out = httpx.post(path, json=_pod("off", automountServiceAccountToken=False)).json()
    assert not opted_out["spec"].get("volumes")
