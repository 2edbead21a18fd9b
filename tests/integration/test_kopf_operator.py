"""A real kopf operator (PyPI `kopf`) reconciling a custom resource served by pyk8s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, Kubectl

OPERATOR = Path(__file__).parent / "operators" / "greeter.py"

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "greeters.test.pyk8s.io"},
    "spec": {
        "group": "test.pyk8s.io",
        "scope": "Namespaced",
        "names": {"plural": "greeters", "singular": "greeter", "kind": "Greeter"},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"who": {"type": "string"}}},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}


def _wait(what: str, check: Callable[[], object], seconds: float = 30) -> object:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def operator(kubectl: Kubectl, unique_ns: str, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    kubectl.run("apply", "-f", "-", stdin=json.dumps(CRD))
    _wait("the CRD", lambda: kubectl.run("get", "greeters", "-A", check=False).returncode == 0)
    log = open(workdir / "kopf.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", unique_ns, str(OPERATOR)],
        cwd=REPO, stdout=log, stderr=log, env={**os.environ, "KUBECONFIG": str(kubectl.kubeconfig)},
    )
    yield proc
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_kopf_operator_reconciles_a_custom_resource(operator: subprocess.Popen[bytes], kubectl: Kubectl,
                                                     unique_ns: str) -> None:
    greeter = {"apiVersion": "test.pyk8s.io/v1", "kind": "Greeter", "metadata": {"name": "hi"},
               "spec": {"who": "pyk8s"}}
    kubectl.run("-n", unique_ns, "apply", "-f", "-", stdin=json.dumps(greeter))

    def configmap() -> dict | None:
        r = kubectl.run("-n", unique_ns, "get", "configmap", "hi-greeting", "-o", "json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    cm = _wait("the operator's ConfigMap", configmap)
    assert cm["data"] == {"greeting": "Hello, pyk8s!"}
    owner = cm["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Greeter" and owner["name"] == "hi" and owner.get("controller") is True

    def status() -> dict | None:
        obj = kubectl.json("-n", unique_ns, "get", "greeter", "hi")
        return obj.get("status", {}).get("create")

    assert _wait("the handler's status", status) == {"configmap": "hi-greeting"}
    finalizers = kubectl.json("-n", unique_ns, "get", "greeter", "hi")["metadata"].get("finalizers", [])
    assert "kopf.zalando.org/KopfFinalizerMarker" in finalizers

    kubectl.run("-n", unique_ns, "patch", "greeter", "hi", "--type", "merge", "-p", '{"spec":{"who":"you"}}')
    _wait("the update handler", lambda: (configmap() or {}).get("data", {}).get("greeting") == "Hello, you!")

    kubectl.run("-n", unique_ns, "delete", "greeter", "hi", "--timeout=30s")
    _wait("the delete handler", lambda: kubectl.run("-n", unique_ns, "get", "configmap", "hi-goodbye",
                                                    check=False).returncode == 0)
    assert kubectl.run("-n", unique_ns, "get", "greeter", "hi", check=False).returncode != 0
    assert operator.poll() is None, "the operator exited"
