"""The service status lifecycle the conformance suite walks (test/e2e/network/service.go "should
complete a service status lifecycle"): status read, patched with an annotation and a load-balancer
ingress, updated with a condition, the service patched and deleted, each step seen by a watch."""

from __future__ import annotations

import json
from typing import Any

import httpx


def test_service_status_lifecycle(apiserver: str, unique_ns: str) -> None:
    base = f"{apiserver}/api/v1/namespaces/{unique_ns}/services"
    selector = {"labelSelector": "test-service-static=true"}
    start = httpx.get(f"{apiserver}/api/v1/services", params=selector).json()["metadata"]["resourceVersion"]
    svc = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "test-service-x1", "labels": {"test-service-static": "true"}},
           "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "protocol": "TCP", "port": 80,
                                                       "targetPort": 80}]}}
    r = httpx.post(base, json=svc)
    assert r.status_code == 201, r.text
    status = httpx.get(f"{base}/test-service-x1/status")
    assert status.status_code == 200 and status.json()["status"]["loadBalancer"] == {}

    patch = {"metadata": {"annotations": {"patchedstatus": "true"}},
             "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}}
    r = httpx.patch(f"{base}/test-service-x1/status", content=json.dumps(patch),
                    headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["annotations"] == {"patchedstatus": "true"}
    assert r.json()["status"]["loadBalancer"]["ingress"][0]["ip"] == "203.0.113.1"

    current = httpx.get(f"{base}/test-service-x1").json()
    current["status"]["conditions"] = [{"type": "StatusUpdate", "status": "True", "reason": "E2E",
                                        "message": "Set from e2e test"}]
    r = httpx.put(f"{base}/test-service-x1/status", json=current)
    assert r.status_code == 200, r.text
    assert r.json()["status"]["conditions"][0]["message"] == "Set from e2e test"
    assert r.json()["status"]["loadBalancer"]["ingress"][0]["ip"] == "203.0.113.1"

    labels = {"metadata": {"labels": {"test-service": "patched"}}}
    r = httpx.patch(f"{base}/test-service-x1", content=json.dumps(labels),
                    headers={"content-type": "application/strategic-merge-patch+json"})
    assert r.status_code == 200, r.text
    assert httpx.delete(f"{base}/test-service-x1").status_code == 200

    events: list[tuple[str, dict[str, Any]]] = []
    params = {**selector, "watch": "1", "resourceVersion": start, "timeoutSeconds": "10"}
    with httpx.stream("GET", base, params=params, timeout=20) as w:
        for line in w.iter_lines():
            event = json.loads(line)
            events.append((event["type"], event["object"]))
            if event["type"] == "DELETED":
                break
    kinds = [t for t, _ in events]
    assert kinds[0] == "ADDED" and kinds[-1] == "DELETED", kinds
    annotated = [o for t, o in events if t == "MODIFIED" and (o["metadata"].get("annotations") or {}).get(
        "patchedstatus") == "true"]
    assert any(o["status"]["loadBalancer"].get("ingress") == [{"ip": "203.0.113.1", "ipMode": "VIP"}]
               for o in annotated), annotated
    assert any(c.get("reason") == "E2E" for o in annotated for c in o["status"].get("conditions") or [])
    assert any(o["metadata"]["labels"].get("test-service") == "patched" for t, o in events if t == "MODIFIED")
    assert events[-1][1]["metadata"]["labels"]["test-service-static"] == "true"


def test_load_balancer_status_is_validated(apiserver: str, unique_ns: str) -> None:
    base = f"{apiserver}/api/v1/namespaces/{unique_ns}/services"
    merge = {"content-type": "application/merge-patch+json"}
    for name, kind in (("lb", "LoadBalancer"), ("cip", "ClusterIP")):
        body = {"metadata": {"name": name}, "spec": {"type": kind, "ports": [{"port": 80}]}}
        assert httpx.post(base, json=body).status_code == 201
    r = httpx.patch(f"{base}/cip/status", json={"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}},
                    headers=merge)
    assert r.status_code == 422
    assert r.json()["details"]["causes"] == [{
        "reason": "FieldValueForbidden", "field": "status.loadBalancer.ingress",
        "message": "Forbidden: may only be used when `spec.type` is 'LoadBalancer'"}]
    bad = {"status": {"loadBalancer": {"ingress": [{"ip": "300.1.1.1"}, {"hostname": "10.0.0.1"},
                                                   {"hostname": "lb.example.com", "ipMode": "Proxy"},
                                                   {"ip": "203.0.113.7", "ipMode": "Tunnel"}]}}}
    r = httpx.patch(f"{base}/lb/status", json=bad, headers=merge)
    assert r.status_code == 422, r.text
    causes = {c["field"]: c["message"] for c in r.json()["details"]["causes"]}
    assert causes == {
        "status.loadBalancer.ingress[0].ip": 'Invalid value: "300.1.1.1": must be a valid IP address, '
                                             "(e.g. 10.9.8.7 or 2001:db8::ffff)",
        "status.loadBalancer.ingress[1].hostname": 'Invalid value: "10.0.0.1": must be a DNS name, not an IP '
                                                   "address",
        "status.loadBalancer.ingress[2].ipMode": "Forbidden: may not be specified when `ip` is not",
        "status.loadBalancer.ingress[3].ipMode": 'Unsupported value: "Tunnel": supported values: "Proxy", "VIP"',
    }
    assert httpx.get(f"{base}/lb").json()["status"] == {"loadBalancer": {}}
    r = httpx.patch(f"{base}/lb/status", json={"status": {"loadBalancer": {"ingress": [
        {"ip": "203.0.113.7", "ipMode": "Proxy"}, {"ip": "203.0.113.8"}]}}}, headers=merge)
    assert r.status_code == 200, r.text
    assert r.json()["status"]["loadBalancer"]["ingress"] == [{"ip": "203.0.113.7", "ipMode": "Proxy"},
                                                             {"ip": "203.0.113.8", "ipMode": "VIP"}]
