"""DNS wire encoding/decoding and the cluster zone's lookup rules."""

from __future__ import annotations

import pytest

from proxy_agent.dns.server import DNSServer
from proxy_agent.dns.wire import (
    AAAA,
    CNAME,
    NXDOMAIN,
    SOA,
    SRV,
    A,
    Record,
    WireError,
    build_query,
    build_response,
    encode_name,
    parse_message,
    parse_question,
    rdata_a,
    rdata_srv,
    read_name,
)
from proxy_agent.dns.zone import ClusterZone
from tests.unit.proxy.fixtures import endpoint_slice, service


def test_name_roundtrip_and_compression() -> None:
    assert encode_name("a.bc.") == b"\x01a\x02bc\x00"
    data = b"\x00" * 12 + b"\x03foo\x03bar\x00" + b"\x03www\xc0\x0c"
    assert read_name(data, 12) == ("foo.bar.", 21)
    assert read_name(data, 21) == ("www.foo.bar.", 27)
    with pytest.raises(WireError):
        read_name(b"\x00" * 12 + b"\xc0\x0c", 12)


def test_query_and_response_roundtrip() -> None:
    query = build_query("Web.NS.svc.cluster.local", A, ident=0x1234)
    q = parse_question(query)
    assert (q.id, q.name, q.qtype, q.rd) == (0x1234, "Web.NS.svc.cluster.local.", A, True)
    reply = build_response(query, q, 0, [Record(q.name, A, 5, rdata_a("10.96.0.1"))])
    msg = parse_message(reply)
    assert msg.id == 0x1234 and msg.rcode == 0 and msg.values(A) == ["10.96.0.1"]
    assert msg.flags & 0x8000 and msg.flags & 0x0400 and msg.flags & 0x0100
    big = build_response(
        query,
        q,
        0,
        [Record(q.name, A, 5, rdata_a(f"10.0.{i // 250}.{i % 250}")) for i in range(100)],
        max_size=512,
    )
    assert parse_message(big).truncated and not parse_message(big).answers


@pytest.fixture
def zone() -> ClusterZone:
    z = ClusterZone("cluster.local")
    z.set_service(
        service(
            "web",
            clusterIP="10.96.0.10",
            clusterIPs=["10.96.0.10"],
            ports=[{"name": "http", "port": 80, "protocol": "TCP"}],
        )
    )
    z.set_service(service("db", clusterIP="None", ports=[{"name": "pg", "port": 5432}]))
    z.set_service(service("ext", type="ExternalName", externalName="example.org"))
    sl = endpoint_slice("db-1", "db", [("10.244.0.5", "n1"), ("10.244.1.6", "n2")], port=5432, port_name="pg")
    sl["endpoints"][0]["hostname"] = "db-0"
    z.set_slice(sl)
    nr = endpoint_slice("db-2", "db", [("10.244.2.9", "n1")], port=5432, port_name="pg", ready=False)
    z.set_slice(nr)
    return z


def test_zone_lookups(zone: ClusterZone) -> None:
    ans = zone.lookup("web.ns.svc.cluster.local.", A)
    assert ans and [r.rdata for r in ans.answers] == [rdata_a("10.96.0.10")]
    assert zone.lookup("web.ns.svc.cluster.local.", AAAA).answers == []  # NODATA
    db = zone.lookup("db.ns.svc.cluster.local.", A)
    assert sorted(r.rdata for r in db.answers) == sorted([rdata_a("10.244.0.5"), rdata_a("10.244.1.6")])
    pod = zone.lookup("db-0.db.ns.svc.cluster.local.", A)
    assert pod.answers[0].rdata == rdata_a("10.244.0.5")
    assert zone.lookup("10-244-1-6.db.ns.svc.cluster.local.", A).answers[0].rdata == rdata_a("10.244.1.6")
    srv = zone.lookup("_http._tcp.web.ns.svc.cluster.local.", SRV)
    assert srv.answers[0].rdata[6:] == encode_name("web.ns.svc.cluster.local.")
    assert srv.answers[0].rdata[4:6] == (80).to_bytes(2, "big")
    hsrv = zone.lookup("_pg._tcp.db.ns.svc.cluster.local.", SRV)
    assert len(hsrv.answers) == 2 and len(hsrv.additional) == 2
    cname = zone.lookup("ext.ns.svc.cluster.local.", A)
    assert cname.answers[0].rtype == CNAME and cname.answers[0].rdata == encode_name("example.org.")
    assert zone.lookup("1-2-3-4.ns.pod.cluster.local.", A).answers[0].rdata == rdata_a("1.2.3.4")
    nx = zone.lookup("nope.ns.svc.cluster.local.", A)
    assert nx.rcode == NXDOMAIN and nx.authority[0].rtype == SOA
    assert zone.lookup("_nope._tcp.web.ns.svc.cluster.local.", SRV).rcode == NXDOMAIN
    assert zone.lookup("example.com.", A) is None


def test_cache_follows_zone_changes(zone: ClusterZone) -> None:
    server = DNSServer(zone, [])
    query = build_query("web.ns.svc.cluster.local", A, ident=7)
    assert parse_message(server.answer_local(query, 512)).values(A) == ["10.96.0.10"]
    zone.set_service(service("web", clusterIP="10.96.0.99", ports=[{"port": 80}]))
    again = parse_message(server.answer_local(build_query("web.ns.svc.cluster.local", A, ident=8), 512))
    assert again.values(A) == ["10.96.0.99"] and again.id == 8


def test_cache_drops_only_what_a_change_is_about(zone: ClusterZone) -> None:
    server = DNSServer(zone, [])
    web = build_query("web.ns.svc.cluster.local", A, ident=1)
    db = build_query("db-0.db.ns.svc.cluster.local", A, ident=2)
    namespace = build_query("ns.svc.cluster.local", A, ident=3)
    for q in (web, db, namespace):
        server.answer_local(q, 512)
    # zone.lookup is not consulted for what stays cached
    calls: list[str] = []
    lookup = zone.lookup
    zone.lookup = lambda name, qtype: calls.append(name) or lookup(name, qtype)  # type: ignore[method-assign]
    sl = endpoint_slice("db-1", "db", [("10.244.0.8", "n1")], port=5432, port_name="pg")
    sl["endpoints"][0]["hostname"] = "db-0"
    zone.set_slice(sl)
    assert parse_message(server.answer_local(db, 512)).values(A) == ["10.244.0.8"]
    assert parse_message(server.answer_local(web, 512)).values(A) == ["10.96.0.10"]
    server.answer_local(namespace, 512)  # about no one Service: dropped on any change
    assert calls == ["db-0.db.ns.svc.cluster.local.", "ns.svc.cluster.local."]
    # a reply is cached per opcode/RD bits and echoes each query's ID; a compressed question still parses
    reply = parse_message(server.answer_local(build_query("web.ns.svc.cluster.local", A, ident=9, rd=False), 512))
    assert reply.id == 9 and not reply.flags & 0x0100 and reply.values(A) == ["10.96.0.10"]
    compressed = web[:12] + b"\x03web\xc0\x16" + b"\x00\x01\x00\x01" + b"\x02ns\x03svc\x07cluster\x05local\x00"
    reply = parse_message(server.answer_local(compressed, 512))
    assert reply.questions == [("web.ns.svc.cluster.local.", A)] and reply.values(A) == ["10.96.0.10"]
    with pytest.raises(WireError):
        server.answer_local(web[:14], 512)
    assert zone.owner("_pg._tcp.db.ns.svc.cluster.local.") == ("ns", "db")
    assert zone.owner("ns.svc.cluster.local.") is None and zone.owner("a-b-c-d.ns.pod.cluster.local.") is None


def test_reply_names_are_compressed_against_the_question() -> None:
    ns = "a-namespace-with-a-rather-long-generated-name-0123456789"
    base = f"db.{ns}.svc.cluster.local."
    query = build_query(f"_http._tcp.{base}", SRV, ident=5)
    q = parse_question(query)
    answers = [Record(q.name, SRV, 5, rdata_srv(0, 100, 80, f"web-{i}.{base}")) for i in range(3)]
    additional = [Record(f"web-{i}.{base}", A, 5, rdata_a(f"10.244.0.{i + 1}")) for i in range(3)]
    reply = build_response(query, q, 0, answers, [], additional, max_size=512)
    uncompressed = len(query) + sum(len(encode_name(r.name)) + 10 + len(r.rdata) for r in answers + additional)
    assert len(reply) < 512 < uncompressed  # would be truncated without compression
    msg = parse_message(reply)
    assert not msg.truncated and [rd[3] for rd in msg.values(SRV)] == [f"web-{i}.{base}" for i in range(3)]
    expected = [(f"web-{i}.{base}", f"10.244.0.{i + 1}") for i in range(3)]
    assert [(name, rd) for name, _, _, rd in msg.additional] == expected
    assert reply.count(b"\x05_http") == 1 and reply.count(ns.encode()) == 4  # question + 3 SRV targets
