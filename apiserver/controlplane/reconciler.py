"""The lease endpoint reconciler (upstream's `--endpoint-reconciler-type=lease`): each apiserver refreshes its
own lease, then sets the `kubernetes` Endpoints and EndpointSlice to the IPs of all live leases. So N
apiservers each appear, and one that died leaves once its lease expires, at most TTL + interval later."""

from __future__ import annotations

import asyncio
from typing import Any

from apiserver.controlplane.endpoints_adapter import EndpointsAdapter
from apiserver.controlplane.leases import MasterLeases


class NoLiveLeases(Exception):
    """No lease was listed right after refreshing our own: storage is off, so the endpoints stay as they are."""


class LeaseEndpointReconciler:
    """Keeps one apiserver's IP in the `kubernetes` endpoints while it runs and takes it out when it stops."""

    def __init__(self, adapter: EndpointsAdapter, leases: MasterLeases) -> None:
        self.adapter = adapter
        self.leases = leases
        self.stopped = False
        self._lock = asyncio.Lock()

    async def reconcile(self, ip: str, ports: list[dict[str, Any]], reconcile_ports: bool) -> None:
        """Refresh our lease first, whatever happens next, so some apiserver always lists us."""
        if self.stopped:
            return
        async with self._lock:
            await self.leases.update(ip)
            await self._sync(ports, reconcile_ports)

    async def remove(self, ip: str, ports: list[dict[str, Any]]) -> bool:
        """Drop our lease and rewrite the endpoints without us; False (and nothing written) when there was
        no lease to drop."""
        async with self._lock:
            if not await self.leases.remove(ip):
                return False
            await self._sync(ports, True)
            return True

    def stop_reconciling(self) -> None:
        self.stopped = True

    async def _sync(self, ports: list[dict[str, Any]], reconcile_ports: bool) -> None:
        ips = await self.leases.list()
        # An apiserver that is stopping may be the last one: then the endpoints do become empty.
        if not ips and not self.stopped:
            raise NoLiveLeases("no API server IP addresses were listed in storage, refusing to erase all "
                               "endpoints for the kubernetes Service")
        await self.adapter.sync(set(ips), ports, reconcile_ports)
