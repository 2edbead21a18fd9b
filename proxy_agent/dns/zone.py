"""The cluster zone's lookup rules (upstream's DNS spec for Services and Pods), answered from
Services and EndpointSlices kept in memory by informers.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy_agent.dns.wire import (
    AAAA,
    ANY,
    CNAME,
    NOERROR,
    NS,
    NXDOMAIN,
    SOA,
    SRV,
    A,
    Record,
    encode_name,
    rdata_soa,
    rdata_srv,
)

Obj = dict[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass
class Answer:
    rcode: int
    answers: list[Record] = field(default_factory=list)
    authority: list[Record] = field(default_factory=list)
    additional: list[Record] = field(default_factory=list)


def _ip_record(name: str, ip: str, ttl: int) -> Record | None:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return None
    return Record(name, A if addr.version == 4 else AAAA, ttl, addr.packed)


class ClusterZone:
    """Services and EndpointSlices by name; `lookup` answers one question about the zone."""

    def __init__(self, domain: str = "cluster.local", ttl: int = 5) -> None:
        self.domain = domain.strip(".").lower() + "."
        self.ttl = ttl
        self.services: dict[tuple[str, str], Obj] = {}
        self.slices: dict[tuple[str, str], dict[str, Obj]] = {}
        self.serial = int(time.time())
        #: called with the (namespace, service) whose names may answer differently now
        self.listeners: list[Callable[[tuple[str, str]], None]] = []

    # -- cache maintenance ---------------------------------------------------------------------

    def _changed(self, key: tuple[str, str]) -> None:
        self.serial = max(self.serial + 1, int(time.time()))
        for listener in self.listeners:
            listener(key)

    def set_service(self, svc: Obj, deleted: bool = False) -> None:
        meta = svc["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        if deleted:
            self.services.pop(key, None)
        else:
            self.services[key] = svc
        self._changed(key)

    def set_slice(self, sl: Obj, deleted: bool = False) -> None:
        meta = sl["metadata"]
        svc = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if not svc:
            return
        key = (meta.get("namespace", ""), svc)
        bucket = self.slices.setdefault(key, {})
        if deleted:
            bucket.pop(meta["name"], None)
        else:
            bucket[meta["name"]] = sl
        self._changed(key)

    # -- lookups -------------------------------------------------------------------------------

    def owner(self, name: str) -> tuple[str, str] | None:
        """The (namespace, service) a lowercased name under `<ns>.svc.<domain>` is about, else None."""
        if not name.endswith(".svc." + self.domain):
            return None
        labels = name[: -len(self.domain) - 5].split(".")
        return (labels[-1], labels[-2]) if len(labels) >= 2 else None

    def in_zone(self, name: str) -> bool:
        return name == self.domain or name.endswith("." + self.domain)

    def soa(self) -> Record:
        return Record(
            self.domain,
            SOA,
            self.ttl,
            rdata_soa("ns.dns." + self.domain, "hostmaster." + self.domain, self.serial, minimum=self.ttl),
        )

    def _nodata(self) -> Answer:
        return Answer(NOERROR, authority=[self.soa()])

    def _nx(self) -> Answer:
        return Answer(NXDOMAIN, authority=[self.soa()])

    def lookup(self, qname: str, qtype: int) -> Answer | None:
        """The answer for a name in the zone, or None when the name is not ours (forward it)."""
        name = qname.lower()
        if not name.endswith("."):
            name += "."
        if not self.in_zone(name):
            return None
        labels = name[: -len(self.domain)].rstrip(".").split(".") if name != self.domain else []
        if not labels:
            if qtype == SOA:
                return Answer(NOERROR, answers=[self.soa()])
            if qtype == NS:
                return Answer(
                    NOERROR, answers=[Record(self.domain, NS, self.ttl, encode_name("ns.dns." + self.domain))]
                )
            return self._nodata()
        kind = labels[-1]
        if kind == "svc":
            return self._svc(name, labels[:-1], qtype)
        if kind == "pod" and len(labels) == 3:
            return self._pod(name, labels[0], qtype)
        if kind == "pod" and len(labels) <= 2:
            return self._nodata()
        return self._nx()

    def _pod(self, name: str, label: str, qtype: int) -> Answer:
        text = label.replace("-", ".") if label.count("-") == 3 else label.replace("-", ":")
        try:
            addr = ipaddress.ip_address(text)
        except ValueError:
            return self._nx()
        rtype = A if addr.version == 4 else AAAA
        if qtype not in (rtype, ANY):
            return self._nodata()
        return Answer(NOERROR, answers=[Record(name, rtype, self.ttl, addr.packed)])

    def _svc(self, name: str, labels: list[str], qtype: int) -> Answer:
        if len(labels) <= 1:
            return self._nodata() if (not labels or self._namespace_exists(labels[0])) else self._nx()
        ns, svc_name = labels[-1], labels[-2]
        svc = self.services.get((ns, svc_name))
        if svc is None:
            return self._nx()
        base = f"{svc_name}.{ns}.svc.{self.domain}"
        if len(labels) == 2:
            return self._service(name, base, svc, qtype)
        if len(labels) == 3:
            return self._endpoint(name, labels[0], svc, qtype)
        if len(labels) == 4 and labels[0].startswith("_") and labels[1].startswith("_"):
            return self._srv(name, base, svc, labels[0][1:], labels[1][1:], qtype)
        return self._nx()

    def _namespace_exists(self, ns: str) -> bool:
        return any(key[0] == ns for key in self.services)

    def _ready_endpoints(self, svc: Obj) -> list[tuple[Obj, Obj]]:
        """(slice, endpoint) for every ready endpoint of the Service, deduplicated by address."""
        meta = svc["metadata"]
        seen: set[str] = set()
        out: list[tuple[Obj, Obj]] = []
        for _, sl in sorted(self.slices.get((meta.get("namespace", ""), meta["name"]), {}).items()):
            for ep in sl.get("endpoints") or []:
                addrs = ep.get("addresses") or []
                if not addrs or (ep.get("conditions") or {}).get("ready") is False or addrs[0] in seen:
                    continue
                seen.add(addrs[0])
                out.append((sl, ep))
        return out

    def _headless(self, svc: Obj) -> bool:
        return (svc.get("spec") or {}).get("clusterIP") == "None"

    def _service(self, name: str, base: str, svc: Obj, qtype: int) -> Answer:
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            target = (spec.get("externalName") or "").rstrip(".") + "."
            return Answer(NOERROR, answers=[Record(name, CNAME, self.ttl, encode_name(target))])
        if qtype == SRV:
            return self._srv(name, base, svc, None, None, qtype)
        if self._headless(svc):
            ips = [ep["addresses"][0] for _, ep in self._ready_endpoints(svc)]
        else:
            ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
        records = [r for ip in ips if (r := _ip_record(name, ip, self.ttl)) is not None]
        wanted = [r for r in records if qtype == ANY or r.rtype == qtype]
        return Answer(NOERROR, answers=wanted) if wanted else self._nodata()

    def _endpoint(self, name: str, label: str, svc: Obj, qtype: int) -> Answer:
        for _, ep in self._ready_endpoints(svc):
            ip = ep["addresses"][0]
            if ep.get("hostname") == label or ip.replace(".", "-").replace(":", "-") == label:
                rec = _ip_record(name, ip, self.ttl)
                if rec is not None and qtype in (rec.rtype, ANY):
                    return Answer(NOERROR, answers=[rec])
                return self._nodata()
        return self._nx()

    def _srv(self, name: str, base: str, svc: Obj, port: str | None, proto: str | None, qtype: int) -> Answer:
        spec = svc.get("spec") or {}
        answers: list[Record] = []
        additional: list[Record] = []
        if self._headless(svc):
            for sl, ep in self._ready_endpoints(svc):
                ip = ep["addresses"][0]
                target = f"{ep.get('hostname') or ip.replace('.', '-').replace(':', '-')}.{base}"
                matched = False
                for p in sl.get("ports") or []:
                    if not p.get("name") or p.get("port") is None:
                        continue
                    if (port is None or p["name"] == port) and (
                        proto is None or (p.get("protocol") or "TCP").lower() == proto
                    ):
                        answers.append(Record(name, SRV, self.ttl, rdata_srv(0, 100, int(p["port"]), target)))
                        matched = True
                if matched and (rec := _ip_record(target, ip, self.ttl)) is not None:
                    additional.append(rec)
        else:
            for p in spec.get("ports") or []:
                if not p.get("name") and port is not None:
                    continue
                if (port is None or p["name"] == port) and (
                    proto is None or (p.get("protocol") or "TCP").lower() == proto
                ):
                    answers.append(Record(name, SRV, self.ttl, rdata_srv(0, 100, int(p["port"]), base)))
            if answers and spec.get("clusterIP"):
                rec = _ip_record(base, spec["clusterIP"], self.ttl)
                if rec is not None:
                    additional.append(rec)
        if not answers:
            return self._nx() if port is not None else self._nodata()
        if qtype not in (SRV, ANY):
            return self._nodata()
        return Answer(NOERROR, answers=answers, additional=additional)
