"""iptables mode: upstream's chain layout written through one `iptables-restore --noflush`.

Per-Service chains (KUBE-SVC/SVL/EXT/SEP) are written only for the Services that changed (partial
sync), and of those only the chains whose rules differ from what was last written, or for all of
them on a full sync. The top-level chains (KUBE-SERVICES, KUBE-NODEPORTS, the filter chains: one
rule per Service, 10,000 at scale) are rewritten only on a full sync or when a changed Service's own
dispatch rules differ, assembled from per-Service caches. Chains that no longer belong to anything
are flushed and deleted in the same transaction. Above 1,000 endpoints the per-endpoint rules carry
no comments (upstream's largeClusterMode).

With iptables-legacy every restore, however small, copies the whole table out of the kernel and back
(about 0.5 s at 170,000 rules). The nft-backed iptables-restore changes only what it is given, but one
run slows down with the square of the chains it creates, so its full syncs go in batches of about
BATCH_RULES rules: each batch writes whole Services' chains, and the last one the top-level chains and
deletions, so every step leaves a consistent table.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from proxy_agent.backends import Backend, CommandError, Ruleset, b32_hash, run_tool
from proxy_agent.tracker import Endpoint, ProxyState, ServicePort, usable

MASQ_MARK = "0x4000"
LARGE_CLUSTER_ENDPOINTS = 1000
#: nft-backed iptables-restore (1.8.9) slows down with the square of what one run creates; a full sync
#: through it is cut into runs of about this many rules (linear again: 4,000 rules take ~0.1 s)
BATCH_RULES = 4000
NAT_TOP = ("KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ")
FILTER_TOP = (
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-FORWARD",
    "KUBE-NODEPORTS",
    "KUBE-PROXY-FIREWALL",
)
SERVICE_PREFIXES = ("KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-SEP-", "KUBE-FW-")
OWNED_TOP = {*NAT_TOP, *FILTER_TOP, "KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-PROXY-CANARY"}

# (table, chain, rule) jumps from the built-in chains, ensured outside the atomic restore as upstream does.
JUMPS: tuple[tuple[str, str, list[str]], ...] = (
    (
        "filter",
        "INPUT",
        [
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes load balancer firewall",
            "-j",
            "KUBE-PROXY-FIREWALL",
        ],
    ),
    (
        "filter",
        "INPUT",
        ["-m", "comment", "--comment", "kubernetes health check service ports", "-j", "KUBE-NODEPORTS"],
    ),
    (
        "filter",
        "INPUT",
        [
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes externally-visible service portals",
            "-j",
            "KUBE-EXTERNAL-SERVICES",
        ],
    ),
    (
        "filter",
        "FORWARD",
        ["-m", "comment", "--comment", "kubernetes forwarding rules", "-j", "KUBE-FORWARD"],
    ),
    (
        "filter",
        "FORWARD",
        [
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes service portals",
            "-j",
            "KUBE-SERVICES",
        ],
    ),
    (
        "filter",
        "FORWARD",
        [
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes externally-visible service portals",
            "-j",
            "KUBE-EXTERNAL-SERVICES",
        ],
    ),
    (
        "filter",
        "OUTPUT",
        [
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes service portals",
            "-j",
            "KUBE-SERVICES",
        ],
    ),
    ("nat", "OUTPUT", ["-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"]),
    (
        "nat",
        "PREROUTING",
        ["-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"],
    ),
    (
        "nat",
        "POSTROUTING",
        ["-m", "comment", "--comment", "kubernetes postrouting rules", "-j", "KUBE-POSTROUTING"],
    ),
)


def svc_chain(sp: ServicePort) -> str:
    return "KUBE-SVC-" + b32_hash(str(sp.name) + sp.proto)


def svl_chain(sp: ServicePort) -> str:
    return "KUBE-SVL-" + b32_hash(str(sp.name) + sp.proto)


def ext_chain(sp: ServicePort) -> str:
    return "KUBE-EXT-" + b32_hash(str(sp.name) + sp.proto)


def sep_chain(sp: ServicePort, ep: Endpoint) -> str:
    return "KUBE-SEP-" + b32_hash(str(sp.name) + sp.proto + str(ep))


def _q(comment: str) -> str:
    return f'"{comment}"'


class ServiceRules:
    """The rules of one Service port, split into the pieces each table and chain needs."""

    __slots__ = ("chains", "ext_filter", "filter_services", "nodeports", "services")

    def __init__(self) -> None:
        self.services: list[str] = []
        self.nodeports: list[str] = []
        self.filter_services: list[str] = []
        self.ext_filter: list[str] = []
        self.chains: dict[str, list[str]] = {}


def service_rules(state: ProxyState, sp: ServicePort, masq_rule: str | None, large: bool = False) -> ServiceRules:
    """Every rule for one Service port, as upstream's syncProxyRules writes them; `large` (more than
    LARGE_CLUSTER_ENDPOINTS endpoints in all) leaves the comments off the per-endpoint rules, as
    upstream's largeClusterMode does: they are most of the table's bytes."""
    out = ServiceRules()
    name = str(sp.name)
    proto = sp.proto
    key = name + proto
    match = f"-m {proto} -p {proto}"
    all_eps = usable(state.endpoints.get(sp.name, []))
    local_eps = state.local_endpoints(sp)
    internal_eps = local_eps if sp.internal_local else all_eps
    svc, svl, ext = svc_chain(sp), svl_chain(sp), ext_chain(sp)
    write_svc = bool(all_eps) and (not sp.internal_local or sp.external)
    write_svl = bool(local_eps) and (sp.internal_local or sp.external_local)
    internal_target = svl if sp.internal_local else svc
    external_eps = local_eps if sp.external_local else all_eps

    if internal_eps:
        out.services.append(
            f"-A KUBE-SERVICES -m comment --comment {_q(name + ' cluster IP')} {match} "
            f"-d {sp.cluster_ip}/32 --dport {sp.port} -j {internal_target}"
        )
    else:
        why = "has no local endpoints" if sp.internal_local and all_eps else "has no endpoints"
        verdict = "DROP" if sp.internal_local and all_eps else "REJECT"
        out.filter_services.append(
            f"-A KUBE-SERVICES -m comment --comment {_q(name + ' ' + why)} {match} "
            f"-d {sp.cluster_ip}/32 --dport {sp.port} -j {verdict}"
        )
    if sp.external:
        if external_eps:
            for eip in sp.external_ips:
                out.services.append(
                    f"-A KUBE-SERVICES -m comment --comment {_q(name + ' external IP')} {match} "
                    f"-d {eip}/32 --dport {sp.port} -j {ext}"
                )
            if sp.node_port:
                out.nodeports.append(
                    f"-A KUBE-NODEPORTS -m comment --comment {name} {match} --dport {sp.node_port} -j {ext}"
                )
            ext_rules = out.chains[ext] = []
            if sp.external_local:
                if state.cluster_cidr:
                    ext_rules.append(
                        f"-A {ext} -m comment --comment "
                        f"{_q('pod traffic for ' + name + ' external destinations')} "
                        f"-s {state.cluster_cidr} -j {svc}"
                    )
                ext_rules.append(
                    f"-A {ext} -m comment --comment "
                    f"{_q('masquerade LOCAL traffic for ' + name + ' external destinations')} "
                    f"-m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"
                )
                ext_rules.append(
                    f"-A {ext} -m comment --comment "
                    f"{_q('route LOCAL traffic for ' + name + ' external destinations')} "
                    f"-m addrtype --src-type LOCAL -j {svc}"
                )
                ext_rules.append(f"-A {ext} -j {svl}")
            else:
                ext_rules.append(
                    f"-A {ext} -m comment --comment "
                    f"{_q('masquerade traffic for ' + name + ' external destinations')} "
                    f"-j KUBE-MARK-MASQ"
                )
                ext_rules.append(f"-A {ext} -j {svc}")
        else:
            why = "has no local endpoints" if sp.external_local and all_eps else "has no endpoints"
            verdict = "DROP" if sp.external_local and all_eps else "REJECT"
            for eip in sp.external_ips:
                out.ext_filter.append(
                    f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {_q(name + ' ' + why)} "
                    f"{match} -d {eip}/32 --dport {sp.port} -j {verdict}"
                )
            if sp.node_port:
                out.ext_filter.append(
                    f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {_q(name + ' ' + why)} "
                    f"-m addrtype --dst-type LOCAL {match} --dport {sp.node_port} -j {verdict}"
                )

    seps: dict[str, Endpoint] = {}
    for chain, eps, wanted in ((svc, all_eps, write_svc), (svl, local_eps, write_svl)):
        if not wanted:
            continue
        rules = out.chains[chain] = []
        if masq_rule is not None and chain == internal_target:
            rules.append(
                f"-A {chain} -m comment --comment {_q(name + ' cluster IP')} {match} "
                f"-d {sp.cluster_ip}/32 --dport {sp.port}{masq_rule} -j KUBE-MARK-MASQ"
            )
        names = ["KUBE-SEP-" + b32_hash(f"{key}{ep.ip}:{ep.port}") for ep in eps]  # sep_chain, inlined
        if sp.affinity_timeout:
            for ep, sep in zip(eps, names, strict=True):
                comment = "" if large else f" -m comment --comment {_q(name + ' -> ' + str(ep))}"
                rules.append(
                    f"-A {chain}{comment} "
                    f"-m recent --name {sep} --rcheck --seconds {sp.affinity_timeout} --reap -j {sep}"
                )
        n = len(eps)
        for i, (ep, sep) in enumerate(zip(eps, names, strict=True)):
            stat = f" -m statistic --mode random --probability {1.0 / (n - i):.10f}" if n - i > 1 else ""
            comment = "" if large else f" -m comment --comment {_q(name + ' -> ' + str(ep))}"
            rules.append(f"-A {chain}{comment}{stat} -j {sep}")
            seps[sep] = ep
    recent = " -m recent --name {} --set" if sp.affinity_timeout else ""
    comment = "" if large else f" -m comment --comment {name}"
    for sep, ep in seps.items():
        out.chains[sep] = [
            f"-A {sep}{comment} -s {ep.ip}/32 -j KUBE-MARK-MASQ",
            f"-A {sep}{comment}{recent.format(sep)} {match} -j DNAT --to-destination {ep}",
        ]
    return out


@dataclass(slots=True)
class _Cached:
    """What one Service contributed to the last ruleset, so partial syncs render only changed ones."""

    top: tuple[tuple[str, ...], ...]
    chains: dict[str, list[str]]


class IptablesBackend(Backend):
    """Renders and applies the iptables ruleset; remembers each Service's rules and chains."""

    mode = "iptables"

    def __init__(self, binary: str = "iptables") -> None:
        self.binary = binary
        self.restore = binary + "-restore"
        self.save = binary + "-save"
        self._cache: dict[str, _Cached] = {}
        self._kernel_unknown = True
        self._large: bool | None = None
        self._nft: bool | None = None

    def _service(self, state: ProxyState, ports: list[ServicePort], masq_rule: str | None, large: bool) -> _Cached:
        top: list[list[str]] = [[], [], [], [], []]
        chains: dict[str, list[str]] = {}
        for sp in ports:
            rules = service_rules(state, sp, masq_rule, large)
            top[0] += rules.services
            top[1] += rules.nodeports
            top[2] += rules.filter_services
            top[3] += rules.ext_filter
            if sp.health_check_node_port:
                hc_comment = _q(sp.name.service + " health check node port")
                top[4].append(
                    f"-A KUBE-NODEPORTS -m comment --comment {hc_comment} "
                    f"-m tcp -p tcp --dport {sp.health_check_node_port} -j ACCEPT"
                )
            chains.update(rules.chains)
        return _Cached(tuple(tuple(part) for part in top), chains)

    def render(self, state: ProxyState, changed: set[str] | None) -> Ruleset:
        """Full: every chain. Partial: the changed Services' chains whose rules differ, plus the
        top-level chains only when a changed Service's dispatch rules differ (as upstream, which
        skips unchanged chains). Entering or leaving large-cluster mode makes it a full one."""
        large = sum(len(eps) for eps in state.endpoints.values()) > LARGE_CLUSTER_ENDPOINTS
        if large != self._large:
            changed = None
        self._large = large
        full = changed is None
        masq_rule: str | None = None
        if state.masquerade_all:
            masq_rule = ""
        elif state.cluster_cidr:
            masq_rule = f" ! -s {state.cluster_cidr}"
        by_service: dict[str, list[ServicePort]] = {}
        for sp in sorted(
            (sp for sp in state.services.values() if full or sp.name.service in changed),  # type: ignore[operator]
            key=lambda s: s.name.key,
        ):
            by_service.setdefault(sp.name.service, []).append(sp)
        keys = set(self._cache) | set(by_service) if full else changed
        before = {svc: self._cache.pop(svc) for svc in keys if svc in self._cache}  # type: ignore[union-attr]
        if full:
            self._cache = {}
        top_changed = full
        chain_decls: list[str] = []
        chain_rules: list[str] = []
        batches: list[tuple[int, int]] = []  # where each batch of Services ends in chain_decls and chain_rules
        kept: set[str] = set()
        for svc, ports in by_service.items():
            entry = self._service(state, ports, masq_rule, large)
            self._cache[svc] = entry
            old = before.get(svc)
            for chain, rules in entry.chains.items():
                if not full and old is not None and old.chains.get(chain) == rules:
                    kept.add(chain)
                else:
                    chain_decls.append(chain)
                    chain_rules += rules
            top_changed = top_changed or old is None or old.top != entry.top
            if full and len(chain_rules) - (batches[-1][1] if batches else 0) >= BATCH_RULES:
                batches.append((len(chain_decls), len(chain_rules)))
        top_changed = top_changed or any(svc not in self._cache for svc in before)
        stale = sorted({c for e in before.values() for c in e.chains} - kept - set(chain_decls))

        top_decls = [f":{c} - [0:0]" for c in NAT_TOP] if top_changed else []
        stale_decls = [f":{c} - [0:0]" for c in stale]
        nat: list[str] = ["*nat", *top_decls, *(f":{c} - [0:0]" for c in chain_decls), *stale_decls]
        nat_top: list[str] = []
        flt: list[str] = []
        if top_changed:
            nat_top = self._nat_top(state)
            nat += nat_top
            flt = ["*filter", *(f":{c} - [0:0]" for c in FILTER_TOP)]
            for part in (2, 3, 4):
                for entry in self._ordered():
                    flt += entry.top[part]
            flt += [
                "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
                '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" '
                f"-m mark --mark {MASQ_MARK}/{MASQ_MARK} -j ACCEPT",
                '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" '
                "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
                "COMMIT",
            ]
        nat += chain_rules
        nat += [f"-X {c}" for c in stale]
        nat.append("COMMIT")
        counts = {
            "nat": sum(len(e.top[0]) + len(e.top[1]) + sum(map(len, e.chains.values())) for e in self._cache.values())
            + 4
            + len(state.nodeport_ips() or [None]),
            "filter": sum(len(e.top[2]) + len(e.top[3]) + len(e.top[4]) for e in self._cache.values()) + 3,
        }

        def split() -> list[str]:
            """The same full sync as one restore per batch of Services' chains (KUBE-MARK-MASQ first, which
            they jump to), then one for the filter table, the top-level nat chains and the stale chains."""
            parts: list[str] = []
            start = (0, 0)
            for end in [*batches, (len(chain_decls), len(chain_rules))]:
                head = [] if parts else [":KUBE-MARK-MASQ - [0:0]", f"-A KUBE-MARK-MASQ -j MARK --or-mark {MASQ_MARK}"]
                decls = [f":{c} - [0:0]" for c in chain_decls[start[0] : end[0]]]
                parts.append("\n".join(["*nat", *head, *decls, *chain_rules[start[1] : end[1]], "COMMIT"]) + "\n")
                start = end
            tail = [*flt, "*nat", *top_decls, *stale_decls, *nat_top, *(f"-X {c}" for c in stale), "COMMIT"]
            return [*parts, "\n".join(tail) + "\n"]

        return Ruleset("\n".join(flt + nat) + "\n", full, counts, split if full else None)

    def _ordered(self) -> list[_Cached]:
        return [self._cache[k] for k in sorted(self._cache, key=lambda k: tuple(k.split("/", 1)))]

    def _nat_top(self, state: ProxyState) -> list[str]:
        """KUBE-POSTROUTING, KUBE-MARK-MASQ, KUBE-SERVICES and KUBE-NODEPORTS from every cached Service."""
        ordered = self._ordered()
        nat = [
            f"-A KUBE-POSTROUTING -m mark ! --mark {MASQ_MARK}/{MASQ_MARK} -j RETURN",
            f"-A KUBE-POSTROUTING -j MARK --xor-mark {MASQ_MARK}",
            '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" '
            "-j MASQUERADE --random-fully",
            f"-A KUBE-MARK-MASQ -j MARK --or-mark {MASQ_MARK}",
        ]
        for entry in ordered:
            nat += entry.top[0]
        np_comment = _q("kubernetes service nodeports; NOTE: this must be the last rule in this chain")
        ips = state.nodeport_ips()
        if ips is None:
            nat.append(
                f"-A KUBE-SERVICES -m comment --comment {np_comment} -m addrtype --dst-type LOCAL "
                "-j KUBE-NODEPORTS"
            )
        else:
            nat += [
                f"-A KUBE-SERVICES -m comment --comment {np_comment} -d {ip}/32 -j KUBE-NODEPORTS"
                for ip in ips
            ]
        for entry in ordered:
            nat += entry.top[1]
        return nat

    def rollback(self) -> None:
        self._kernel_unknown = True
        self._large = None

    async def _saved(self) -> dict[str, str]:
        """`iptables-save` of nat and filter: one table fetch each, where every `-C` check costs one."""
        nat, flt = await asyncio.gather(*(run_tool([self.save, "-t", t], check=False) for t in ("nat", "filter")))
        return {"nat": nat[1], "filter": flt[1]}

    async def ensure_jumps(self, saved: dict[str, str] | None = None) -> None:
        """Insert the jumps from the built-in chains that are missing; a jump found verbatim in
        `saved` needs no `-C` (with the legacy backend each `-C` copies the whole table out)."""
        for table, chain, rule in JUMPS:
            words = [f'"{w}"' if " " in w else w for w in rule]
            if saved is not None and f"-A {chain} {' '.join(words)}\n" in saved.get(table, ""):
                continue
            rc, _ = await run_tool([self.binary, "-w", "-t", table, "-C", chain, *rule], check=False)
            if rc != 0:
                target = rule[-1]
                await run_tool([self.binary, "-w", "-t", table, "-N", target], check=False)
                await run_tool([self.binary, "-w", "-t", table, "-I", chain, *rule])

    async def nft_backed(self) -> bool:
        """Whether the binary is iptables-nft (asked once): its full syncs are applied in batches."""
        if self._nft is None:
            self._nft = "nf_tables" in (await run_tool([self.binary, "--version"], check=False))[1]
        return self._nft

    async def apply(self, ruleset: Ruleset) -> None:
        texts = [ruleset.text]
        if ruleset.full:
            saved = await self._saved()
            await self.ensure_jumps(saved)
            if ruleset.split is not None and await self.nft_backed():
                texts = ruleset.split()
            if self._kernel_unknown:
                declared = set(re.findall(r"^:(\S+)", ruleset.text, re.M))
                existing = set(re.findall(r"^:(KUBE-(?:SVC|SVL|EXT|SEP|FW)-\S+)", saved["nat"], re.M))
                leftover = sorted(existing - declared)
                if leftover:
                    extra = [f":{c} - [0:0]" for c in leftover] + [f"-X {c}" for c in leftover]
                    head, _, tail = texts[-1].rpartition("COMMIT")
                    texts[-1] = head + "\n".join(extra) + "\nCOMMIT" + tail
        try:
            for text in texts:
                await run_tool([self.restore, "-w", "--noflush"], stdin=text)
        except CommandError:
            self._kernel_unknown = True
            raise
        if ruleset.full:
            self._kernel_unknown = False

    async def cleanup(self) -> None:
        """Remove the jumps and every chain kube-proxy owns (iptables and IPVS modes)."""
        for table, chain, rule in JUMPS:
            while (await run_tool([self.binary, "-w", "-t", table, "-D", chain, *rule], check=False))[0] == 0:
                pass
        for table in ("nat", "filter"):
            _, out = await run_tool([self.save, "-t", table], check=False)
            chains = [
                c
                for c in re.findall(r"^:(KUBE-\S+)", out, re.M)
                if c in OWNED_TOP or c.startswith(SERVICE_PREFIXES)
            ]
            if chains:
                text = (
                    "\n".join(
                        [
                            f"*{table}",
                            *[f":{c} - [0:0]" for c in chains],
                            *[f"-X {c}" for c in chains],
                            "COMMIT",
                        ]
                    )
                    + "\n"
                )
                await run_tool([self.restore, "-w", "--noflush"], stdin=text)
        self._owned = {}
        self._kernel_unknown = True
