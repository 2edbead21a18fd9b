"""DefaultIngressClass admission against the real apiserver: an Ingress without a class gets the
default IngressClass (the newest of several), one that names a class or carries the legacy annotation
keeps it, and an update never fills it in."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

CLASSES = "/apis/networking.k8s.io/v1/ingressclasses"
DEFAULT = "ingressclass.kubernetes.io/is-default-class"


@pytest.fixture
def ns(apiserver: str) -> Iterator[str]:
    name = f"ing-{uuid.uuid4().hex[:6]}"
    assert httpx.post(f"{apiserver}/api/v1/namespaces", json={"metadata": {"name": name}}).status_code == 201
    yield name
    for cls in httpx.get(f"{apiserver}{CLASSES}").json()["items"]:
        if cls["metadata"]["name"].startswith(name):
            httpx.delete(f"{apiserver}{CLASSES}/{cls['metadata']['name']}")


def ingress_class(apiserver: str, name: str, default: str | None) -> None:
    annotations = {DEFAULT: default} if default is not None else {}
    body = {"metadata": {"name": name, "annotations": annotations}, "spec": {"controller": "pyk8s.io/test"}}
    assert httpx.post(f"{apiserver}{CLASSES}", json=body).status_code == 201


def ingress(apiserver: str, ns: str, name: str, annotations: dict[str, str] | None = None,
            **spec: object) -> httpx.Response:
    backend = {"service": {"name": "web", "port": {"number": 80}}}
    body = {"metadata": {"name": name, "annotations": annotations or {}}, "spec": {"defaultBackend": backend, **spec}}
    return httpx.post(f"{apiserver}/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses", json=body)


def test_ingress_gets_the_default_class(apiserver: str, ns: str) -> None:
    before = ingress(apiserver, ns, "before").json()
    assert "ingressClassName" not in before["spec"]
    ingress_class(apiserver, f"{ns}-plain", None)
    ingress_class(apiserver, f"{ns}-off", "false")
    ingress_class(apiserver, f"{ns}-old", "true")
    time.sleep(1.1)  # creationTimestamp has one-second resolution: the next one is newer
    ingress_class(apiserver, f"{ns}-new", "true")
    got = ingress(apiserver, ns, "plain").json()
    assert got["spec"]["ingressClassName"] == f"{ns}-new"
    named = ingress(apiserver, ns, "named", ingressClassName=f"{ns}-plain").json()
    assert named["spec"]["ingressClassName"] == f"{ns}-plain"
    legacy = ingress(apiserver, ns, "legacy", {"kubernetes.io/ingress.class": "nginx"}).json()
    assert "ingressClassName" not in legacy["spec"]
    path = f"{apiserver}/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses/before"
    updated = httpx.put(path, json={**before, "metadata": {**before["metadata"], "labels": {"a": "b"}}}).json()
    assert "ingressClassName" not in updated["spec"]
