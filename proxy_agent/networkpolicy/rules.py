"""The node's policy programs as a packet filter ruleset, one atomic transaction per sync.

nftables: table `ip kube-network-policies`, base chains on the forward hook (every pod's traffic
but the node's own) and the input hook (pods reaching the node). Replies (conntrack established or
related) pass first; then an egress-isolated source jumps, through the `egress-pods` verdict map, to
its program's chain, and an ingress-isolated destination through `ingress-pods`. A program chain
returns on the first allow and drops at its end, so one packet passes the source pod's egress and
the destination pod's ingress in turn. Each sync deletes and recreates the whole table inside the
same `nft -f`, so no packet sees half a ruleset; conntrack keeps established connections alive.

iptables (where nft is missing): the same layout in the filter table, chains KUBE-NWPLCY-*, written
by one `iptables-restore --noflush`; the jumps from FORWARD and INPUT are kept the first rules there.
"""

from __future__ import annotations

import re

from proxy_agent.backends import run_tool
from proxy_agent.networkpolicy.compiler import Allow, NodePrograms, PortMatch

TABLE = "ip kube-network-policies"
IPT_PREFIX = "KUBE-NWPLCY"
IPT_FORWARD = f"{IPT_PREFIX}-FORWARD"
IPT_INPUT = f"{IPT_PREFIX}-INPUT"
IPT_JUMPS = (("FORWARD", IPT_FORWARD), ("INPUT", IPT_INPUT))


def _ports_nft(ports: tuple[PortMatch, ...]) -> list[str]:
    """One match per protocol: `meta l4proto tcp th dport { 80, 8000-8080 }`."""
    by_proto: dict[str, list[PortMatch]] = {}
    for p in ports:
        by_proto.setdefault(p.protocol.lower(), []).append(p)
    out = []
    for proto, matches in sorted(by_proto.items()):
        if any(m.first == 0 for m in matches):
            out.append(f"meta l4proto {proto}")
            continue
        items = ", ".join(str(m.first) if m.first == m.last else f"{m.first}-{m.last}" for m in _merged(matches))
        out.append(f"meta l4proto {proto} th dport {{ {items} }}")
    return out


def _merged(matches: list[PortMatch]) -> list[PortMatch]:
    """Overlapping or adjacent ranges joined (an nft interval set refuses overlaps)."""
    out: list[PortMatch] = []
    for m in sorted(matches, key=lambda m: (m.first, m.last)):
        if out and m.first <= out[-1].last + 1:
            out[-1] = PortMatch(m.protocol, out[-1].first, max(out[-1].last, m.last))
        else:
            out.append(m)
    return out


def _allow_nft(allow: Allow, field: str) -> list[str]:
    addr = f"ip {field} {{ {', '.join(allow.nets)} }} " if allow.nets is not None else ""
    if allow.ports is None:
        return [f"{addr}return"]
    return [f"{addr}{ports} return" for ports in _ports_nft(allow.ports)]


def render_nftables(programs: NodePrograms) -> str:
    """The whole table, replacing whatever the last sync wrote."""
    out = [f"add table {TABLE}", f"delete table {TABLE}",
           f'add table {TABLE} {{ comment "rules for NetworkPolicies" ; }}',
           f"add map {TABLE} ingress-pods {{ type ipv4_addr : verdict ; }}",
           f"add map {TABLE} egress-pods {{ type ipv4_addr : verdict ; }}"]
    for direction, by_ip, field in (("ingress", programs.ingress, "saddr"), ("egress", programs.egress, "daddr")):
        for key, program in sorted({p.key: p for p in by_ip.values()}.items()):
            chain = f"{direction}-{key}"
            out.append(f"add chain {TABLE} {chain}")
            for allow in program.allows:
                out += [f"add rule {TABLE} {chain} {r}" for r in _allow_nft(allow, field)]
            out.append(f"add rule {TABLE} {chain} drop")
        if by_ip:
            elems = ", ".join(f"{ip} : jump {direction}-{p.key}" for ip, p in sorted(by_ip.items()))
            out.append(f"add element {TABLE} {direction}-pods {{ {elems} }}")
    out += [
        f"add chain {TABLE} forward {{ type filter hook forward priority 0 ; policy accept ; }}",
        f"add chain {TABLE} input {{ type filter hook input priority 0 ; policy accept ; }}",
        f"add rule {TABLE} forward ct state established,related accept",
        f"add rule {TABLE} forward ip saddr vmap @egress-pods",
        f"add rule {TABLE} forward ip daddr vmap @ingress-pods",
        f"add rule {TABLE} input ct state established,related accept",
        f"add rule {TABLE} input ip saddr vmap @egress-pods",
    ]
    return "\n".join(out) + "\n"


def _ports_ipt(ports: tuple[PortMatch, ...] | None) -> list[str]:
    if ports is None:
        return [""]
    out = []
    for m in sorted(ports):
        proto = m.protocol.lower()
        if m.first == 0:
            out.append(f"-p {proto} ")
        else:
            span = str(m.first) if m.first == m.last else f"{m.first}:{m.last}"
            out.append(f"-p {proto} -m {proto} --dport {span} ")
    return out


def ipt_chain(direction: str, key: str) -> str:
    return f"{IPT_PREFIX}-{direction[0].upper()}-{key}"


def render_iptables(programs: NodePrograms, existing: set[str]) -> str:
    """iptables-restore --noflush input for the filter table; chains of ours in `existing` that the
    programs no longer need are flushed and deleted in the same transaction."""
    chains = [IPT_FORWARD, IPT_INPUT]
    rules = [f"-A {c} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN" for c in chains]
    for direction, by_ip, flag in (("egress", programs.egress, "-d"), ("ingress", programs.ingress, "-s")):
        for key, program in sorted({p.key: p for p in by_ip.values()}.items()):
            chain = ipt_chain(direction, key)
            chains.append(chain)
            for allow in program.allows:
                for net in allow.nets if allow.nets is not None else ("",):
                    addr = f"{flag} {net} " if net else ""
                    rules += [f"-A {chain} {addr}{ports}-j RETURN" for ports in _ports_ipt(allow.ports)]
            rules.append(f"-A {chain} -j DROP")
        match = "-s" if direction == "egress" else "-d"
        hooks = (IPT_FORWARD, IPT_INPUT) if direction == "egress" else (IPT_FORWARD,)
        for ip, program in sorted(by_ip.items()):
            rules += [f"-A {hook} {match} {ip}/32 -j {ipt_chain(direction, program.key)}" for hook in hooks]
    stale = sorted(existing - set(chains))
    lines = ["*filter", *(f":{c} - [0:0]" for c in [*chains, *stale]), *rules, *(f"-X {c}" for c in stale), "COMMIT"]
    return "\n".join(lines) + "\n"


class NftablesRules:
    """Writes the table with `nft -f`."""

    mode = "nftables"

    def __init__(self, binary: str = "nft") -> None:
        self.binary = binary

    async def apply(self, programs: NodePrograms) -> str:
        text = render_nftables(programs)
        await run_tool([self.binary, "-f", "-"], stdin=text)
        return text

    async def cleanup(self) -> None:
        await run_tool([self.binary, "-f", "-"], stdin=f"add table {TABLE}\ndelete table {TABLE}\n")


class IptablesRules:
    """Writes the KUBE-NWPLCY chains with `<binary>-restore --noflush`; jumps ensured outside it."""

    mode = "iptables"

    def __init__(self, binary: str = "iptables") -> None:
        self.binary = binary

    async def _existing(self) -> set[str]:
        _, out = await run_tool([self.binary + "-save", "-t", "filter"], check=False)
        return set(re.findall(rf"^:({IPT_PREFIX}-\S+)", out, re.M))

    async def apply(self, programs: NodePrograms) -> str:
        text = render_iptables(programs, await self._existing())
        await run_tool([self.binary + "-restore", "-w", "--noflush"], stdin=text)
        for builtin, chain in IPT_JUMPS:
            await self._first(builtin, chain)
        return text

    async def _first(self, builtin: str, chain: str) -> None:
        """Keep our jump the first rule of `builtin`: a rule before it that ACCEPTs (kube-proxy's
        KUBE-FORWARD accepts masquerade-marked packets) would let a packet skip the policies."""
        ours = f"-A {builtin} -j {chain}"
        rules = await self._rules(builtin)
        if rules and rules[0] == ours:
            return
        # insert first, then delete the old copies by number, so there is no moment without the jump
        await run_tool([self.binary, "-w", "-t", "filter", "-I", builtin, "1", "-j", chain])
        rules = await self._rules(builtin)
        for number in sorted((i for i, rule in enumerate(rules, 1) if rule == ours and i > 1), reverse=True):
            await run_tool([self.binary, "-w", "-t", "filter", "-D", builtin, str(number)])

    async def _rules(self, builtin: str) -> list[str]:
        _, listing = await run_tool([self.binary, "-w", "-t", "filter", "-S", builtin], check=False)
        return [line for line in listing.splitlines() if line.startswith(f"-A {builtin} ")]

    async def cleanup(self) -> None:
        for builtin, chain in IPT_JUMPS:
            while (await run_tool([self.binary, "-w", "-t", "filter", "-D", builtin, "-j", chain],
                                  check=False))[0] == 0:
                pass
        existing = sorted(await self._existing())
        if existing:
            text = "\n".join(["*filter", *(f":{c} - [0:0]" for c in existing), *(f"-X {c}" for c in existing),
                              "COMMIT"]) + "\n"
            await run_tool([self.binary + "-restore", "-w", "--noflush"], stdin=text)
