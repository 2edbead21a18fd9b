"""Services: defaults, validation, type-change rules, and allocation of cluster IPs and
node ports from the configured ranges.

Allocated values are recorded as etcd keys below the storage root (`ranges/serviceips/<ip>`,
`ranges/servicenodeports/<port>`) that the store creates and deletes in
the same transaction as the Service, so two writers can never get the same value.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Callable
from typing import Any

from apiserver.registry.base import MetaStrategy, child, get, setdefault
from apiserver.registry.service_status import default_load_balancer_status, validate_load_balancer_status
from apiserver.registry.strategy import Allocation, Cause, Obj
from services.api import errors
from services.api import validation as v

IP_PREFIX = "ranges/serviceips/"
NODE_PORT_PREFIX = "ranges/servicenodeports/"
SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
SESSION_AFFINITIES = ("ClientIP", "None")
TRAFFIC_POLICIES = ("Cluster", "Local")
PORT_PROTOCOLS = ("SCTP", "TCP", "UDP")
IP_FAMILY_POLICIES = ("PreferDualStack", "RequireDualStack", "SingleStack")
IP_FAMILIES = ("IPv4", "IPv6")
DEFAULT_CLIENT_IP_TIMEOUT = 10800
MAX_CLIENT_IP_TIMEOUT = 86400
KUBELET_PORT = 10250
TOPOLOGY_MODE = "service.kubernetes.io/topology-mode"
TOPOLOGY_HINTS = "service.kubernetes.io/topology-aware-hints"
_IP_ERR = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
_LINK_LOCAL_MULTICAST = (ipaddress.ip_network("224.0.0.0/24"), ipaddress.ip_network("ff02::/16"))


def needs_cluster_ip(svc: Obj | None) -> bool:
    return svc is not None and get(svc, "spec", "type", default="ClusterIP") != "ExternalName"


def needs_node_ports(svc: Obj | None) -> bool:
    if svc is None:
        return False
    kind = get(svc, "spec", "type", default="ClusterIP")
    if kind == "NodePort":
        return True
    return kind == "LoadBalancer" and get(svc, "spec", "allocateLoadBalancerNodePorts", default=True) is not False


def externally_accessible(svc: Obj) -> bool:
    """Reachable from outside the cluster: NodePort, LoadBalancer, or ClusterIP with external IPs."""
    kind = get(svc, "spec", "type")
    return kind in ("NodePort", "LoadBalancer") or (kind == "ClusterIP" and bool(get(svc, "spec", "externalIPs")))


def needs_health_check_port(svc: Obj | None) -> bool:
    return (
        svc is not None
        and get(svc, "spec", "type") == "LoadBalancer"
        and get(svc, "spec", "externalTrafficPolicy") == "Local"
    )


def is_headless(svc: Obj) -> bool:
    return get(svc, "spec", "clusterIP") == "None"


def _cluster_ips(svc: Obj | None) -> list[str]:
    if svc is None or not needs_cluster_ip(svc):
        return []
    spec = svc.get("spec") or {}
    ips = list(spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else []))
    return [ip for ip in ips if ip and ip != "None"]


def _node_ports(svc: Obj | None) -> set[int]:
    if svc is None:
        return set()
    ports = {p["nodePort"] for p in get(svc, "spec", "ports", default=[]) if p.get("nodePort")}
    health = get(svc, "spec", "healthCheckNodePort")
    if health:
        ports.add(health)
    return ports


def allocation_keys(svc: Obj | None) -> set[str]:
    """Every range key a stored Service holds."""
    return {IP_PREFIX + ip for ip in _cluster_ips(svc)} | {NODE_PORT_PREFIX + str(p) for p in _node_ports(svc)}


def range_offset(size: int, low: int, high: int, step: int) -> int:
    """Size of the static band at the bottom of a range that dynamic allocation avoids
    while the rest has room (KEP-3070 for IPs, KEP-3668 for node ports)."""
    if size < low:
        return 0
    return max(low, min(high, size // step))


def pick_free(size: int, offset: int, is_free: Callable[[int], bool]) -> int | None:
    """A random free index: the upper (dynamic) band first, then the static band."""
    for lo, hi in ((offset, size), (0, offset)):
        if hi <= lo:
            continue
        start = random.randrange(lo, hi)
        width = hi - lo
        for i in range(width):
            idx = lo + (start - lo + i) % width
            if is_free(idx):
                return idx
    return None


class ServiceStrategy(MetaStrategy):
    name_fn = staticmethod(v.name_is_dns1035_label)

    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        # Go strings: empty is unset, so it gets the default too.
        for key, default in (("type", "ClusterIP"), ("sessionAffinity", "None")):
            if not spec.get(key):
                spec[key] = default
        default_load_balancer_status(obj)
        if spec["sessionAffinity"] == "ClientIP":
            client_ip = child(spec, "sessionAffinityConfig", "clientIP")
            setdefault(client_ip, "timeoutSeconds", DEFAULT_CLIENT_IP_TIMEOUT)
        for port in spec.get("ports") or []:
            if not isinstance(port, dict):
                continue
            if not port.get("protocol"):
                port["protocol"] = "TCP"
            if port.get("targetPort") in (None, 0, ""):
                port["targetPort"] = port.get("port")
        kind = spec["type"]
        if externally_accessible(obj) and not spec.get("externalTrafficPolicy"):
            spec["externalTrafficPolicy"] = "Cluster"
        if kind == "LoadBalancer":
            setdefault(spec, "allocateLoadBalancerNodePorts", True)
        if kind == "ExternalName":
            return
        setdefault(spec, "internalTrafficPolicy", "Cluster")
        if spec.get("clusterIP") and not spec.get("clusterIPs"):
            spec["clusterIPs"] = [spec["clusterIP"]]
        elif spec.get("clusterIPs") and not spec.get("clusterIP"):
            spec["clusterIP"] = spec["clusterIPs"][0]
        if spec.get("clusterIP") == "None" and not spec.get("selector"):
            setdefault(spec, "ipFamilyPolicy", "RequireDualStack")
        else:
            setdefault(spec, "ipFamilyPolicy", "SingleStack")
        if not spec.get("ipFamilies"):
            spec["ipFamilies"] = ["IPv4"]

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"loadBalancer": {}}

    def validate_status_update(self, new: Obj, old: Obj) -> list[Cause]:
        return validate_load_balancer_status(new)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        super().prepare_for_update(new, old)
        _drop_type_dependent_fields(new, old)
        _patch_allocated_values(new, old)

    def validate_spec(self, obj: Obj) -> list[Cause]:
        """Upstream's ValidateService: what kube-proxy and the node agents later act on must be well formed."""
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        kind = spec.get("type") or ""
        if not kind:
            causes.append(v.required("spec.type"))
        elif kind not in SERVICE_TYPES:
            causes.append(v.not_supported("spec.type", kind, SERVICE_TYPES))
        ports = _list(spec.get("ports"))
        if not ports and not is_headless(obj) and kind != "ExternalName":
            causes.append(v.required("spec.ports"))
        causes.extend(_validate_type(obj, spec, kind))
        causes.extend(_validate_ports(ports, kind))
        causes.extend(v.validate_labels(spec.get("selector"), "spec.selector"))
        causes.extend(_validate_affinity(spec))
        if kind != "ExternalName":
            causes.extend(_validate_cluster_ips(obj, spec))
        causes.extend(_validate_external_ips(_list(spec.get("externalIPs"))))
        causes.extend(_validate_load_balancer_fields(spec, kind))
        causes.extend(_validate_traffic_policies(obj, spec, kind))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        """Upstream's ValidateServiceUpdate: the primary cluster IP and IP family never change (short of going
        to or from ExternalName), and only a SingleStack service may drop its secondary."""
        causes = self.validate_spec(new)
        if needs_cluster_ip(new) and needs_cluster_ip(old):
            causes.extend(_cluster_ips_update(new, old))
            causes.extend(_ip_families_update(new, old))
        return causes

    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        fields["spec.clusterIP"] = get(obj, "spec", "clusterIP", default="")
        fields["spec.type"] = get(obj, "spec", "type", default="")
        return fields

    async def allocate(self, ctx: Any, obj: Obj, old: Obj | None) -> Allocation:
        meta = obj.get("metadata") or {}
        owner = f"{meta.get('namespace', '')}/{meta.get('name', '')}".encode()
        held = allocation_keys(old)
        alloc = Allocation()
        if needs_cluster_ip(obj):
            await self._allocate_ip(ctx, obj, held, owner, alloc)
        if needs_node_ports(obj) or needs_health_check_port(obj):
            await self._allocate_node_ports(ctx, obj, held, owner, alloc)
        alloc.delete = sorted(held - allocation_keys(obj))
        return alloc

    async def _allocate_ip(self, ctx: Any, obj: Obj, held: set[str], owner: bytes, alloc: Allocation) -> None:
        spec = obj["spec"]
        requested = spec.get("clusterIP") or ""
        if requested == "None":
            spec["clusterIPs"] = ["None"]
            return
        cidr: ipaddress.IPv4Network = ctx.service_cidr
        family_causes = _configured_families(spec, f"IPv{cidr.version}")
        if family_causes:
            raise self._invalid(obj, family_causes)
        if requested:
            if IP_PREFIX + requested in held:
                return
            taken = await ctx.taken(IP_PREFIX)
            why = ""
            try:
                addr = ipaddress.ip_address(requested)
            except ValueError:
                why = f"the provided IP ({requested}) is not in the valid range. The range of valid IPs is {cidr}"
            else:
                if addr not in cidr or addr in (cidr.network_address, cidr.broadcast_address):
                    why = f"the provided IP ({requested}) is not in the valid range. The range of valid IPs is {cidr}"
                elif IP_PREFIX + str(addr) in taken:
                    why = "provided IP is already allocated"
            if why:
                raise self._invalid(obj, [v.invalid("spec.clusterIPs", spec.get("clusterIPs") or [requested],
                                                    f"failed to allocate IP {requested}: {why}")])
            alloc.create[IP_PREFIX + str(addr)] = owner
            return
        taken = await ctx.taken(IP_PREFIX)
        base = int(cidr.network_address) + 1
        size = max(cidr.num_addresses - 2, 0)
        offset = range_offset(cidr.num_addresses, 16, 256, 16)
        idx = pick_free(size, offset, lambda i: IP_PREFIX + str(ipaddress.ip_address(base + i)) not in taken)
        if idx is None:
            raise errors.internal("failed to allocate a serviceIP: range is full")
        ip = str(ipaddress.ip_address(base + idx))
        spec["clusterIP"] = ip
        spec["clusterIPs"] = [ip]
        alloc.create[IP_PREFIX + ip] = owner

    async def _allocate_node_ports(
        self, ctx: Any, obj: Obj, held: set[str], owner: bytes, alloc: Allocation
    ) -> None:
        spec = obj["spec"]
        first, last = ctx.node_port_range
        taken = await ctx.taken(NODE_PORT_PREFIX)
        mine: set[int] = set()
        causes: list[Cause] = []

        def claim(port: int, path: str) -> None:
            key = NODE_PORT_PREFIX + str(port)
            if port in mine or key in held:
                mine.add(port)
                return
            if not first <= port <= last:
                causes.append(v.invalid(path, port, "provided port is not in the valid range. "
                                                     f"The range of valid ports is {first}-{last}"))
            elif key in taken:
                causes.append(v.invalid(path, port, "provided port is already allocated"))
            else:
                mine.add(port)
                alloc.create[key] = owner

        def fresh() -> int:
            size = last - first + 1
            offset = range_offset(size, 16, 128, 32)
            idx = pick_free(size, offset,
                            lambda i: first + i not in mine and NODE_PORT_PREFIX + str(first + i) not in taken)
            if idx is None:
                raise errors.internal("failed to allocate a nodePort: range is full")
            port = first + idx
            mine.add(port)
            alloc.create[NODE_PORT_PREFIX + str(port)] = owner
            return port

        ports = spec.get("ports") or []
        if needs_node_ports(obj):
            for i, port in enumerate(ports):
                if port.get("nodePort"):
                    claim(port["nodePort"], f"spec.ports[{i}].nodePort")
            if causes:
                raise self._invalid(obj, causes)
            for port in ports:
                if not port.get("nodePort"):
                    same = [p["nodePort"] for p in ports if p.get("nodePort") and p.get("port") == port.get("port")
                            and p.get("protocol") != port.get("protocol")]
                    port["nodePort"] = same[0] if same else fresh()
        if needs_health_check_port(obj):
            health = spec.get("healthCheckNodePort")
            if health:
                claim(health, "spec.healthCheckNodePort")
                if causes:
                    raise self._invalid(obj, causes)
            else:
                spec["healthCheckNodePort"] = fresh()

    def _invalid(self, obj: Obj, causes: list[Cause]) -> errors.StatusError:
        return errors.invalid(self.resource.kind, self.resource.group, get(obj, "metadata", "name", default=""),
                              causes)

    def release(self, obj: Obj) -> list[str]:
        return sorted(allocation_keys(obj))


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _validate_type(obj: Obj, spec: Obj, kind: str) -> list[Cause]:
    """What each type forbids or requires of the rest of the spec."""
    causes: list[Cause] = []
    if kind in ("LoadBalancer", "NodePort") and is_headless(obj):
        causes.append(v.invalid("spec.clusterIP", "None", f"may not be set to 'None' for {kind} services"))
    if kind == "LoadBalancer":
        for i, port in enumerate(_list(spec.get("ports"))):
            if isinstance(port, dict) and port.get("port") == KUBELET_PORT:
                causes.append(v.invalid(f"spec.ports[{i}]", KUBELET_PORT, f"may not expose port {KUBELET_PORT} "
                                        "externally since it is used by kubelet"))
    if kind == "ExternalName":
        if spec.get("clusterIPs") or spec.get("clusterIP"):
            causes.append(v.forbidden("spec.clusterIPs", "may not be set for ExternalName services"))
        if spec.get("ipFamilies"):
            causes.append(v.forbidden("spec.ipFamilies", "may not be set for ExternalName services"))
        if spec.get("ipFamilyPolicy") is not None:
            causes.append(v.forbidden("spec.ipFamilyPolicy", "may not be set for ExternalName services"))
        name = spec.get("externalName") or ""
        cname = name.removesuffix(".") if isinstance(name, str) else ""
        if not cname:
            causes.append(v.required("spec.externalName"))
        else:
            causes.extend(v.invalid("spec.externalName", cname, m) for m in v.is_dns1123_subdomain(cname))
    if kind == "ClusterIP":
        for i, port in enumerate(_list(spec.get("ports"))):
            if isinstance(port, dict) and port.get("nodePort"):
                causes.append(v.forbidden(f"spec.ports[{i}].nodePort", "may not be used when `type` is 'ClusterIP'"))
    return causes


def _validate_affinity(spec: Obj) -> list[Cause]:
    affinity = spec.get("sessionAffinity") or ""
    config = spec.get("sessionAffinityConfig")
    if not affinity:
        return [v.required("spec.sessionAffinity")]
    if affinity not in SESSION_AFFINITIES:
        return [v.not_supported("spec.sessionAffinity", affinity, SESSION_AFFINITIES)]
    if affinity == "None":
        if config is not None:
            return [v.forbidden("spec.sessionAffinityConfig", "must not be set when session affinity is None")]
        return []
    when = "when session affinity type is ClientIP"
    if not isinstance(config, dict):
        return [v.required("spec.sessionAffinityConfig", when)]
    client_ip = config.get("clientIP")
    if not isinstance(client_ip, dict):
        return [v.required("spec.sessionAffinityConfig.clientIP", when)]
    timeout = client_ip.get("timeoutSeconds")
    path = "spec.sessionAffinityConfig.clientIP.timeoutSeconds"
    if timeout is None:
        return [v.required(path, when)]
    if not isinstance(timeout, int) or not 0 < timeout <= MAX_CLIENT_IP_TIMEOUT:
        return [v.invalid(path, timeout, f"must be greater than 0 and less than {MAX_CLIENT_IP_TIMEOUT}")]
    return []


def _ip(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _validate_cluster_ips(obj: Obj, spec: Obj) -> list[Cause]:
    """Upstream's ValidateServiceClusterIPsRelatedFields: clusterIP(s), ipFamilies and ipFamilyPolicy agree."""
    causes: list[Cause] = []
    cluster_ip = spec.get("clusterIP") or ""
    ips = _list(spec.get("clusterIPs"))
    families = _list(spec.get("ipFamilies"))
    if cluster_ip:
        if not ips:
            causes.append(v.required("spec.clusterIPs"))
        elif ips[0] != cluster_ip:
            causes.append(v.invalid("spec.clusterIPs", ips, "first value must match `clusterIP`"))
    elif ips:
        causes.append(v.invalid("spec.clusterIPs", ips, "must be empty when `clusterIP` is not specified"))
    seen: set[Any] = set()
    for i, family in enumerate(families):
        if family not in IP_FAMILIES:
            causes.append(v.not_supported(f"spec.ipFamilies[{i}]", family, IP_FAMILIES))
        if family in seen:
            causes.append(v.duplicate(f"spec.ipFamilies[{i}]", family))
        seen.add(family)
    policy = spec.get("ipFamilyPolicy")
    if policy is not None and policy not in IP_FAMILY_POLICIES:
        causes.append(v.not_supported("spec.ipFamilyPolicy", policy, IP_FAMILY_POLICIES))
    bad_ips = False
    for i, ip in enumerate(ips):
        if i == 0 and ip == "None":
            if len(ips) > 1:
                bad_ips = True
                causes.append(v.invalid("spec.clusterIPs", ips, "'None' must be the first and only value"))
            continue
        if _ip(ip) is None:
            bad_ips = True
            causes.append(v.invalid(f"spec.clusterIPs[{i}]", ip, _IP_ERR))
    if len(ips) > 2:
        causes.append(v.invalid("spec.clusterIPs", ips, "may only hold up to 2 values"))
    if bad_ips:
        return causes
    if len(ips) > 1 and len({_ip(ip).version for ip in ips}) != len(ips):  # type: ignore[union-attr]
        causes.append(v.invalid("spec.clusterIPs", ips, "may specify no more than one IP for each IP family"))
    if not is_headless(obj):
        for i, (ip, family) in enumerate(zip(ips, families, strict=False)):
            wanted = {"IPv4": 4, "IPv6": 6}.get(family)
            if wanted is not None and _ip(ip).version != wanted:  # type: ignore[union-attr]
                causes.append(v.invalid(f"spec.clusterIPs[{i}]", ip,
                                        f"expected an {family} value as indicated by `ipFamilies[{i}]`"))
    return causes


def _cluster_ips_update(new: Obj, old: Obj) -> list[Cause]:
    if is_headless(new) and is_headless(old):
        return []
    ips, old_ips = _list(get(new, "spec", "clusterIPs")), _list(get(old, "spec", "clusterIPs"))
    path = "spec.clusterIPs"
    if len(ips) == len(old_ips):
        return [v.invalid(f"{path}[{i}]", ips, "may not change once set")
                for i, ip in enumerate(old_ips) if ip != ips[i]]
    causes: list[Cause] = []
    if old_ips and ips and ips[0] != old_ips[0]:
        causes.append(v.invalid(f"{path}[0]", ips, "may not change once set"))
    if len(ips) < len(old_ips):
        if not ips:
            causes.append(v.invalid(f"{path}[0]", ips, "primary clusterIP can not be unset"))
        elif len(ips) == 1 and get(new, "spec", "ipFamilyPolicy") != "SingleStack":
            causes.append(v.invalid(f"{path}[0]", ips, "`ipFamilyPolicy` must be set to 'SingleStack' when "
                                                      "releasing the secondary clusterIP"))
    return causes


def _ip_families_update(new: Obj, old: Obj) -> list[Cause]:
    if is_headless(new) or is_headless(old):
        return []
    families, old_families = _list(get(new, "spec", "ipFamilies")), _list(get(old, "spec", "ipFamilies"))
    if len(families) == len(old_families):
        if families != old_families:
            return [v.invalid("spec.ipFamilies[0]", families, "may not change once set")]
        return []
    if families and old_families and families[0] != old_families[0]:
        return [v.invalid("spec.ipFamilies[0]", families, "may not change once set")]
    return []


def _configured_families(spec: Obj, family: str) -> list[Cause]:
    """A single-stack cluster serves only its own family, as upstream's allocator checks."""
    causes = [v.invalid(f"spec.ipFamilies[{i}]", spec["ipFamilies"], f"ipfamily {f} is not configured on cluster")
              for i, f in enumerate(_list(spec.get("ipFamilies"))) if f != family]
    policy = spec.get("ipFamilyPolicy")
    if policy == "RequireDualStack":
        causes.append(v.invalid("spec.ipFamilyPolicy", policy,
                                "this cluster is not configured for dual-stack services"))
    ips = [ip for ip in _list(spec.get("clusterIPs")) if ip != "None"]
    if len(ips) > 1 and policy == "SingleStack":
        causes.append(v.invalid("spec.ipFamilyPolicy", policy,
                                "must be 'RequireDualStack' or 'PreferDualStack' when multiple IPs are specified"))
    if len(_list(spec.get("ipFamilies"))) > 1 and policy == "SingleStack":
        causes.append(v.invalid("spec.ipFamilyPolicy", policy, "must be 'RequireDualStack' or 'PreferDualStack' "
                                                               "when multiple 'ipFamilies' are specified"))
    for i, text in enumerate(ips):
        ip = _ip(text)
        if ip is not None and f"IPv{ip.version}" != family:
            causes.append(v.invalid(f"spec.clusterIPs[{i}]", spec["clusterIPs"],
                                    f"IPv{ip.version} is not configured on this cluster"))
    return causes


def _validate_external_ips(ips: list[Any]) -> list[Cause]:
    """Valid addresses that are neither unspecified, loopback nor link-local (upstream's ValidateNonSpecialIP)."""
    causes: list[Cause] = []
    for i, text in enumerate(ips):
        path = f"spec.externalIPs[{i}]"
        ip = _ip(text)
        if ip is None:
            causes.append(v.invalid(path, text, _IP_ERR))
            continue
        if ip.is_unspecified:
            causes.append(v.invalid(path, text, f"may not be unspecified ({text})"))
        if ip.is_loopback:
            causes.append(v.invalid(path, text, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
        if ip.is_link_local:
            causes.append(v.invalid(path, text, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
        if any(ip in net for net in _LINK_LOCAL_MULTICAST if net.version == ip.version):
            causes.append(v.invalid(path, text, "may not be in the link-local multicast range (224.0.0.0/24, "
                                                "ff02::/10)"))
    return causes


def _validate_load_balancer_fields(spec: Obj, kind: str) -> list[Cause]:
    causes: list[Cause] = []
    only_lb = "may only be used when `type` is 'LoadBalancer'"
    ranges = _list(spec.get("loadBalancerSourceRanges"))
    if ranges:
        if kind != "LoadBalancer":
            causes.append(v.forbidden("spec.LoadBalancerSourceRanges", only_lb))
        for text in ranges:
            try:
                ipaddress.ip_network(text.strip() if isinstance(text, str) else text, strict=False)
            except (ValueError, TypeError):
                shown = "[" + " ".join(str(r) for r in ranges) + "]"
                causes.append(v.invalid("spec.LoadBalancerSourceRanges", shown,
                                        "must be a list of IP ranges. For example, 10.240.0.0/24,10.250.0.0/24 "))
                break
    if spec.get("allocateLoadBalancerNodePorts") is not None and kind != "LoadBalancer":
        causes.append(v.forbidden("spec.allocateLoadBalancerNodePorts", only_lb))
    if kind == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is None:
        causes.append(v.required("allocateLoadBalancerNodePorts"))
    lb_class = spec.get("loadBalancerClass")
    if lb_class is not None:
        if kind != "LoadBalancer":
            causes.append(v.forbidden("spec.loadBalancerClass", only_lb))
        else:
            causes.extend(v.invalid("spec.loadBalancerClass", lb_class, m) for m in v.is_qualified_name(lb_class))
    return causes


def _validate_traffic_policies(obj: Obj, spec: Obj, kind: str) -> list[Cause]:
    causes: list[Cause] = []
    etp = spec.get("externalTrafficPolicy")
    if not externally_accessible(obj):
        if etp:
            causes.append(v.invalid("spec.externalTrafficPolicy", etp,
                                    "may only be set for externally-accessible services"))
    elif not etp:
        causes.append(v.required("spec.externalTrafficPolicy"))
    elif etp not in TRAFFIC_POLICIES:
        causes.append(v.not_supported("spec.externalTrafficPolicy", etp, TRAFFIC_POLICIES))
    health = spec.get("healthCheckNodePort")
    if not needs_health_check_port(obj):
        if health:
            causes.append(v.invalid("spec.healthCheckNodePort", health, "may only be set when `type` is "
                                    "'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
    elif health:
        causes.extend(v.invalid("spec.healthCheckNodePort", health, m) for m in v.is_valid_port_num(health))
    itp = spec.get("internalTrafficPolicy")
    if itp is None and kind in ("ClusterIP", "NodePort", "LoadBalancer"):
        causes.append(v.required("spec.internalTrafficPolicy", "must be specified"))
    elif itp is not None and itp not in TRAFFIC_POLICIES:
        causes.append(v.not_supported("spec.internalTrafficPolicy", itp, TRAFFIC_POLICIES))
    distribution = spec.get("trafficDistribution")
    if distribution is not None and distribution != "PreferClose":
        causes.append(v.not_supported("spec.trafficDistribution", distribution, ("PreferClose",)))
    annotations = get(obj, "metadata", "annotations", default={})
    annotations = annotations if isinstance(annotations, dict) else {}
    mode, hints = annotations.get(TOPOLOGY_MODE), annotations.get(TOPOLOGY_HINTS)
    if mode is not None and hints is not None and mode != hints:
        causes.append(v.invalid(f"metadata.annotations[{TOPOLOGY_MODE}]", mode,
                                f"must match annotations[{TOPOLOGY_HINTS}] when both are specified"))
    return causes


def _validate_ports(ports: list[Any], kind: str) -> list[Cause]:
    causes: list[Cause] = []
    names: set[str] = set()
    seen: set[tuple[Any, Any]] = set()
    node_ports: set[tuple[Any, Any]] = set()
    for i, port in enumerate(ports):
        path = f"spec.ports[{i}]"
        if not isinstance(port, dict):
            causes.append(v.invalid(path, port, "must be an object"))
            continue
        name = port.get("name") or ""
        if len(ports) > 1 and not name:
            causes.append(v.required(f"{path}.name"))
        elif name:
            causes.extend(v.invalid(f"{path}.name", name, m) for m in v.is_dns1123_label(name))
            if name in names:
                causes.append(v.duplicate(f"{path}.name", name))
            names.add(name)
        number = port.get("port")
        causes.extend(v.invalid(f"{path}.port", number, m) for m in v.is_valid_port_num(number))
        protocol = port.get("protocol") or ""
        if not protocol:
            causes.append(v.required(f"{path}.protocol"))
        elif protocol not in PORT_PROTOCOLS:
            causes.append(v.not_supported(f"{path}.protocol", protocol, PORT_PROTOCOLS))
        target = port.get("targetPort")
        if isinstance(target, str):
            causes.extend(v.invalid(f"{path}.targetPort", target, m) for m in v.is_valid_port_name(target))
        elif target is not None:
            causes.extend(v.invalid(f"{path}.targetPort", target, m) for m in v.is_valid_port_num(target))
        app_protocol = port.get("appProtocol")
        if app_protocol is not None:
            causes.extend(v.invalid(f"{path}.appProtocol", app_protocol, m) for m in v.is_qualified_name(app_protocol))
        node_port = port.get("nodePort")
        if node_port:
            if (protocol, node_port) in node_ports:
                causes.append(v.duplicate(f"{path}.nodePort", node_port))
            node_ports.add((protocol, node_port))
        key = (number, protocol)
        if key in seen:
            causes.append(v.duplicate(path, {"port": number, "protocol": protocol}))
        seen.add(key)
    return causes


def _drop_type_dependent_fields(new: Obj, old: Obj) -> None:
    """When the type changes, fields the new type cannot have are cleared if the client left them as they were."""
    spec = child(new, "spec")
    old_spec = old.get("spec") or {}
    if needs_cluster_ip(old) and not needs_cluster_ip(new):
        if spec.get("clusterIP") in (None, "", old_spec.get("clusterIP")):
            for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"):
                spec.pop(key, None)
    if needs_node_ports(old) and not needs_node_ports(new):
        old_ports = {(p.get("port"), p.get("protocol")): p.get("nodePort") for p in old_spec.get("ports") or []}
        for port in spec.get("ports") or []:
            if port.get("nodePort") == old_ports.get((port.get("port"), port.get("protocol"))):
                port.pop("nodePort", None)
    if needs_health_check_port(old) and not needs_health_check_port(new):
        if spec.get("healthCheckNodePort") == old_spec.get("healthCheckNodePort"):
            spec.pop("healthCheckNodePort", None)
    if not externally_accessible(new):
        if spec.get("externalTrafficPolicy") == old_spec.get("externalTrafficPolicy"):
            spec.pop("externalTrafficPolicy", None)
    if spec.get("type") != "LoadBalancer":
        for key in ("allocateLoadBalancerNodePorts", "loadBalancerClass"):
            if spec.get(key) == old_spec.get(key):
                spec.pop(key, None)


def _patch_allocated_values(new: Obj, old: Obj) -> None:
    """Allocated values an update body left out (kubectl apply of the original manifest) are kept."""
    spec = child(new, "spec")
    old_spec = old.get("spec") or {}
    if needs_cluster_ip(old) and needs_cluster_ip(new) and not spec.get("clusterIP"):
        if old_spec.get("clusterIP"):
            spec["clusterIP"] = old_spec["clusterIP"]
            spec["clusterIPs"] = list(old_spec.get("clusterIPs") or [old_spec["clusterIP"]])
    if needs_node_ports(old) and needs_node_ports(new):
        by_name = {p.get("name", ""): p["nodePort"] for p in old_spec.get("ports") or [] if p.get("nodePort")}
        used = {p["nodePort"] for p in spec.get("ports") or [] if p.get("nodePort")}
        for port in spec.get("ports") or []:
            previous = by_name.get(port.get("name", ""))
            if not port.get("nodePort") and previous and previous not in used:
                port["nodePort"] = previous
                used.add(previous)
    if needs_health_check_port(old) and needs_health_check_port(new) and not spec.get("healthCheckNodePort"):
        if old_spec.get("healthCheckNodePort"):
            spec["healthCheckNodePort"] = old_spec["healthCheckNodePort"]
