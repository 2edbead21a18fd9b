"""Representative Services and EndpointSlices shared by the rule-generation tests."""

from __future__ import annotations

from typing import Any

from proxy_agent.tracker import SERVICE_NAME_LABEL, ChangeTracker, ProxyState


def service(name: str, ns: str = "ns", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name}, "spec": spec}


def endpoint_slice(
    name: str,
    svc: str,
    eps: list[tuple[str, str]],
    port: int = 8080,
    port_name: str = "",
    ns: str = "ns",
    ready: bool = True,
    terminating: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "labels": {SERVICE_NAME_LABEL: svc}},
        "addressType": "IPv4",
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
        "endpoints": [
            {
                "addresses": [ip],
                "nodeName": node,
                "conditions": {"ready": ready, "serving": True, "terminating": terminating},
            }
            for ip, node in eps
        ],
    }


def representative() -> tuple[ChangeTracker, ProxyState]:
    """ClusterIP with 3 endpoints, NodePort, affinity, Local policies, headless, ExternalName, empty."""
    t = ChangeTracker()
    t.service_update(None, service("web", clusterIP="10.96.0.10", ports=[{"name": "http", "port": 80}]))
    t.service_update(
        None, service("np", clusterIP="10.96.0.11", type="NodePort", ports=[{"port": 80, "nodePort": 30080}])
    )
    t.service_update(
        None,
        service(
            "aff",
            clusterIP="10.96.0.12",
            sessionAffinity="ClientIP",
            sessionAffinityConfig={"clientIP": {"timeoutSeconds": 600}},
            ports=[{"port": 80}],
        ),
    )
    t.service_update(
        None,
        service(
            "loc",
            clusterIP="10.96.0.13",
            type="NodePort",
            externalTrafficPolicy="Local",
            healthCheckNodePort=32000,
            ports=[{"port": 80, "nodePort": 30081}],
        ),
    )
    t.service_update(
        None, service("iloc", clusterIP="10.96.0.14", internalTrafficPolicy="Local", ports=[{"port": 80}])
    )
    t.service_update(None, service("headless", clusterIP="None", ports=[{"port": 80}]))
    t.service_update(None, service("ext", type="ExternalName", externalName="example.org"))
    t.service_update(None, service("empty", clusterIP="10.96.0.15", ports=[{"port": 80}]))
    three = [("10.244.0.2", "n1"), ("10.244.0.3", "n1"), ("10.244.1.2", "n2")]
    t.slice_update(endpoint_slice("web-a", "web", three, port_name="http"))
    t.slice_update(endpoint_slice("np-a", "np", three[:2]))
    t.slice_update(endpoint_slice("aff-a", "aff", three[:2]))
    t.slice_update(endpoint_slice("loc-a", "loc", [("10.244.0.2", "n1"), ("10.244.1.2", "n2")]))
    t.slice_update(endpoint_slice("iloc-a", "iloc", [("10.244.1.2", "n2")]))
    t.slice_update(endpoint_slice("headless-a", "headless", three))
    state = ProxyState(node_name="n1", cluster_cidr="10.244.0.0/16", node_ips=("192.168.50.2",))
    t.apply(state, None)
    t.take()
    return t, state
