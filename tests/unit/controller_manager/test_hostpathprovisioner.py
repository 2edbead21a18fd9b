"""The volume pyk8s-hostpath-provisioner builds for a claim, its refusals, the helper pod that deletes
a volume's directory, and the PersistentVolume controller's choice of the default class."""

from __future__ import annotations

from typing import Any

from controller_manager.controllers.hostpathprovisioner import (
    DEFAULT_BASE_PATH,
    build_helper_pod,
    build_volume,
    is_ours_to_delete,
    provisioning_problem,
    volume_node,
)
from controller_manager.controllers.persistentvolume import find_best_match
from controller_manager.registry import discover, enabled
from services.api.storage import default_storage_class, names_class

SELECTED = "volume.kubernetes.io/selected-node"


def storage_class(binding: str = "WaitForFirstConsumer", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": "standard"}, "provisioner": "pyk8s.io/hostpath", "volumeBindingMode": binding,
            **extra}


def claim(node: str | None = "node-1", **spec: Any) -> dict[str, Any]:
    ann = {"volume.kubernetes.io/storage-provisioner": "pyk8s.io/hostpath"}
    if node:
        ann[SELECTED] = node
    return {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
            "metadata": {"name": "data", "namespace": "ns", "uid": "1234-abcd", "resourceVersion": "7",
                         "annotations": ann},
            "spec": {"accessModes": ["ReadWriteOnce", "ReadOnlyMany"], "storageClassName": "standard",
                     "resources": {"requests": {"storage": "2Gi"}}, **spec}}


def test_volume_for_a_claim() -> None:
    pv = build_volume(claim(), storage_class(reclaimPolicy="Retain", parameters={"path": "/srv/vols/"}), "host-1")
    assert pv["metadata"] == {"name": "pvc-1234-abcd", "annotations": {"pv.kubernetes.io/provisioned-by":
                                                                        "pyk8s.io/hostpath"}}
    spec = pv["spec"]
    assert spec["hostPath"] == {"path": "/srv/vols/pvc-1234-abcd", "type": "DirectoryOrCreate"}
    assert spec["capacity"] == {"storage": "2Gi"}
    assert spec["accessModes"] == ["ReadWriteOnce", "ReadOnlyMany"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain" and spec["storageClassName"] == "standard"
    assert spec["nodeAffinity"]["required"]["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["host-1"]}]}]
    assert spec["claimRef"] == {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "ns",
                                "name": "data", "uid": "1234-abcd", "resourceVersion": "7"}
    assert volume_node(pv) == "host-1"
    # The PersistentVolume controller takes it for the claim it is pre-bound to, WaitForFirstConsumer or not.
    assert find_best_match(claim(), [{**pv, "status": {"phase": "Available"}}], True) is not None


def test_defaults_base_path_and_delete_policy() -> None:
    spec = build_volume(claim(), storage_class(), "h")["spec"]
    assert spec["hostPath"]["path"] == f"{DEFAULT_BASE_PATH}/pvc-1234-abcd"
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"


def test_refusals() -> None:
    assert provisioning_problem(claim(), storage_class()) is None
    immediate = provisioning_problem(claim(node=None), storage_class("Immediate"))
    assert immediate is not None and "WaitForFirstConsumer" in immediate
    assert provisioning_problem(claim(), None) == 'storageclass.storage.k8s.io "standard" not found'
    assert "not provisioned by" in (provisioning_problem(claim(), {**storage_class(), "provisioner": "x"}) or "")
    assert provisioning_problem(claim(selector={"matchLabels": {"a": "b"}}), storage_class()) == \
        "claim Selector is not supported"
    assert "Block" in (provisioning_problem(claim(volumeMode="Block"), storage_class()) or "")


def released(pv: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**pv, "status": {"phase": "Released", **status}}


def test_helper_pods_create_and_remove_only_the_volume_directory() -> None:
    pv = build_volume(claim(), storage_class(parameters={"path": "/data/st"}), "host-1")
    for action in ("create", "delete"):
        pod = build_helper_pod(pv, "node-1", action)
        assert pod["metadata"]["name"] == f"helper-pod-{action}-pvc-1234-abcd"
        spec = pod["spec"]
        assert spec["nodeName"] == "node-1" and spec["restartPolicy"] == "Never"
        (container,) = spec["containers"]
        assert container["image"] == "busybox" and container["imagePullPolicy"] == "IfNotPresent"
        mount = container["volumeMounts"][0]["mountPath"]
        assert spec["volumes"][0]["hostPath"]["path"] == "/data/st"
        if action == "delete":
            assert container["command"] == ["rm", "-rf", f"{mount}/pvc-1234-abcd"]
        else:  # world-writable, as local-path makes it, so a non-root container can write
            assert container["command"] == ["sh", "-c", f"mkdir -p {mount}/pvc-1234-abcd && "
                                                        f"chmod 0777 {mount}/pvc-1234-abcd"]


def test_which_volumes_it_deletes() -> None:
    pv = build_volume(claim(), storage_class(), "h")
    assert is_ours_to_delete(released(pv))
    assert not is_ours_to_delete({**pv, "status": {"phase": "Bound"}})
    assert not is_ours_to_delete(released(build_volume(claim(), storage_class(reclaimPolicy="Retain"), "h")))
    other = released({**pv, "metadata": {**pv["metadata"], "annotations": {"pv.kubernetes.io/provisioned-by": "x"}}})
    assert not is_ours_to_delete(other)
    deleting = released({**pv, "metadata": {**pv["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    assert not is_ours_to_delete(deleting)
    renamed = released({**pv, "spec": {**pv["spec"], "hostPath": {"path": "/"}}})
    assert not is_ours_to_delete(renamed)


def test_off_unless_named() -> None:
    available = discover()
    assert "pyk8s-hostpath-provisioner" not in enabled(["*"], available)
    assert "pyk8s-hostpath-provisioner" in enabled(["*", "pyk8s-hostpath-provisioner"], available)


def test_pv_controller_default_class() -> None:
    def cls(name: str, created: str, default: bool = True) -> dict[str, Any]:
        ann = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
        return {"metadata": {"name": name, "creationTimestamp": created, "annotations": ann}}

    assert default_storage_class([cls("a", "2026-01-01T00:00:00Z", False)]) is None
    assert default_storage_class([cls("b", "2026-01-01T00:00:00Z"), cls("c", "2026-01-02T00:00:00Z"),
                          cls("a", "2026-01-02T00:00:00Z")])["metadata"]["name"] == "a"
    assert not names_class({"metadata": {}, "spec": {}})
    assert names_class({"metadata": {}, "spec": {"storageClassName": ""}})
    assert names_class({"metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": "x"}}, "spec": {}})
