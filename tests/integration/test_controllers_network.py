"""The service-networking controllers (Endpoints, EndpointSlice, mirroring, node IPAM, root CA
publisher) in a real controller-manager process, with pods run by a hollow kubelet
(tests/integration/cluster.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.client import AlreadyExists, Client, ClientConfig, NotFound, gvr
from services.runtime.pki import create_ca
from tests.integration import cluster as plane
from tests.integration.cluster import NODE_NAMES, Cluster, Proc, eventually, register_nodes, script

cluster = plane.cluster
unique_ns = plane.unique_ns

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
SERVICES = gvr("v1", "services")
ENDPOINTS = gvr("v1", "endpoints")
SLICES = gvr("discovery.k8s.io/v1", "endpointslices")
CONFIGMAPS = gvr("v1", "configmaps")
EVENTS = gvr("v1", "events")

#: the hollow nodes, every one in zone-a
NET_NODES = NODE_NAMES
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"
CONTROLLERS = "endpoint,endpointslice,endpointslicemirroring,nodeipam,root-ca-cert-publisher"


@pytest.fixture(scope="module")
def cluster_cidr(cluster: Cluster) -> ipaddress.IPv4Network:
    """A pod range just big enough for the nodes already there and a few more, so the IPAM test can
    fill it up."""
    existing = len(httpx.get(f"{cluster.url}/api/v1/nodes", timeout=10).json()["items"])
    capacity = max(4, 1 << math.ceil(math.log2(existing + 3)))
    return ipaddress.ip_network(f"10.123.0.0/{24 - int(math.log2(capacity))}", strict=False)


@pytest.fixture(scope="module")
def root_ca_file(cluster: Cluster) -> Path:
    path = cluster.workdir / "network-root-ca.crt"
    path.write_bytes(create_ca("network-test-ca").cert_pem())
    return path


@pytest.fixture(scope="module")
def root_ca_pem(root_ca_file: Path) -> str:
    return root_ca_file.read_text()


@pytest.fixture(scope="module")
def controller_manager(cluster: Cluster, cluster_cidr: ipaddress.IPv4Network, root_ca_file: Path) -> Iterator[Proc]:
    cm = cluster.controller_manager("cm-network", f"--controllers={CONTROLLERS}", "--leader-elect=false",
                                    "--allocate-node-cidrs", f"--cluster-cidr={cluster_cidr}",
                                    "--node-cidr-mask-size=24", "--service-cluster-ip-range=10.96.0.0/12",
                                    f"--root-ca-file={root_ca_file}")
    yield cm
    cm.stop()


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=cluster.url)) as c:
        yield c


@pytest.fixture
def kubelet(cluster: Cluster, controller_manager: Proc) -> Proc:
    """The hollow kubelet running the cluster's nodes, with this module's controller-manager up."""
    return cluster.kubelet


def pod_body(name: str, node: str, *, app: str = "web", web_port: int = 8080, grace: int = 0,
             finalizers: list[str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app": app}, "annotations": annotations or {}}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": grace,
                     "containers": [{"name": "c", "image": "nginx",
                                     "ports": [{"name": "web", "containerPort": web_port}]}]}}


def service_body(name: str, target: int | str = 8080, selector: dict[str, str] | None = None,
                 **spec: Any) -> dict[str, Any]:
    body_spec: dict[str, Any] = {"ports": [{"name": "http", "port": 80, "targetPort": target, "protocol": "TCP"}],
                                 **spec}
    if selector is not None:
        body_spec["selector"] = selector
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {"tier": "front"}},
            "spec": body_spec}


async def slices_of(client: Client, ns: str, service: str) -> list[dict[str, Any]]:
    return (await client.list(SLICES, ns, label_selector=f"kubernetes.io/service-name={service}"))["items"]


async def endpoints_of(client: Client, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return await client.get(ENDPOINTS, name, ns)
    except NotFound:
        return None


def by_pod(slice_: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["targetRef"]["name"]: e for e in slice_.get("endpoints") or []}


def subset_ips(endpoints: dict[str, Any] | None, field: str) -> set[str]:
    return {a["targetRef"]["name"] for s in (endpoints or {}).get("subsets") or [] for a in s.get(field) or []}


async def test_service_gets_endpoints_and_slice_with_conditions(
        client: Client, kubelet: Proc, unique_ns: str) -> None:
    # web-1's container exits after running for five seconds, so the pod is Ready, then (crash-looping
    # in a ten-second back-off) not Ready, then Ready again for five seconds, and so on.
    for i, node in enumerate(NET_NODES):
        crash = script("c", "exit=1,after=5") if i == 1 else None
        await client.create(PODS, pod_body(f"web-{i}", node, annotations=crash), unique_ns)
    await client.create(SERVICES, service_body("web", "web", {"app": "web"}), unique_ns)

    async def three_ready() -> dict[str, Any] | None:
        ep = await endpoints_of(client, unique_ns, "web")
        return ep if subset_ips(ep, "addresses") == {"web-0", "web-1", "web-2"} else None

    ep = await eventually(three_ready, what="endpoints with three ready addresses")
    (subset,) = ep["subsets"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    pods = {p["metadata"]["name"]: p for p in (await client.list(PODS, unique_ns))["items"]}
    for address in subset["addresses"]:
        pod = pods[address["targetRef"]["name"]]
        assert address["ip"] == pod["status"]["podIP"]
        assert address["nodeName"] == pod["spec"]["nodeName"]
        assert address["targetRef"]["uid"] == pod["metadata"]["uid"]
        assert address["targetRef"]["kind"] == "Pod"
    assert TRIGGER in ep["metadata"]["annotations"]
    assert ep["metadata"]["labels"] == {"tier": "front"}

    async def slice_ready() -> dict[str, Any] | None:
        slices = await slices_of(client, unique_ns, "web")
        if len(slices) == 1 and [e["conditions"]["ready"] for e in slices[0].get("endpoints") or []] == [True] * 3:
            return slices[0]
        return None

    slice_ = await eventually(slice_ready, what="one slice with three endpoints")
    svc = await client.get(SERVICES, "web", unique_ns)
    assert slice_["addressType"] == "IPv4"
    assert slice_["metadata"]["labels"][MANAGED_BY] == "endpointslice-controller.k8s.io"
    assert slice_["metadata"]["labels"]["tier"] == "front"
    assert slice_["metadata"]["ownerReferences"][0]["uid"] == svc["metadata"]["uid"]
    assert slice_["metadata"]["ownerReferences"][0]["kind"] == "Service"
    assert TRIGGER in slice_["metadata"]["annotations"]
    assert slice_["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    for name, endpoint in by_pod(slice_).items():
        assert endpoint["conditions"] == {"ready": True, "serving": True, "terminating": False}
        assert endpoint["addresses"] == [pods[name]["status"]["podIP"]]
        assert endpoint["nodeName"] == pods[name]["spec"]["nodeName"]
        assert endpoint["zone"] == "zone-a"
        assert not endpoint.get("hints")

    # web-1 turning not-ready (its container exited) moves to notReadyAddresses and ready=false.
    async def moved() -> bool:
        ep = await endpoints_of(client, unique_ns, "web")
        slices = await slices_of(client, unique_ns, "web")
        return (subset_ips(ep, "notReadyAddresses") == {"web-1"} and subset_ips(ep, "addresses") == {"web-0", "web-2"}
                and len(slices) == 1 and by_pod(slices[0])["web-1"]["conditions"] == {
                    "ready": False, "serving": False, "terminating": False})

    await eventually(moved, what="not-ready pod in notReadyAddresses and ready=false")

    # A terminating (still ready) pod is serving and terminating in the slice, gone from Endpoints.
    await client.create(PODS, pod_body("web-term", NET_NODES[0], grace=30, finalizers=["test.pyk8s.io/hold"]),
                        unique_ns)
    await eventually(lambda: _in_addresses(client, unique_ns, "web-term"), what="web-term ready")
    # A frozen kubelet leaves the deleted pod's containers running and its Ready condition as it was.
    with kubelet.frozen():
        await client.delete(PODS, "web-term", unique_ns, grace_period_seconds=30)

        async def terminating() -> bool:
            ep = await endpoints_of(client, unique_ns, "web")
            slices = await slices_of(client, unique_ns, "web")
            endpoint = by_pod(slices[0]).get("web-term") if len(slices) == 1 else None
            return "web-term" not in subset_ips(ep, "addresses") | subset_ips(ep, "notReadyAddresses") and (
                endpoint is not None
                and endpoint["conditions"] == {"ready": False, "serving": True, "terminating": True})

        await eventually(terminating, what="terminating pod serving+terminating in the slice only")
    await client.patch(PODS, "web-term", {"metadata": {"finalizers": None}}, unique_ns)

    async def gone() -> bool:
        slices = await slices_of(client, unique_ns, "web")
        return len(slices) == 1 and "web-term" not in by_pod(slices[0])

    await eventually(gone, what="deleted pod leaves the slice")


async def _in_addresses(client: Client, ns: str, pod: str) -> bool:
    return pod in subset_ips(await endpoints_of(client, ns, "web"), "addresses")


async def test_named_target_ports_resolve_per_pod(client: Client, kubelet: Proc, unique_ns: str) -> None:
    await client.create(PODS, pod_body("a", NET_NODES[0], web_port=8080), unique_ns)
    await client.create(PODS, pod_body("b", NET_NODES[1], web_port=9090), unique_ns)
    await client.create(SERVICES, service_body("web", "web", {"app": "web"}), unique_ns)

    async def split() -> list[tuple[set[str], int]] | None:
        ep = await endpoints_of(client, unique_ns, "web")
        got = sorted(({a["targetRef"]["name"] for a in s.get("addresses") or []}, s["ports"][0]["port"])
                     for s in (ep or {}).get("subsets") or [])
        return got if got == [({"a"}, 8080), ({"b"}, 9090)] else None

    await eventually(split, what="one subset per resolved port")

    async def slices_split() -> bool:
        slices = await slices_of(client, unique_ns, "web")
        got = sorted((s["ports"][0]["port"], sorted(by_pod(s))) for s in slices if s.get("ports"))
        return got == [(8080, ["a"]), (9090, ["b"])] and len(slices) == 2

    await eventually(slices_split, what="one slice per resolved port")


async def test_250_pods_give_three_slices_and_little_churn(
        client: Client, kubelet: Proc, unique_ns: str) -> None:
    await client.create(SERVICES, service_body("big", 8080, {"app": "big"}), unique_ns)
    limit = asyncio.Semaphore(16)

    async def make(i: int) -> None:
        """Create one pod; a dropped connection under load is retried (a repeat may find it made)."""
        async with limit:
            for _ in range(5):
                try:
                    await client.create(PODS, pod_body(f"big-{i}", NET_NODES[i % 3], app="big"), unique_ns)
                    return
                except AlreadyExists:
                    return
                except httpx.TransportError:
                    await asyncio.sleep(0.2)
            raise AssertionError(f"could not create big-{i}")

    await asyncio.gather(*(make(i) for i in range(250)))

    async def packed() -> list[dict[str, Any]] | None:
        slices = await slices_of(client, unique_ns, "big")
        ready = [e for s in slices for e in s.get("endpoints") or [] if e["conditions"]["ready"]]
        return slices if len(ready) == 250 and len(slices) == 3 else None

    slices = await eventually(packed, within=90, what="250 ready endpoints in three slices")
    assert all(len(s["endpoints"]) <= 100 for s in slices)
    assert len({e["targetRef"]["name"] for s in slices for e in s["endpoints"]}) == 250
    ep = await eventually(lambda: _endpoints_with(client, unique_ns, "big", 250), what="250 addresses")
    assert "endpoints.kubernetes.io/over-capacity" not in ep["metadata"].get("annotations", {})

    before = {s["metadata"]["name"] for s in slices}
    await client.delete(PODS, "big-7", unique_ns)

    async def removed() -> list[dict[str, Any]] | None:
        now = await slices_of(client, unique_ns, "big")
        names = {e["targetRef"]["name"] for s in now for e in s.get("endpoints") or []}
        return now if len(names) == 249 and "big-7" not in names else None

    after = await eventually(removed, what="deleted pod gone from the slices")
    assert {s["metadata"]["name"] for s in after} == set(before)
    generations = {s["metadata"]["name"]: s["metadata"]["generation"] for s in slices}
    untouched = [s for s in after if s["metadata"]["generation"] == generations[s["metadata"]["name"]]]
    assert len(untouched) == 2


async def _endpoints_with(client: Client, ns: str, name: str, count: int) -> dict[str, Any] | None:
    ep = await endpoints_of(client, ns, name)
    return ep if len(subset_ips(ep, "addresses")) == count else None


async def test_selectorless_service_keeps_manual_endpoints_and_gets_mirrored_slice(
        client: Client, controller_manager: Proc, unique_ns: str) -> None:
    await client.create(SERVICES, service_body("ext", 5432), unique_ns)
    manual = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "ext", "labels": {"src": "manual"}},
              "subsets": [{"addresses": [{"ip": "192.168.50.1"}, {"ip": "192.168.50.2"}],
                           "ports": [{"name": "http", "port": 5432, "protocol": "TCP"}]}]}
    await client.create(ENDPOINTS, manual, unique_ns)

    async def mirrored() -> dict[str, Any] | None:
        slices = await slices_of(client, unique_ns, "ext")
        if len(slices) == 1 and len(slices[0].get("endpoints") or []) == 2:
            return slices[0]
        return None

    slice_ = await eventually(mirrored, what="mirrored slice")
    assert slice_["metadata"]["labels"][MANAGED_BY] == "endpointslicemirroring-controller.k8s.io"
    assert slice_["metadata"]["labels"]["src"] == "manual"
    assert slice_["metadata"]["ownerReferences"][0]["kind"] == "Endpoints"
    assert sorted(e["addresses"][0] for e in slice_["endpoints"]) == ["192.168.50.1", "192.168.50.2"]
    assert all(e["conditions"]["ready"] for e in slice_["endpoints"])
    assert slice_["ports"] == [{"name": "http", "port": 5432, "protocol": "TCP"}]

    ep = await client.get(ENDPOINTS, "ext", unique_ns)
    ep["subsets"][0]["addresses"] = [{"ip": "192.168.50.3"}]
    await client.replace(ENDPOINTS, ep, namespace=unique_ns)

    async def followed() -> bool:
        slices = await slices_of(client, unique_ns, "ext")
        return len(slices) == 1 and [e["addresses"][0] for e in slices[0].get("endpoints") or []] == ["192.168.50.3"]

    await eventually(followed, what="mirrored slice follows the Endpoints")
    kept = await client.get(ENDPOINTS, "ext", unique_ns)
    assert kept["subsets"][0]["addresses"] == [{"ip": "192.168.50.3"}]

    await client.patch(ENDPOINTS, "ext", {"metadata": {"labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}}},
                       unique_ns)

    async def unmirrored() -> bool:
        return not await slices_of(client, unique_ns, "ext")

    await eventually(unmirrored, what="skip-mirror removes the mirrored slice")


async def test_nodes_get_distinct_pod_cidrs_and_freed_ones_are_reused(
        client: Client, kubelet: Proc, cluster_cidr: ipaddress.IPv4Network) -> None:
    capacity = 1 << (24 - cluster_cidr.prefixlen)

    def inside(node: dict[str, Any]) -> bool:
        cidr = (node.get("spec") or {}).get("podCIDR")
        return bool(cidr) and ipaddress.ip_network(cidr).subnet_of(cluster_cidr)

    async def all_allocated() -> list[dict[str, Any]] | None:
        nodes = (await client.list(NODES))["items"]
        return nodes if all(inside(n) for n in nodes) else None

    nodes = await eventually(all_allocated, what="every existing node allocated")
    free = capacity - len(nodes)
    assert free >= 2
    names = [f"ipam-node-{i}" for i in range(free)]
    try:
        await register_nodes(client, names, unschedulable=True)
        nodes = await eventually(all_allocated, what="new nodes allocated")
        cidrs = [n["spec"]["podCIDR"] for n in nodes]
        assert len(set(cidrs)) == len(cidrs) == capacity
        for node in nodes:
            assert node["spec"]["podCIDRs"] == [node["spec"]["podCIDR"]]
            assert ipaddress.ip_network(node["spec"]["podCIDR"]).prefixlen == 24

        await register_nodes(client, ["ipam-extra"], unschedulable=True)
        names.append("ipam-extra")

        async def refused() -> bool:
            events = (await client.list(EVENTS, "default"))["items"]
            return any(e["involvedObject"].get("name") == "ipam-extra" and e["reason"] == "CIDRNotAvailable"
                       for e in events)

        await eventually(refused, what="CIDRNotAvailable event")
        assert not (await client.get(NODES, "ipam-extra"))["spec"].get("podCIDR")

        freed = (await client.get(NODES, names[0]))["spec"]["podCIDR"]
        await client.delete(NODES, names[0])

        async def reused() -> bool:
            return (await client.get(NODES, "ipam-extra"))["spec"].get("podCIDR") == freed

        await eventually(reused, what="freed CIDR handed to the waiting node")
    finally:
        for name in names:
            try:
                await client.delete(NODES, name)
            except NotFound:
                pass


async def test_root_ca_configmap_published_and_restored(
        client: Client, controller_manager: Proc, unique_ns: str, root_ca_pem: str) -> None:
    want = root_ca_pem

    async def published() -> dict[str, Any] | None:
        try:
            cm = await client.get(CONFIGMAPS, "kube-root-ca.crt", unique_ns)
        except NotFound:
            return None
        return cm if cm.get("data") == {"ca.crt": want} else None

    cm = await eventually(published, what="kube-root-ca.crt")
    assert cm["metadata"]["annotations"]["kubernetes.io/description"]
    await client.patch(CONFIGMAPS, "kube-root-ca.crt", {"data": {"ca.crt": "tampered"}}, unique_ns)
    await eventually(published, what="tampered CA restored")
    await client.delete(CONFIGMAPS, "kube-root-ca.crt", unique_ns)
    await eventually(published, what="deleted ConfigMap recreated")
    assert (await client.get(CONFIGMAPS, "kube-root-ca.crt", "default"))["data"] == {"ca.crt": want}
