"""The agent's sync loop: informers on NetworkPolicies, Pods and Namespaces mark the node dirty; the
loop compiles and writes the whole ruleset at most every --min-sync-period (a change after a quiet
spell is written at once, so it takes effect well within a second) and at least every --sync-period,
skipping the write when the rules came out the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol

import structlog
from prometheus_client import Counter, Gauge, Histogram

from proxy_agent.networkpolicy.compiler import NodePrograms, compile_node, pod_info
from services.client import GVR, Client
from services.informers import SharedInformerFactory

log = structlog.get_logger("proxy_agent.networkpolicy")

POLICIES = GVR("networking.k8s.io", "v1", "networkpolicies")
PODS = GVR("", "v1", "pods")
NAMESPACES = GVR("", "v1", "namespaces", namespaced=False)

SYNC_DURATION = Histogram("pyk8s_network_policy_sync_duration_seconds", "Time to compile and write the rules")
LAST_SYNC = Gauge("pyk8s_network_policy_sync_last_timestamp_seconds", "The last time the rules were written")
SYNC_FAILURES = Counter("pyk8s_network_policy_sync_failures_total", "Rule writes that failed")
ISOLATED = Gauge("pyk8s_network_policy_isolated_pods", "Pods of this node isolated by policy", ["direction"])

Obj = dict[str, Any]


class Rules(Protocol):
    mode: str

    async def apply(self, programs: NodePrograms) -> str: ...

    async def cleanup(self) -> None: ...


class PolicyAgent:
    """Keeps one node's packet filter in line with the cluster's NetworkPolicies."""

    def __init__(self, rules: Rules, node: str, *, min_sync_period: float = 0.1,
                 sync_period: float = 60.0) -> None:
        self.rules = rules
        self.node = node
        self.min_sync_period = min_sync_period
        self.sync_period = sync_period
        self.synced = False
        self._kick = asyncio.Event()
        self._last_text = ""
        self._last_sync = 0.0
        self._factory: SharedInformerFactory | None = None

    def _queue(self, *_args: Any) -> None:
        self._kick.set()

    def on_pod(self, old: Obj | None, new: Obj | None) -> None:
        if old is None or new is None or pod_info(old) != pod_info(new):
            self._kick.set()

    def on_namespace(self, old: Obj | None, new: Obj | None) -> None:
        labels = [((o or {}).get("metadata") or {}).get("labels") for o in (old, new)]
        if old is None or new is None or labels[0] != labels[1]:
            self._kick.set()

    async def sync_once(self, policies: list[Obj], pods: list[Obj], namespaces: list[Obj]) -> bool:
        """Compile and write; False when the ruleset came out as last written (nothing to do)."""
        start = time.perf_counter()
        programs = compile_node(policies, pods, namespaces, self.node)
        ISOLATED.labels("ingress").set(len(programs.ingress))
        ISOLATED.labels("egress").set(len(programs.egress))
        key = repr((sorted(programs.ingress.items()), sorted(programs.egress.items())))
        if key == self._last_text:
            return False
        try:
            await self.rules.apply(programs)
        except Exception:
            SYNC_FAILURES.inc()
            self._last_text = ""
            raise
        self._last_text = key
        SYNC_DURATION.observe(time.perf_counter() - start)
        LAST_SYNC.set_to_current_time()
        log.info("network policy rules written", mode=self.rules.mode, ingress_isolated=len(programs.ingress),
                 egress_isolated=len(programs.egress), seconds=round(time.perf_counter() - start, 4))
        return True

    async def run(self, client: Client) -> None:
        """Watch, then sync until cancelled."""
        factory = SharedInformerFactory(client)
        policies = factory.informer_for(POLICIES)
        pods = factory.informer_for(PODS)
        namespaces = factory.informer_for(NAMESPACES)
        regs = [
            policies.add_event_handler(self._queue, self._queue, self._queue),
            pods.add_event_handler(lambda o: self.on_pod(None, o), self.on_pod, lambda o: self.on_pod(o, None)),
            namespaces.add_event_handler(lambda o: self.on_namespace(None, o), self.on_namespace,
                                         lambda o: self.on_namespace(o, None)),
        ]
        factory.start()
        try:
            for reg in regs:
                await reg.wait_for_sync()
            while True:
                wait = self._last_sync + self.min_sync_period - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._kick.clear()
                self._last_sync = time.monotonic()
                try:
                    if not await self.sync_once(policies.list(), pods.list(), namespaces.list()):
                        log.debug("network policy rules unchanged")
                    self.synced = True
                except Exception as exc:
                    log.error("network policy sync failed; retrying", error=str(exc))
                    await asyncio.sleep(1.0)
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.sync_period):
                        await self._kick.wait()
                if not self._kick.is_set():
                    self._last_text = ""  # the periodic sync rewrites, repairing rules someone removed
        finally:
            await factory.shutdown()
