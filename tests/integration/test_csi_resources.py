"""storage.k8s.io/v1 CSIDriver (cluster-scoped, with upstream's defaults) and CSIStorageCapacity
(namespaced) with every verb, as the conformance suite's CSIDriver and CSIStorageCapacity API specs use them."""

from __future__ import annotations

import json

import httpx

from tests.conftest import Kubectl

GROUP = "/apis/storage.k8s.io/v1"


def test_discovery_lists_both(kubectl: Kubectl) -> None:
    rows = {line.split()[0]: line.split() for line in
            kubectl.run("api-resources", "--api-group=storage.k8s.io", "--no-headers").stdout.splitlines()}
    assert rows["csidrivers"][-2:] == ["false", "CSIDriver"]
    assert rows["csistoragecapacities"][-2:] == ["true", "CSIStorageCapacity"]


def test_csi_driver_defaults_and_verbs(kubectl: Kubectl, apiserver: str) -> None:
    kubectl.run("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": "csi.conformance.example.com", "labels": {"e2e": "csidriver"}}, "spec": {}}))
    got = kubectl.json("get", "csidriver", "csi.conformance.example.com")
    assert got["spec"] == {"attachRequired": True, "podInfoOnMount": False,
                           "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"],
                           "storageCapacity": False, "requiresRepublish": False, "seLinuxMount": False}
    assert "namespace" not in got["metadata"]
    table = kubectl.run("get", "csidriver", "csi.conformance.example.com").stdout.split("\n")
    assert table[0].split() == ["NAME", "ATTACHREQUIRED", "PODINFOONMOUNT", "STORAGECAPACITY", "TOKENREQUESTS",
                                "REQUIRESREPUBLISH", "MODES", "AGE"]
    assert table[1].split()[:7] == ["csi.conformance.example.com", "true", "false", "false", "<unset>", "false",
                                    "Persistent"]
    base = f"{apiserver}{GROUP}/csidrivers"
    listed = httpx.get(base, params={"labelSelector": "e2e=csidriver"}).json()
    assert [i["metadata"]["name"] for i in listed["items"]] == ["csi.conformance.example.com"]
    r = httpx.patch(f"{base}/csi.conformance.example.com", json={"metadata": {"annotations": {"patched": "true"}},
                                                                 "spec": {"podInfoOnMount": True}},
                    headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200 and r.json()["spec"]["podInfoOnMount"] is True
    current = r.json()
    current["spec"]["attachRequired"] = False
    r = httpx.put(f"{base}/csi.conformance.example.com", json=current)
    assert r.status_code == 422
    assert r.json()["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.attachRequired",
                                              "message": "Invalid value: false: field is immutable"}]
    r = httpx.delete(base, params={"labelSelector": "e2e=csidriver"})
    assert r.status_code == 200
    assert httpx.get(f"{base}/csi.conformance.example.com").status_code == 404


def test_csi_driver_validation(apiserver: str) -> None:
    body = {"metadata": {"name": "bad_name"}, "spec": {"fsGroupPolicy": "Sometimes",
                                                       "volumeLifecycleModes": ["Forever"],
                                                       "tokenRequests": [{"audience": "a", "expirationSeconds": 60},
                                                                         {"audience": "a"}]}}
    r = httpx.post(f"{apiserver}{GROUP}/csidrivers", json=body)
    assert r.status_code == 422
    causes = {c["field"]: c["message"] for c in r.json()["details"]["causes"]}
    assert causes["metadata.name"].startswith('Invalid value: "bad_name": a lowercase RFC 1123 subdomain')
    assert causes["spec.fsGroupPolicy"] == ('Unsupported value: "Sometimes": supported values: "File", "None", '
                                            '"ReadWriteOnceWithFSType"')
    assert causes["spec.volumeLifecycleModes[0]"] == ('Unsupported value: "Forever": supported values: '
                                                      '"Ephemeral", "Persistent"')
    assert causes["spec.tokenRequests[0].expirationSeconds"] == ("Invalid value: 60: may not specify a duration "
                                                                  "less than 10 minutes")
    assert causes["spec.tokenRequests[1].audience"] == 'Duplicate value: "a"'


def test_csi_storage_capacity_verbs(kubectl: Kubectl, apiserver: str, unique_ns: str) -> None:
    base = f"{apiserver}{GROUP}/namespaces/{unique_ns}/csistoragecapacities"
    body = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
            "metadata": {"generateName": "e2e-", "labels": {"e2e": "capacity"}},
            "storageClassName": "e2e-sc", "nodeTopology": {"matchLabels": {"zone": "a"}}, "capacity": "1Gi"}
    r = httpx.post(base, json=body)
    assert r.status_code == 201, r.text
    name = r.json()["metadata"]["name"]
    assert r.json()["metadata"]["namespace"] == unique_ns and r.json()["capacity"] == "1Gi"
    assert kubectl.json("-n", unique_ns, "get", "csistoragecapacity", name)["storageClassName"] == "e2e-sc"
    table = kubectl.run("-n", unique_ns, "get", "csistoragecapacities").stdout.split("\n")
    assert table[0].split() == ["NAME", "STORAGECLASSNAME", "CAPACITY"] and table[1].split() == [name, "e2e-sc", "1Gi"]
    everywhere = httpx.get(f"{apiserver}{GROUP}/csistoragecapacities", params={"labelSelector": "e2e=capacity"})
    assert name in [i["metadata"]["name"] for i in everywhere.json()["items"]]
    with httpx.stream("GET", base, params={"watch": "1", "resourceVersion": "0", "timeoutSeconds": "5"},
                      timeout=10) as w:
        first = json.loads(next(w.iter_lines()))
    assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == name
    r = httpx.patch(f"{base}/{name}", json={"maximumVolumeSize": "512Mi"},
                    headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200 and r.json()["maximumVolumeSize"] == "512Mi"
    current = r.json()
    current["capacity"] = "-1"
    current["storageClassName"] = "other"
    r = httpx.put(f"{base}/{name}", json=current)
    assert r.status_code == 422
    causes = {c["field"]: c["message"] for c in r.json()["details"]["causes"]}
    assert causes["capacity"] == 'Invalid value: "-1": must be greater than or equal to 0'
    assert causes["storageClassName"] == 'Invalid value: "other": field is immutable'
    assert httpx.delete(base, params={"labelSelector": "e2e=capacity"}).status_code == 200
    assert httpx.get(base).json()["items"] == []
