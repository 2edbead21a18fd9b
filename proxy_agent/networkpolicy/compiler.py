"""NetworkPolicy semantics, as `networking.k8s.io/v1` defines them, turned into one program per pod of
this node: what may reach it (ingress) and what it may reach (egress), each None while no policy of
that type selects the pod (it is open), else the list of allows (empty: default deny).

Everything is resolved to addresses and numeric ports here, so the backends only write rules: peer
pods become /32s, ipBlocks their CIDR minus the excepts, named ports the container port of the pod
they name (the selected pod for ingress, the destination pod for egress). Pods with the same program
share one chain, so the rule count grows with the distinct policies, not the pods.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from services.api.selectors import LabelSelector

Obj = dict[str, Any]
Net = ipaddress.IPv4Network

PROTOCOLS = ("TCP", "UDP", "SCTP")


@dataclass(frozen=True, order=True)
class PortMatch:
    """One protocol and an inclusive port range; `first` 0 means every port of the protocol."""

    protocol: str
    first: int = 0
    last: int = 0


@dataclass(frozen=True, order=True)
class Allow:
    """Traffic from (ingress) or to (egress) `nets` on `ports`; None is anything."""

    nets: tuple[str, ...] | None
    ports: tuple[PortMatch, ...] | None


@dataclass(frozen=True)
class Program:
    """The allows of one direction; an empty tuple denies everything but replies."""

    allows: tuple[Allow, ...]

    @property
    def key(self) -> str:
        """A stable name for the chain that holds this program."""
        text = repr(self.allows).encode()
        return hashlib.sha256(text).hexdigest()[:12]


@dataclass
class NodePrograms:
    """For every isolated pod IP of this node, the program of each direction it is isolated in."""

    ingress: dict[str, Program] = field(default_factory=dict)
    egress: dict[str, Program] = field(default_factory=dict)

    def programs(self) -> dict[str, Program]:
        """Every distinct program by its key (what the backends write one chain for)."""
        return {p.key: p for p in (*self.ingress.values(), *self.egress.values())}


@dataclass(frozen=True)
class PodInfo:
    """What the policies need of one pod."""

    namespace: str
    name: str
    ip: str
    node: str
    labels: dict[str, str]
    ports: dict[tuple[str, str], int]  # (container port name, protocol) -> number


def pod_info(pod: Obj) -> PodInfo | None:
    """The pod as policies see it, or None when no policy applies to it: no IPv4 pod IP yet, host
    network (its address is the node's), or finished."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if spec.get("hostNetwork") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ips = [p.get("ip", "") for p in status.get("podIPs") or []] or [status.get("podIP") or ""]
    ip = next((i for i in ips if i and ":" not in i), "")
    if not ip:
        return None
    ports: dict[tuple[str, str], int] = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for port in container.get("ports") or []:
            if port.get("name") and port.get("containerPort"):
                ports.setdefault((port["name"], port.get("protocol") or "TCP"), int(port["containerPort"]))
    meta = pod.get("metadata") or {}
    return PodInfo(meta.get("namespace", ""), meta.get("name", ""), ip, spec.get("nodeName") or "",
                   dict(meta.get("labels") or {}), ports)


def policy_types(spec: Obj) -> tuple[bool, bool]:
    """(ingress, egress): the policy's types, or upstream's default when it names none."""
    types = spec.get("policyTypes") or (["Ingress"] + (["Egress"] if spec.get("egress") else []))
    return "Ingress" in types, "Egress" in types


def block_nets(block: Obj) -> list[Net]:
    """An ipBlock's CIDR minus its excepts (IPv6 ones match nothing in this IPv4 cluster)."""
    try:
        nets = [ipaddress.ip_network(block.get("cidr", ""), strict=False)]
    except ValueError:
        return []
    if not isinstance(nets[0], ipaddress.IPv4Network):
        return []
    for text in block.get("except") or []:
        try:
            hole = ipaddress.ip_network(text, strict=False)
        except ValueError:
            continue
        if not isinstance(hole, ipaddress.IPv4Network):
            continue
        out: list[Net] = []
        for net in nets:
            if hole.supernet_of(net):
                continue
            out.extend(net.address_exclude(hole) if net.supernet_of(hole) else [net])
        nets = out
    return nets


def collapse(nets: Iterable[Net]) -> tuple[str, ...]:
    return tuple(str(n) for n in ipaddress.collapse_addresses(nets))


class Cluster:
    """Pods and namespace labels, indexed for selector matching."""

    def __init__(self, pods: Iterable[Obj], namespaces: Iterable[Obj]) -> None:
        self.pods = [p for p in (pod_info(o) for o in pods) if p is not None]
        self.ns_labels = {
            (ns.get("metadata") or {}).get("name", ""): dict((ns.get("metadata") or {}).get("labels") or {})
            for ns in namespaces
        }
        self.by_ns: dict[str, list[PodInfo]] = {}
        for pod in self.pods:
            self.by_ns.setdefault(pod.namespace, []).append(pod)

    def select(self, namespace: str, pod_selector: Obj | None) -> list[PodInfo]:
        selector = LabelSelector.from_dict(pod_selector if pod_selector is not None else {})
        return [p for p in self.by_ns.get(namespace, []) if selector.matches(p.labels)]

    def namespaces(self, ns_selector: Obj) -> list[str]:
        selector = LabelSelector.from_dict(ns_selector)
        return sorted(name for name, labels in self.ns_labels.items() if selector.matches(labels))

    def peer(self, namespace: str, peer: Obj) -> tuple[list[PodInfo], list[Net]]:
        """The pods and networks one `from`/`to` entry names."""
        if peer.get("ipBlock") is not None:
            return [], block_nets(peer["ipBlock"])
        if peer.get("namespaceSelector") is not None:
            spaces = self.namespaces(peer["namespaceSelector"])
        else:
            spaces = [namespace]
        pod_selector = peer.get("podSelector")
        return [p for ns in spaces for p in self.select(ns, pod_selector if pod_selector is not None else {})], []


def _numeric(port: Obj) -> PortMatch | None:
    """A port entry with a number or no port at all; None for a named one."""
    protocol = port.get("protocol") or "TCP"
    value = port.get("port")
    if value is None:
        return PortMatch(protocol)
    if isinstance(value, str) and not value.isdigit():
        return None
    first = int(value)
    return PortMatch(protocol, first, max(first, int(port.get("endPort") or first)))


def _named(ports: list[Obj]) -> list[tuple[str, str]]:
    return [(str(p["port"]), p.get("protocol") or "TCP") for p in ports if _numeric(p) is None]


@dataclass(frozen=True)
class RuleAllows:
    """What one ingress or egress rule allows: the same for every pod the policy selects, but for
    ingress named ports, which each selected pod resolves against its own container ports."""

    shared: tuple[Allow, ...]
    peer_nets: tuple[str, ...] | None = None
    named: tuple[tuple[str, str], ...] = ()

    def for_target(self, target: PodInfo) -> list[Allow]:
        resolved = tuple(sorted({PortMatch(proto, n, n) for name, proto in self.named
                                 if (n := target.ports.get((name, proto)))}))
        return [*self.shared, Allow(self.peer_nets, resolved)] if resolved else list(self.shared)


def _rule_allows(cluster: Cluster, namespace: str, rule: Obj, peers_key: str, ingress: bool) -> RuleAllows:
    """Resolve one rule's peers and ports (once per policy, not per selected pod)."""
    port_entries = rule.get("ports") or []
    numeric = tuple(sorted({m for m in map(_numeric, port_entries) if m is not None}))
    named = _named(port_entries)
    peers = rule.get(peers_key) or []
    pods: list[PodInfo] = []
    nets: list[Net] = []
    for peer in peers:
        p, n = cluster.peer(namespace, peer)
        pods += p
        nets += n
    peer_nets = None if not peers else collapse([*nets, *(ipaddress.IPv4Network(p.ip) for p in pods)])
    if peer_nets == ():
        return RuleAllows(())
    if not port_entries:
        return RuleAllows((Allow(peer_nets, None),))
    shared = [Allow(peer_nets, numeric)] if numeric else []
    if named and ingress:
        return RuleAllows(tuple(shared), peer_nets, tuple(named))
    if named:
        # an egress named port is the destination pod's: every pod the peers reach that has it
        if peers:
            candidates = {p.ip: p for p in pods}
            candidates.update({p.ip: p for p in cluster.pods if nets and _in_any(p.ip, nets)})
        else:
            candidates = {p.ip: p for p in cluster.pods}
        for ip in sorted(candidates):
            resolved = tuple(sorted({PortMatch(proto, n, n) for name, proto in named
                                     if (n := candidates[ip].ports.get((name, proto)))}))
            if resolved:
                shared.append(Allow((f"{ip}/32",), resolved))
    return RuleAllows(tuple(shared))


def _in_any(ip: str, nets: list[Net]) -> bool:
    addr = ipaddress.IPv4Address(ip)
    return any(addr in n for n in nets)


def compile_node(policies: Iterable[Obj], pods: Iterable[Obj], namespaces: Iterable[Obj], node: str) -> NodePrograms:
    """The programs of every isolated pod on `node`."""
    policies = list(policies)
    if not policies:
        return NodePrograms()  # every pod is open: no need to look at them
    cluster = Cluster(pods, namespaces)
    ingress: dict[str, set[Allow]] = {}
    egress: dict[str, set[Allow]] = {}
    for policy in policies:
        meta = policy.get("metadata") or {}
        spec = policy.get("spec") or {}
        namespace = meta.get("namespace", "")
        wants_ingress, wants_egress = policy_types(spec)
        targets = [p for p in cluster.select(namespace, spec.get("podSelector") or {}) if p.node == node]
        if not targets:
            continue
        for wanted, direction, peers_key, into in ((wants_ingress, "ingress", "from", ingress),
                                                   (wants_egress, "egress", "to", egress)):
            if not wanted:
                continue
            rules = [_rule_allows(cluster, namespace, rule, peers_key, direction == "ingress")
                     for rule in spec.get(direction) or []]
            for target in targets:
                allows = into.setdefault(target.ip, set())
                for rule_allows in rules:
                    allows.update(rule_allows.for_target(target))
    return NodePrograms(
        ingress={ip: Program(tuple(sorted(a, key=_order))) for ip, a in ingress.items()},
        egress={ip: Program(tuple(sorted(a, key=_order))) for ip, a in egress.items()},
    )


def _order(allow: Allow) -> tuple[Any, ...]:
    return (allow.nets is not None, allow.nets or (), allow.ports is not None, allow.ports or ())
