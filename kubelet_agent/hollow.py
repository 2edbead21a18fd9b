"""Many simulated kubelets in one process (like kubemark/kwok): each has its own Node, Lease and
hollow runtime; they share one API client, one status sender, one pod watch dispatched by node, and
one Node watch whose cache (keyed by name) each kubelet reads its own Node from for admission.

Given an API address, each also serves the kubelet API there on a port of its own, which its Node
reports (as kwok's nodes share the simulator's address): /metrics/resource then gives the pods'
configured usage, so the metrics server and autoscaling work at scale."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from typing import Any

from kubelet_agent.cri.hollow import HollowRuntime
from kubelet_agent.cri.stages import Stage
from kubelet_agent.kubelet import Kubelet, KubeletOptions
from kubelet_agent.node import NODES, HostInfo, NodeConfig
from kubelet_agent.pods.status import PODS, StatusManager
from kubelet_agent.server.auth import KubeletAuth
from kubelet_agent.server.server import KubeletServer
from services.client import Client
from services.informers import Informer, strip_managed_fields


def hollow_node_ip(index: int) -> str:
    return str(ipaddress.ip_address("10.64.0.1") + index)


class HollowNodes:
    def __init__(self, client: Client, prefix: str, count: int, options: KubeletOptions, *,
                 labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
                 max_pods: int = 110, start_concurrency: int = 50, stages: list[Stage] | None = None,
                 api_address: str | None = None, api_auth: Callable[[str], KubeletAuth] | None = None,
                 cert_dir: str | None = None, client_ca_file: str | None = None) -> None:
        self.client = client
        self.api_address = api_address
        self.api_auth = api_auth
        self.cert_dir = cert_dir
        self.client_ca_file = client_ca_file
        self.apis: list[KubeletServer] = []
        self.status = StatusManager(client, concurrency=32)
        self.kubelets: dict[str, Kubelet] = {}
        self.start_concurrency = start_concurrency
        host = HostInfo.hollow()
        self.nodes = Informer(client, NODES, transform=strip_managed_fields)
        for i in range(count):
            name = f"{prefix}-{i}"
            config = NodeConfig(name=name, node_ips=[api_address or hollow_node_ip(i)], host=host, runtime_version="",
                                max_pods=max_pods, labels={"pyk8s.io/hollow": "true", **(labels or {})},
                                taints=list(taints or []))
            runtime = HollowRuntime(pod_cidr=f"10.{128 + i // 256}.{i % 256}.0/24", stages=stages)
            self.kubelets[name] = Kubelet(client, runtime, config, options, self.status, own_informer=False,
                                          nodes=self.nodes)
        # The kubelets never read managedFields and write status by patch, so the cache need not hold them.
        self.informer = Informer(client, PODS, field_selector="spec.nodeName!=", transform=strip_managed_fields)
        self.informer.add_event_handler(self._add, lambda _o, n: self._add(n), self._delete)

    def _add(self, pod: dict[str, Any]) -> None:
        kubelet = self.kubelets.get((pod.get("spec") or {}).get("nodeName", ""))
        if kubelet is not None:
            kubelet.on_pod(pod)

    def _delete(self, pod: dict[str, Any]) -> None:
        kubelet = self.kubelets.get((pod.get("spec") or {}).get("nodeName", ""))
        if kubelet is not None:
            kubelet.on_pod_deleted(pod)

    async def _serve_apis(self) -> None:
        """One kubelet API per node on the API address, started one by one (they share a serving cert)."""
        for name, kubelet in self.kubelets.items():
            api = KubeletServer(kubelet, address=self.api_address or "127.0.0.1", port=0, cert_dir=self.cert_dir,
                                client_ca_file=self.client_ca_file,
                                auth=self.api_auth(name) if self.api_auth else None)
            await api.start()
            kubelet.node_config.kubelet_port = api.port
            self.apis.append(api)

    async def start(self) -> None:
        if self.api_address:
            await self._serve_apis()
        self.status.start()
        sem = asyncio.Semaphore(self.start_concurrency)

        async def one(k: Kubelet) -> None:
            async with sem:
                await k.start()

        self.nodes.start()
        await asyncio.gather(*(one(k) for k in self.kubelets.values()))
        await self.nodes.wait_for_sync()
        self.informer.start()

    async def stop(self) -> None:
        await self.informer.stop()
        await self.nodes.stop()
        await asyncio.gather(*(k.stop() for k in self.kubelets.values()))
        await asyncio.gather(*(api.stop() for api in self.apis))
        await self.status.stop()
