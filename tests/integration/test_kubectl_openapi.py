"""Real kubectl against the real apiserver: validation, apply and explain all read our OpenAPI."""

from __future__ import annotations

import httpx

from tests.conftest import Kubectl

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
"""

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: solo
spec:
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
"""


def test_documents_are_served(apiserver: str) -> None:
    index = httpx.get(f"{apiserver}/openapi/v3", timeout=30)
    assert index.status_code == 200
    paths = index.json()["paths"]
    assert {"api/v1", "apis/apps/v1"} <= set(paths)
    doc = httpx.get(apiserver + paths["apis/apps/v1"]["serverRelativeURL"], timeout=30)
    assert doc.status_code == 200
    patch = doc.json()["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    missing = httpx.get(f"{apiserver}/openapi/v3/apis/nope.example.com/v1", timeout=30)
    assert missing.status_code == 404 and missing.json()["kind"] == "Status"
    proto = httpx.get(
        f"{apiserver}/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
        timeout=30,
    )
    assert proto.status_code == 200 and proto.content.startswith(b"\x0a\x032.0")


def test_create_validates_by_default(kubectl: Kubectl, unique_ns: str) -> None:
    """`kubectl create -f` without --validate=false: kubectl reads /openapi/v3 first."""
    out = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=DEPLOYMENT + "---" + POD)
    assert "deployment.apps/web created" in out.stdout
    assert "pod/solo created" in out.stdout
    assert kubectl.json("get", "-n", unique_ns, "deployment", "web")["spec"]["replicas"] == 1
    assert kubectl.json("get", "-n", unique_ns, "pod", "solo")["spec"]["containers"][0]["name"] == "main"


def test_strict_validation_rejects_unknown_fields(kubectl: Kubectl, unique_ns: str) -> None:
    bad = DEPLOYMENT.replace("image: nginx:1.27", "image: nginx:1.27\n        bogusField: 1")
    result = kubectl.run("create", "--validate=strict", "-n", unique_ns, "-f", "-", stdin=bad, check=False)
    assert result.returncode != 0
    assert 'unknown field "spec.template.spec.containers[0].bogusField"' in result.stderr
    missing = kubectl.run("get", "-n", unique_ns, "deployment", "web", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_list_manifests_are_validated_on_the_client(kubectl: Kubectl, unique_ns: str) -> None:
    """A `kind: List` is checked by kubectl itself against the protobuf /openapi/v2."""
    listing = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: listed}
  data: {a: b}
"""
    bad = listing.replace("data: {a: b}", "data: {a: b}\n  bogus: 1")
    result = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=bad, check=False)
    assert result.returncode != 0
    assert 'unknown field "bogus" in io.k8s.api.core.v1.ConfigMap' in result.stderr
    out = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=listing)
    assert "configmap/listed created" in out.stdout


def test_apply_computes_patches_from_the_schema(kubectl: Kubectl, unique_ns: str) -> None:
    first = kubectl.run("apply", "-n", unique_ns, "-f", "-", stdin=DEPLOYMENT)
    assert "deployment.apps/web created" in first.stdout
    changed = DEPLOYMENT.replace("nginx:1.27", "nginx:1.28")
    second = kubectl.run("apply", "-n", unique_ns, "-f", "-", stdin=changed)
    assert "deployment.apps/web configured" in second.stdout
    assert "openapi" not in second.stderr
    spec = kubectl.json("get", "-n", unique_ns, "deployment", "web")["spec"]["template"]["spec"]
    assert [(c["name"], c["image"]) for c in spec["containers"]] == [("web", "nginx:1.28")]


def test_explain(kubectl: Kubectl) -> None:
    containers = kubectl.run("explain", "pods.spec.containers").stdout
    assert "KIND:       Pod" in containers
    assert "FIELD: containers <[]Container>" in containers
    assert "image\t<string>" in containers
    recursive = kubectl.run("explain", "deployment", "--recursive").stdout
    assert "GROUP:      apps" in recursive
    assert "strategy\t<DeploymentStrategy>" in recursive
    assert "maxSurge\t<IntOrString>" in recursive
    legacy = kubectl.run("explain", "--output", "plaintext-openapiv2", "deployment.spec.replicas").stdout
    assert "FIELD:    replicas <integer>" in legacy
    missing = kubectl.run("explain", "pods.spec.nonexistent", check=False)
    assert missing.returncode != 0 and 'field "nonexistent" does not exist' in missing.stderr
