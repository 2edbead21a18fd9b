"""Server-side apply through real kubectl against the real apiserver and etcd."""

from __future__ import annotations

import json
from typing import Any

import httpx
import yaml

from tests.conftest import Kubectl


def deployment(ns: str, replicas: int = 1, image: str = "nginx:1.25") -> str:
    return json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": image}]}}},
    })


def configmap(ns: str, labels: dict[str, str], data: dict[str, str]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "cfg", "namespace": ns, "labels": labels}, "data": data})


def managers(obj: dict) -> dict[tuple[str, str], dict]:
    return {(e["manager"], e["operation"]): e for e in obj["metadata"].get("managedFields", [])}


def test_conflicting_appliers_and_force(kubectl: Kubectl, unique_ns: str) -> None:
    def ssa(manager: str, replicas: int, *extra: str, check: bool = True) -> Any:
        return kubectl.run("apply", "--server-side", f"--field-manager={manager}", *extra, "-f", "-",
                           stdin=deployment(unique_ns, replicas), check=check)

    ssa("team-a", 2)
    same = ssa("team-b", 2)
    assert "serverside-applied" in same.stdout

    clash = ssa("team-b", 5, check=False)
    assert clash.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "team-a": .spec.replicas' in clash.stderr
    assert "--force-conflicts" in clash.stderr
    assert kubectl.json("get", "deployment", "web", "-n", unique_ns)["spec"]["replicas"] == 2

    ssa("team-b", 5, "--force-conflicts")
    obj = kubectl.json("get", "deployment", "web", "-n", unique_ns, "--show-managed-fields")
    assert obj["spec"]["replicas"] == 5
    owned = managers(obj)
    assert "f:replicas" in owned[("team-b", "Apply")]["fieldsV1"]["f:spec"]
    assert "f:replicas" not in owned[("team-a", "Apply")]["fieldsV1"]["f:spec"]
    # team-a now conflicts in turn.
    back = ssa("team-a", 2, check=False)
    assert 'conflict with "team-b": .spec.replicas' in back.stderr


def test_fields_dropped_by_their_only_manager_are_removed(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("apply", "--server-side", "--field-manager=owner", "-f", "-",
                stdin=configmap(unique_ns, {"keep": "1", "drop": "1"}, {"a": "1", "b": "2", "c": "3"}))
    kubectl.run("apply", "--server-side", "--field-manager=helper", "-f", "-",
                stdin=configmap(unique_ns, {}, {"b": "2"}))
    kubectl.run("apply", "--server-side", "--field-manager=owner", "-f", "-",
                stdin=configmap(unique_ns, {"keep": "1"}, {"a": "1"}))
    obj = kubectl.json("get", "configmap", "cfg", "-n", unique_ns)
    assert obj["metadata"]["labels"] == {"keep": "1"}
    assert obj["data"] == {"a": "1", "b": "2"}  # c is gone, b is still applied by helper


def test_show_managed_fields(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("apply", "--server-side", "--field-manager=shower", "-f", "-", stdin=deployment(unique_ns, 3))
    get = ("get", "deployment", "web", "-n", unique_ns, "-o", "yaml")
    shown = kubectl.run(*get, "--show-managed-fields").stdout
    [entry] = [e for e in yaml.safe_load(shown)["metadata"]["managedFields"] if e["manager"] == "shower"]
    assert (entry["operation"], entry["apiVersion"], entry["fieldsType"]) == ("Apply", "apps/v1", "FieldsV1")
    assert entry["time"].endswith("Z")
    spec = entry["fieldsV1"]["f:spec"]
    assert spec["f:replicas"] == {}
    container = spec["f:template"]["f:spec"]["f:containers"]['k:{"name":"web"}']
    assert container == {".": {}, "f:name": {}, "f:image": {}}
    hidden = kubectl.run(*get).stdout
    assert "managedFields" not in hidden


def test_update_writers_are_tracked(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("create", "-f", "-", stdin=deployment(unique_ns, 1))
    kubectl.run("scale", "deployment/web", "-n", unique_ns, "--replicas=4")
    kubectl.run("label", "deployment/web", "-n", unique_ns, "tier=front")
    obj = kubectl.json("get", "deployment", "web", "-n", unique_ns, "--show-managed-fields")
    owned = managers(obj)
    create = owned[("kubectl-create", "Update")]["fieldsV1"]
    assert "f:selector" in create["f:spec"]
    assert "f:replicas" not in create["f:spec"]
    label = owned[("kubectl-label", "Update")]["fieldsV1"]
    assert label == {"f:metadata": {"f:labels": {".": {}, "f:tier": {}}}}
    scalers = [e for e in obj["metadata"]["managedFields"] if e["manager"] == "kubectl"]
    assert scalers and scalers[0].get("subresource") == "scale"
    # The update owner conflicts with an applier that changes its field.
    clash = kubectl.run("apply", "--server-side", "--field-manager=late", "-f", "-",
                        stdin=deployment(unique_ns, 1), check=False)
    assert 'conflict with "kubectl" with subresource "scale" using apps/v1: .spec.replicas' in clash.stderr


def test_server_side_apply_after_client_side_apply(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("apply", "-f", "-", stdin=deployment(unique_ns, 1))
    changed = deployment(unique_ns, 3, image="nginx:1.27")
    result = kubectl.run("apply", "--server-side", "-f", "-", stdin=changed)
    assert "serverside-applied" in result.stdout
    obj = kubectl.json("get", "deployment", "web", "-n", unique_ns, "--show-managed-fields")
    assert obj["spec"]["replicas"] == 3
    assert obj["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"
    assert ("kubectl", "Apply") in managers(obj)
    # Applying the same file again is conflict-free.
    kubectl.run("apply", "--server-side", "-f", "-", stdin=changed)


def test_apply_requires_a_field_manager(apiserver: str, kubectl: Kubectl, unique_ns: str) -> None:
    url = f"{apiserver}/api/v1/namespaces/{unique_ns}/configmaps/cfg"
    headers = {"Content-Type": "application/apply-patch+yaml", "Authorization": "Bearer test"}
    body = configmap(unique_ns, {}, {"a": "1"})
    missing = httpx.patch(url, content=body, headers=headers)
    assert missing.status_code == 422
    assert missing.json()["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch')
    created = httpx.patch(url, params={"fieldManager": "raw"}, content=body, headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["metadata"]["managedFields"][0]["manager"] == "raw"
    secret = json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cfg"}})
    wrong = httpx.patch(url, params={"fieldManager": "raw"}, headers=headers, content=secret)
    assert wrong.status_code == 400
    assert wrong.json()["message"] == "invalid object type: /v1, Kind=Secret"
    clash = httpx.patch(url, params={"fieldManager": "other"}, headers=headers,
                        content=configmap(unique_ns, {}, {"a": "2"}))
    assert clash.status_code == 409
    assert clash.json()["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "raw"', "field": ".data.a"}]
