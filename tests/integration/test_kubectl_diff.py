"""`kubectl diff -f`: a server-side dry run of the change, compared with the live object. A changed object
shows its change and exits 1; an unchanged one prints nothing and exits 0; client-side and --server-side."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kubectl

GROUP = "diff.pyk8s.io"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"gizmos.{GROUP}"},
    "spec": {
        "group": GROUP, "scope": "Namespaced",
        "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "properties": {"spec": {"type": "object", "properties": {
                "size": {"type": "integer", "default": 1,
                         "x-kubernetes-validations": [{"rule": "self <= 10", "message": "too big"}]},
                "color": {"type": "string"}}}}}}}],
    },
}


def deployment(image: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": image}]}}},
    }


def gizmo(color: str, size: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"color": color}
    if size is not None:
        spec["size"] = size
    return {"apiVersion": f"{GROUP}/v1", "kind": "Gizmo", "metadata": {"name": "g1"}, "spec": spec}


def _write(path: Path, obj: dict[str, Any]) -> str:
    path.write_text(json.dumps(obj))
    return str(path)


@pytest.fixture(scope="module")
def gizmo_crd(kubectl: Kubectl) -> str:
    kubectl.run("apply", "-f", "-", stdin=json.dumps(CRD))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if kubectl.run("get", "gizmos", "-A", check=False).returncode == 0:
            return CRD["metadata"]["name"]
        time.sleep(0.2)
    raise AssertionError("gizmos never served")


@pytest.mark.parametrize("server_side", [False, True], ids=["client-side", "server-side"])
def test_diff_of_a_deployment(kubectl: Kubectl, unique_ns: str, tmp_path: Path, server_side: bool) -> None:
    mode = ["--server-side", "--field-manager=diff-test"] if server_side else []
    ns = ("-n", unique_ns)
    path = _write(tmp_path / "web.json", deployment("nginx:1.25"))
    kubectl.run(*ns, "apply", *mode, "-f", path)
    live_before = kubectl.json(*ns, "get", "deployment", "web")

    same = kubectl.run(*ns, "diff", *mode, "-f", path, check=False)
    assert (same.returncode, same.stdout) == (0, ""), same.stderr

    _write(tmp_path / "web.json", deployment("nginx:1.26", replicas=3))
    changed = kubectl.run(*ns, "diff", *mode, "-f", path, check=False)
    assert changed.returncode == 1, changed.stderr
    lines = changed.stdout.splitlines()
    assert "-      - image: nginx:1.25" in lines and "+      - image: nginx:1.26" in lines
    assert "-  replicas: 1" in lines and "+  replicas: 3" in lines
    assert "-  generation: 1" in lines and "+  generation: 2" in lines
    assert not any(line.startswith(("-  resourceVersion", "+  resourceVersion")) for line in lines)
    # diff is a dry run: nothing stored changed
    live_after = kubectl.json(*ns, "get", "deployment", "web")
    assert live_after["metadata"]["resourceVersion"] == live_before["metadata"]["resourceVersion"]
    assert live_after["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.25"

    kubectl.run(*ns, "apply", *mode, "-f", path)
    again = kubectl.run(*ns, "diff", *mode, "-f", path, check=False)
    assert (again.returncode, again.stdout) == (0, ""), again.stdout


def test_diff_of_a_new_object_shows_all_of_it(kubectl: Kubectl, unique_ns: str, tmp_path: Path) -> None:
    path = _write(tmp_path / "web.json", deployment("nginx:1.25"))
    r = kubectl.run("-n", unique_ns, "diff", "-f", path, check=False)
    assert r.returncode == 1
    assert "+      - image: nginx:1.25" in r.stdout.splitlines()
    assert kubectl.run("-n", unique_ns, "get", "deployment", "web", check=False).returncode != 0


@pytest.mark.parametrize("server_side", [False, True], ids=["client-side", "server-side"])
def test_diff_of_a_custom_object(gizmo_crd: str, kubectl: Kubectl, unique_ns: str, tmp_path: Path,
                                 server_side: bool) -> None:
    mode = ["--server-side", "--field-manager=diff-test"] if server_side else []
    ns = ("-n", unique_ns)
    path = _write(tmp_path / "g.json", gizmo("red"))
    kubectl.run(*ns, "apply", *mode, "-f", path)
    same = kubectl.run(*ns, "diff", *mode, "-f", path, check=False)
    assert (same.returncode, same.stdout) == (0, ""), same.stdout + same.stderr

    _write(tmp_path / "g.json", gizmo("blue", size=4))
    changed = kubectl.run(*ns, "diff", *mode, "-f", path, check=False)
    assert changed.returncode == 1, changed.stderr
    lines = changed.stdout.splitlines()
    assert "-  color: red" in lines and "+  color: blue" in lines
    assert "-  size: 1" in lines and "+  size: 4" in lines
    assert kubectl.json(*ns, "get", "gizmo", "g1")["spec"] == {"color": "red", "size": 1}

    # the dry run validates: a change the schema's rules reject is an error (exit > 1), not a diff
    _write(tmp_path / "g.json", gizmo("blue", size=11))
    rejected = kubectl.run(*ns, "diff", *mode, "-f", path, check=False)
    assert rejected.returncode > 1
    assert 'spec.size: Invalid value: "integer": too big' in rejected.stderr
