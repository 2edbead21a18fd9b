"""Node lifecycle controller: watches each node's heartbeats (its Lease in kube-node-lease and its
Ready condition), marks a silent node's conditions Unknown after --node-monitor-grace-period, taints
not-ready and unreachable nodes NoExecute at a per-zone rate (slower or stopped when a zone is
disrupted, so a network partition does not empty it), keeps the NoSchedule taints in step with the
node's conditions, and marks the pods of a not-ready node not Ready.

Heartbeats are timed by when this process observed them, never by the node's clock, as upstream's
probe timestamps are.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from controller_manager.base import QueueController
from controller_manager.context import ControllerContext
from controller_manager.events import EventRecorder
from controller_manager.resources import NODES, PODS
from services.api.conditions import get_condition
from services.api.meta import now_rfc3339, parse_time
from services.client import ApiError, Conflict, NotFound, gvr
from services.informers import NODE_NAME_INDEX, Informer
from services.runtime.durations import duration_flag

NAME = "nodelifecycle"

Obj = dict[str, Any]

LEASES = gvr("coordination.k8s.io/v1", "leases")
LEASE_NAMESPACE = "kube-node-lease"

TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
NO_EXECUTE = "NoExecute"
NO_SCHEDULE = "NoSchedule"

#: condition type -> {status: NoSchedule taint key}, upstream's nodeConditionToTaintKeyStatusMap
CONDITION_TAINTS: dict[str, dict[str, str]] = {
    "Ready": {"False": TAINT_NOT_READY, "Unknown": TAINT_UNREACHABLE},
    "MemoryPressure": {"True": "node.kubernetes.io/memory-pressure"},
    "DiskPressure": {"True": "node.kubernetes.io/disk-pressure"},
    "NetworkUnavailable": {"True": "node.kubernetes.io/network-unavailable"},
    "PIDPressure": {"True": "node.kubernetes.io/pid-pressure"},
}
#: the NoSchedule taint keys this controller owns
NO_SCHEDULE_KEYS = frozenset([TAINT_UNSCHEDULABLE, *(k for m in CONDITION_TAINTS.values() for k in m.values())])
#: conditions besides Ready that go Unknown with it (upstream's remainingNodeConditionTypes)
REMAINING_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure")

STATE_INITIAL = "Initial"
STATE_NORMAL = "Normal"
STATE_FULL_DISRUPTION = "FullDisruption"
STATE_PARTIAL_DISRUPTION = "PartialDisruption"

ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")

#: how often the rate-limited NoExecute tainting queues are worked (upstream's NodeEvictionPeriod)
TAINTING_PERIOD = 0.1
TAINT_RETRIES = 5


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-monitor-period", type=duration_flag, default=5.0,
                        help="how often node heartbeats are checked")
    parser.add_argument("--node-monitor-grace-period", type=duration_flag, default=40.0,
                        help="how long a node may go without a heartbeat before it is marked unhealthy")
    parser.add_argument("--node-startup-grace-period", type=duration_flag, default=60.0,
                        help="how long a node that never posted status may stay silent")
    parser.add_argument("--node-eviction-rate", type=float, default=0.1,
                        help="nodes per second tainted for eviction in a healthy zone")
    parser.add_argument("--secondary-node-eviction-rate", type=float, default=0.01,
                        help="nodes per second tainted for eviction in a partially disrupted large zone")
    parser.add_argument("--unhealthy-zone-threshold", type=float, default=0.55,
                        help="fraction of not-ready nodes (at least 3) that makes a zone partially disrupted")
    parser.add_argument("--large-cluster-size-threshold", type=int, default=50,
                        help="zones above this many nodes keep evicting (slowly) when partially disrupted")


def new(ctx: ControllerContext) -> NodeLifecycleController:
    return NodeLifecycleController(ctx)


# -- pure decisions ---------------------------------------------------------------------------------


def ready_status(node: Obj) -> str | None:
    cond = get_condition(node, "Ready")
    return cond.get("status") if cond else None


def zone_key(node: Obj) -> str:
    """Upstream's GetZoneKey: region and zone together; "" for a node with neither label."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    region = next((labels[k] for k in REGION_LABELS if labels.get(k)), "")
    zone = next((labels[k] for k in ZONE_LABELS if labels.get(k)), "")
    if not region and not zone:
        return ""
    return f"{region}:\x00:{zone}"


def zone_state(ready: list[str | None], unhealthy_threshold: float) -> tuple[int, str]:
    """(not-ready count, state) of a zone from its nodes' Ready statuses (upstream's ComputeZoneState)."""
    ready_nodes = sum(1 for s in ready if s == "True")
    not_ready = len(ready) - ready_nodes
    if ready_nodes == 0 and not_ready > 0:
        return not_ready, STATE_FULL_DISRUPTION
    if not_ready > 2 and not_ready / (not_ready + ready_nodes) >= unhealthy_threshold:
        return not_ready, STATE_PARTIAL_DISRUPTION
    return not_ready, STATE_NORMAL


def zone_qps(state: str, zone_size: int, rate: float, secondary_rate: float, large_cluster: int) -> float:
    """The NoExecute tainting rate of a zone in `state`: full rate when healthy or wholly down, the
    secondary rate (or none, for small zones) when partially disrupted."""
    if state == STATE_PARTIAL_DISRUPTION:
        return secondary_rate if zone_size > large_cluster else 0.0
    return rate


def no_execute_key(status: str | None) -> str | None:
    """The NoExecute taint a node with this Ready status should carry."""
    return {"False": TAINT_NOT_READY, "Unknown": TAINT_UNREACHABLE}.get(status or "")


def desired_no_schedule(node: Obj) -> list[str]:
    """Keys of the NoSchedule taints the node's conditions and spec.unschedulable call for."""
    keys = []
    for cond in (node.get("status") or {}).get("conditions") or []:
        key = CONDITION_TAINTS.get(cond.get("type", ""), {}).get(cond.get("status", ""))
        if key and key not in keys:
            keys.append(key)
    if (node.get("spec") or {}).get("unschedulable"):
        keys.append(TAINT_UNSCHEDULABLE)
    return keys


def no_schedule_changes(node: Obj) -> tuple[list[str], list[str]]:
    """(keys to add, keys to remove) among the controller's NoSchedule taints."""
    want = desired_no_schedule(node)
    have = [t.get("key", "") for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") == NO_SCHEDULE and t.get("key") in NO_SCHEDULE_KEYS]
    return [k for k in want if k not in have], [k for k in have if k not in want]


def swap_taints(taints: list[Obj], add: list[Obj], remove: list[Obj], now: str) -> list[Obj] | None:
    """The taint list with `remove` gone and `add` present (timeAdded now), or None when unchanged.
    Taints match by key and effect, as upstream's MatchTaint."""
    gone = {(t["key"], t["effect"]) for t in remove}
    out = [t for t in taints if (t.get("key"), t.get("effect")) not in gone]
    present = {(t.get("key"), t.get("effect")) for t in out}
    for taint in add:
        if (taint["key"], taint["effect"]) not in present:
            out.append({**taint, "timeAdded": now})
    if len(out) == len(taints) and all(a is b for a, b in zip(out, taints, strict=True)):
        return None
    return out


def unknown_conditions(node: Obj, now: str) -> list[Obj]:
    """The node's conditions after its kubelet fell silent: Ready and the pressure conditions
    Unknown (reason NodeStatusUnknown), or NodeStatusNeverUpdated ones added where missing; a
    condition already Unknown keeps its transition time."""
    conditions = [dict(c) for c in (node.get("status") or {}).get("conditions") or []]
    created = (node.get("metadata") or {}).get("creationTimestamp") or now
    by_type = {c.get("type"): c for c in conditions}
    for ctype in ("Ready", *REMAINING_CONDITIONS):
        cond = by_type.get(ctype)
        if cond is None:
            conditions.append({"type": ctype, "status": "Unknown", "lastHeartbeatTime": created,
                               "lastTransitionTime": now, "reason": "NodeStatusNeverUpdated",
                               "message": "Kubelet never posted node status."})
        elif cond.get("status") != "Unknown":
            cond.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.",
                        lastTransitionTime=now)
    return conditions


class TokenBucket:
    """Upstream's flowcontrol token bucket with burst 1; qps 0 never admits (eviction stopped)."""

    def __init__(self, qps: float, full: bool = True) -> None:
        self.qps = qps
        self.tokens = 1.0 if full else 0.0
        self.last = time.monotonic()

    def try_accept(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        if self.qps <= 0:
            return False
        self.tokens = min(1.0, self.tokens + (now - self.last) * self.qps)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass
class NodeHealth:
    """What was last observed of a node's heartbeats, and when (monotonic, this process's clock)."""

    probe: float
    heartbeat: str | None
    lease_renew: str | None
    status: str | None


# -- the controller ---------------------------------------------------------------------------------


class NodeLifecycleController(QueueController):
    """The work queue (node names) keeps the NoSchedule taints in step with conditions; the monitor
    loop checks heartbeats; the tainting loop applies NoExecute taints as the zone's rate allows."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.client = ctx.client
        opts = ctx.options
        self.monitor_period = float(opts.node_monitor_period)
        self.grace = float(opts.node_monitor_grace_period)
        self.startup_grace = float(opts.node_startup_grace_period)
        self.rate = float(opts.node_eviction_rate)
        self.secondary_rate = float(opts.secondary_node_eviction_rate)
        self.unhealthy_threshold = float(opts.unhealthy_zone_threshold)
        self.large_cluster = int(opts.large_cluster_size_threshold)
        self.nodes: Informer = ctx.informer(NODES)
        self.leases: Informer = ctx.informer(LEASES)
        self.pods: Informer = ctx.informer(PODS)
        self.recorder: EventRecorder = ctx.recorder("node-controller")
        self.health: dict[str, NodeHealth] = {}
        self.known: set[str] = set()
        self.zone_states: dict[str, str] = {}
        self.limiters: dict[str, TokenBucket] = {}
        #: zone -> node names waiting for their NoExecute taint, in order
        self.tainting: dict[str, dict[str, None]] = {}
        self._swaps: set[asyncio.Task[Any]] = set()
        super().__init__(NAME, [self.nodes, self.leases, self.pods])
        self.nodes.add_event_handler(self.enqueue, self._node_updated, None)

    def _node_updated(self, old: Obj, new: Obj) -> None:
        if no_schedule_changes(new) != ([], []):
            self.enqueue(new)

    async def run(self) -> None:
        await asyncio.gather(*(i.wait_for_sync() for i in self.watched))
        loops = [asyncio.create_task(self._monitor_loop()), asyncio.create_task(self._tainting_loop())]
        try:
            await super().run()
        finally:
            for task in [*loops, *self._swaps]:
                task.cancel()
            await asyncio.gather(*loops, *self._swaps, return_exceptions=True)

    # -- NoSchedule taints (upstream's doNoScheduleTaintingPass) ------------------------------------

    async def sync(self, key: str) -> None:
        node = self.nodes.get(key)
        if node is None or no_schedule_changes(node) == ([], []):
            return
        await self._swap(key, self._no_schedule_swap)

    @staticmethod
    def _no_schedule_swap(node: Obj) -> tuple[list[Obj], list[Obj]]:
        add, remove = no_schedule_changes(node)
        return ([{"key": k, "effect": NO_SCHEDULE} for k in add], [{"key": k, "effect": NO_SCHEDULE} for k in remove])

    async def _swap(self, name: str, changes: Any) -> bool:
        """Apply `changes(node) -> (add, remove)` to the node's taints, read fresh and written with its
        resourceVersion so a concurrent taint edit is never lost (upstream's SwapNodeControllerTaint)."""
        for _ in range(TAINT_RETRIES):
            try:
                node = await self.client.get(NODES, name)
            except NotFound:
                return False
            add, remove = changes(node)
            old = (node.get("spec") or {}).get("taints") or []
            taints = swap_taints(old, add, remove, now_rfc3339())
            if taints is None:
                return True
            patch = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                     "spec": {"taints": taints or None}}
            try:
                await self.client.patch(NODES, name, patch)
                before = {f"{t.get('key')}:{t.get('effect')}" for t in old}
                after = {f"{t.get('key')}:{t.get('effect')}" for t in taints}
                self.log.info("updated node taints", node=name, added=sorted(after - before),
                              removed=sorted(before - after))
                return True
            except Conflict:
                continue
        return False

    # -- heartbeats --------------------------------------------------------------------------------

    async def _monitor_loop(self) -> None:
        last = time.monotonic()
        while True:
            now = time.monotonic()
            if now - last > self.grace:
                # This process did not run (stopped, starved) for longer than the grace period: the
                # heartbeats it missed say nothing about the nodes, so each gets a fresh grace period.
                self.log.warning("node monitor stalled; restarting grace periods", stalledFor=round(now - last, 1))
                for health in self.health.values():
                    health.probe = now
            try:
                await self.monitor()
            except asyncio.CancelledError:
                raise
            except (ApiError, httpx.HTTPError) as exc:
                self.log.info("node health pass failed", error=str(exc))
            except Exception:
                self.log.exception("node health pass failed")
            last = time.monotonic()
            await asyncio.sleep(self.monitor_period)

    def _observe(self, node: Obj, now: float) -> NodeHealth:
        """Refresh the probe time when the Ready heartbeat or the Lease renewal moved on."""
        name = node["metadata"]["name"]
        ready = get_condition(node, "Ready")
        heartbeat = ready.get("lastHeartbeatTime") if ready else None
        lease = self.leases.get(name, LEASE_NAMESPACE)
        renew = ((lease or {}).get("spec") or {}).get("renewTime")
        saved = self.health.get(name)
        if saved is None:
            saved = self.health[name] = NodeHealth(now, heartbeat, renew, ready_status(node))
            return saved
        if heartbeat != saved.heartbeat:
            saved.heartbeat = heartbeat
            saved.probe = now
        if renew and renew != saved.lease_renew:
            old, new = parse_time(saved.lease_renew), parse_time(renew)
            if old is None or (new is not None and new > old):
                saved.lease_renew = renew
                saved.probe = now
        return saved

    async def monitor(self) -> None:
        """One pass of upstream's monitorNodeHealth."""
        nodes = self.nodes.list()
        names = {n["metadata"]["name"] for n in nodes}
        for node in nodes:
            name = node["metadata"]["name"]
            if name not in self.known:
                self.known.add(name)
                self._node_event(node, "RegisteredNode", f"Registered Node {name} in Controller")
        for name in self.known - names:
            self.known.discard(name)
            self.health.pop(name, None)
            for queue in self.tainting.values():
                queue.pop(name, None)
            self._node_event({"metadata": {"name": name}}, "RemovingNode", f"Removing Node {name} from Controller")
        now = time.monotonic()
        zones: dict[str, list[str | None]] = {}
        for node in nodes:
            current = await self._update_health(node, now)
            zones.setdefault(zone_key(node), []).append(current)
            if current is None:
                continue
            self._process_taint_eviction(node, current)
            if current != "True":
                await self._mark_pods_not_ready(node)
        await self._handle_disruption(zones, nodes)

    async def _update_health(self, node: Obj, now: float) -> str | None:
        """Upstream's tryUpdateNodeHealth: the node's Ready status after marking it Unknown if its
        heartbeats stopped for longer than the grace period."""
        health = self._observe(node, now)
        observed = ready_status(node)
        grace = self.grace if get_condition(node, "Ready") is not None else self.startup_grace
        if now - health.probe <= grace:
            return observed
        conditions = unknown_conditions(node, now_rfc3339())
        if conditions == ((node.get("status") or {}).get("conditions") or []):
            return observed
        name = node["metadata"]["name"]
        patch = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                 "status": {"conditions": conditions}}
        try:
            await self.client.patch_status(NODES, name, patch)
        except (Conflict, NotFound) as exc:
            self.log.info("could not mark node status unknown", node=name, error=str(exc))
            return observed
        self.log.info("node stopped posting status", node=name, silentFor=round(now - health.probe, 1))
        if observed == "True":
            self._node_event(node, "NodeNotReady", f"Node {name} status is now: NodeNotReady")
        return "Unknown"

    def _node_event(self, node: Obj, reason: str, message: str) -> None:
        meta = node["metadata"]
        ref = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": meta["name"], "uid": meta.get("uid", "")}}
        self.recorder.normal(ref, reason, message)

    async def _mark_pods_not_ready(self, node: Obj) -> None:
        """Upstream's MarkPodsNotReady: pods still Ready on a node that is not get Ready False."""
        name = node["metadata"]["name"]
        for pod in self.pods.store.by_index(NODE_NAME_INDEX, name):
            conditions = (pod.get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                continue
            now = now_rfc3339()
            updated = [{**c, "status": "False", "lastTransitionTime": now} if c.get("type") == "Ready" else c
                       for c in conditions]
            meta = pod["metadata"]
            patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": {"conditions": updated}}
            try:
                await self.client.patch_status(PODS, meta["name"], patch, meta["namespace"])
                self.log.info("marked pod not ready", pod=f"{meta['namespace']}/{meta['name']}", node=name)
            except (Conflict, NotFound):
                continue

    # -- NoExecute taints ---------------------------------------------------------------------------

    def _process_taint_eviction(self, node: Obj, ready: str) -> None:
        """Upstream's processTaintBaseEviction: queue a not-ready/unreachable node for its NoExecute
        taint (swapping at once when it already has the other one); a Ready node loses both."""
        name = node["metadata"]["name"]
        want = no_execute_key(ready)
        have = {t.get("key") for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == NO_EXECUTE}
        zone = zone_key(node)
        if want is None:
            self.tainting.get(zone, {}).pop(name, None)
            if have & {TAINT_NOT_READY, TAINT_UNREACHABLE}:
                self._spawn(self._swap(name, self._no_execute_swap))
            return
        if want in have:
            return
        if have & {TAINT_NOT_READY, TAINT_UNREACHABLE}:
            self._spawn(self._swap(name, self._no_execute_swap))
            return
        self.tainting.setdefault(zone, {}).setdefault(name, None)

    def _spawn(self, coro: Any) -> None:
        """Run a taint swap beside the monitor pass (upstream does these swaps without rate limit)."""
        task = asyncio.create_task(coro)
        self._swaps.add(task)
        task.add_done_callback(self._swap_done)

    def _swap_done(self, task: asyncio.Task[Any]) -> None:
        self._swaps.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.info("could not swap node taints", error=str(task.exception()))

    @staticmethod
    def _no_execute_swap(node: Obj) -> tuple[list[Obj], list[Obj]]:
        want = no_execute_key(ready_status(node))
        add = [{"key": want, "effect": NO_EXECUTE}] if want else []
        remove = [{"key": k, "effect": NO_EXECUTE} for k in (TAINT_NOT_READY, TAINT_UNREACHABLE) if k != want]
        return add, remove

    async def _tainting_loop(self) -> None:
        while True:
            await asyncio.sleep(TAINTING_PERIOD)
            try:
                await self.tainting_pass()
            except asyncio.CancelledError:
                raise
            except (ApiError, httpx.HTTPError) as exc:
                self.log.info("tainting pass failed", error=str(exc))
            except Exception:
                self.log.exception("tainting pass failed")

    async def tainting_pass(self) -> None:
        """Upstream's doNoExecuteTaintingPass: taint queued nodes while the zone's limiter allows."""
        for zone, queue in self.tainting.items():
            limiter = self.limiters.setdefault(zone, TokenBucket(self.rate))
            while queue:
                name = next(iter(queue))
                node = self.nodes.get(name)
                if node is None or no_execute_key(ready_status(node)) is None:
                    del queue[name]
                    continue
                if not limiter.try_accept():
                    break
                del queue[name]
                if not await self._swap(name, self._no_execute_swap):
                    queue[name] = None
                    break

    # -- zones -------------------------------------------------------------------------------------

    async def _handle_disruption(self, zones: dict[str, list[str | None]], nodes: list[Obj]) -> None:
        """Upstream's handleDisruption: stop tainting when every zone is down (the control plane is
        the likelier culprit), and slow it down in partially disrupted zones."""
        states = {zone: zone_state(ready, self.unhealthy_threshold)[1] for zone, ready in zones.items()}
        for zone in list(self.zone_states):
            if zone not in states:
                del self.zone_states[zone]
                self.limiters.pop(zone, None)
        was_all_down = bool(self.zone_states) and all(s == STATE_FULL_DISRUPTION for s in self.zone_states.values())
        all_down = bool(states) and all(s == STATE_FULL_DISRUPTION for s in states.values())
        if all_down and not was_all_down:
            self.log.warning("all nodes are not ready; entering master disruption mode")
            for node in nodes:
                self.tainting.get(zone_key(node), {}).pop(node["metadata"]["name"], None)
                await self._swap(node["metadata"]["name"], lambda _n: ([], [
                    {"key": TAINT_NOT_READY, "effect": NO_EXECUTE}, {"key": TAINT_UNREACHABLE, "effect": NO_EXECUTE}]))
            for zone in states:
                self._set_limiter(zone, 0.0)
        elif was_all_down and not all_down:
            self.log.info("some nodes are ready; exiting master disruption mode")
            now = time.monotonic()
            for health in self.health.values():
                health.probe = now
            for zone, state in states.items():
                self._set_limiter(zone, self._qps(zone, state, zones))
        elif not all_down:
            for zone, state in states.items():
                if self.zone_states.get(zone, STATE_INITIAL) != state:
                    self._set_limiter(zone, self._qps(zone, state, zones))
        self.zone_states = states

    def _qps(self, zone: str, state: str, zones: dict[str, list[str | None]]) -> float:
        return zone_qps(state, len(zones[zone]), self.rate, self.secondary_rate, self.large_cluster)

    def _set_limiter(self, zone: str, qps: float) -> None:
        """Upstream's SwapLimiter: a new rate, without a fresh token if the old bucket was empty."""
        old = self.limiters.get(zone)
        if old is not None and old.qps == qps:
            return
        full = old is None or old.try_accept()
        self.limiters[zone] = TokenBucket(qps, full=full)
