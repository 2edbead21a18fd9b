"""Cluster DNS names of a StatefulSet's pods behind its headless Service, end to end: the real
StatefulSet and EndpointSlice controllers, the scheduler and a hollow kubelet (tests/integration/
cluster.py) make the pods and their slices, and `python -m proxy_agent.dns` answers from the API.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy_agent.dns.wire import NXDOMAIN, SRV, A, Message
from services.client import Client, ClientConfig, gvr
from tests.conftest import REPO, free_port
from tests.integration import cluster as plane
from tests.integration.cluster import Cluster, Proc, eventually
from tests.integration.test_dns import query

cluster = plane.cluster
unique_ns = plane.unique_ns

PODS = gvr("v1", "pods")
SERVICES = gvr("v1", "services")
STS = gvr("apps/v1", "statefulsets")


@pytest.fixture(scope="module")
def controller_manager(cluster: Cluster) -> Iterator[Proc]:
    cm = cluster.controller_manager("cm-dns", "--leader-elect=false", "--controllers=statefulset,endpointslice")
    yield cm
    cm.stop()
    print(cm.log_tail(60))  # shown by pytest when a test of this module failed


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[Client]:
    async with Client(ClientConfig(server=cluster.url)) as c:
        yield c


@pytest.fixture
async def dns(cluster: Cluster, tmp_path: Path) -> AsyncIterator[int]:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy_agent.dns", "--master", cluster.url, "--bind-address", "127.0.0.1",
        "--port", str(port), "--resolv-conf", str(resolv), "--health-port", "0",
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                await query(port, "cluster.local", A)
                break
            except (TimeoutError, OSError):
                await asyncio.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        await proc.wait()


def statefulset(name: str, service: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": service,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


async def test_statefulset_pods_resolve_by_hostname(
    client: Client, dns: int, controller_manager: Proc, unique_ns: str
) -> None:
    ns = unique_ns
    await client.create(SERVICES, {
        "metadata": {"name": "db"},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]},
    }, ns)  # fmt: skip
    await client.create(STS, statefulset("web", "db", 2), ns)

    async def pod_ips() -> dict[str, str] | None:
        pods = (await client.list(PODS, ns))["items"]
        ips = {p["metadata"]["name"]: (p.get("status") or {}).get("podIP") for p in pods}
        return ips if len(ips) == 2 and all(ips.values()) else None

    ips: dict[str, str] = await eventually(pod_ips, what="two StatefulSet pods with IPs")
    assert set(ips) == {"web-0", "web-1"}

    async def answer(name: str, qtype: int, check: Any) -> Message:
        async def attempt() -> Message | None:
            msg = await query(dns, name, qtype)
            return msg if check(msg) else None

        return await eventually(attempt, within=40, what=f"{name} answered")

    base = f"db.{ns}.svc.cluster.local"
    # <hostname>.<subdomain>.<namespace>.svc.<zone>: each pod by the hostname its StatefulSet gave it
    for pod, ip in ips.items():
        msg = await answer(f"{pod}.{base}", A, lambda m, ip=ip: m.values(A) == [ip])
        assert msg.rcode == 0 and msg.answers[0][0] == f"{pod}.{base}."
    # the headless Service itself: every ready pod's address, no ClusterIP
    msg = await answer(base, A, lambda m: sorted(m.values(A)) == sorted(ips.values()))
    # SRV names each pod by its stable name, with its address alongside
    srv = await answer(f"_http._tcp.{base}", SRV, lambda m: len(m.values(SRV)) == 2)
    assert sorted(t for *_, t in srv.values(SRV)) == [f"web-0.{base}.", f"web-1.{base}."]
    assert {name: rd for name, _, _, rd in srv.additional} == {f"{p}.{base}.": ip for p, ip in ips.items()}
    assert (await query(dns, f"web-2.{base}", A)).rcode == NXDOMAIN
    # scaled down: web-1's name goes away with its endpoint
    sts = await client.get(STS, "web", ns)
    sts["spec"]["replicas"] = 1
    await client.replace(STS, sts, namespace=ns)
    await answer(f"web-1.{base}", A, lambda m: m.rcode == NXDOMAIN)
    assert (await query(dns, f"web-0.{base}", A)).values(A) == [ips["web-0"]]
