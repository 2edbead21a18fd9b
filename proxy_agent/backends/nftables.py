"""nftables mode: upstream's `ip kube-proxy` table, written as one `nft -f` transaction.

Dispatch goes through verdict maps (service-ips, service-nodeports, no-endpoint-services, ...).
A Service port with k <= 64 endpoints and no session affinity has no chain of its own: its dispatch
elements go to the shared chain `pick-<k>`, whose DNAT rule looks the endpoint up in the
`service-endpoints` map by destination and `numgen random mod k` (a second rule does the same for
NodePort traffic by protocol and port in `nodeport-endpoints`). So such a Service costs map elements
only, and an endpoint change is a few element updates. Rules and chains are what `nft -f` pays for
(about 20 us each, half in the kernel). Upstream's per-Service anonymous `numgen ... vmap {...}` is
worse here: the kernel names each anonymous set by scanning every set of the table (quadratic), and
a map bound from one rule per Service is checked against every binding for each element added
(quadratic too), hence a few shared `pick-<k>` chains. They are created with the table, because nft
1.0.6 cannot add a rule using these maps once it has to read their `typeof` back from the kernel.

Local-policy chains (`local-*`), Services with more endpoints and sessionAffinity Services keep one
`numgen random mod k == 0` DNAT rule per endpoint (probability 1/k of the rest), affinity with
per-endpoint chains holding the affinity set update. Hairpin masquerading is one rule in
`masquerading` over the `hairpin-endpoints` set of endpoint IP pairs, and ClusterIP masquerading one
rule in `services`.

A partial sync adds and deletes only the changed Services' map elements (reference-counted, since
an endpoint IP can back several Services) and flushes and refills only their chains; a full sync
deletes and recreates the whole table in the same transaction.
"""

from __future__ import annotations

from collections import Counter

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
    ("set", "hairpin-endpoints", "ipv4_addr . ipv4_addr", "endpoint IP twice, to masquerade hairpin traffic"),
    (
        "map",
        "service-endpoints",
        "typeof ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . th dport",
        "endpoint by destination and random index",
    ),
    (
        "map",
        "nodeport-endpoints",
        "typeof meta l4proto . th dport . numgen random mod 1 : ip daddr . th dport",
        "endpoint by NodePort and random index",
    ),
)
PICK = "pick"
PICK_MAX = 64


def hash_truncate(name: str) -> str:
    """Upstream's hashAndTruncate: 8 characters of the name's hash, then the readable name."""
    name = b32_hash(name)[:8] + "-" + name
    return name[: NAME_MAX - 3] + "..." if len(name) > NAME_MAX else name


def chain_base(sp: ServicePort) -> str:
    return hash_truncate(f"{sp.name.namespace}/{sp.name.name}/{sp.proto}/{sp.name.port}")


def endpoint_base(sp: ServicePort, ep: Endpoint) -> str:
    return hash_truncate(f"{sp.name.namespace}/{sp.name.name}/{sp.proto}/{sp.name.port}__{ep.ip}/{ep.port}")


def _pick(remaining: int) -> str:
    """Pick this endpoint with probability 1/remaining, so the whole chain spreads traffic evenly."""
    return f"numgen random mod {remaining} == 0 " if remaining > 1 else ""


def _elements(verb: str, elems: dict[tuple[str, str], None], key_only: bool) -> list[str]:
    """One `add element`/`delete element` command per set; deletes name only the key of map elements."""
    by_set: dict[str, list[str]] = {}
    for setname, elem in elems:
        by_set.setdefault(setname, []).append(elem.split(" : ", 1)[0] if key_only else elem)
    return [f"{verb} {TABLE} {name} {{ {', '.join(items)} }}" for name, items in by_set.items()]


def _picked(sp: ServicePort, eps: list[Endpoint], cluster: bool, external: bool) -> list[tuple[str, str]]:
    """The endpoint-map elements under every destination that reaches `pick-<k>` for this Service port."""
    tail = f" . {sp.proto} . {sp.port} . "
    keys = [sp.cluster_ip + tail] if cluster else []
    if external:
        keys += [eip + tail for eip in sp.external_ips]
    targets = [f"{i} : {ep.ip} . {ep.port}" for i, ep in enumerate(eps)]
    out = [("service-endpoints", key + t) for key in keys for t in targets]
    if external and sp.node_port:
        prefix = f"{sp.proto} . {sp.node_port} . "
        out += [("nodeport-endpoints", prefix + t) for t in targets]
    return out


def _pick_chain(k: int) -> list[str]:
    """The shared DNAT chain of Services with k endpoints: by destination first, else by NodePort
    (a map miss ends the rule, so the second rule sees only what the first did not match)."""
    chain = f"{PICK}-{k}"
    return [
        f"add chain {TABLE} {chain}",
        f"add rule {TABLE} {chain} dnat to ip daddr . meta l4proto . th dport . numgen random mod {k} "
        "map @service-endpoints",
        f"add rule {TABLE} {chain} dnat to meta l4proto . th dport . numgen random mod {k} map @nodeport-endpoints",
    ]


class NftablesBackend(Backend):
    """Renders and applies the nftables ruleset; remembers which chains, sets and map elements each
    Service owns so that a partial sync touches nothing else."""

    mode = "nftables"

    def __init__(self, binary: str = "nft") -> None:
        self.binary = binary
        self._owned: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]] = {}
        self._refs: dict[tuple[str, str], int] = {}

    def service_objects(
        self, state: ProxyState, sp: ServicePort
    ) -> tuple[list[tuple[str, str]], list[str], list[str], list[tuple[str, str]]]:
        """(owned objects, their declarations, their rules, (set, element) pairs) for one Service port."""
        base = chain_base(sp)
        all_eps = usable(state.endpoints.get(sp.name, []))
        local_eps = state.local_endpoints(sp)
        internal_eps = local_eps if sp.internal_local else all_eps
        external_eps = local_eps if sp.external_local else all_eps
        svc, loc, ext = f"service-{base}", f"local-{base}", f"external-{base}"
        picked = 0 < len(all_eps) <= PICK_MAX and not sp.affinity_timeout
        if picked:
            svc = f"{PICK}-{len(all_eps)}"
        objs: list[tuple[str, str]] = []
        decls: list[str] = []
        rules: list[str] = []
        elems: list[tuple[str, str]] = [("cluster-ips", sp.cluster_ip)]
        key = f"{sp.cluster_ip} . {sp.proto} . {sp.port}"
        if internal_eps:
            elems.append(("service-ips", f"{key} : goto {loc if sp.internal_local else svc}"))
        else:
            verdict = "drop" if sp.internal_local and all_eps else "goto reject-chain"
            elems.append(("no-endpoint-services", f"{key} : {verdict}"))
        if sp.external:
            if external_eps:
                for eip in sp.external_ips:
                    elems.append(("service-ips", f"{eip} . {sp.proto} . {sp.port} : goto {ext}"))
                if sp.node_port:
                    elems.append(("service-nodeports", f"{sp.proto} . {sp.node_port} : goto {ext}"))
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
                    elems.append(("no-endpoint-services", f"{eip} . {sp.proto} . {sp.port} : {verdict}"))
                if sp.node_port:
                    elems.append(("no-endpoint-nodeports", f"{sp.proto} . {sp.node_port} : {verdict}"))
        affinity: dict[str, tuple[Endpoint, str]] = {}
        for chain, eps, wanted in (
            (svc, all_eps, bool(all_eps) and (not sp.internal_local or sp.external)),
            (loc, local_eps, bool(local_eps) and (sp.internal_local or sp.external_local)),
        ):
            if not wanted:
                continue
            n = len(eps)
            if chain == svc and picked:
                elems += _picked(sp, eps, cluster=not sp.internal_local, external=bool(sp.external and external_eps))
            elif sp.affinity_timeout:
                objs.append(("chain", chain))
                targets = []
                for ep in eps:
                    ebase = endpoint_base(sp, ep)
                    affinity[f"endpoint-{ebase}"] = (ep, f"affinity-{ebase}")
                    targets.append(f"endpoint-{ebase}")
                    rules.append(f"add rule {TABLE} {chain} ip saddr @affinity-{ebase} goto endpoint-{ebase}")
                for i, target in enumerate(targets):
                    rules.append(f"add rule {TABLE} {chain} {_pick(n - i)}goto {target}")
            else:
                objs.append(("chain", chain))
                for i, ep in enumerate(eps):
                    rules.append(
                        f"add rule {TABLE} {chain} {_pick(n - i)}meta l4proto {sp.proto} dnat to {ep}"
                    )
            # only a pod on this node can be DNATed here to itself
            elems += [
                ("hairpin-endpoints", f"{ep.ip} . {ep.ip}") for ep in eps if ep.node_name in ("", state.node_name)
            ]
        for chain, (ep, aff) in affinity.items():
            objs.append(("chain", chain))
            objs.append(("set", aff))
            decls.append(
                f"add set {TABLE} {aff} {{ type ipv4_addr; flags dynamic,timeout; "
                f"timeout {sp.affinity_timeout}s; }}"
            )
            rules.append(f"add rule {TABLE} {chain} update @{aff} {{ ip saddr }}")
            rules.append(f"add rule {TABLE} {chain} meta l4proto {sp.proto} dnat to {ep}")
        return objs, decls, rules, elems

    def render(self, state: ProxyState, changed: set[str] | None) -> Ruleset:
        """Full: the whole table. Partial: element deletes, then the changed Services' chains and
        rules, then element adds, then their chains and sets that went away, all one transaction."""
        full = changed is None
        keys: set[str] = set() if changed is None else changed
        if full:
            self._owned, self._refs = {}, {}
        before = {svc: self._owned.pop(svc) for svc in keys if svc in self._owned}
        decls: list[str] = []
        rules: list[str] = []
        for sp in sorted(
            (sp for sp in state.services.values() if full or sp.name.service in keys), key=lambda s: s.name.key
        ):
            objs, sp_decls, sp_rules, elems = self.service_objects(state, sp)
            owned = self._owned.setdefault(sp.name.service, ([], []))
            owned[0].extend(objs)
            owned[1].extend(elems)
            decls += sp_decls
            rules += sp_rules
        added: dict[tuple[str, str], None] = {}
        removed: dict[tuple[str, str], None] = {}
        refs = self._refs
        for _, elems in before.values():
            for elem in elems:
                refs[elem] -= 1
                if not refs[elem]:
                    del refs[elem]
                    removed[elem] = None
        if full:
            self._refs = refs = dict(Counter(elem for _, elems in self._owned.values() for elem in elems))
            added = dict.fromkeys(refs)
        for svc in () if full else keys:
            for elem in self._owned.get(svc, ((), ()))[1]:
                refs[elem] = refs.get(elem, 0) + 1
                if refs[elem] == 1:
                    if elem in removed:
                        del removed[elem]
                    else:
                        added[elem] = None
        old_objs = {o for objs, _ in before.values() for o in objs}
        new_objs = {o for svc in keys if svc in self._owned for o in self._owned[svc][0]}
        out: list[str] = [f"add table {TABLE}"]
        if full:
            out += [f"delete table {TABLE}", f'add table {TABLE} {{ comment "rules for kube-proxy" ; }}']
            out += self._skeleton(state)
            new_objs = {o for objs, _ in self._owned.values() for o in objs}
            ips = state.nodeport_ips()
            for ip in ips or ():
                added[("nodeport-ips", ip)] = None
        out += _elements("delete element", removed, key_only=True)
        out += [line for line in decls if ("set", line.split()[4]) not in old_objs]
        chains = sorted(name for kind, name in new_objs if kind == "chain")
        out += [f"add chain {TABLE} {c}" for c in chains if ("chain", c) not in old_objs]
        out += [f"flush chain {TABLE} {c}" for c in chains if ("chain", c) in old_objs]
        out += rules
        out += _elements("add element", added, key_only=False)
        stale = sorted(old_objs - new_objs)
        out += [f"flush chain {TABLE} {name}" for kind, name in stale if kind == "chain"]
        out += [f"delete chain {TABLE} {name}" for kind, name in stale if kind == "chain"]
        out += [f"delete set {TABLE} {name}" for kind, name in stale if kind == "set"]
        counts = {
            "chains": sum(1 for line in out if line.startswith("add chain")),
            "rules": sum(1 for line in out if line.startswith("add rule")),
            "elements": len(added),
        }
        return Ruleset("\n".join(out) + "\n", full, counts)

    def _skeleton(self, state: ProxyState) -> list[str]:
        """The fixed part of the table: base chains, helper chains, the dispatch sets and maps."""
        out: list[str] = []
        for kind, name, typ, comment in SETS:
            typ = typ if typ.startswith("typeof ") else "type " + typ
            out.append(f'add {kind} {TABLE} {name} {{ {typ} ; comment "{comment}" ; }}')
        helpers = {
            "masquerading": [
                f"ct status dnat ip saddr . ip daddr @hairpin-endpoints meta mark set meta mark | {MASQ_MARK} "
                'comment "hairpin: an endpoint reaching itself through its Service"',
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
        if state.masquerade_all:
            helpers["services"].insert(0, "ip daddr @cluster-ips jump mark-for-masquerade")
        elif state.cluster_cidr:
            helpers["services"].insert(
                0,
                f"ip saddr != {state.cluster_cidr} ip daddr @cluster-ips jump mark-for-masquerade "
                'comment "ClusterIP traffic from outside the pod network"',
            )
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
        for k in range(1, PICK_MAX + 1):
            out += _pick_chain(k)
        for name, _, rules in BASE_CHAINS:
            out += [f"add rule {TABLE} {name} {r}" for r in rules]
        return out

    async def apply(self, ruleset: Ruleset) -> None:
        await run_tool([self.binary, "-f", "-"], stdin=ruleset.text)

    def rollback(self) -> None:
        self._owned, self._refs = {}, {}

    async def cleanup(self) -> None:
        await run_tool([self.binary, "-f", "-"], stdin=f"add table {TABLE}\ndelete table {TABLE}\n")
        self._owned, self._refs = {}, {}
