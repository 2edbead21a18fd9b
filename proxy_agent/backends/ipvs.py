"""IPVS mode: virtual servers per ClusterIP:port and NodePort, the ipsets upstream's IPVS proxier
keeps (KUBE-CLUSTER-IP, KUBE-LOOP-BACK, KUBE-NODE-PORT-*), and the iptables glue around them.

This kernel has no IPVS, so the mode is checked by what it writes (`--dry-run-output`): one file
with four sections, the input of `ipset restore`, `ipvsadm-restore`, `iptables-restore` and the
`ip` commands for the kube-ipvs0 dummy interface. Applying runs those tools in that order.
Every sync is a full one: ipvsadm-restore has no partial form.
"""

from __future__ import annotations

from proxy_agent.backends import Backend, CommandError, Ruleset, run_tool
from proxy_agent.backends.iptables import IptablesBackend
from proxy_agent.tracker import Endpoint, ProxyState, ServicePort, usable

SECTIONS = ("ipset", "ipvsadm", "iptables", "ip")
SETS = (
    ("KUBE-CLUSTER-IP", "hash:ip,port", "Kubernetes service cluster ip + port for masquerade purpose"),
    (
        "KUBE-LOOP-BACK",
        "hash:ip,port,ip",
        "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose",
    ),
    (
        "KUBE-EXTERNAL-IP",
        "hash:ip,port",
        "Kubernetes service external ip + port for masquerade and filter purpose",
    ),
    ("KUBE-NODE-PORT-TCP", "bitmap:port", "Kubernetes nodeport TCP port for masquerade purpose"),
    (
        "KUBE-NODE-PORT-LOCAL-TCP",
        "bitmap:port",
        "Kubernetes nodeport TCP port with externalTrafficPolicy=local",
    ),
    ("KUBE-NODE-PORT-UDP", "bitmap:port", "Kubernetes nodeport UDP port for masquerade purpose"),
    (
        "KUBE-NODE-PORT-LOCAL-UDP",
        "bitmap:port",
        "Kubernetes nodeport UDP port with externalTrafficPolicy=local",
    ),
)
DUMMY = "kube-ipvs0"


def _flag(sp: ServicePort) -> str:
    return {"tcp": "-t", "udp": "-u", "sctp": "--sctp-service"}[sp.proto]


class IpvsBackend(Backend):
    """Renders the IPVS mode's four inputs; applies them with ipset, ipvsadm-restore and iptables-restore."""

    mode = "ipvs"

    def __init__(self, iptables_binary: str = "iptables", scheduler: str = "rr") -> None:
        self.iptables = IptablesBackend(iptables_binary)
        self.scheduler = scheduler

    def _virtual(self, sp: ServicePort, vip: str, port: int, eps: list[Endpoint]) -> list[str]:
        persist = f" -p {sp.affinity_timeout}" if sp.affinity_timeout else ""
        out = [f"-A {_flag(sp)} {vip}:{port} -s {self.scheduler}{persist}"]
        out += [f"-a {_flag(sp)} {vip}:{port} -r {ep.ip}:{ep.port} -m -w 1" for ep in eps]
        return out

    def render(self, state: ProxyState, changed: set[str] | None) -> Ruleset:
        sets: dict[str, list[str]] = {name: [] for name, _, _ in SETS}
        ipvs: list[str] = ["-C"]
        addresses: set[str] = set()
        node_ips = state.nodeport_ips()
        if node_ips is None:
            node_ips = list(state.node_ips)
        for sp in sorted(state.services.values(), key=lambda s: s.name):
            eps = usable(state.endpoints.get(sp.name, []))
            local = state.local_endpoints(sp)
            sets["KUBE-CLUSTER-IP"].append(f"{sp.cluster_ip},{sp.proto}:{sp.port}")
            addresses.add(sp.cluster_ip)
            ipvs += self._virtual(sp, sp.cluster_ip, sp.port, local if sp.internal_local else eps)
            for ep in eps:
                if ep.node_name == state.node_name:
                    sets["KUBE-LOOP-BACK"].append(f"{ep.ip},{sp.proto}:{ep.port},{ep.ip}")
            external = local if sp.external_local else eps
            for eip in sp.external_ips:
                sets["KUBE-EXTERNAL-IP"].append(f"{eip},{sp.proto}:{sp.port}")
                addresses.add(eip)
                ipvs += self._virtual(sp, eip, sp.port, external)
            if sp.node_port and sp.proto in ("tcp", "udp"):
                kind = "LOCAL-" if sp.external_local else ""
                sets[f"KUBE-NODE-PORT-{kind}{sp.proto.upper()}"].append(str(sp.node_port))
                for ip in node_ips:
                    ipvs += self._virtual(sp, ip, sp.node_port, external)
        ipset: list[str] = []
        for name, typ, comment in SETS:
            extra = (
                " range 0-65535" if typ.startswith("bitmap") else " family inet hashsize 1024 maxelem 65536"
            )
            ipset.append(f"create {name} {typ}{extra} comment -exist")
            ipset.append(f"flush {name}")
            ipset += [f'add {name} {member} comment "{comment}"' for member in sorted(set(sets[name]))]
        iptables = self._glue(state)
        ip = [f"link add {DUMMY} type dummy", *[f"addr add {a}/32 dev {DUMMY}" for a in sorted(addresses)]]
        text = "".join(
            f"### {name}\n" + "\n".join(lines) + "\n"
            for name, lines in zip(SECTIONS, (ipset, ipvs, iptables, ip), strict=True)
        )
        counts = {
            "virtual_servers": sum(1 for line in ipvs if line.startswith("-A ")),
            "real_servers": sum(1 for line in ipvs if line.startswith("-a ")),
            "nat": sum(1 for line in iptables if line.startswith("-A")),
        }
        return Ruleset(text, True, counts)

    def _glue(self, state: ProxyState) -> list[str]:
        """The iptables rules the IPVS proxier keeps: masquerade, NodePort marks, hairpin, accept."""
        if state.masquerade_all:
            masq = " "
        elif state.cluster_cidr:
            masq = f" ! -s {state.cluster_cidr} "
        else:
            masq = ""
        nat = [
            "*nat",
            *[
                f":{c} - [0:0]"
                for c in (
                    "KUBE-SERVICES",
                    "KUBE-POSTROUTING",
                    "KUBE-MARK-MASQ",
                    "KUBE-NODE-PORT",
                    "KUBE-LOAD-BALANCER",
                )
            ],
        ]
        nat.append(
            '-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for '
            'solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE'
        )
        nat.append("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN")
        nat.append("-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000")
        nat.append(
            '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" '
            "-j MASQUERADE --random-fully"
        )
        nat.append("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000")
        if masq:
            nat.append(
                '-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for '
                f'masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst{masq.rstrip()} '
                "-j KUBE-MARK-MASQ"
            )
        nat.append(
            '-A KUBE-SERVICES -m comment --comment "Kubernetes service external ip + port for masquerade '
            'and filter purpose" -m set --match-set KUBE-EXTERNAL-IP dst,dst -j KUBE-MARK-MASQ'
        )
        nat.append("-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT")
        nat.append("-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT")
        for proto in ("tcp", "udp"):
            up = proto.upper()
            nat.append(
                f'-A KUBE-NODE-PORT -p {proto} -m comment --comment "Kubernetes nodeport {up} port with '
                f'externalTrafficPolicy=local" -m set --match-set KUBE-NODE-PORT-LOCAL-{up} dst -j RETURN'
            )
            nat.append(
                f'-A KUBE-NODE-PORT -p {proto} -m comment --comment "Kubernetes nodeport {up} port for '
                f'masquerade purpose" -m set --match-set KUBE-NODE-PORT-{up} dst -j KUBE-MARK-MASQ'
            )
        nat.append("COMMIT")
        flt = [
            "*filter",
            ":KUBE-FORWARD - [0:0]",
            "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
            '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 '
            "-j ACCEPT",
            '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" '
            "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            "COMMIT",
        ]
        return flt + nat

    async def apply(self, ruleset: Ruleset) -> None:
        parts = dict.fromkeys(SECTIONS, "")
        current = ""
        for line in ruleset.text.splitlines():
            if line.startswith("### "):
                current = line[4:]
            else:
                parts[current] += line + "\n"
        try:
            await run_tool(["ipset", "restore"], stdin=parts["ipset"])
            await run_tool(["ipvsadm-restore"], stdin=parts["ipvsadm"])
            await self.iptables.ensure_jumps()
            await run_tool([self.iptables.restore, "-w", "--noflush"], stdin=parts["iptables"])
            for line in parts["ip"].splitlines():
                await run_tool(["ip", *line.split()], check=False)
        except FileNotFoundError as exc:
            raise CommandError(
                f"IPVS mode needs {exc.filename}; this kernel has no IPVS, use --dry-run-output"
            ) from exc

    async def cleanup(self) -> None:
        for argv in (["ipvsadm", "-C"], ["ip", "link", "del", DUMMY]):
            try:
                await run_tool(argv, check=False)
            except FileNotFoundError:
                continue
        await self.iptables.cleanup()
        for name, _, _ in SETS:
            try:
                await run_tool(["ipset", "destroy", name], check=False)
            except FileNotFoundError:
                break
