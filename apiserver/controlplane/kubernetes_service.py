"""The `default/kubernetes` Service, through which pods reach the apiservers, and the loop that keeps its
endpoints (upstream's kubernetesservice controller).

The Service is created once with the first IP of the service CIDR, port 443 to this apiserver's secure
port, and is not rewritten afterwards (upstream stopped reconciling it in 1.17). Every interval this
apiserver refreshes its lease and sets the endpoints to every live apiserver; on a clean stop it takes
itself out at once instead of waiting for its lease to expire.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog

from apiserver.controlplane.endpoints_adapter import FIELD_MANAGER
from apiserver.controlplane.reconciler import LeaseEndpointReconciler
from apiserver.registry.store import RESTStore, WriteOptions
from services.api import errors

log = structlog.get_logger("apiserver.controlplane")

NAMESPACE = "default"
NAME = "kubernetes"
SERVICE_PORT = 443
PORT_NAME = "https"
#: Seconds a stopping apiserver spends taking itself out of the endpoints at most.
STOP_TIMEOUT = 5.0


@dataclass(frozen=True)
class ServiceConfig:
    """Where the Service lives (`service_ip`) and where this apiserver answers (`public_ip`, `public_port`)."""

    service_ip: str
    public_ip: str
    public_port: int
    interval: float


class KubernetesServiceController:
    """Creates the Service and, with a reconciler, keeps this apiserver in its Endpoints and EndpointSlice."""

    def __init__(self, config: ServiceConfig, services: RESTStore, reconciler: LeaseEndpointReconciler | None) -> None:
        self.config = config
        self.services = services
        self.reconciler = reconciler
        self._task: asyncio.Task[None] | None = None

    @property
    def endpoint_ports(self) -> list[dict[str, Any]]:
        return [{"name": PORT_NAME, "port": self.config.public_port, "protocol": "TCP"}]

    async def start(self) -> None:
        """Drop a lease a previous run of this apiserver left behind, make the Service and our endpoint, then loop."""
        if self.reconciler is not None:
            try:
                if await self.reconciler.remove(self.config.public_ip, self.endpoint_ports):
                    log.warning("found stale data, removed the previous endpoints of the kubernetes service: "
                                "this apiserver did not stop cleanly last time", ip=self.config.public_ip)
            except Exception:  # noqa: BLE001 - the loop below retries every interval
                log.exception("could not remove old endpoints of the kubernetes service")
        await self._update_logged()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Take this apiserver out of the endpoints; without etcd, give up within the graceful shutdown's
        window (upstream waits two intervals) and let the lease expire on its own."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self.reconciler is None:
            return
        self.reconciler.stop_reconciling()
        try:
            await asyncio.wait_for(self.reconciler.remove(self.config.public_ip, self.endpoint_ports),
                                   min(2 * self.config.interval, STOP_TIMEOUT))
        except TimeoutError:
            log.warning("removing this apiserver from the kubernetes service's endpoints timed out")
        except Exception:  # noqa: BLE001 - stopping goes on; the lease expires on its own
            log.exception("could not remove this apiserver from the kubernetes service's endpoints")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.config.interval)
            await self._update_logged()

    async def _update_logged(self) -> None:
        try:
            await self.update()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - retried next interval
            log.exception("unable to sync the kubernetes service")

    async def update(self) -> None:
        await self.ensure_service()
        if self.reconciler is not None:
            await self.reconciler.reconcile(self.config.public_ip, self.endpoint_ports, False)

    async def ensure_service(self) -> None:
        try:
            await self.services.get(NAMESPACE, NAME)
            return
        except errors.StatusError as exc:
            if exc.code != 404:
                raise
        service = {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE,
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": self.config.service_ip, "ipFamilyPolicy": "SingleStack",
                     "sessionAffinity": "None",
                     "ports": [{"name": PORT_NAME, "port": SERVICE_PORT, "protocol": "TCP",
                                "targetPort": self.config.public_port}]},
        }
        try:
            await self.services.create(NAMESPACE, service, WriteOptions(field_manager=FIELD_MANAGER))
        except errors.StatusError as exc:
            if exc.code != 409:
                raise
