"""Status subresource writes keep what upstream's status strategies keep: the status and the metadata
sent with it (labels, annotations), never the spec; Deployment status resets labels, Pod status resets
ownerReferences and custom-resource status resets all metadata but managedFields."""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
import pytest

POD_TEMPLATE = {"metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
SELECTOR = {"matchLabels": {"app": "x"}}
MERGE = {"content-type": "application/merge-patch+json"}

# (path under the server, namespaced, kind body, a spec change the status write must not make, status)
CASES: dict[str, tuple[str, bool, dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "jobs": ("/apis/batch/v1", True,
             {"spec": {"template": {**POD_TEMPLATE, "spec": {**POD_TEMPLATE["spec"], "restartPolicy": "Never"}},
                       "suspend": True}},
             {"parallelism": 5}, {"startTime": "2026-01-01T00:00:00Z"}),
    "cronjobs": ("/apis/batch/v1", True,
                 {"spec": {"schedule": "*/1 * * * *", "suspend": True, "jobTemplate": {"spec": {"template": {
                     **POD_TEMPLATE, "spec": {**POD_TEMPLATE["spec"], "restartPolicy": "Never"}}}}}},
                 {"schedule": "*/5 * * * *"}, {"lastScheduleTime": "2026-01-01T00:00:00Z"}),
    "ingresses": ("/apis/networking.k8s.io/v1", True,
                  {"spec": {"defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}}},
                  {"ingressClassName": "other"}, {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}),
    "deployments": ("/apis/apps/v1", True, {"spec": {"selector": SELECTOR, "template": POD_TEMPLATE,
                                                     "paused": True}},
                    {"replicas": 9}, {"observedGeneration": 1}),
    "replicasets": ("/apis/apps/v1", True, {"spec": {"replicas": 0, "selector": SELECTOR,
                                                     "template": POD_TEMPLATE}},
                    {"replicas": 9}, {"replicas": 0, "observedGeneration": 1}),
    "statefulsets": ("/apis/apps/v1", True, {"spec": {"replicas": 0, "selector": SELECTOR,
                                                      "serviceName": "s", "template": POD_TEMPLATE}},
                     {"replicas": 9}, {"replicas": 0, "observedGeneration": 1}),
    "daemonsets": ("/apis/apps/v1", True, {"spec": {"selector": SELECTOR, "template": {
        **POD_TEMPLATE, "spec": {**POD_TEMPLATE["spec"], "nodeSelector": {"none": "none"}}}}},
        {"minReadySeconds": 9}, {"numberMisscheduled": 0, "currentNumberScheduled": 0,
                                 "desiredNumberScheduled": 0, "numberReady": 0, "observedGeneration": 1}),
    "replicationcontrollers": ("/api/v1", True, {"spec": {"replicas": 0, "selector": {"app": "x"},
                                                          "template": POD_TEMPLATE}},
                               {"replicas": 9}, {"replicas": 0, "observedGeneration": 1}),
    "services": ("/api/v1", True, {"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}},
                 {"sessionAffinity": "ClientIP"},
                 {"loadBalancer": {"ingress": [{"ip": "203.0.113.2", "ipMode": "VIP"}]}}),
    "pods": ("/api/v1", True, {"spec": {"containers": [{"name": "c", "image": "busybox"}],
                                        "nodeName": "no-such-node"}},
             {"activeDeadlineSeconds": 9}, {"phase": "Pending", "message": "set through status"}),
    "nodes": ("/api/v1", False, {"spec": {}}, {"unschedulable": True},
              {"capacity": {"cpu": "2"}}),
    "persistentvolumes": ("/api/v1", False, {"spec": {"capacity": {"storage": "1Gi"},
                                                      "accessModes": ["ReadWriteOnce"],
                                                      "hostPath": {"path": "/tmp/x"},
                                                      "storageClassName": "none"}},
                          {"persistentVolumeReclaimPolicy": "Delete"}, {"phase": "Available",
                                                                        "message": "through status"}),
    "persistentvolumeclaims": ("/api/v1", True, {"spec": {"accessModes": ["ReadWriteOnce"],
                                                          "storageClassName": "none",
                                                          "resources": {"requests": {"storage": "1Gi"}}}},
                               {"resources": {"requests": {"storage": "2Gi"}}}, {"phase": "Pending"}),
    "namespaces": ("/api/v1", False, {"spec": {}}, {"finalizers": []}, {"phase": "Active"}),
    "resourcequotas": ("/api/v1", True, {"spec": {"hard": {"pods": "10"}}}, {"hard": {"pods": "20"}},
                       {"hard": {"pods": "10"}, "used": {"pods": "0"}}),
    "horizontalpodautoscalers": ("/apis/autoscaling/v2", True,
                                 {"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                              "name": "none"}, "maxReplicas": 3}},
                                 {"maxReplicas": 9}, {"currentReplicas": 0, "desiredReplicas": 0}),
    "poddisruptionbudgets": ("/apis/policy/v1", True, {"spec": {"minAvailable": 1, "selector": SELECTOR}},
                             {"minAvailable": 2}, {"currentHealthy": 0, "desiredHealthy": 0,
                                                   "disruptionsAllowed": 0, "expectedPods": 0}),
}
KINDS = {"jobs": "Job", "cronjobs": "CronJob", "ingresses": "Ingress", "deployments": "Deployment",
         "replicasets": "ReplicaSet", "statefulsets": "StatefulSet", "daemonsets": "DaemonSet",
         "replicationcontrollers": "ReplicationController", "services": "Service", "pods": "Pod",
         "nodes": "Node", "persistentvolumes": "PersistentVolume",
         "persistentvolumeclaims": "PersistentVolumeClaim", "namespaces": "Namespace",
         "resourcequotas": "ResourceQuota", "horizontalpodautoscalers": "HorizontalPodAutoscaler",
         "poddisruptionbudgets": "PodDisruptionBudget"}
RESETS = {"deployments": {"labels"}}


def _url(apiserver: str, plural: str, ns: str) -> str:
    prefix, namespaced, *_ = CASES[plural]
    return f"{apiserver}{prefix}/namespaces/{ns}/{plural}" if namespaced else f"{apiserver}{prefix}/{plural}"


@pytest.fixture(scope="module")
def ns(apiserver: str) -> str:
    name = f"status-meta-{os.getpid() % 10000}"
    r = httpx.post(f"{apiserver}/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


@pytest.mark.parametrize("plural", sorted(CASES))
def test_status_patch_keeps_metadata_changes(apiserver: str, ns: str, plural: str) -> None:
    prefix, _, body, spec_change, status = CASES[plural]
    name = f"st-{plural[:20]}-{ns}"
    base = _url(apiserver, plural, ns)
    obj = {"apiVersion": prefix.removeprefix("/apis/").removeprefix("/api/"), "kind": KINDS[plural],
           "metadata": {"name": name, "labels": {"keep": "old"}}, **body}
    r = httpx.post(base, json=obj)
    assert r.status_code == 201, r.text
    before = r.json()
    patch = {"metadata": {"labels": {"patchedstatus": "true"}, "annotations": {"patchedstatus": "true"}},
             "spec": spec_change, "status": status}
    r = httpx.patch(f"{base}/{name}/status", json=patch, headers=MERGE)
    assert r.status_code == 200, r.text
    got = r.json()
    for key, value in status.items():
        assert got["status"][key] == value
    assert got["spec"] == before["spec"]
    assert got["metadata"]["annotations"]["patchedstatus"] == "true"
    labels = {k: v for k, v in got["metadata"]["labels"].items() if k != "kubernetes.io/metadata.name"}
    if "labels" in RESETS.get(plural, ()):
        assert labels == {"keep": "old"}
    else:
        assert labels == {"keep": "old", "patchedstatus": "true"}
    assert httpx.get(f"{base}/{name}").json()["metadata"] == got["metadata"]


def test_status_update_keeps_annotations_but_pod_owner_references_stay(apiserver: str, unique_ns: str) -> None:
    base = f"{apiserver}/api/v1/namespaces/{unique_ns}/pods"
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "owned"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "no-such-node"}}
    pod = httpx.post(base, json=body).json()
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "0b0e5c2e-0000-4000-8000-000000000001"}
    pod["metadata"]["ownerReferences"] = [owner]
    pod["metadata"]["annotations"] = {"through": "put"}
    r = httpx.put(f"{base}/owned/status", json=pod)
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["annotations"] == {"through": "put"}
    assert "ownerReferences" not in r.json()["metadata"]


def test_custom_resource_status_resets_metadata(apiserver: str) -> None:
    group = "statusmeta.pyk8s.io"
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"gizmos.{group}"},
           "spec": {"group": group, "scope": "Cluster",
                    "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                                  "schema": {"openAPIV3Schema": {"type": "object",
                                                                 "x-kubernetes-preserve-unknown-fields": True}}}]}}
    crds = f"{apiserver}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    assert httpx.post(crds, json=crd).status_code == 201
    r = httpx.patch(f"{crds}/gizmos.{group}/status", json={"metadata": {"annotations": {"a": "b"}}}, headers=MERGE)
    assert r.status_code == 200 and "annotations" not in r.json()["metadata"]
    base = f"{apiserver}/apis/{group}/v1/gizmos"
    deadline = time.monotonic() + 20
    while httpx.get(base).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    body = {"apiVersion": f"{group}/v1", "kind": "Gizmo", "metadata": {"name": "g", "labels": {"keep": "old"}},
            "spec": {"x": 1}}
    assert httpx.post(base, json=body).status_code == 201
    r = httpx.patch(f"{base}/g/status", json={"metadata": {"labels": {"new": "1"}, "annotations": {"a": "b"}},
                                              "spec": {"x": 2}, "status": {"ok": True}}, headers=MERGE)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["status"] == {"ok": True} and got["spec"] == {"x": 1}
    assert got["metadata"]["labels"] == {"keep": "old"} and "annotations" not in got["metadata"]
