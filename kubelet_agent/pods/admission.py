"""Pod admission on the node, as upstream's predicate and privilege admit handlers: a pod bound here that
does not fit (resources, pod count, node affinity, host ports, untolerated NoExecute taints) or asks for a
privileged container the node does not allow is rejected once, when it first arrives, instead of being
started."""

from __future__ import annotations

import math
from typing import Any

from kubelet_agent.pods.util import quantity
from services.api.nodeaffinity import find_untolerated_taint, required_node_affinity_matches

RESOURCE_REASONS = {"cpu": "OutOfcpu", "memory": "OutOfmemory", "ephemeral-storage": "OutOfephemeral-storage",
                    "pods": "OutOfpods"}
NODE_AFFINITY = ("NodeAffinity", "node(s) didn't match Pod's node affinity/selector")
NODE_NAME = ("NodeName", "node(s) didn't match the requested node name")
NODE_PORTS = ("NodePorts", "node(s) didn't have free ports for the requested pod ports")
TAINTS = ("TaintToleration", "node(s) had untolerated taint")
#: verdicts that depend on the Node's labels and taints, which change under a running kubelet
NODE_DEPENDENT = frozenset({NODE_AFFINITY[0], TAINTS[0]})
FORBIDDEN = "Forbidden"


def _scaled(name: str, value: Any) -> int:
    """Integer amounts as the scheduler counts them: CPU in millicores, everything else in units (rounded up)."""
    q = quantity(value)
    return math.ceil(q * 1000) if name == "cpu" else math.ceil(q)


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Effective requests: app containers plus sidecars, or the largest init step if bigger, plus overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, 0) + _scaled(name, value)
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        requests = {n: _scaled(n, v) for n, v in ((c.get("resources") or {}).get("requests") or {}).items()}
        if c.get("restartPolicy") == "Always":
            for name, value in requests.items():
                sidecars[name] = sidecars.get(name, 0) + value
            continue
        for name, value in requests.items():
            init_peak[name] = max(init_peak.get(name, 0), value + sidecars.get(name, 0))
    for name, value in sidecars.items():
        total[name] = total.get(name, 0) + value
    for name, value in init_peak.items():
        total[name] = max(total.get(name, 0), value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + _scaled(name, value)
    return total


def matches_node_affinity(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """nodeSelector and required node affinity against the node's labels (upstream's RequiredNodeAffinity)."""
    return required_node_affinity_matches(pod.get("spec") or {}, node)


def host_ports(pod: dict[str, Any]) -> list[tuple[str, str, int]]:
    spec = pod.get("spec") or {}
    out = []
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append((p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", int(p["hostPort"])))
    return out


def _ports_conflict(wanted: list[tuple[str, str, int]], used: set[tuple[str, str, int]]) -> bool:
    for ip, proto, port in wanted:
        for uip, uproto, uport in used:
            if port == uport and proto == uproto and (ip == uip or "0.0.0.0" in (ip, uip)):
                return True
    return False


def untolerated_no_execute(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    taints = (node.get("spec") or {}).get("taints") or []
    return find_untolerated_taint(taints, tolerations, ("NoExecute",)) is not None


def is_privileged(container: dict[str, Any]) -> bool:
    return bool((container.get("securityContext") or {}).get("privileged"))


def has_privileged_container(spec: dict[str, Any]) -> bool:
    """Whether any init, app or ephemeral container asks to be privileged (its sandbox must be too)."""
    return any(is_privileged(c) for key in ("initContainers", "containers", "ephemeralContainers")
               for c in spec.get(key) or [])


def privilege_verdict(pod: dict[str, Any]) -> tuple[str, str] | None:
    """Upstream's privilege admit handler when --allow-privileged=false."""
    spec, uid = pod.get("spec") or {}, pod["metadata"].get("uid", "")
    for key, what in (("containers", "container"), ("initContainers", "init container")):
        if any(is_privileged(c) for c in spec.get(key) or []):
            return FORBIDDEN, f'pod with UID "{uid}" specified privileged {what}, but is disallowed'
    return None


def admit(pod: dict[str, Any], node: dict[str, Any], active: list[dict[str, Any]],
          allocatable: dict[str, str], *, static: bool = False,
          allow_privileged: bool = True) -> tuple[str, str] | None:
    """None when `pod` fits next to the `active` pods, else (reason, message) for the first failing check.

    Checks run in upstream's order (resources, node affinity, node name, host ports, NoExecute taints,
    then privilege); extended resources the node does not advertise are left to cluster-level
    allocation, as upstream.
    """
    capacity_pods = int(quantity(allocatable.get("pods", 0)))
    if len(active) + 1 > capacity_pods:
        return RESOURCE_REASONS["pods"], _insufficient("pods", 1, len(active), capacity_pods)
    wanted = {n: v for n, v in pod_requests(pod).items() if v > 0}
    if wanted:
        used: dict[str, int] = {}
        for other in active:
            for name, value in pod_requests(other).items():
                used[name] = used.get(name, 0) + value
        basic = ["cpu", "memory", "ephemeral-storage"]
        for name in basic + sorted(n for n in wanted if n not in basic and n in allocatable):
            if name not in wanted:
                continue
            capacity = _scaled(name, allocatable.get(name, 0))
            if wanted[name] + used.get(name, 0) > capacity:
                reason = RESOURCE_REASONS.get(name, f"OutOf{name}")
                return reason, _insufficient(name, wanted[name], used.get(name, 0), capacity)
    if not matches_node_affinity(pod, node):
        return _predicate(NODE_AFFINITY)
    node_name = (pod.get("spec") or {}).get("nodeName")
    if node_name and node_name != (node.get("metadata") or {}).get("name"):
        return _predicate(NODE_NAME)
    ports = host_ports(pod)
    if ports and _ports_conflict(ports, {p for other in active for p in host_ports(other)}):
        return _predicate(NODE_PORTS)
    if not static and untolerated_no_execute(pod, node):
        return _predicate(TAINTS)
    if not allow_privileged:
        return privilege_verdict(pod)
    return None


def _insufficient(name: str, requested: int, used: int, capacity: int) -> str:
    return f"Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"


def _predicate(failure: tuple[str, str]) -> tuple[str, str]:
    return failure[0], f"Predicate {failure[0]} failed: {failure[1]}"
