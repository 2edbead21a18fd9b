"""nftables mode: upstream's `ip kube-proxy` table, written as one `nft -f` transaction.

Dispatch goes through verdict maps (service-ips, service-nodeports, no-endpoint-services, ...),
so a partial sync rewrites the maps' elements and only the chains of the Services that changed.
A full sync deletes and recreates the whole table in the same transaction.
"""

from __future__ import annotations

from proxy_agent.backends import Backend, Ruleset, b32_hash, run_tool
from proxy_agent.tracker import Endpoint, ProxyState, ServicePort, usable

TABLE = "ip kube-proxy"
MASQ_MARK = "0x4000"
NAME_MAX = 256 - 16

BASE_CHAINS = (
    ("filter-prerouting", "type filter hook prerouting priority -110", ["ct state new jump firewall-check"]),
    (
        "filter-input",
        "type filter hook input priority -110",
        ["ct state new jump nodeport-endpoints-check", "ct state new jump service-endpoints-check"],
    ),
    (
        "filter-forward",
        "type filter hook forward priority -110",
        ["ct state new jump service-endpoints-check", "ct state new jump cluster-ips-check"],
    ),
    (
        "filter-output",
        "type filter hook output priority -110",
        ["ct state new jump service-endpoints-check", "ct state new jump firewall-check"],
    ),
    (
        "filter-output-post-dnat",
        "type filter hook output priority -90",
        ["ct state new jump cluster-ips-check"],
    ),
    ("nat-prerouting", "type nat hook prerouting priority -100", ["jump services"]),
    ("nat-output", "type nat hook output priority -100", ["jump services"]),
    ("nat-postrouting", "type nat hook postrouting priority 100", ["jump masquerading"]),
)
SETS = (
    ("set", "cluster-ips", "ipv4_addr", "Active ClusterIPs"),
    ("set", "nodeport-ips", "ipv4_addr", "IPs that accept NodePort traffic"),
    (
        "map",
        "no-endpoint-services",
        "ipv4_addr . inet_proto . inet_service : verdict",
        "vmap to drop or reject packets to services with no endpoints",
    ),
    (
        "map",
        "no-endpoint-nodeports",
        "inet_proto . inet_service : verdict",
        "vmap to drop or reject packets to service nodeports with no endpoints",
    ),
    (
        "map",
        "firewall-ips",
        "ipv4_addr . inet_proto . inet_service : verdict",
        "destinations that are subject to LoadBalancerSourceRanges",
    ),
    (
        "map",
        "service-ips",
        "ipv4_addr . inet_proto . inet_service : verdict",
        "ClusterIP, ExternalIP and LoadBalancer IP traffic",
    ),
    ("map", "service-nodeports", "inet_proto . inet_service : verdict", "NodePort traffic"),
)


def hash_truncate(name: str) -> str:
    """Upstream's hashAndTruncate: 8 characters of the name's hash, then the readable name."""
    name = b32_hash(name)[:8] + "-" + name
    return name[: NAME_MAX - 3] + "..." if len(name) > NAME_MAX else name


def chain_base(sp: ServicePort) -> str:
    return hash_truncate(f"{sp.name.namespace}/{sp.name.name}/{sp.proto}/{sp.name.port}")


def endpoint_base(sp: ServicePort, ep: Endpoint) -> str:
    return hash_truncate(f"{sp.name.namespace}/{sp.name.name}/{sp.proto}/{sp.name.port}__{ep.ip}/{ep.port}")


class NftablesBackend(Backend):
    """Renders and applies the nftables ruleset; remembers which chains and sets each Service owns."""

    mode = "nftables"

    def __init__(self, binary: str = "nft") -> None:
        self.binary = binary
        self._owned: dict[str, list[tuple[str, str]]] = {}

    def service_objects(
        self, state: ProxyState, sp: ServicePort, masq: str | None
    ) -> tuple[list[tuple[str, str]], list[str], dict[str, list[str]]]:
        """(owned objects, their declarations, map elements) for one Service port."""
        base = chain_base(sp)
        all_eps = usable(state.endpoints.get(sp.name, []))
        local_eps = state.local_endpoints(sp)
        internal_eps = local_eps if sp.internal_local else all_eps
        external_eps = local_eps if sp.external_local else all_eps
        svc, loc, ext = f"service-{base}", f"local-{base}", f"external-{base}"
        objs: list[tuple[str, str]] = []
        decls: list[str] = []
        rules: list[str] = []
        elems: dict[str, list[str]] = {}
        key = f"{sp.cluster_ip} . {sp.proto} . {sp.port}"
        elems.setdefault("cluster-ips", []).append(sp.cluster_ip)
        if internal_eps:
            elems.setdefault("service-ips", []).append(f"{key} : goto {loc if sp.internal_local else svc}")
        else:
            verdict = "drop" if sp.internal_local and all_eps else "goto reject-chain"
            elems.setdefault("no-endpoint-services", []).append(f"{key} : {verdict}")
        if sp.external:
            if external_eps:
                for eip in sp.external_ips:
                    elems.setdefault("service-ips", []).append(f"{eip} . {sp.proto} . {sp.port} : goto {ext}")
                if sp.node_port:
                    elems.setdefault("service-nodeports", []).append(
                        f"{sp.proto} . {sp.node_port} : goto {ext}"
                    )
                objs.append(("chain", ext))
                if sp.external_local:
                    if state.cluster_cidr:
                        rules.append(
                            f"add rule {TABLE} {ext} ip saddr {state.cluster_cidr} goto {svc} "
                            'comment "short-circuit pod traffic"'
                        )
                    rules.append(
                        f"add rule {TABLE} {ext} fib saddr type local jump mark-for-masquerade "
                        'comment "masquerade local traffic"'
                    )
                    rules.append(
                        f"add rule {TABLE} {ext} fib saddr type local goto {svc} "
                        'comment "short-circuit local traffic"'
                    )
                    rules.append(f"add rule {TABLE} {ext} goto {loc}")
                else:
                    rules.append(f"add rule {TABLE} {ext} jump mark-for-masquerade")
                    rules.append(f"add rule {TABLE} {ext} goto {svc}")
            else:
                verdict = "drop" if sp.external_local and all_eps else "goto reject-chain"
                for eip in sp.external_ips:
                    elems.setdefault("no-endpoint-services", []).append(
                        f"{eip} . {sp.proto} . {sp.port} : {verdict}"
                    )
                if sp.node_port:
                    elems.setdefault("no-endpoint-nodeports", []).append(
                        f"{sp.proto} . {sp.node_port} : {verdict}"
                    )
        seps: dict[str, tuple[Endpoint, str]] = {}
        for chain, eps, wanted in (
            (svc, all_eps, bool(all_eps) and (not sp.internal_local or sp.external)),
            (loc, local_eps, bool(local_eps) and (sp.internal_local or sp.external_local)),
        ):
            if not wanted:
                continue
            objs.append(("chain", chain))
            if masq is not None and chain == (loc if sp.internal_local else svc):
                rules.append(
                    f"add rule {TABLE} {chain} ip daddr {sp.cluster_ip} {sp.proto} dport {sp.port}"
                    f"{masq} jump mark-for-masquerade"
                )
            targets = []
            for ep in eps:
                ebase = endpoint_base(sp, ep)
                seps[f"endpoint-{ebase}"] = (ep, f"affinity-{ebase}")
                targets.append(f"endpoint-{ebase}")
            if sp.affinity_timeout:
                for target in targets:
                    rules.append(f"add rule {TABLE} {chain} ip saddr @{seps[target][1]} goto {target}")
            vmap = ", ".join(f"{i} : goto {t}" for i, t in enumerate(targets))
            rules.append(f"add rule {TABLE} {chain} numgen random mod {len(targets)} vmap {{ {vmap} }}")
        for chain, (ep, aff) in seps.items():
            objs.append(("chain", chain))
            rules.append(f"add rule {TABLE} {chain} ip saddr {ep.ip} jump mark-for-masquerade")
            if sp.affinity_timeout:
                objs.append(("set", aff))
                decls.append(
                    f"add set {TABLE} {aff} {{ type ipv4_addr; flags dynamic,timeout; "
                    f"timeout {sp.affinity_timeout}s; }}"
                )
                rules.append(f"add rule {TABLE} {chain} update @{aff} {{ ip saddr }}")
            rules.append(f"add rule {TABLE} {chain} meta l4proto {sp.proto} dnat to {ep.ip}:{ep.port}")
        decls += [f"add chain {TABLE} {c}" for kind, c in objs if kind == "chain"]
        decls += [f"flush chain {TABLE} {c}" for kind, c in objs if kind == "chain"]
        return objs, decls + rules, elems

    def render(self, state: ProxyState, changed: set[str] | None) -> Ruleset:
        full = changed is None
        masq: str | None = None
        if state.masquerade_all:
            masq = ""
        elif state.cluster_cidr:
            masq = f" ip saddr != {state.cluster_cidr}"
        out: list[str] = [f"add table {TABLE}"]
        if full:
            out += [f"delete table {TABLE}", f'add table {TABLE} {{ comment "rules for kube-proxy" ; }}']
            out += self._skeleton(state)
        else:
            out += [f"flush {kind} {TABLE} {name}" for kind, name, _, _ in SETS]
        elements: dict[str, list[str]] = {}
        decls: list[str] = []
        rules: list[str] = []
        owned: dict[str, list[tuple[str, str]]] = {} if full else dict(self._owned)
        touched: set[str] = set()
        for sp in sorted(state.services.values(), key=lambda s: s.name):
            objs, lines, elems = self.service_objects(state, sp, masq)
            for setname, items in elems.items():
                elements.setdefault(setname, []).extend(items)
            svc = sp.name.service
            if full or svc in changed:  # type: ignore[operator]
                if svc not in touched:
                    owned[svc] = []
                    touched.add(svc)
                owned[svc] += objs
                for line in lines:
                    (decls if line.startswith(("add chain", "add set", "flush chain")) else rules).append(
                        line
                    )
        if not full:
            for svc in changed:  # type: ignore[union-attr]
                if svc not in touched:
                    owned.pop(svc, None)
        alive = {o for objs in owned.values() for o in objs}
        stale = [] if full else sorted({o for objs in self._owned.values() for o in objs} - alive)
        self._owned = owned
        ips = state.nodeport_ips()
        if ips:
            elements["nodeport-ips"] = list(ips)
        elements["cluster-ips"] = sorted(set(elements.get("cluster-ips", [])))
        out += decls
        out += rules
        n_elements = 0
        for setname, items in elements.items():
            if items:
                n_elements += len(items)
                out.append(f"add element {TABLE} {setname} {{ {', '.join(items)} }}")
        out += [f"delete chain {TABLE} {name}" for kind, name in stale if kind == "chain"]
        out += [f"delete set {TABLE} {name}" for kind, name in stale if kind == "set"]
        counts = {
            "chains": sum(1 for line in out if line.startswith("add chain")),
            "rules": sum(1 for line in out if line.startswith("add rule")),
            "elements": n_elements,
        }
        return Ruleset("\n".join(out) + "\n", full, counts)

    def _skeleton(self, state: ProxyState) -> list[str]:
        """The fixed part of the table: base chains, helper chains, the dispatch sets and maps."""
        out: list[str] = []
        for kind, name, typ, comment in SETS:
            out.append(f'add {kind} {TABLE} {name} {{ type {typ} ; comment "{comment}" ; }}')
        helpers = {
            "masquerading": [
                f"meta mark & {MASQ_MARK} == 0 return",
                f"meta mark set meta mark ^ {MASQ_MARK}",
                "masquerade fully-random",
            ],
            "mark-for-masquerade": [f"meta mark set meta mark | {MASQ_MARK}"],
            "reject-chain": ["reject"],
            "cluster-ips-check": [
                'ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"'
            ],
            "service-endpoints-check": ["ip daddr . meta l4proto . th dport vmap @no-endpoint-services"],
            "nodeport-endpoints-check": [],
            "firewall-check": ["ip daddr . meta l4proto . th dport vmap @firewall-ips"],
            "services": ["ip daddr . meta l4proto . th dport vmap @service-ips"],
        }
        if state.nodeport_ips() is None:
            local = "fib daddr type local ip daddr != 127.0.0.0/8"
        else:
            local = "ip daddr @nodeport-ips"
        helpers["nodeport-endpoints-check"].append(
            f"{local} meta l4proto . th dport vmap @no-endpoint-nodeports"
        )
        helpers["services"].append(f"{local} meta l4proto . th dport vmap @service-nodeports")
        for name in helpers:
            out.append(f"add chain {TABLE} {name}")
        for name, spec, _ in BASE_CHAINS:
            out.append(f"add chain {TABLE} {name} {{ {spec} ; }}")
        for name, rules in helpers.items():
            out += [f"add rule {TABLE} {name} {r}" for r in rules]
        for name, _, rules in BASE_CHAINS:
            out += [f"add rule {TABLE} {name} {r}" for r in rules]
        return out

    async def apply(self, ruleset: Ruleset) -> None:
        await run_tool([self.binary, "-f", "-"], stdin=ruleset.text)

    def rollback(self) -> None:
        self._owned = {}

    async def cleanup(self) -> None:
        await run_tool([self.binary, "-f", "-"], stdin=f"add table {TABLE}\ndelete table {TABLE}\n")
        self._owned = {}
