"""Node IPAM controller (the range allocator): with --allocate-node-cidrs, every Node gets one pod
CIDR per cluster CIDR in spec.podCIDR(s), set once by patch, never the same as another node's,
and returned to the pool when the node goes away. The pool is rebuilt from the nodes at start.
"""

from __future__ import annotations

import argparse
import ipaddress
from typing import Any

from controller_manager.base import QueueController, RequeueAfter
from controller_manager.context import ControllerContext
from controller_manager.controllers.nodeipam.cidrset import CIDRSet, CIDRSetFull
from controller_manager.events import EventRecorder
from controller_manager.resources import NODES
from services.client import ApiError, NotFound, ServerTimeout
from services.informers import Informer
from services.runtime import boolean_flag

NAME = "nodeipam"

Obj = dict[str, Any]

DEFAULT_MASK = {4: 24, 6: 64}
#: how soon a node waiting for a free CIDR is looked at again (a release also wakes it at once)
FULL_RETRY = 5.0
UPDATE_WORKERS = 4


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allocate-node-cidrs", type=boolean_flag, nargs="?", const=True, default=False,
                        help="allocate a pod CIDR to every node from --cluster-cidr")
    parser.add_argument("--cluster-cidr", default="", help="CIDR(s) of pods in the cluster, comma-separated")
    parser.add_argument("--node-cidr-mask-size", type=int, default=0,
                        help="mask size of a node's pod CIDR (single-stack clusters)")
    parser.add_argument("--node-cidr-mask-size-ipv4", type=int, default=0, help="IPv4 node CIDR mask size (24)")
    parser.add_argument("--node-cidr-mask-size-ipv6", type=int, default=0, help="IPv6 node CIDR mask size (64)")
    parser.add_argument("--service-cluster-ip-range", default="",
                        help="CIDR of Service cluster IPs, never handed to nodes")
    parser.add_argument("--secondary-service-cluster-ip-range", default="")
    parser.add_argument("--cidr-allocator-type", default="RangeAllocator", choices=("RangeAllocator",))


def new(ctx: ControllerContext) -> NodeIpamController | Disabled:
    if not getattr(ctx.options, "allocate_node_cidrs", False):
        return Disabled()
    return NodeIpamController(ctx, build_cidr_sets(ctx.options))


class Disabled:
    """What runs when --allocate-node-cidrs is off: nothing, as upstream does not start the controller."""

    async def run(self) -> None:
        return None


def node_masks(options: argparse.Namespace, families: list[int]) -> list[int]:
    """The node mask per cluster CIDR, with upstream's rules about which flags go together."""
    single = int(getattr(options, "node_cidr_mask_size", 0) or 0)
    by_family = {4: int(getattr(options, "node_cidr_mask_size_ipv4", 0) or 0),
                 6: int(getattr(options, "node_cidr_mask_size_ipv6", 0) or 0)}
    if len(families) > 1:
        if single:
            raise ValueError("usage of --node-cidr-mask-size is not allowed with dual-stack clusters")
    elif single and any(by_family.values()):
        raise ValueError("usage of --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6 is not allowed "
                         "if --node-cidr-mask-size is set")
    return [single or by_family[f] or DEFAULT_MASK[f] for f in families]


def build_cidr_sets(options: argparse.Namespace) -> list[CIDRSet]:
    """One CIDR set per cluster CIDR, with the Service ranges taken out of it."""
    cidrs = [c.strip() for c in (getattr(options, "cluster_cidr", "") or "").split(",") if c.strip()]
    if not cidrs:
        raise ValueError("--cluster-cidr is required when --allocate-node-cidrs is set")
    if len(cidrs) > 2:
        raise ValueError("--cluster-cidr takes at most two CIDRs, one per IP family")
    networks = [ipaddress.ip_network(c, strict=False) for c in cidrs]
    families = [n.version for n in networks]
    if len(set(families)) != len(families):
        raise ValueError("--cluster-cidr with two CIDRs needs one IPv4 and one IPv6 CIDR")
    sets = [CIDRSet(n, m) for n, m in zip(networks, node_masks(options, families), strict=True)]
    for flag in ("service_cluster_ip_range", "secondary_service_cluster_ip_range"):
        for text in (getattr(options, flag, "") or "").split(","):
            if text.strip():
                exclude_range(sets, text.strip())
    return sets


def exclude_range(sets: list[CIDRSet], cidr: str) -> None:
    """Occupy every node subnet that overlaps `cidr` in whichever set it meets."""
    network = ipaddress.ip_network(cidr, strict=False)
    for cidr_set in sets:
        if network.version == cidr_set.cluster.version and network.overlaps(cidr_set.cluster):
            cidr_set.occupy(network)


def node_cidrs(node: Obj) -> list[str]:
    spec = node.get("spec") or {}
    return list(spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []))


class NodeIpamController(QueueController):
    def __init__(self, ctx: ControllerContext, cidr_sets: list[CIDRSet]) -> None:
        self.client = ctx.client
        self.cidr_sets = cidr_sets
        self.nodes: Informer = ctx.informer(NODES)
        self.recorder: EventRecorder = ctx.recorder("cidrAllocator")
        #: node name -> (uid, CIDRs) this allocator holds for it
        self.assigned: dict[str, tuple[str, list[str]]] = {}
        super().__init__(NAME, [self.nodes], UPDATE_WORKERS)
        self.nodes.add_event_handler(self.enqueue, self._node_updated, self.enqueue)

    def _node_updated(self, old: Obj, new: Obj) -> None:
        held = self.assigned.get(new["metadata"]["name"])
        if not node_cidrs(new) or held is None or held[1] != node_cidrs(new):
            self.enqueue(new)

    async def run(self) -> None:
        await self.nodes.wait_for_sync()
        for node in self.nodes.list():
            if node_cidrs(node):
                self._occupy(node)
        self.log.info("allocation map rebuilt from nodes", nodes=len(self.assigned),
                      clusterCIDRs=[str(s.cluster) for s in self.cidr_sets])
        await super().run()

    def _occupy(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        cidrs = node_cidrs(node)
        for cidr_set, cidr in zip(self.cidr_sets, cidrs, strict=False):
            try:
                cidr_set.occupy(cidr)
            except ValueError as exc:
                self.log.error("node CIDR outside the cluster CIDR", node=name, cidr=cidr, error=str(exc))
        self.assigned[name] = (node["metadata"].get("uid", ""), cidrs)

    def _release(self, name: str) -> None:
        held = self.assigned.pop(name, None)
        if held is None:
            return
        for cidr_set, cidr in zip(self.cidr_sets, held[1], strict=False):
            try:
                cidr_set.release(cidr)
            except ValueError:
                continue
        self.log.info("released node CIDRs", node=name, podCIDRs=held[1])

    def _wake_waiting(self) -> None:
        """Nodes still without a CIDR may get the one just freed."""
        for node in self.nodes.list():
            if not node_cidrs(node):
                self.enqueue(node)

    def _status_event(self, name: str, status: str) -> None:
        ref = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "uid": name}}
        self.recorder.normal(ref, status, f"Node {name} status is now: {status}")

    async def sync(self, key: str) -> None:
        node = self.nodes.get(key)
        if node is None:
            if key in self.assigned:
                self._release(key)
                self._wake_waiting()
            return
        uid = node["metadata"].get("uid", "")
        held = self.assigned.get(key)
        current = node_cidrs(node)
        if current:
            if held != (uid, current):
                self._release(key)
                self._occupy(node)
            return
        if held is not None and held[0] == uid:
            allocated = held[1]
        else:
            self._release(key)
            allocated = self._allocate(key, uid)
        try:
            await self.client.patch(NODES, key, {"spec": {"podCIDR": allocated[0], "podCIDRs": allocated}},
                                    patch_type="strategic")
        except NotFound:
            self._release(key)
            return
        except ApiError as exc:
            self._status_event(key, "CIDRAssignmentFailed")
            if not isinstance(exc, ServerTimeout):
                self._release(key)
            raise
        self.log.info("set node PodCIDR", node=key, podCIDRs=allocated)

    def _allocate(self, name: str, uid: str) -> list[str]:
        allocated: list[str] = []
        try:
            for cidr_set in self.cidr_sets:
                allocated.append(cidr_set.allocate_next())
        except CIDRSetFull:
            for cidr_set, cidr in zip(self.cidr_sets, allocated, strict=False):
                cidr_set.release(cidr)
            self._status_event(name, "CIDRNotAvailable")
            self.log.warning("no CIDR left for node", node=name)
            raise RequeueAfter(FULL_RETRY) from None
        self.assigned[name] = (uid, allocated)
        return allocated
