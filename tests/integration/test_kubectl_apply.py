"""Real kubectl sends strategic merge patches (apply, set, rollout restart, edit); the live object follows."""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Kubectl

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def manifest(
    image: str, env: list[dict[str, str]], ports: list[dict[str, Any]] | None, labels: dict[str, str]
) -> dict[str, Any]:
    web: dict[str, Any] = {"name": "web", "image": image, "env": env}
    if ports is not None:
        web["ports"] = ports
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [web, {"name": "log", "image": "busybox:1.36", "command": ["sleep", "1d"]}]
                },
            },
        },
    }


def containers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}


def keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from keys(v)
    elif isinstance(value, list):
        for v in value:
            yield from keys(v)


@pytest.fixture
def applied(kubectl: Kubectl, unique_ns: str, tmp_path: Path) -> Path:
    """A Deployment created by `kubectl apply -f` from a file the test may edit and apply again."""
    path = tmp_path / "web.yaml"
    path.write_text(
        yaml.safe_dump(
            manifest(
                "nginx:1.27",
                [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                [{"containerPort": 80, "name": "http"}],
                {"app": "web"},
            )
        )
    )
    out = kubectl.run("-n", unique_ns, "apply", "-f", str(path)).stdout
    assert "deployment.apps/web created" in out
    return path


def test_apply_again_follows_the_edited_file(kubectl: Kubectl, unique_ns: str, applied: Path) -> None:
    first = kubectl.json("-n", unique_ns, "get", "deployment", "web")
    assert [e["name"] for e in containers(first)["web"]["env"]] == ["A", "B"]

    edited = manifest("nginx:1.28", [{"name": "A", "value": "1"}], None, {"app": "web", "team": "x"})
    applied.write_text(yaml.safe_dump(edited))
    out = kubectl.run("-n", unique_ns, "apply", "-f", str(applied)).stdout
    assert "deployment.apps/web configured" in out

    live = kubectl.json("-n", unique_ns, "get", "deployment", "web")
    web, log = containers(live)["web"], containers(live)["log"]
    assert web["image"] == "nginx:1.28"
    assert web["env"] == [{"name": "A", "value": "1"}]
    assert "ports" not in web
    assert [c["name"] for c in live["spec"]["template"]["spec"]["containers"]] == ["web", "log"]
    assert log["image"] == "busybox:1.36" and log["command"] == ["sleep", "1d"]
    assert live["metadata"]["labels"] == {"app": "web", "team": "x"}
    assert not [k for k in keys(live) if k.startswith("$")]
    last = json.loads(live["metadata"]["annotations"][LAST_APPLIED])
    assert last["spec"] == edited["spec"]
    assert last["metadata"]["labels"] == edited["metadata"]["labels"]

    again = kubectl.run("-n", unique_ns, "apply", "-f", str(applied)).stdout
    assert "deployment.apps/web unchanged" in again


def test_apply_keeps_fields_set_by_others(kubectl: Kubectl, unique_ns: str, applied: Path) -> None:
    """A three-way merge: a label added with `kubectl label` survives a re-apply of the file."""
    kubectl.run("-n", unique_ns, "label", "deployment", "web", "owner=ops")
    edited = yaml.safe_load(applied.read_text())
    edited["spec"]["replicas"] = 2
    applied.write_text(yaml.safe_dump(edited))
    kubectl.run("-n", unique_ns, "apply", "-f", str(applied))
    live = kubectl.json("-n", unique_ns, "get", "deployment", "web")
    assert live["metadata"]["labels"] == {"app": "web", "owner": "ops"}
    assert live["spec"]["replicas"] == 2


def test_set_image_and_set_env(kubectl: Kubectl, unique_ns: str, applied: Path) -> None:
    kubectl.run("-n", unique_ns, "set", "image", "deployment/web", "web=nginx:2")
    live = kubectl.json("-n", unique_ns, "get", "deployment", "web")
    assert containers(live)["web"]["image"] == "nginx:2"
    assert containers(live)["log"]["image"] == "busybox:1.36"
    assert [(p["containerPort"], p["name"]) for p in containers(live)["web"]["ports"]] == [(80, "http")]

    kubectl.run("-n", unique_ns, "set", "env", "deployment/web", "-c", "web", "C=3", "A-")
    env = containers(kubectl.json("-n", unique_ns, "get", "deployment", "web"))["web"]["env"]
    assert env == [{"name": "B", "value": "2"}, {"name": "C", "value": "3"}]


def test_rollout_restart_annotates_the_template(kubectl: Kubectl, unique_ns: str, applied: Path) -> None:
    before = kubectl.json("-n", unique_ns, "get", "deployment", "web")
    kubectl.run("-n", unique_ns, "rollout", "restart", "deployment/web")
    live = kubectl.json("-n", unique_ns, "get", "deployment", "web")
    annotations = live["spec"]["template"]["metadata"]["annotations"]
    assert set(annotations) == {"kubectl.kubernetes.io/restartedAt"}
    assert time.strptime(annotations["kubectl.kubernetes.io/restartedAt"][:19], "%Y-%m-%dT%H:%M:%S")
    assert live["spec"]["template"]["metadata"]["labels"] == {"app": "web"}
    assert containers(live) == containers(before)


def test_edit_with_an_editor_script(
    kubectl: Kubectl, unique_ns: str, applied: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/image: nginx:1.27/image: nginx:edited/' \"$1\"\n")
    editor.chmod(editor.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("KUBE_EDITOR", str(editor))
    monkeypatch.delenv("EDITOR", raising=False)
    out = kubectl.run("-n", unique_ns, "edit", "deployment", "web").stdout
    assert "deployment.apps/web edited" in out
    live = kubectl.json("-n", unique_ns, "get", "deployment", "web")
    assert containers(live)["web"]["image"] == "nginx:edited"
    assert containers(live)["log"]["image"] == "busybox:1.36"
    assert [e["name"] for e in containers(live)["web"]["env"]] == ["A", "B"]


def test_patch_errors_come_back_in_upstream_words(kubectl: Kubectl, unique_ns: str, applied: Path) -> None:
    result = kubectl.run(
        "-n",
        unique_ns,
        "patch",
        "deployment",
        "web",
        "-p",
        '{"spec":{"template":{"spec":{"containers":[{"image":"x"}]}}}}',
        check=False,
    )
    assert result.returncode != 0
    assert "map: map[image:x] does not contain declared merge key: name" in result.stderr
    live = kubectl.json("-n", unique_ns, "get", "deployment", "web")
    assert containers(live)["web"]["image"] == "nginx:1.27"


GADGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.smp.pyk8s.io"},
    "spec": {
        "group": "smp.pyk8s.io",
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def test_custom_resources_refuse_strategic_merge_patch(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("apply", "-f", "-", stdin=json.dumps(GADGET_CRD))
    deadline = time.monotonic() + 10
    while "gadgets" not in kubectl.run("api-resources", "--api-group", "smp.pyk8s.io").stdout:
        assert time.monotonic() < deadline, "CRD never served"
        time.sleep(0.2)
    gadget = {
        "apiVersion": "smp.pyk8s.io/v1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
        "spec": {"items": [{"name": "a"}]},
    }
    kubectl.run("-n", unique_ns, "create", "-f", "-", stdin=json.dumps(gadget))

    result = kubectl.run("-n", unique_ns, "patch", "gadget", "g", "-p", '{"spec":{"size":1}}', check=False)
    assert result.returncode != 0
    assert (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    ) in result.stderr

    kubectl.run("-n", unique_ns, "patch", "gadget", "g", "--type", "merge", "-p", '{"spec":{"size":1}}')
    assert kubectl.json("-n", unique_ns, "get", "gadget", "g")["spec"] == {
        "items": [{"name": "a"}],
        "size": 1,
    }
