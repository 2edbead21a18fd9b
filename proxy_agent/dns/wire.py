"""DNS wire format (RFC 1035, SRV from RFC 2782, AAAA from RFC 3596): just what a cluster DNS
server and its tests need. Queries are parsed without copying names twice. Replies compress the
owner names of their records against the question and each other (RFC 1035 4.1.4), as a headless
Service's SRV answer with its addresses would not fit 512 bytes otherwise; names inside record data
are written whole (RFC 2782 forbids compressing SRV targets).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field

A, NS, CNAME, SOA, PTR, TXT, AAAA, SRV, OPT, ANY = 1, 2, 5, 6, 12, 16, 28, 33, 41, 255
CLASS_IN = 1
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
TYPE_NAMES = {
    A: "A",
    NS: "NS",
    CNAME: "CNAME",
    SOA: "SOA",
    PTR: "PTR",
    TXT: "TXT",
    AAAA: "AAAA",
    SRV: "SRV",
    ANY: "ANY",
}

_HEADER = struct.Struct("!HHHHHH")
_RR = struct.Struct("!HHIH")


class WireError(ValueError):
    """A message too malformed to answer."""


@dataclass(frozen=True, slots=True)
class Question:
    id: int
    flags: int
    name: str
    qtype: int
    qclass: int
    end: int

    @property
    def rd(self) -> bool:
        return bool(self.flags & 0x0100)


@dataclass(frozen=True, slots=True)
class Record:
    name: str
    rtype: int
    ttl: int
    rdata: bytes


@dataclass(slots=True)
class Message:
    """A decoded message, for clients and tests."""

    id: int
    flags: int
    questions: list[tuple[str, int]] = field(default_factory=list)
    answers: list[tuple[str, int, int, object]] = field(default_factory=list)
    authority: list[tuple[str, int, int, object]] = field(default_factory=list)
    additional: list[tuple[str, int, int, object]] = field(default_factory=list)

    @property
    def rcode(self) -> int:
        return self.flags & 0xF

    @property
    def truncated(self) -> bool:
        return bool(self.flags & 0x0200)

    def values(self, rtype: int) -> list[object]:
        return [rd for _, t, _, rd in self.answers if t == rtype]


def encode_name(name: str) -> bytes:
    out = bytearray()
    for label in name.rstrip(".").split("."):
        if not label:
            continue
        raw = label.encode("idna") if not label.isascii() else label.encode()
        if len(raw) > 63:
            raise WireError(f"label too long: {label!r}")
        out.append(len(raw))
        out += raw
    out.append(0)
    return bytes(out)


def read_name(data: bytes, offset: int) -> tuple[str, int]:
    """(dotted name, offset after it), following compression pointers."""
    labels: list[str] = []
    end = -1
    jumps = 0
    while True:
        if offset >= len(data):
            raise WireError("name runs past the message")
        length = data[offset]
        if length & 0xC0 == 0xC0:
            if offset + 1 >= len(data):
                raise WireError("truncated pointer")
            if end < 0:
                end = offset + 2
            offset = ((length & 0x3F) << 8) | data[offset + 1]
            jumps += 1
            if jumps > 64:
                raise WireError("pointer loop")
            continue
        if length & 0xC0:
            raise WireError("bad label type")
        offset += 1
        if length == 0:
            break
        labels.append(data[offset : offset + length].decode("latin-1"))
        offset += length
    return ".".join(labels) + ".", (end if end >= 0 else offset)


def parse_question(data: bytes) -> Question:
    """The header and first question of a query."""
    if len(data) < 12:
        raise WireError("short header")
    ident, flags, qdcount, _, _, _ = _HEADER.unpack_from(data)
    if flags & 0x8000 or qdcount != 1:
        raise WireError("not a single-question query")
    name, offset = read_name(data, 12)
    if offset + 4 > len(data):
        raise WireError("short question")
    qtype, qclass = struct.unpack_from("!HH", data, offset)
    return Question(ident, flags, name, qtype, qclass, offset + 4)


def build_query(name: str, qtype: int, ident: int = 0, rd: bool = True) -> bytes:
    return (
        _HEADER.pack(ident, 0x0100 if rd else 0, 1, 0, 0, 0)
        + encode_name(name)
        + struct.pack("!HH", qtype, CLASS_IN)
    )


def _question_suffixes(question: bytes) -> dict[str, int] | None:
    """Offsets of every suffix of the question name, keyed by its lowercased text; None when the
    query compressed it (its pointers lead into the query, not the reply)."""
    table: dict[str, int] = {}
    labels: list[tuple[int, str]] = []
    i = 0
    while i < len(question) and question[i]:
        length = question[i]
        if length & 0xC0:
            return None
        labels.append((12 + i, question[i + 1 : i + 1 + length].decode("latin-1").lower()))
        i += length + 1
    for k, (offset, _) in enumerate(labels):
        table[".".join(label for _, label in labels[k:])] = offset
    return table


def _compress(name: str, offset: int, table: dict[str, int]) -> bytes:
    """`name` written at `offset`: its labels up to the longest suffix already written, then a pointer."""
    labels = [label for label in name.rstrip(".").split(".") if label]
    out = bytearray()
    for k in range(len(labels)):
        suffix = ".".join(labels[k:]).lower()
        pointer = table.get(suffix)
        if pointer is not None:
            out += (0xC000 | pointer).to_bytes(2, "big")
            return bytes(out)
        if offset + len(out) < 0x4000:
            table[suffix] = offset + len(out)
        raw = labels[k].encode("idna") if not labels[k].isascii() else labels[k].encode()
        if len(raw) > 63:
            raise WireError(f"label too long: {labels[k]!r}")
        out.append(len(raw))
        out += raw
    out.append(0)
    return bytes(out)


def build_response(
    query: bytes,
    q: Question,
    rcode: int,
    answers: list[Record] = (),  # type: ignore[assignment]
    authority: list[Record] = (),  # type: ignore[assignment]
    additional: list[Record] = (),  # type: ignore[assignment]
    authoritative: bool = True,
    max_size: int = 0,
) -> bytes:
    """A reply echoing the question; past `max_size` (UDP) the answer is cut and TC set."""
    flags = 0x8000 | (q.flags & 0x7900) | (0x0400 if authoritative else 0) | 0x0080 | rcode
    question = query[12 : q.end]
    table = _question_suffixes(question)
    if table is None:
        question = encode_name(q.name) + struct.pack("!HH", q.qtype, q.qclass)
        table = _question_suffixes(question) or {}
    body = bytearray()
    start = 12 + len(question)
    for rec in (*answers, *authority, *additional):
        body += _compress(rec.name, start + len(body), table)
        body += _RR.pack(rec.rtype, CLASS_IN, rec.ttl, len(rec.rdata))
        body += rec.rdata
    counts = (len(answers), len(authority), len(additional))
    if max_size and start + len(body) > max_size:
        flags |= 0x0200
        body, counts = bytearray(), (0, 0, 0)
    return _HEADER.pack(q.id, flags, 1, *counts) + question + bytes(body)


def rdata_a(ip: str) -> bytes:
    return ipaddress.IPv4Address(ip).packed


def rdata_aaaa(ip: str) -> bytes:
    return ipaddress.IPv6Address(ip).packed


def rdata_srv(priority: int, weight: int, port: int, target: str) -> bytes:
    return struct.pack("!HHH", priority, weight, port) + encode_name(target)


def rdata_soa(
    mname: str,
    rname: str,
    serial: int,
    refresh: int = 7200,
    retry: int = 1800,
    expire: int = 86400,
    minimum: int = 30,
) -> bytes:
    return (
        encode_name(mname)
        + encode_name(rname)
        + struct.pack("!IIIII", serial, refresh, retry, expire, minimum)
    )


def _decode_rdata(data: bytes, rtype: int, offset: int, length: int) -> object:
    if rtype == A and length == 4:
        return str(ipaddress.IPv4Address(data[offset : offset + 4]))
    if rtype == AAAA and length == 16:
        return str(ipaddress.IPv6Address(data[offset : offset + 16]))
    if rtype in (CNAME, NS, PTR):
        return read_name(data, offset)[0]
    if rtype == SRV:
        prio, weight, port = struct.unpack_from("!HHH", data, offset)
        return prio, weight, port, read_name(data, offset + 6)[0]
    if rtype == SOA:
        mname, o = read_name(data, offset)
        rname, o = read_name(data, o)
        return (mname, rname, *struct.unpack_from("!IIIII", data, o))
    return data[offset : offset + length]


def parse_message(data: bytes) -> Message:
    """Decode a whole message (compression included)."""
    if len(data) < 12:
        raise WireError("short header")
    ident, flags, qd, an, ns, ar = _HEADER.unpack_from(data)
    msg = Message(ident, flags)
    offset = 12
    for _ in range(qd):
        name, offset = read_name(data, offset)
        qtype, _ = struct.unpack_from("!HH", data, offset)
        offset += 4
        msg.questions.append((name, qtype))
    for count, bucket in ((an, msg.answers), (ns, msg.authority), (ar, msg.additional)):
        for _ in range(count):
            name, offset = read_name(data, offset)
            rtype, _, ttl, length = _RR.unpack_from(data, offset)
            offset += _RR.size
            if offset + length > len(data):
                raise WireError("record runs past the message")
            bucket.append((name, rtype, ttl, _decode_rdata(data, rtype, offset, length)))
            offset += length
    return msg
