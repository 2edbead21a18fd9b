"""Service specs that kube-proxy and the node agents later act on are validated as upstream's
ValidateService does: every malformed field is a 422 naming it, and nothing is stored."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest


@pytest.fixture(scope="module")
def client(apiserver: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=apiserver, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def ns(client: httpx.Client) -> str:
    name = f"svcval-{uuid.uuid4().hex[:8]}"
    assert client.post("/api/v1/namespaces", json={"metadata": {"name": name}}).status_code == 201
    return name


PORTS = [{"port": 80}]


def _create(client: httpx.Client, ns: str, spec: dict[str, Any]) -> httpx.Response:
    name = f"s-{uuid.uuid4().hex[:8]}"
    return client.post(f"/api/v1/namespaces/{ns}/services", json={"metadata": {"name": name}, "spec": spec})


@pytest.mark.parametrize(("spec", "field", "message"), [
    ({"ports": PORTS, "externalIPs": ["not-an-ip"]}, "spec.externalIPs[0]",
     'Invalid value: "not-an-ip": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)'),
    ({"ports": PORTS, "externalIPs": [""]}, "spec.externalIPs[0]", 'Invalid value: "": must be a valid IP address'),
    ({"ports": PORTS, "externalIPs": ["127.0.0.1"]}, "spec.externalIPs[0]",
     'Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)'),
    ({"ports": PORTS, "externalIPs": ["169.254.169.254"]}, "spec.externalIPs[0]", "may not be in the link-local range"),
    ({"ports": PORTS, "externalIPs": ["0.0.0.0"]}, "spec.externalIPs[0]", "may not be unspecified (0.0.0.0)"),
    ({"ports": PORTS, "ipFamilies": ["IPv5"]}, "spec.ipFamilies[0]",
     'Unsupported value: "IPv5": supported values: "IPv4", "IPv6"'),
    ({"ports": PORTS, "ipFamilies": [""]}, "spec.ipFamilies[0]", 'Unsupported value: ""'),
    ({"ports": PORTS, "ipFamilies": ["IPv4", "IPv4"]}, "spec.ipFamilies[1]", 'Duplicate value: "IPv4"'),
    ({"ports": PORTS, "ipFamilies": ["IPv6"]}, "spec.ipFamilies[0]", "ipfamily IPv6 is not configured on cluster"),
    ({"ports": PORTS, "ipFamilyPolicy": "Sometimes"}, "spec.ipFamilyPolicy",
     'Unsupported value: "Sometimes": supported values: "PreferDualStack", "RequireDualStack", "SingleStack"'),
    ({"ports": PORTS, "ipFamilyPolicy": "RequireDualStack"}, "spec.ipFamilyPolicy",
     "this cluster is not configured for dual-stack services"),
    ({"ports": PORTS, "clusterIP": "10.96.0.32", "clusterIPs": ["10.96.0.32", "fd00::32"],
      "ipFamilyPolicy": "PreferDualStack"}, "spec.clusterIPs[1]", "IPv6 is not configured on this cluster"),
    ({"ports": PORTS, "clusterIP": "10.96.0.33", "clusterIPs": ["10.96.0.33", "fd00::33"]}, "spec.ipFamilyPolicy",
     "must be 'RequireDualStack' or 'PreferDualStack' when multiple IPs are specified"),
    ({"ports": PORTS, "clusterIP": "10.96.0.300"}, "spec.clusterIPs[0]", "must be a valid IP address"),
    ({"ports": PORTS, "clusterIP": "10.96.0.30", "clusterIPs": ["10.96.0.30", "10.96.0.31"]}, "spec.clusterIPs",
     "may specify no more than one IP for each IP family"),
    ({"ports": PORTS, "clusterIP": "10.96.0.30", "clusterIPs": ["10.96.0.30", "fd00::1", "10.96.0.31"]},
     "spec.clusterIPs", "may only hold up to 2 values"),
    ({"ports": PORTS, "clusterIP": "None", "clusterIPs": ["None", "10.96.0.31"]}, "spec.clusterIPs",
     "'None' must be the first and only value"),
    ({"ports": PORTS, "clusterIP": "fd00::10", "ipFamilies": ["IPv4"]}, "spec.clusterIPs[0]",
     "expected an IPv4 value as indicated by `ipFamilies[0]`"),
    ({"ports": [{"port": 80, "nodePort": 30080}, {"port": 81, "nodePort": 30080, "name": "b"}], "type": "NodePort"},
     "spec.ports[1].nodePort", "Duplicate value: 30080"),
    ({"ports": [{"port": 80, "nodePort": 80}], "type": "NodePort"}, "spec.ports[0].nodePort",
     "provided port is not in the valid range. The range of valid ports is 30000-32767"),
    ({"ports": [{"port": 80, "nodePort": 30001}]}, "spec.ports[0].nodePort",
     "Forbidden: may not be used when `type` is 'ClusterIP'"),
    ({"ports": [{"port": 80, "appProtocol": "not a name"}]}, "spec.ports[0].appProtocol", "Invalid value"),
    ({"ports": [{"port": 10250}], "type": "LoadBalancer"}, "spec.ports[0]",
     "may not expose port 10250 externally since it is used by kubelet"),
    ({"ports": PORTS, "type": "NodePort", "clusterIP": "None"}, "spec.clusterIP",
     "may not be set to 'None' for NodePort services"),
    ({"ports": PORTS, "type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/8", "nope"]},
     "spec.LoadBalancerSourceRanges", "must be a list of IP ranges"),
    ({"ports": PORTS, "loadBalancerSourceRanges": ["10.0.0.0/8"]}, "spec.LoadBalancerSourceRanges",
     "Forbidden: may only be used when `type` is 'LoadBalancer'"),
    ({"ports": PORTS, "allocateLoadBalancerNodePorts": False}, "spec.allocateLoadBalancerNodePorts",
     "Forbidden: may only be used when `type` is 'LoadBalancer'"),
    ({"ports": PORTS, "loadBalancerClass": "example.com/lb"}, "spec.loadBalancerClass",
     "Forbidden: may only be used when `type` is 'LoadBalancer'"),
    ({"type": "ExternalName", "externalName": ""}, "spec.externalName", "Required value"),
    ({"type": "ExternalName", "externalName": "not a host"}, "spec.externalName", "Invalid value"),
    ({"type": "ExternalName", "externalName": "db.example.com", "ipFamilies": ["IPv4"]}, "spec.ipFamilies",
     "Forbidden: may not be set for ExternalName services"),
    ({"ports": PORTS, "sessionAffinity": "Sticky"}, "spec.sessionAffinity", 'Unsupported value: "Sticky"'),
    ({"ports": PORTS, "sessionAffinity": "None", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}}},
     "spec.sessionAffinityConfig", "Forbidden: must not be set when session affinity is None"),
    ({"ports": PORTS, "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 0}}},
     "spec.sessionAffinityConfig.clientIP.timeoutSeconds", "must be greater than 0 and less than 86400"),
    ({"ports": PORTS, "externalTrafficPolicy": "Local"}, "spec.externalTrafficPolicy",
     "may only be set for externally-accessible services"),
    ({"ports": PORTS, "type": "NodePort", "externalTrafficPolicy": "Everywhere"}, "spec.externalTrafficPolicy",
     'Unsupported value: "Everywhere": supported values: "Cluster", "Local"'),
    ({"ports": PORTS, "internalTrafficPolicy": ""}, "spec.internalTrafficPolicy", 'Unsupported value: ""'),
    ({"ports": PORTS, "type": "NodePort", "healthCheckNodePort": 30500}, "spec.healthCheckNodePort",
     "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"),
    ({"ports": PORTS, "trafficDistribution": "Anywhere"}, "spec.trafficDistribution",
     'Unsupported value: "Anywhere": supported values: "PreferClose"'),
    ({"ports": PORTS, "type": "Bridge"}, "spec.type",
     'Unsupported value: "Bridge": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"'),
])
def test_invalid_service_is_refused(client: httpx.Client, ns: str, spec: dict[str, Any], field: str,
                                    message: str) -> None:
    before = client.get(f"/api/v1/namespaces/{ns}/services").json()["items"]
    r = _create(client, ns, spec)
    assert r.status_code == 422, r.text
    causes = r.json()["details"]["causes"]
    assert any(c["field"] == field and message in c["message"] for c in causes), causes
    assert client.get(f"/api/v1/namespaces/{ns}/services").json()["items"] == before


@pytest.mark.parametrize("spec", [
    {"ports": PORTS, "externalIPs": ["192.0.2.10", "2001:db8::10"]},
    {"ports": PORTS, "type": "LoadBalancer", "loadBalancerSourceRanges": [" 10.0.0.0/8", "192.168.0.0/16"],
     "loadBalancerClass": "example.com/lb", "externalTrafficPolicy": "Local"},
    {"type": "ExternalName", "externalName": "db.example.com."},
    {"ports": PORTS, "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}},
    {"ports": [{"port": 53, "protocol": "UDP", "nodePort": 30053, "name": "u"},
               {"port": 53, "protocol": "TCP", "nodePort": 30053, "name": "t"}], "type": "NodePort"},
    {"clusterIP": "None", "ports": PORTS},
    {"ports": [{"port": 80, "protocol": ""}], "type": "", "sessionAffinity": ""},
])
def test_valid_service_is_accepted(client: httpx.Client, ns: str, spec: dict[str, Any]) -> None:
    r = _create(client, ns, spec)
    assert r.status_code == 201, r.text


def test_cluster_ip_service_with_external_ips_gets_a_traffic_policy(client: httpx.Client, ns: str) -> None:
    r = _create(client, ns, {"ports": PORTS, "externalIPs": ["192.0.2.11"]})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["externalTrafficPolicy"] == "Cluster"


def test_cluster_ip_and_family_never_change(client: httpx.Client, ns: str) -> None:
    r = _create(client, ns, {"ports": PORTS})
    assert r.status_code == 201, r.text
    svc = r.json()
    path = f"/api/v1/namespaces/{ns}/services/{svc['metadata']['name']}"
    ip = svc["spec"]["clusterIP"]
    other = "10.96.0.77" if ip != "10.96.0.77" else "10.96.0.78"
    moved = {**svc, "spec": {**svc["spec"], "clusterIP": other, "clusterIPs": [other]}}
    r = client.put(path, json=moved)
    assert r.status_code == 422, r.text
    assert {"field": "spec.clusterIPs[0]", "reason": "FieldValueInvalid",
            "message": f'Invalid value: ["{other}"]: may not change once set'} in r.json()["details"]["causes"]
    r = client.put(path, json={**svc, "spec": {**svc["spec"], "ipFamilies": ["IPv6"]}})
    assert r.status_code == 422, r.text
    assert any(c["field"] == "spec.ipFamilies[0]" and "may not change once set" in c["message"]
               for c in r.json()["details"]["causes"])
    assert client.get(path).json()["spec"]["clusterIPs"] == [ip]
    # Leaving the allocated values out keeps them, as kubectl apply of the original manifest does.
    r = client.put(path, json={"metadata": svc["metadata"], "spec": {"ports": PORTS, "selector": {"a": "b"}}})
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["clusterIPs"] == [ip]


def test_topology_annotations_must_agree(client: httpx.Client, ns: str) -> None:
    r = client.post(f"/api/v1/namespaces/{ns}/services", json={
        "metadata": {"name": "topo", "annotations": {"service.kubernetes.io/topology-mode": "Auto",
                                                      "service.kubernetes.io/topology-aware-hints": "Disabled"}},
        "spec": {"ports": PORTS}})
    assert r.status_code == 422, r.text
    assert r.json()["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "metadata.annotations[service.kubernetes.io/topology-mode]",
        "message": 'Invalid value: "Auto": must match annotations[service.kubernetes.io/topology-aware-hints] '
                   "when both are specified"}]
