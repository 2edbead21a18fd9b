"""etcd over TLS: a three-member cluster whose clients and peers must show certificates of etcd's own
CA (kubeadm's layout, made by the code `pyk8s up` uses), and the apiserver's own gRPC client on it."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from aetcd import rpc

from apiserver.storage.etcd import EtcdStore
from apiserver.storage.grpc_wire import Connection, GrpcError, client_tls
from deploy.bootstrap import PkiDir
from tests.conftest import (
    REPO,
    Etcd,
    etcd_apiserver_flags,
    etcd_client_tls,
    etcd_pki,
    free_port,
    start_apiserver,
    start_etcd_cluster,
)

RANGE = "/etcdserverpb.KV/Range"


def _leader_first(members: list[Etcd], tls: ssl.SSLContext) -> list[Etcd]:
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        ids, leader = {}, None
        for m in members:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                status = httpx.post(f"{m.client_url}/v3/maintenance/status", json={}, timeout=3, verify=tls).json()
                ids[status["header"]["member_id"]] = m
                leader = status.get("leader") or leader
        if leader in ids and len(ids) == len(members):
            return [ids[leader], *(m for m in members if m is not ids[leader])]
        time.sleep(0.1)
    raise RuntimeError("the etcd cluster elected no leader")


@pytest.fixture(scope="module")
def tls_cluster(workdir: Path) -> Iterator[tuple[list[Etcd], PkiDir]]:
    pki = etcd_pki(workdir / "tls-etcd-pki")
    members = start_etcd_cluster(3, workdir / "tls-etcd", tls=pki)
    try:
        yield _leader_first(members, etcd_client_tls(pki)), pki
    finally:
        for m in members:
            m.kill()


def _host_port(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    assert parsed.hostname and parsed.port
    return parsed.hostname, parsed.port


def test_members_peer_over_tls(tls_cluster: tuple[list[Etcd], PkiDir]) -> None:
    members, pki = tls_cluster
    listed = httpx.post(f"{members[0].client_url}/v3/cluster/member/list", json={}, timeout=5,
                        verify=etcd_client_tls(pki)).json()["members"]
    assert len(listed) == 3
    assert all(url.startswith("https://") for m in listed for url in m["peerURLs"] + m["clientURLs"])


async def test_store_speaks_tls_with_a_client_cert(tls_cluster: tuple[list[Etcd], PkiDir]) -> None:
    members, pki = tls_cluster
    cert, key = pki.apiserver_etcd_client
    store = EtcdStore([m.client_url for m in members], tls=client_tls(str(pki.etcd("ca")[0]), str(cert), str(key)))
    try:
        revision = await store.create("/registry/configmaps/tls/one", b'{"metadata":{"name":"one"}}')
        kv = await store.get("/registry/configmaps/tls/one")
        assert kv is not None and kv.mod_revision == revision
    finally:
        await store.close()


async def test_etcd_refuses_a_client_without_a_cert(tls_cluster: tuple[list[Etcd], PkiDir]) -> None:
    members, pki = tls_cluster
    host, port = _host_port(members[0].client_url)
    request = rpc.RangeRequest(key=b"/registry/", range_end=b"/registry0", count_only=True).SerializeToString()
    with pytest.raises((GrpcError, ssl.SSLError)) as refused:
        conn = await Connection.open(host, port, 5, tls=client_tls(str(pki.etcd("ca")[0])))
        try:
            await conn.unary(RANGE, request, 5)
        finally:
            conn.close()
    assert "certificate" in str(refused.value).lower() or "connection lost" in str(refused.value)
    cert, key = pki.etcd("healthcheck-client")
    conn = await Connection.open(host, port, 5, tls=client_tls(str(pki.etcd("ca")[0]), str(cert), str(key)))
    try:
        assert rpc.RangeResponse.FromString(await conn.unary(RANGE, request, 5)).header.revision > 0
    finally:
        conn.close()


async def test_store_refuses_an_etcd_of_another_ca(tls_cluster: tuple[list[Etcd], PkiDir], workdir: Path) -> None:
    members, _ = tls_cluster
    other = etcd_pki(workdir / "tls-other-pki")
    host, port = _host_port(members[0].client_url)
    cert, key = other.apiserver_etcd_client
    with pytest.raises(ssl.SSLCertVerificationError):
        await Connection.open(host, port, 5, tls=client_tls(str(other.etcd("ca")[0]), str(cert), str(key)))


def test_apiserver_without_a_client_cert_never_gets_ready(tls_cluster: tuple[list[Etcd], PkiDir],
                                                          workdir: Path) -> None:
    members, pki = tls_cluster
    port = free_port()
    log_path = workdir / "tls-nocert-apiserver.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "apiserver", "--etcd-servers", members[0].client_url, "--secure-port", "0",
             "--insecure-port", str(port), f"--etcd-cafile={pki.etcd('ca')[0]}"],
            cwd=REPO, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 8
        refused = False
        while time.monotonic() < deadline and not refused:
            refused = "certificate" in log_path.read_text(errors="replace")
            with contextlib.suppress(httpx.HTTPError):
                assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code != 200
            time.sleep(0.2)
        assert refused, log_path.read_text(errors="replace")[-2000:]
    finally:
        proc.kill()  # still retrying etcd inside its start-up, where it does not stop on SIGTERM
        proc.wait(15)


async def test_apiserver_fails_over_across_tls_members(tls_cluster: tuple[list[Etcd], PkiDir],
                                                       workdir: Path) -> None:
    members, pki = tls_cluster
    server = start_apiserver([m.client_url for m in members], workdir / "tls-apiserver", *etcd_apiserver_flags(pki))
    base = f"{server.url}/api/v1/namespaces/default/configmaps"
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            for i in range(5):
                r = await http.post(base, json={"metadata": {"name": f"before-{i}"}, "data": {"i": str(i)}})
                assert r.status_code == 201, r.text
            members[0].kill()  # the leader, and the member the apiserver talks to
            for i in range(5):
                r = await http.post(base, json={"metadata": {"name": f"after-{i}"}, "data": {"i": str(i)}})
                assert r.status_code == 201, r.text
            names = {item["metadata"]["name"] for item in (await http.get(base)).json()["items"]}
            assert {f"{w}-{i}" for w in ("before", "after") for i in range(5)} <= names
            r = await http.get(f"{base}/after-4")
            assert r.status_code == 200 and r.json()["data"] == {"i": "4"}
        await asyncio.sleep(0)
        assert "moving on" in server.log_tail(200)
    finally:
        server.stop()
