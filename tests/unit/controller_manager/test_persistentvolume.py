"""The PersistentVolume controller's volume choice (upstream's findBestMatchForClaim) and the
protection controllers' notion of a claim in use."""

from __future__ import annotations

from typing import Any

from controller_manager.controllers.persistentvolume import (
    check_volume_satisfies_claim,
    find_best_match,
)
from controller_manager.controllers.pvcprotection import pod_uses_claim
from services.api.storage import object_class

RWO, ROX, RWX = "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"


def pv(name: str, size: str = "1Gi", modes: tuple[str, ...] = (RWO,), sc: str = "", phase: str = "Available",
       labels: dict[str, str] | None = None, claim: dict[str, str] | None = None, **spec: Any) -> dict:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "labels": labels or {}, "resourceVersion": "1"},
        "spec": {"capacity": {"storage": size}, "accessModes": list(modes), "hostPath": {"path": f"/srv/{name}"},
                 **spec},
        "status": {"phase": phase},
    }
    if sc:
        obj["spec"]["storageClassName"] = sc
    if claim:
        obj["spec"]["claimRef"] = claim
    return obj


def pvc(name: str = "data", size: str = "1Gi", modes: tuple[str, ...] = (RWO,), sc: str | None = None,
        selector: dict | None = None, **spec: Any) -> dict:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "5"},
        "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": size}}, **spec},
    }
    if sc is not None:
        obj["spec"]["storageClassName"] = sc
    if selector is not None:
        obj["spec"]["selector"] = selector
    return obj


def name_of(volume: dict | None) -> str | None:
    return None if volume is None else volume["metadata"]["name"]


def test_smallest_fitting_volume_wins() -> None:
    volumes = [pv("big", "10Gi"), pv("small", "500Mi"), pv("fits", "2Gi"), pv("exact", "1536Mi")]
    assert name_of(find_best_match(pvc(size="1.5Gi"), volumes)) == "exact"
    assert name_of(find_best_match(pvc(size="3Gi"), volumes)) == "big"
    assert find_best_match(pvc(size="11Gi"), volumes) is None


def test_only_available_volumes_not_being_deleted() -> None:
    deleting = pv("deleting", "1Gi")
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    volumes = [pv("pending", "1Gi", phase="Pending"), pv("released", "1Gi", phase="Released"), deleting]
    assert find_best_match(pvc(), volumes) is None
    assert name_of(find_best_match(pvc(), [*volumes, pv("free", "5Gi")])) == "free"


def test_storage_class_must_be_equal_and_nil_means_empty() -> None:
    volumes = [pv("gold", "1Gi", sc="gold"), pv("plain", "5Gi")]
    assert name_of(find_best_match(pvc(), volumes)) == "plain"
    assert name_of(find_best_match(pvc(sc=""), volumes)) == "plain"
    assert name_of(find_best_match(pvc(sc="gold"), volumes)) == "gold"
    assert find_best_match(pvc(sc="silver"), volumes) is None
    beta = pvc()
    beta["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "gold"}
    assert object_class(beta) == "gold"
    assert name_of(find_best_match(beta, volumes)) == "gold"


def test_access_modes_superset_with_the_fewest_modes_first() -> None:
    volumes = [pv("many", "1Gi", modes=(RWO, ROX, RWX)), pv("rwo-big", "5Gi", modes=(RWO,)), pv("rox", "1Gi", (ROX,))]
    # A RWO volume is taken before a smaller one that also offers more modes.
    assert name_of(find_best_match(pvc(modes=(RWO,)), volumes)) == "rwo-big"
    assert name_of(find_best_match(pvc(modes=(RWO, RWX)), volumes)) == "many"
    assert find_best_match(pvc(modes=(RWX,)), [pv("rwo", "1Gi")]) is None


def test_volume_mode_must_match() -> None:
    volumes = [pv("block", "1Gi", volumeMode="Block"), pv("fs", "2Gi")]
    assert name_of(find_best_match(pvc(), volumes)) == "fs"
    assert name_of(find_best_match(pvc(volumeMode="Block"), volumes)) == "block"


def test_label_selector() -> None:
    volumes = [pv("fast", "5Gi", labels={"speed": "fast"}), pv("slow", "1Gi", labels={"speed": "slow"})]
    assert name_of(find_best_match(pvc(selector={"matchLabels": {"speed": "fast"}}), volumes)) == "fast"
    expr = {"matchExpressions": [{"key": "speed", "operator": "In", "values": ["turbo"]}]}
    assert find_best_match(pvc(selector=expr), volumes) is None
    assert name_of(find_best_match(pvc(selector={}), volumes)) == "slow"


def test_volume_pre_bound_to_the_claim_comes_first() -> None:
    ref = {"namespace": "ns", "name": "data"}
    volumes = [pv("small", "1Gi"), pv("mine", "10Gi", phase="Pending", claim=ref),
               pv("other", "1Gi", claim={"namespace": "ns", "name": "else"})]
    assert name_of(find_best_match(pvc(), volumes)) == "mine"
    # A claimRef with another claim's UID is not ours, and a volume claimed by another is never offered.
    stale = [pv("stale", "1Gi", claim={**ref, "uid": "someone-else"}), volumes[2]]
    assert find_best_match(pvc(), stale) is None
    # Pre-bound volumes are still returned for WaitForFirstConsumer claims; the others are the scheduler's.
    assert name_of(find_best_match(pvc(), volumes, delay_binding=True)) == "mine"
    assert find_best_match(pvc(), [pv("free", "1Gi")], delay_binding=True) is None


def test_node_affinity_does_not_matter_for_immediate_binding() -> None:
    affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}
    assert name_of(find_best_match(pvc(), [pv("local", "1Gi", nodeAffinity=affinity)])) == "local"


def test_requested_volume_checks() -> None:
    assert check_volume_satisfies_claim(pv("v", "1Gi"), pvc()) is None
    assert check_volume_satisfies_claim(pv("v", "500Mi"), pvc()) == "requested PV is too small"
    assert check_volume_satisfies_claim(pv("v", "1Gi", sc="gold"), pvc()) == "storageClassName does not match"
    assert check_volume_satisfies_claim(pv("v", "1Gi", volumeMode="Block"), pvc()) == "incompatible volumeMode"
    assert check_volume_satisfies_claim(pv("v", "1Gi", modes=(ROX,)), pvc()) == "incompatible accessMode"


def pod(name: str, volumes: list[dict], node: str = "n1", phase: str = "Running", **meta: Any) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"pod-{name}", **meta},
            "spec": {"nodeName": node, "volumes": volumes}, "status": {"phase": phase}}


def test_pod_uses_claim() -> None:
    claim = pvc("data")
    uses = [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]
    assert pod_uses_claim(pod("p", uses), claim)
    assert not pod_uses_claim(pod("p", [{"name": "v", "persistentVolumeClaim": {"claimName": "other"}}]), claim)
    assert not pod_uses_claim(pod("p", uses, node=""), claim), "an unscheduled pod does not hold the volume"
    assert not pod_uses_claim(pod("p", uses, phase="Succeeded"), claim)
    assert not pod_uses_claim(pod("p", uses, phase="Failed"), claim)
    shut_down = pod("p", uses, deletionTimestamp="2024-01-01T00:00:00Z", deletionGracePeriodSeconds=0)
    assert not pod_uses_claim(shut_down, claim)
    terminating = pod("p", uses, deletionTimestamp="2024-01-01T00:00:00Z", deletionGracePeriodSeconds=30)
    assert pod_uses_claim(terminating, claim)


def test_pod_uses_its_ephemeral_claim_only() -> None:
    ephemeral = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]
    claim = pvc("web-scratch")
    assert not pod_uses_claim(pod("web", ephemeral), claim), "not owned by the pod"
    claim["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "pod-web",
                                             "controller": True}]
    assert pod_uses_claim(pod("web", ephemeral), claim)
    assert not pod_uses_claim(pod("db", ephemeral), claim)
