"""Concurrent Service creates contend for cluster IPs and node ports: none fails, none is shared."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.conftest import start_apiserver


async def test_concurrent_node_ports_in_a_tight_range(etcd_server: str, workdir: Path) -> None:
    server = start_apiserver([etcd_server], workdir / "alloc", "--service-node-port-range", "31000-31150",
                             "--etcd-prefix", "/alloc-test")
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
            assert (await c.post("/api/v1/namespaces", json={"metadata": {"name": "alloc"}})).status_code == 201

            async def create(i: int) -> httpx.Response:
                return await c.post("/api/v1/namespaces/alloc/services", json={
                    "metadata": {"name": f"s{i}"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}})

            responses = await asyncio.gather(*(create(i) for i in range(120)))
            assert [r.text for r in responses if r.status_code != 201] == []
            ports = [r.json()["spec"]["ports"][0]["nodePort"] for r in responses]
            ips = [r.json()["spec"]["clusterIP"] for r in responses]
            assert len(set(ports)) == len(ports) and all(31000 <= p <= 31150 for p in ports)
            assert len(set(ips)) == len(ips)
    finally:
        server.stop()
