"""The sync loop: informers feed the change tracker; a bounded-frequency runner turns changes into
one ruleset per sync (never more often than --min-sync-period, at least every --sync-period), a
partial one when it can, a full one at start, after a failure, when the node changes, and hourly.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from typing import Any

import structlog
from prometheus_client import Counter, Gauge, Histogram

from proxy_agent.backends import Backend
from proxy_agent.healthcheck import ProxyHealth, ServiceHealthServers
from proxy_agent.tracker import ChangeTracker, ProxyState
from services.client import GVR, Client
from services.informers import SharedInformerFactory

log = structlog.get_logger("proxy_agent")

SERVICES = GVR("", "v1", "services")
ENDPOINT_SLICES = GVR("discovery.k8s.io", "v1", "endpointslices")
NODES = GVR("", "v1", "nodes", namespaced=False)
FULL_SYNC_PERIOD = 3600.0

_BUCKETS = (
    0.001,
    0.002,
    0.004,
    0.008,
    0.016,
    0.032,
    0.064,
    0.128,
    0.256,
    0.512,
    1.024,
    2.048,
    4.096,
    8.192,
    16.384,
)
SYNC_DURATION = Histogram(
    "kubeproxy_sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds", buckets=_BUCKETS
)
FULL_SYNC_DURATION = Histogram(
    "kubeproxy_sync_full_proxy_rules_duration_seconds",
    "Full SyncProxyRules latency in seconds",
    buckets=_BUCKETS,
)
PARTIAL_SYNC_DURATION = Histogram(
    "kubeproxy_sync_partial_proxy_rules_duration_seconds",
    "Partial SyncProxyRules latency in seconds",
    buckets=_BUCKETS,
)
LAST_SYNC = Gauge(
    "kubeproxy_sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced"
)
LAST_QUEUED = Gauge(
    "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
    "The last time a sync of proxy rules was queued",
)
IPTABLES_TOTAL = Gauge(
    "kubeproxy_sync_proxy_rules_iptables_total",
    "Total number of iptables rules owned by kube-proxy",
    ["table"],
)
NFTABLES_TOTAL = Gauge(
    "kubeproxy_sync_proxy_rules_nftables_objects_total",
    "Number of nftables chains, rules and set/map elements written by the last sync",
    ["kind"],
)
RESTORE_FAILURES = Counter(
    "kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "Cumulative proxy rules restore failures"
)
ENDPOINT_CHANGES = Counter(
    "kubeproxy_sync_proxy_rules_endpoint_changes_total", "Cumulative proxy rules EndpointSlice changes"
)
SERVICE_CHANGES = Counter(
    "kubeproxy_sync_proxy_rules_service_changes_total", "Cumulative proxy rules Service changes"
)


def node_addresses(node: dict[str, Any] | None) -> tuple[str, ...]:
    addrs = ((node or {}).get("status") or {}).get("addresses") or []
    return tuple(
        a["address"]
        for a in addrs
        if a.get("type") in ("InternalIP", "ExternalIP") and ":" not in a.get("address", "")
    )


class Proxier:
    """Owns the state, the backend and the sync runner for one node."""

    def __init__(
        self,
        backend: Backend,
        state: ProxyState,
        *,
        sync_period: float = 30.0,
        min_sync_period: float = 1.0,
        dry_run_output: str | None = None,
        health: ProxyHealth | None = None,
        service_health: ServiceHealthServers | None = None,
    ) -> None:
        self.backend = backend
        self.state = state
        self.tracker = ChangeTracker()
        self.sync_period = sync_period
        self.min_sync_period = min_sync_period
        self.dry_run_output = dry_run_output
        self.health = health or ProxyHealth(sync_period)
        self.service_health = service_health
        self._kick = asyncio.Event()
        self._need_full = True
        self._last_sync = 0.0
        self._last_full = 0.0
        self.syncs = 0

    # -- event handlers -------------------------------------------------------------------------

    def _queue(self) -> None:
        self.health.queued()
        LAST_QUEUED.set_to_current_time()
        self._kick.set()

    def on_service(self, old: dict | None, new: dict | None) -> None:
        if self.tracker.service_update(old, new):
            SERVICE_CHANGES.inc()
            self._queue()

    def on_slice(self, sl: dict, deleted: bool = False) -> None:
        if self.tracker.slice_update(sl, deleted):
            ENDPOINT_CHANGES.inc()
            self._queue()

    def on_node(self, node: dict | None) -> None:
        ips = node_addresses(node)
        if ips != self.state.node_ips:
            self.state.node_ips = ips
            self._need_full = True
            self._queue()

    # -- syncing --------------------------------------------------------------------------------

    async def sync_once(self) -> None:
        """Write one ruleset; a failure makes the next sync a full one."""
        start = time.perf_counter()
        changed = self.tracker.take()
        full = (
            self._need_full
            or self.dry_run_output is not None
            or (time.monotonic() - self._last_full > FULL_SYNC_PERIOD)
        )
        # the state follows the changes either way (as upstream's maps do); a full sync rewrites every rule
        self.tracker.apply(self.state, changed)
        ruleset = self.backend.render(self.state, None if full else changed)
        try:
            if self.dry_run_output is not None:
                await asyncio.to_thread(_write_atomic, self.dry_run_output, ruleset.text)
            else:
                await self.backend.apply(ruleset)
        except Exception:
            RESTORE_FAILURES.inc()
            self.backend.rollback()
            self._need_full = True
            raise
        elapsed = time.perf_counter() - start
        self._need_full = False
        if full:
            self._last_full = time.monotonic()
        SYNC_DURATION.observe(elapsed)
        (FULL_SYNC_DURATION if full else PARTIAL_SYNC_DURATION).observe(elapsed)
        LAST_SYNC.set_to_current_time()
        gauge = IPTABLES_TOTAL if self.backend.mode in ("iptables", "ipvs") else NFTABLES_TOTAL
        for key, value in ruleset.counts.items():
            gauge.labels(key).set(value)
        self.health.updated()
        self.syncs += 1
        log.debug("synced proxy rules", full=full, changed=len(changed), seconds=round(elapsed, 4))
        if self.service_health is not None:
            await self.service_health.sync(self._health_check_ports())

    def _health_check_ports(self) -> dict[int, tuple[str, int]]:
        out: dict[int, tuple[str, int]] = {}
        for sp in self.state.services.values():
            if sp.health_check_node_port:
                out[sp.health_check_node_port] = (sp.name.service, len(self.state.local_endpoints(sp)))
        return out

    async def sync_loop(self) -> None:
        """Sync on change, at most every min_sync_period, at least every sync_period; retry failures."""
        while True:
            wait = self._last_sync + self.min_sync_period - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._kick.clear()
            self._last_sync = time.monotonic()
            try:
                await self.sync_once()
            except Exception as exc:
                log.error("sync failed; retrying with a full sync", error=str(exc))
                await asyncio.sleep(self.min_sync_period)
                continue
            try:
                async with asyncio.timeout(self.sync_period):
                    await self._kick.wait()
            except TimeoutError:
                pass

    async def run(self, client: Client, hostname: str) -> None:
        """Watch Services, EndpointSlices and this Node; sync until cancelled."""
        factory = SharedInformerFactory(client)
        services = factory.informer_for(SERVICES)
        slices = factory.informer_for(ENDPOINT_SLICES)
        nodes = factory.informer_for(NODES, field_selector=f"metadata.name={hostname}")
        regs = [
            services.add_event_handler(
                lambda o: self.on_service(None, o), self.on_service, lambda o: self.on_service(o, None)
            ),
            slices.add_event_handler(
                self.on_slice, lambda _o, n: self.on_slice(n), lambda o: self.on_slice(o, True)
            ),
            nodes.add_event_handler(
                self.on_node, lambda _o, n: self.on_node(n), lambda _o: self.on_node(None)
            ),
        ]
        factory.start()
        try:
            for reg in regs:
                await reg.wait_for_sync()
            await self.sync_loop()
        finally:
            await factory.shutdown()
            if self.service_health is not None:
                await self.service_health.stop()


def _write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".proxy-rules-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
