"""The kubelet API's authentication and authorization filter, and the SPDY upgrade paths: the kubelet
passing exec/attach to the runtime, serving port-forward itself, and the apiserver splicing the
client's connection to the kubelet under uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import types
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from apiserver.endpoints.handlers import proxy
from kubelet_agent.config import parser, settings
from kubelet_agent.server import spdy
from kubelet_agent.server.auth import (
    AccessWebhook,
    KubeletAuth,
    TokenWebhook,
    bearer_token,
    certificate_user,
    request_attributes,
)
from kubelet_agent.server.server import HTTPError, KubeletServer, Request
from kubelet_agent.server.streaming import PortForwardTunnel, SocketChannel, proxy_spdy
from services.client.errors import InternalError
from services.runtime import pki

NODE = "node-a"


class Reviews:
    """A stand-in for the apiserver's review APIs: tokens it knows, users it lets in, calls it saw."""

    def __init__(self, tokens: dict[str, dict[str, Any]], allowed: set[str] | None = None,
                 broken: bool = False) -> None:
        self.tokens = tokens
        self.allowed = allowed
        self.broken = broken
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, path: str, *, body: Any = None) -> Any:
        assert method == "POST"
        self.calls.append((path, body))
        if path.endswith("/tokenreviews"):
            user = self.tokens.get(body["spec"]["token"])
            return {**body, "status": {"authenticated": True, "user": user} if user else
                    {"authenticated": False, "error": "invalid bearer token"}}
        if self.broken:
            raise InternalError(500, "InternalError", "etcd is down")
        spec = body["spec"]
        return {**body, "status": {"allowed": self.allowed is None or spec["user"] in self.allowed}}


def test_request_attributes_follow_upstreams_paths() -> None:
    assert request_attributes("GET", "/stats/summary") == ("get", "stats")
    assert request_attributes("GET", "/stats") == ("get", "stats")
    assert request_attributes("GET", "/statsx") == ("get", "proxy")
    assert request_attributes("GET", "/metrics/cadvisor") == ("get", "metrics")
    assert request_attributes("GET", "/logs/syslog") == ("get", "log")
    assert request_attributes("GET", "/spec/") == ("get", "spec")
    assert request_attributes("POST", "/exec/ns/p/c") == ("create", "proxy")
    assert request_attributes("GET", "/containerLogs/ns/p/c") == ("get", "proxy")
    assert request_attributes("POST", "/portForward/ns/p") == ("create", "proxy")
    assert request_attributes("PUT", "/pods") == ("update", "proxy")
    assert request_attributes("PATCH", "/run/ns/p/c") == ("patch", "proxy")
    assert request_attributes("DELETE", "/pods") == ("delete", "proxy")


def test_certificate_and_token_sources() -> None:
    peer = {"subject": ((("commonName", "kube-apiserver-kubelet-client"),), (("organizationName", "system:masters"),))}
    user = certificate_user(peer)
    assert user is not None and user.name == "kube-apiserver-kubelet-client"
    assert user.groups == ("system:masters", "system:authenticated")
    assert certificate_user(None) is None and certificate_user({}) is None
    assert bearer_token([("Authorization", "Bearer abc.def")]) == "abc.def"
    assert bearer_token([("authorization", "Basic Zm9v")]) == ""
    # base64url("tok-1") without padding, as browsers offer it in the WebSocket subprotocols
    offered = "v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.dG9rLTE"
    assert bearer_token([("Sec-WebSocket-Protocol", offered)]) == "tok-1"


def test_auth_flags_and_config_file(tmp_path: Path) -> None:
    def parse(*argv: str) -> Any:
        return settings(parser().parse_args(["--node-ip", "10.0.0.1", *argv]))

    default = parse()
    assert (default.anonymous_auth, default.token_webhook, default.authorization_mode) == (False, True, "Webhook")
    assert (default.token_webhook_ttl, default.authorized_ttl, default.unauthorized_ttl) == (120.0, 300.0, 30.0)
    assert parse("--anonymous-auth").anonymous_auth is True
    assert parse("--anonymous-auth=false").anonymous_auth is False
    assert parse("--authentication-token-webhook=false").token_webhook is False
    assert parse("--authorization-mode", "AlwaysAllow").authorization_mode == "AlwaysAllow"
    assert parse("--authorization-webhook-cache-authorized-ttl=1m0s").authorized_ttl == 60.0
    with pytest.raises(SystemExit):
        parse("--anonymous-auth=maybe")
    config = tmp_path / "kubelet.yaml"
    config.write_text("kind: KubeletConfiguration\nauthentication:\n  anonymous: {enabled: true}\n"
                      "  webhook: {enabled: false, cacheTTL: 10s}\n  x509: {clientCAFile: /ca.crt}\n"
                      "authorization:\n  mode: AlwaysAllow\n  webhook: {cacheUnauthorizedTTL: 5s}\n")
    from_file = parse("--config", str(config))
    assert (from_file.anonymous_auth, from_file.token_webhook, from_file.token_webhook_ttl) == (True, False, 10.0)
    assert (from_file.authorization_mode, from_file.unauthorized_ttl, from_file.client_ca_file) == \
        ("AlwaysAllow", 5.0, "/ca.crt")
    assert parse("--config", str(config), "--anonymous-auth=false").anonymous_auth is False


def _kubelet() -> Any:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {}}
    return types.SimpleNamespace(name=NODE, workers={"u1": types.SimpleNamespace(pod=pod)})


async def _server(tmp_path: Path, auth: KubeletAuth, client_ca: Path | None = None) -> KubeletServer:
    server = KubeletServer(_kubelet(), address="127.0.0.1", port=0, cert_dir=str(tmp_path / "pki"),
                           hosts=["127.0.0.1"], auth=auth, client_ca_file=str(client_ca) if client_ca else None)
    await server.start()
    return server


async def test_tokens_are_reviewed_cached_and_authorized(tmp_path: Path) -> None:
    alice = {"username": "alice", "uid": "u-a", "groups": ["devs"], "extra": {"scopes": ["x"]}}
    reviews = Reviews({"good": alice}, allowed={"alice"})
    server = await _server(tmp_path, KubeletAuth(tokens=TokenWebhook(reviews), access=AccessWebhook(reviews, NODE)))
    try:
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{server.port}", verify=False) as c:
            assert (await c.get("/healthz")).text == "ok"
            assert reviews.calls == []
            plain = await c.get("/pods")
            assert (plain.status_code, plain.text) == (401, "Unauthorized")
            unknown = await c.get("/pods", headers={"Authorization": "Bearer bad"})
            assert (unknown.status_code, unknown.text) == (401, "Unauthorized")
            for _ in range(3):
                ok = await c.get("/pods", headers={"Authorization": "Bearer good"})
                assert ok.status_code == 200 and ok.json()["kind"] == "PodList"
        token_calls = [body for path, body in reviews.calls if path.endswith("/tokenreviews")]
        assert [b["spec"]["token"] for b in token_calls] == ["bad", "good"]
        assert token_calls[0]["kind"] == "TokenReview" and token_calls[0]["apiVersion"] == "authentication.k8s.io/v1"
        sars = [body for path, body in reviews.calls if path.endswith("/subjectaccessreviews")]
        assert len(sars) == 1
        assert sars[0]["spec"] == {
            "user": "alice", "uid": "u-a", "groups": ["devs", "system:authenticated"], "extra": {"scopes": ["x"]},
            "resourceAttributes": {"verb": "get", "group": "", "version": "v1", "resource": "nodes",
                                   "subresource": "proxy", "name": NODE}}
    finally:
        await server.stop()


async def test_denied_and_failed_authorization(tmp_path: Path) -> None:
    reviews = Reviews({"bob": {"username": "bob", "groups": []}}, allowed=set())
    server = await _server(tmp_path, KubeletAuth(anonymous=True, tokens=TokenWebhook(reviews),
                                                 access=AccessWebhook(reviews, NODE)))
    try:
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{server.port}", verify=False) as c:
            denied = await c.get("/stats/summary", headers={"Authorization": "Bearer bob"})
            assert denied.status_code == 403
            assert denied.text == "Forbidden (user=bob, verb=get, resource=nodes, subresource=stats)"
            anonymous = await c.post("/exec/ns/p/c?command=ls&output=1")
            assert anonymous.text == "Forbidden (user=system:anonymous, verb=create, resource=nodes, subresource=proxy)"
            # anonymous auth does not rescue a token the apiserver rejects
            assert (await c.get("/pods", headers={"Authorization": "Bearer nobody"})).status_code == 401
            reviews.broken = True
            failed = await c.get("/metrics", headers={"Authorization": "Bearer bob"})
            assert failed.status_code == 500
            assert failed.text == "Authorization error (user=bob, verb=get, resource=nodes, subresource=metrics)"
    finally:
        await server.stop()


async def test_client_certificates_signed_by_the_client_ca(tmp_path: Path) -> None:
    ca = pki.create_ca("clients")
    ca.write(tmp_path / "ca.crt", tmp_path / "ca.key")
    pki.issue_client_cert(ca, "kube-apiserver-kubelet-client", ["system:masters"]).write(
        tmp_path / "c.crt", tmp_path / "c.key")
    pki.issue_client_cert(pki.create_ca("other"), "intruder").write(tmp_path / "x.crt", tmp_path / "x.key")
    reviews = Reviews({})
    server = await _server(tmp_path, KubeletAuth(tokens=TokenWebhook(reviews), access=AccessWebhook(reviews, NODE)),
                           client_ca=tmp_path / "ca.crt")

    def context(name: str) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
        return ctx

    try:
        url = f"https://127.0.0.1:{server.port}/stats/summary"
        async with httpx.AsyncClient(verify=context("c")) as c:
            assert (await c.get(url)).json()["node"]["nodeName"] == NODE
        sar = reviews.calls[-1][1]["spec"]
        assert sar["user"] == "kube-apiserver-kubelet-client"
        assert sar["groups"] == ["system:masters", "system:authenticated"]
        assert sar["resourceAttributes"]["subresource"] == "stats"
        async with httpx.AsyncClient(verify=False) as c:
            assert (await c.get(url)).status_code == 401
        with pytest.raises(httpx.HTTPError):
            async with httpx.AsyncClient(verify=context("x")) as c:
                await c.get(url)
    finally:
        await server.stop()


def test_spdy_protocol_negotiation() -> None:
    def request(*offers: str) -> Request:
        return Request("POST", "/portForward/ns/p", [("X-Stream-Protocol-Version", o) for o in offers])

    assert KubeletServer._negotiate_spdy(request("v2.portforward.k8s.io", "portforward.k8s.io"),
                                         ["portforward.k8s.io"]) == "portforward.k8s.io"
    with pytest.raises(HTTPError) as missing:
        KubeletServer._negotiate_spdy(request(), ["portforward.k8s.io"])
    assert missing.value.status == 400 and "X-Stream-Protocol-Version is required" in str(missing.value)
    with pytest.raises(HTTPError) as refused:
        KubeletServer._negotiate_spdy(request("v9.example"), ["portforward.k8s.io"])
    assert refused.value.status == 403
    assert str(refused.value) == ("unable to upgrade: unable to negotiate protocol: client supports [v9.example], "
                                  "server accepts [portforward.k8s.io]")
    assert refused.value.headers == [("X-Accepted-Stream-Protocol-Versions", "portforward.k8s.io")]


# -- SPDY on the kubelet -------------------------------------------------------------------------------


async def _runtime_streaming_server(answer: bytes) -> tuple[asyncio.Server, int, list[bytes]]:
    """A streaming server that answers the upgrade with `answer`, then echoes what it gets in upper case."""
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(answer)
        await writer.drain()
        if b" 101 " in answer:
            while data := await reader.read(65536):
                writer.write(data.upper())
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], heads


async def _open(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host, port)


async def _client_pair(handler: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.Server]:
    """A connection to a one-shot server running `handler(reader, writer)`."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    return reader, writer, server


async def test_exec_upgrade_is_passed_to_the_runtime_and_spliced() -> None:
    answer = (b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
              b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
    runtime, port, heads = await _runtime_streaming_server(answer)
    headers = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"),
               ("X-Stream-Protocol-Version", "v5.channel.k8s.io"), ("X-Stream-Protocol-Version", "v4.channel.k8s.io")]

    async def kubelet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await proxy_spdy(f"http://127.0.0.1:{port}/exec/tok", headers, reader, writer, _open)

    reader, writer, server = await _client_pair(kubelet)
    try:
        assert await reader.readuntil(b"\r\n\r\n") == answer
        writer.write(b"frames")
        await writer.drain()
        assert await reader.readexactly(6) == b"FRAMES"
        writer.close()
    finally:
        server.close()
        runtime.close()
    assert heads[0].startswith(b"POST /exec/tok HTTP/1.1\r\n")
    assert b"X-Stream-Protocol-Version: v5.channel.k8s.io\r\nX-Stream-Protocol-Version: v4.channel.k8s.io" in heads[0]


async def test_a_runtime_refusal_reaches_the_client_unchanged() -> None:
    answer = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 12\r\n\r\nno protocols"
    runtime, port, _ = await _runtime_streaming_server(answer)

    async def kubelet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await proxy_spdy(f"http://127.0.0.1:{port}/exec/tok", [], reader, writer, _open)
        writer.close()

    reader, writer, server = await _client_pair(kubelet)
    try:
        assert await reader.read() == answer
    finally:
        writer.close()
        server.close()
        runtime.close()


async def test_port_forward_tunnel_on_the_upgraded_socket() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"echo:" + await reader.read(100))
        await writer.drain()
        writer.close()

    target = await asyncio.start_server(echo, "127.0.0.1", 0)
    target_port = target.sockets[0].getsockname()[1]

    async def kubelet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await PortForwardTunnel(SocketChannel(reader, writer), _open, "ns/p").serve()

    reader, writer, server = await _client_pair(kubelet)

    async def write(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    session = spdy.Session(lambda: reader.read(65536), write, client=True)
    session.start()
    try:
        error = await session.open_stream({"streamType": "error", "port": str(target_port), "requestID": "0"})
        data = await session.open_stream({"streamType": "data", "port": str(target_port), "requestID": "0"})
        await data.write(b"ping")
        await data.close()
        assert await data.read_all() == b"echo:ping"
        assert await error.read_all() == b""
        bad_error = await session.open_stream({"streamType": "error", "port": "1", "requestID": "1"})
        await session.open_stream({"streamType": "data", "port": "1", "requestID": "1"})
        assert b"error forwarding port 1 to pod ns/p" in await bad_error.read_all()
    finally:
        await session.close()
        writer.close()
        server.close()
        target.close()


# -- SPDY through the apiserver under uvicorn -------------------------------------------------------------


async def _fake_kubelet(tmp_path: Path, answer: bytes) -> tuple[asyncio.Server, int, list[bytes]]:
    """A TLS kubelet that answers the upgrade with `answer` and then echoes in upper case."""
    ca = pki.create_ca("kubelet")
    pki.issue_serving_cert(ca, ["127.0.0.1"]).write(tmp_path / "k.crt", tmp_path / "k.key")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "k.crt", tmp_path / "k.key")
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(answer)
        await writer.drain()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            if b" 101 " in answer:
                while data := await reader.read(65536):
                    writer.write(data.upper())
                    await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ctx)
    return server, server.sockets[0].getsockname()[1], heads


async def _uvicorn(kubelet_port: int) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    node = {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}}}}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await proxy.proxy_node(scope, receive, send, node, scope["path"].removeprefix("/node"))

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, http="httptools", ws="wsproto",
                                           lifespan="off", log_level="error"))
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, task, port


UPGRADE = (b"POST /node/exec/ns/p/c?command=ls HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
           b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\nAuthorization: Bearer user-token\r\n"
           b"Content-Length: 0\r\n\r\n")


async def test_apiserver_splices_a_spdy_upgrade_to_the_kubelet(tmp_path: Path) -> None:
    answer = (b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
              b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
    kubelet, kubelet_port, heads = await _fake_kubelet(tmp_path, answer)
    server, task, port = await _uvicorn(kubelet_port)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(UPGRADE)
        await writer.drain()
        assert await reader.readuntil(b"\r\n\r\n") == answer
        payload = bytes(range(97, 123)) * 20_000
        writer.write(payload)
        await writer.drain()
        assert await reader.readexactly(len(payload)) == payload.upper()
        writer.close()
        for _ in range(100):
            if not server.server_state.connections:
                break
            await asyncio.sleep(0.02)
        assert not server.server_state.connections
        assert heads[0].startswith(b"POST /exec/ns/p/c?command=ls HTTP/1.1\r\n")
        assert b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n" in heads[0]
        assert b"user-token" not in heads[0]
    finally:
        server.should_exit = True
        await task
        kubelet.close()


async def test_apiserver_turns_a_kubelet_refusal_into_a_status(tmp_path: Path) -> None:
    body = b"Forbidden (user=x, verb=create, resource=nodes, subresource=proxy)"
    answer = b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    kubelet, kubelet_port, _ = await _fake_kubelet(tmp_path, answer)
    server, task, port = await _uvicorn(kubelet_port)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(UPGRADE)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 403 ")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(
            b"content-length")))
        status = orjson.loads(await reader.readexactly(length))
        assert status["reason"] == "Forbidden" and status["message"] == body.decode()
        writer.close()
    finally:
        server.should_exit = True
        await task
        kubelet.close()
