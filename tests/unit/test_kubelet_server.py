"""The kubelet API pieces without a runtime: log reading, SPDY framing, the WebSocket channel relay,
the port-forward tunnel and the apiserver's request mapping."""

from __future__ import annotations

import asyncio
import base64
import ssl
import types
import zlib
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from apiserver.endpoints.handlers import proxy
from kubelet_agent.cri.logfile import format_timestamp, parse_record, parse_timestamp
from kubelet_agent.server import spdy
from kubelet_agent.server.logs import CHUNK, LogOptions, read_logs, tail_offset
from kubelet_agent.server.server import KubeletServer
from kubelet_agent.server.streaming import PortForwardTunnel, relay_remote_command, serve_channel_port_forward
from kubelet_agent.server.ws import CHANNEL_PROTOCOLS, EXEC_PROTOCOLS, WebSocket, _negotiate
from services.api import errors

T0 = "2026-01-02T03:04:05.123456789Z"


def _line(i: int, stream: str = "stdout", tag: str = "F", sec: int = 5) -> str:
    return f"2026-01-02T03:04:{sec:02d}.{i:09d}Z {stream} {tag} line {i}\n"


async def _collect(path: Path, options: LogOptions, **kw: object) -> bytes:
    return b"".join([chunk async for chunk in read_logs(str(path), options, **kw)])  # type: ignore[arg-type]


# -- logs ------------------------------------------------------------------------------------------


def test_timestamps_keep_nanoseconds() -> None:
    ns = parse_timestamp(T0)
    assert ns % 1_000_000_000 == 123456789
    assert format_timestamp(ns) == T0
    assert format_timestamp(parse_timestamp("2026-01-02T03:04:05.120000000Z")) == "2026-01-02T03:04:05.12Z"
    assert parse_timestamp("2026-01-02T04:04:05+01:00") == parse_timestamp("2026-01-02T03:04:05Z")


def test_parse_record() -> None:
    r = parse_record(f"{T0} stderr P part".encode())
    assert r is not None and r.stream == "stderr" and not r.full and r.content == b"part"
    assert parse_record(b"garbage") is None
    empty = parse_record(f"{T0} stdout F ".encode())
    assert empty is not None and empty.content == b"" and empty.full


async def test_read_all_tail_since_timestamps_limit(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text("".join(_line(i, sec=i) for i in range(10)) + f"{T0} stdout P par\n{T0} stdout F tial\n")
    assert (await _collect(log, LogOptions())).decode().splitlines()[:2] == ["line 0", "line 1"]
    assert (await _collect(log, LogOptions())).endswith(b"line 9\npartial\n")
    assert await _collect(log, LogOptions(tail_lines=3)) == b"line 9\npartial\n"
    assert await _collect(log, LogOptions(tail_lines=0)) == b""
    since = parse_timestamp("2026-01-02T03:04:08Z")
    assert (await _collect(log, LogOptions(since_ns=since))).startswith(b"line 8\n")
    stamped = await _collect(log, LogOptions(tail_lines=3, timestamps=True))
    assert stamped.splitlines()[0] == b"2026-01-02T03:04:09.000000009Z line 9"
    assert await _collect(log, LogOptions(limit_bytes=9)) == b"line 0\nli"


def test_tail_offset_across_chunks(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    lines = [_line(i) for i in range(CHUNK // 10)]
    log.write_text("".join(lines))
    offset = tail_offset(str(log), 5000)
    assert log.read_bytes()[offset:].decode() == "".join(lines[-5000:])
    assert tail_offset(str(log), len(lines) + 10) == 0


async def test_follow_sees_new_lines_and_ends_when_container_stops(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text(_line(1))
    state = {"running": True}

    async def running() -> bool:
        return state["running"]

    got: list[bytes] = []

    async def follow() -> None:
        async for chunk in read_logs(str(log), LogOptions(follow=True), running, poll=0.02):
            got.append(chunk)

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.1)
    with log.open("a") as f:
        f.write(_line(2))
    for _ in range(100):
        if b"line 2" in b"".join(got):
            break
        await asyncio.sleep(0.02)
    assert b"".join(got) == b"line 1\nline 2\n"
    assert not task.done()
    state["running"] = False
    await asyncio.wait_for(task, 5)


async def test_missing_log_file_is_empty(tmp_path: Path) -> None:
    assert await _collect(tmp_path / "none.log", LogOptions(follow=True)) == b""


# -- SPDY ------------------------------------------------------------------------------------------


def test_dictionary_is_the_spdy3_one() -> None:
    d = spdy.DICTIONARY
    assert len(d) == 1423
    assert d.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert b"\x00\x00\x00\x06200 OK\x00\x00\x00\x07version" in d and d.endswith(b",utf-,*,enq=0.")
    block = spdy.encode_headers({"streamType": "error", "port": "80"})
    z = zlib.compressobj(9, zdict=d)
    wire = z.compress(block) + z.flush(zlib.Z_SYNC_FLUSH)
    assert spdy.decode_headers(zlib.decompressobj(zdict=d).decompress(wire)) == {"streamtype": "error", "port": "80"}


def _pipe() -> tuple[spdy.Reader, spdy.Writer, spdy.Reader, spdy.Writer]:
    a: asyncio.Queue[bytes] = asyncio.Queue()
    b: asyncio.Queue[bytes] = asyncio.Queue()

    async def write_a(data: bytes) -> None:
        # Split frames across reads, as a byte stream or a tunnel may.
        for i in range(0, len(data), 5):
            a.put_nowait(data[i:i + 5])

    async def write_b(data: bytes) -> None:
        b.put_nowait(data)

    return a.get, write_a, b.get, write_b


async def test_spdy_sessions_exchange_streams() -> None:
    read_srv, write_cli, read_cli, write_srv = _pipe()
    seen: list[spdy.Stream] = []

    async def on_stream(stream: spdy.Stream) -> None:
        seen.append(stream)
        data = await stream.read_all()
        await stream.write(data.upper())
        await stream.close()

    server = spdy.Session(read_srv, write_srv, client=False, on_stream=on_stream)
    client = spdy.Session(read_cli, write_cli, client=True)
    server_task = asyncio.create_task(server.run())
    client.start()
    s1 = await client.open_stream({"streamType": "data", "requestID": "1"})
    s2 = await client.open_stream({"streamType": "data", "requestID": "2"})
    assert (s1.id, s2.id) == (1, 3)
    await s1.write(b"hello " * 10000)
    await s1.close()
    await s2.write(b"two")
    await s2.close()
    assert await asyncio.wait_for(s1.read_all(), 5) == b"HELLO " * 10000
    assert await asyncio.wait_for(s2.read_all(), 5) == b"TWO"
    assert [s.headers["requestid"] for s in seen] == ["1", "2"]
    assert client.streams == {} and server.streams == {}
    await write_cli(spdy.control_frame(spdy.PING, 0, b"\x00\x00\x00\x07"))
    frame = await asyncio.wait_for(read_cli(), 5)
    assert frame == spdy.control_frame(spdy.PING, 0, b"\x00\x00\x00\x07")
    await client.close()
    await server.close()
    server_task.cancel()


async def test_spdy_reset_ends_the_stream() -> None:
    read_srv, write_cli, read_cli, write_srv = _pipe()
    streams: list[spdy.Stream] = []

    async def on_stream(stream: spdy.Stream) -> None:
        streams.append(stream)

    server = spdy.Session(read_srv, write_srv, client=False, on_stream=on_stream)
    client = spdy.Session(read_cli, write_cli, client=True)
    task = asyncio.create_task(server.run())
    client.start()
    s = await client.open_stream({"streamType": "data"})
    await s.reset()
    await asyncio.sleep(0.1)
    assert streams and await asyncio.wait_for(streams[0].read(), 2) == b"" and streams[0].reset_by_peer
    await client.close()
    await server.close()
    task.cancel()


# -- WebSocket -------------------------------------------------------------------------------------


def test_negotiate_accepts_non_token_subprotocol() -> None:
    head = (b"GET /portForward/ns/p HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Protocol: SPDY/3.1+portforward.k8s.io\r\n"
            b"Upgrade: websocket\r\n\r\n")
    chosen, rest = _negotiate(head, ["SPDY/3.1+portforward.k8s.io"])
    assert chosen == "SPDY/3.1+portforward.k8s.io" and b"Sec-WebSocket-Protocol" not in rest
    assert rest.endswith(b"\r\n\r\n")
    chosen, _ = _negotiate(b"GET / HTTP/1.1\r\nSec-WebSocket-Protocol: v4.channel.k8s.io, v5.channel.k8s.io\r\n\r\n",
                           ["v5.channel.k8s.io", "v4.channel.k8s.io"])
    assert chosen == "v5.channel.k8s.io"


async def _ws_server(handler: object) -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        await handler(reader, writer, head)  # type: ignore[operator]

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _fake_runtime_exec() -> tuple[spdy.Session, asyncio.Task[None]]:
    """A runtime streaming server in SPDY that runs `cat`: stdin back to stdout, then exit code 3."""
    read_srv, write_cli, read_cli, write_srv = _pipe()
    streams: dict[str, spdy.Stream] = {}
    ready = asyncio.Event()

    async def on_stream(stream: spdy.Stream) -> None:
        streams[stream.kind] = stream
        if {"error", "stdin", "stdout", "stderr"} <= streams.keys():
            ready.set()
            data = await streams["stdin"].read_all()
            await streams["stdout"].write(data)
            await streams["stderr"].write(b"warn")
            await streams["stdout"].close()
            await streams["stderr"].close()
            status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                      "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}
            await streams["error"].write(orjson.dumps(status))
            await streams["error"].close()

    server = spdy.Session(read_srv, write_srv, client=False, on_stream=on_stream)
    client = spdy.Session(read_cli, write_cli, client=True)
    client.start()
    return client, asyncio.create_task(server.run())


async def test_exec_relay_v5_closes_stdin_and_returns_status() -> None:
    from websockets.asyncio.client import connect

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        ws = await WebSocket.accept(reader, writer, head, ["v5.channel.k8s.io", "v4.channel.k8s.io"])
        assert ws is not None
        session, task = await _fake_runtime_exec()
        await relay_remote_command(ws, session, stdin=True, stdout=True, stderr=True, tty=False)
        task.cancel()

    server, port = await _ws_server(handler)
    out: dict[int, bytes] = {}
    async with connect(f"ws://127.0.0.1:{port}/exec", subprotocols=["v5.channel.k8s.io"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "v5.channel.k8s.io"
        await ws.send(b"\x00hello ")
        await ws.send(b"\x00world")
        await ws.send(b"\xff\x00")
        async for msg in ws:
            assert isinstance(msg, bytes)
            out[msg[0]] = out.get(msg[0], b"") + msg[1:]
    server.close()
    assert out[1] == b"hello world" and out[2] == b"warn"
    assert orjson.loads(out[3])["details"]["causes"][0]["message"] == "3"


async def _echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()
        writer.write(b"echo:" + data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_port_forward_tunnel_through_the_apiserver_client() -> None:
    echo, echo_port = await _echo_server()

    async def connect(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(host, port)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        ws = await WebSocket.accept(reader, writer, head, ["SPDY/3.1+portforward.k8s.io"])
        assert ws is not None
        await PortForwardTunnel(ws, connect, "ns/p").serve()

    server, port = await _ws_server(handler)
    sock = await proxy.KubeletSocket.open(f"ws://127.0.0.1:{port}/portForward/ns/p",
                                          ["SPDY/3.1+portforward.k8s.io"], None, 5)
    assert sock.subprotocol == "SPDY/3.1+portforward.k8s.io"

    async def read() -> bytes:
        msg = await sock.recv()
        return msg if isinstance(msg, bytes) else b""

    session = spdy.Session(read, sock.send, client=True)
    session.start()
    for request_id, target in (("0", echo_port), ("1", 1)):
        headers = {"streamType": "error", "port": str(target), "requestID": request_id}
        error = await session.open_stream(headers)
        await error.close()
        data = await session.open_stream({**headers, "streamType": "data"})
        await data.write(b"ping")
        await data.close()
        body = await asyncio.wait_for(data.read_all(), 5)
        message = await asyncio.wait_for(error.read_all(), 5)
        if target == echo_port:
            assert body == b"echo:ping" and message == b""
        else:
            assert body == b"" and b"error forwarding port 1 to pod ns/p" in message
    await session.close()
    await sock.close()
    server.close()
    echo.close()


async def test_channel_port_forward_for_python_clients() -> None:
    from websockets.asyncio.client import connect as ws_connect

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"echo:" + await reader.read(100))
        await writer.drain()
        writer.close()

    echo = await asyncio.start_server(once, "127.0.0.1", 0)
    echo_port = echo.sockets[0].getsockname()[1]

    async def connect(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(host, port)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        ws = await WebSocket.accept(reader, writer, head, ["SPDY/3.1+portforward.k8s.io", "v4.channel.k8s.io"])
        assert ws is not None and ws.subprotocol == "v4.channel.k8s.io"
        await serve_channel_port_forward(ws, connect, [echo_port, 1], "ns/p")

    server, port = await _ws_server(handler)
    got: dict[int, bytes] = {}
    async with ws_connect(f"ws://127.0.0.1:{port}/portForward/ns/p",
                          subprotocols=["v4.channel.k8s.io"]) as ws:  # type: ignore[list-item]
        prefixes = [await ws.recv() for _ in range(4)]
        assert prefixes[0] == bytes([0]) + echo_port.to_bytes(2, "little") and prefixes[3] == b"\x03\x01\x00"
        await ws.send(b"\x00ping")
        async for msg in ws:
            assert isinstance(msg, bytes)
            got[msg[0]] = got.get(msg[0], b"") + msg[1:]
    server.close()
    echo.close()
    assert got[0] == b"echo:ping" and b"error forwarding port 1 to pod ns/p" in got[3]


# -- the HTTP server without a runtime ---------------------------------------------------------------


async def test_server_endpoints_without_runtime(tmp_path: Path) -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {}}
    kubelet = types.SimpleNamespace(name="node-a", workers={"u1": types.SimpleNamespace(pod=pod)},
                                    options=types.SimpleNamespace(root_dir=str(tmp_path)))
    server = KubeletServer(kubelet, address="127.0.0.1", port=0, cert_dir=str(tmp_path / "pki"),
                           hosts=["127.0.0.1"])
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{server.port}", verify=False) as c:
            assert (await c.get("/healthz")).text == "ok"
            pods = (await c.get("/pods")).json()
            assert pods["kind"] == "PodList" and pods["items"][0]["metadata"]["uid"] == "u1"
            summary = (await c.get("/stats/summary")).json()
            assert summary["node"]["nodeName"] == "node-a" and summary["pods"][0]["podRef"]["name"] == "p"
            assert summary["node"]["memory"]["availableBytes"] > 0
            assert (await c.get("/metrics")).status_code == 200
            missing = await c.get("/containerLogs/ns/other/c")
            assert missing.status_code == 404 and "other" in missing.json()["message"]
            assert (await c.get("/containerLogs/ns/p/c")).status_code == 501
            assert (await c.get("/exec/ns/p/c?output=1")).json()["message"] == "you must specify at least 1 command"
            assert (await c.get("/exec/ns/p/c?command=ls&output=1")).status_code == 501
            assert (await c.get("/nowhere")).status_code == 404
        cert = (tmp_path / "pki" / "kubelet.crt").read_bytes()
        assert b"BEGIN CERTIFICATE" in cert
        ctx = ssl.create_default_context(cafile=str(tmp_path / "pki" / "kubelet.crt"))
        async with httpx.AsyncClient(verify=ctx) as c:
            assert (await c.get(f"https://127.0.0.1:{server.port}/healthz")).status_code == 200
    finally:
        await server.stop()


# -- apiserver side ------------------------------------------------------------------------------------


POD = {"metadata": {"name": "web", "namespace": "ns"},
       "spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "init"}]}}


def test_kubelet_paths_and_validation() -> None:
    q = {"container": ["a"], "follow": ["true"], "tailLines": ["5"], "bogus": ["x"]}
    assert proxy.kubelet_path(POD, "log", q) == "/containerLogs/ns/web/a?follow=true&tailLines=5"
    with pytest.raises(errors.StatusError) as exc:
        proxy.kubelet_path(POD, "log", {})
    assert exc.value.code == 400 and exc.value.message == (
        "a container name must be specified for pod web, choose one of: [a b] "
        "or one of the init containers: [init]")
    with pytest.raises(errors.StatusError, match="container c is not valid for pod web"):
        proxy.kubelet_path(POD, "exec", {"container": ["c"], "command": ["ls"], "stdout": ["true"]})
    path = proxy.kubelet_path(POD, "exec", {"container": ["b"], "command": ["sh", "-c", "exit 3"],
                                            "stdin": ["true"], "stdout": ["true"], "stderr": ["true"]})
    assert path == "/exec/ns/web/b?command=sh&command=-c&command=exit+3&input=1&output=1&error=1"
    assert proxy.kubelet_path(POD, "portforward", {"ports": ["8080,9090"]}) == \
        "/portForward/ns/web?port=8080&port=9090"
    with pytest.raises(errors.StatusError, match="at least 1 command"):
        proxy.kubelet_path(POD, "exec", {"container": ["a"], "stdout": ["true"]})


def test_kubelet_address_prefers_internal_ip_and_reported_port() -> None:
    node = {"status": {"addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP",
                                                                             "address": "10.0.0.5"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": 12345}}}}
    assert proxy.kubelet_base(node) == "https://10.0.0.5:12345"
    assert proxy.kubelet_base({"status": {"addresses": [{"type": "InternalIP", "address": "fd00::1"}]}}) == \
        "https://[fd00::1]:10250"
    with pytest.raises(errors.StatusError, match="no preferred addresses"):
        proxy.kubelet_address({"status": {}})



async def _fake_runtime_echo(status: dict[str, Any] | None) -> tuple[spdy.Session, asyncio.Task[None]]:
    """A runtime streaming server in SPDY that runs `echo hi`, then ends with `status` (None: success)."""
    read_srv, write_cli, read_cli, write_srv = _pipe()
    streams: dict[str, spdy.Stream] = {}

    async def on_stream(stream: spdy.Stream) -> None:
        streams[stream.kind] = stream
        if {"error", "stdout", "stderr"} <= streams.keys():
            await streams["stdout"].write(b"hi\n")
            await streams["stdout"].close()
            await streams["stderr"].close()
            if status is not None:
                await streams["error"].write(orjson.dumps(status))
            await streams["error"].close()

    server = spdy.Session(read_srv, write_srv, client=False, on_stream=on_stream)
    client = spdy.Session(read_cli, write_cli, client=True)
    client.start()
    return client, asyncio.create_task(server.run())


EXIT_3 = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
          "message": "command terminated with non-zero exit code: exit status 3",
          "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}


async def _exec_over(subprotocol: str, status: dict[str, Any] | None) -> list[bytes | str]:
    """The messages a client speaking `subprotocol` reads from an exec of the fake runtime's `echo`."""
    from websockets.asyncio.client import connect

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes) -> None:
        ws = await WebSocket.accept(reader, writer, head, EXEC_PROTOCOLS)
        assert ws is not None
        session, task = await _fake_runtime_echo(status)
        await relay_remote_command(ws, session, stdin=False, stdout=True, stderr=True, tty=False)
        task.cancel()

    server, port = await _ws_server(handler)
    async with connect(f"ws://127.0.0.1:{port}/exec", subprotocols=[subprotocol]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == subprotocol
        received = [msg async for msg in ws]
    server.close()
    return received


async def test_exec_relay_channel_k8s_io_sends_only_a_failures_message() -> None:
    assert await _exec_over("channel.k8s.io", EXIT_3) == [
        b"\x01", b"\x01hi\n", b"\x03command terminated with non-zero exit code: exit status 3"]
    assert await _exec_over("channel.k8s.io", None) == [b"\x01", b"\x01hi\n"]


async def test_exec_relay_base64_channels_are_text() -> None:
    assert await _exec_over("base64.channel.k8s.io", None) == ["1", "1aGkK"]
    v4 = await _exec_over("v4.base64.channel.k8s.io", None)
    assert v4[:2] == ["1", "1aGkK"] and v4[2][0] == "3"
    assert orjson.loads(base64.b64decode(v4[2][1:])) == {"metadata": {}, "status": "Success"}


async def test_exec_relay_v4_sends_the_status() -> None:
    messages = await _exec_over("v4.channel.k8s.io", EXIT_3)
    assert messages[:2] == [b"\x01", b"\x01hi\n"]
    assert isinstance(messages[2], bytes) and orjson.loads(messages[2][1:])["reason"] == "NonZeroExitCode"


def test_channel_protocol_decoding() -> None:
    binary, text = CHANNEL_PROTOCOLS["channel.k8s.io"], CHANNEL_PROTOCOLS["base64.channel.k8s.io"]
    assert binary.decode(b"\x00abc") == (0, b"abc") and binary.decode(b"") is None
    assert text.decode(b"0aGk=") == (0, b"hi") and text.decode(b"0!!") is None
