"""StatefulSet identities, pod ordering, claims and their retention owners, rolling-update
partition math, status and revision hashing."""

from __future__ import annotations

from typing import Any

from controller_manager.controllers.statefulset import (
    claim_owner_refs,
    compute_status,
    new_claims,
    new_pod,
    ordinal_range,
    parse_ordinal,
    rolling_update_targets,
)
from controller_manager.history import (
    revision_data,
    safe_encode,
    template_hash,
    template_of,
)

TEMPLATE = {
    "metadata": {"labels": {"app": "web"}},
    "spec": {
        "containers": [{"name": "c", "image": "nginx"}],
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}}],
    },
}


def sts(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "su", "generation": 3},
        "spec": {
            "replicas": 3,
            "serviceName": "web-svc",
            "selector": {"matchLabels": {"app": "web"}},
            "template": TEMPLATE,
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data", "labels": {"tier": "db"}},
                    "spec": {"accessModes": ["ReadWriteOnce"]},
                }
            ],
            **spec,
        },
    }


def pod(ordinal: int, revision: str = "r1", ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"web-{ordinal}",
        "uid": f"p{ordinal}",
        "labels": {"controller-revision-hash": revision},
    }
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_ordinals() -> None:
    assert parse_ordinal("web-12") == ("web", 12)
    assert parse_ordinal("my-web-0") == ("my-web", 0)
    assert parse_ordinal("web") is None
    assert list(ordinal_range(sts())) == [0, 1, 2]
    assert list(ordinal_range(sts(ordinals={"start": 5}, replicas=2))) == [5, 6]


def test_new_pod_identity_and_claims() -> None:
    p = new_pod(sts(), TEMPLATE, 2, "web-abc")
    meta = p["metadata"]
    assert meta["name"] == "web-2"
    assert meta["labels"] == {
        "app": "web",
        "statefulset.kubernetes.io/pod-name": "web-2",
        "apps.kubernetes.io/pod-index": "2",
        "controller-revision-hash": "web-abc",
    }
    assert meta["ownerReferences"][0]["kind"] == "StatefulSet" and meta["ownerReferences"][0]["controller"]
    assert p["spec"]["hostname"] == "web-2" and p["spec"]["subdomain"] == "web-svc"
    volumes = {v["name"]: v for v in p["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-2"}}
    assert "configMap" in volumes["cfg"]
    (claim,) = new_claims(sts(), 2)
    assert claim["metadata"]["name"] == "data-web-2"
    assert claim["metadata"]["labels"] == {"tier": "db", "app": "web"}


def test_claim_retention_owners() -> None:
    claim = {"metadata": {"ownerReferences": [{"kind": "Other", "uid": "o"}]}}
    p = {"metadata": {"name": "web-4", "uid": "pu"}}
    retain = sts(persistentVolumeClaimRetentionPolicy={"whenDeleted": "Retain", "whenScaled": "Retain"})
    assert claim_owner_refs(retain, claim, p, condemned=True) == [{"kind": "Other", "uid": "o"}]
    deleted = sts(persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete", "whenScaled": "Retain"})
    assert [r["uid"] for r in claim_owner_refs(deleted, claim, p, condemned=True)] == ["o", "su"]
    scaled = sts(persistentVolumeClaimRetentionPolicy={"whenDeleted": "Retain", "whenScaled": "Delete"})
    assert [r["uid"] for r in claim_owner_refs(scaled, claim, p, condemned=True)] == ["o", "pu"]
    assert [r["uid"] for r in claim_owner_refs(scaled, claim, p, condemned=False)] == ["o"]
    # Scaling back up takes the pod's ownership away again.
    owned = {"metadata": {"ownerReferences": [{"kind": "Pod", "uid": "pu"}]}}
    assert claim_owner_refs(scaled, owned, p, condemned=False) == []


def test_rolling_update_goes_from_highest_ordinal_to_partition() -> None:
    pods = {i: pod(i) for i in range(5)}
    assert rolling_update_targets(pods, range(5), 0, 1, "r2") == [4]
    assert rolling_update_targets(pods, range(5), 3, 1, "r2") == [4]
    assert rolling_update_targets(pods, range(5), 0, 2, "r2") == [4, 3]
    # One already updated and one down: maxUnavailable 2 allows one more.
    pods[4] = pod(4, "r2")
    pods[3] = pod(3, ready=False)
    assert rolling_update_targets(pods, range(5), 0, 2, "r2") == [3, 2]
    # A pod being deleted counts as unavailable and is not targeted again.
    pods[3] = pod(3, deleting=True)
    assert rolling_update_targets(pods, range(5), 0, 1, "r2") == []
    # Partition above every old pod: nothing to do.
    assert rolling_update_targets({i: pod(i) for i in range(3)}, range(3), 3, 1, "r2") == []


def test_status_and_completed_rollout() -> None:
    pods = [pod(0, "r2"), pod(1, "r2"), pod(2, "r1", ready=False)]
    st = compute_status(sts(), pods, "r1", "r2", 0)
    assert (st["replicas"], st["readyReplicas"], st["currentReplicas"], st["updatedReplicas"]) == (3, 2, 1, 2)
    assert st["currentRevision"] == "r1" and st["observedGeneration"] == 3
    done = compute_status(sts(), [pod(0, "r2"), pod(1, "r2"), pod(2, "r2")], "r1", "r2", 0)
    assert done["currentRevision"] == "r2" and done["currentReplicas"] == 3
    on_delete = compute_status(sts(updateStrategy={"type": "OnDelete"}), [pod(0, "r2")], "r1", "r2", 0)
    assert on_delete["currentRevision"] == "r1"


def test_revision_hash_and_data() -> None:
    assert template_hash(TEMPLATE) == template_hash(
        {"spec": TEMPLATE["spec"], "metadata": TEMPLATE["metadata"]}
    )
    assert template_hash(TEMPLATE) != template_hash(TEMPLATE, 1)
    assert set(template_hash(TEMPLATE)) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert safe_encode("0123") == "4567"  # byte value modulo the alphabet, as upstream
    data = revision_data(TEMPLATE)
    assert data["spec"]["template"]["$patch"] == "replace"
    assert template_of({"data": data}) == TEMPLATE
