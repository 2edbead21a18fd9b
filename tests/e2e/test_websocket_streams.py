"""Logs, exec and attach over plain WebSockets, as clients other than kubectl (and the conformance
suite) speak them: a Python WebSocket client against the apiserver, which relays to a real kubelet
on a real containerd. exec and attach speak `channel.k8s.io`, `base64.channel.k8s.io`,
`v4.channel.k8s.io` and `v5.channel.k8s.io`; logs `binary.k8s.io` and `base64.binary.k8s.io`."""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from tests.conftest import Kubectl
from tests.e2e.containerd_fixture import Containerd, containerd  # noqa: F401 - fixture
from tests.e2e.kubelet_fixture import loopback_kubelet, wait

NODE = "e2e-ws-0"


@pytest.fixture(scope="module")
def node(kubeconfig: Path, containerd: Containerd, kubectl: Kubectl) -> Iterator[int]:  # noqa: F811
    with loopback_kubelet(kubeconfig, containerd, kubectl, NODE) as port:
        yield port


def run_pod(kubectl: Kubectl, ns: str, name: str, command: str) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [
               {"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", command]}]}}
    kubectl.run("apply", "-f", "-", stdin=json.dumps(pod))
    wait(lambda: kubectl.run("-n", ns, "get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running")


def url(apiserver: str, ns: str, pod: str, subresource: str, params: list[tuple[str, str]]) -> str:
    query = urllib.parse.urlencode(params)
    return f"{apiserver.replace('http', 'ws', 1)}/api/v1/namespaces/{ns}/pods/{pod}/{subresource}?{query}"


def open_ws(target: str, protocol: str) -> connect:
    return connect(target, subprotocols=[protocol], additional_headers={"Authorization": "Bearer test"},  # type: ignore[list-item]
                   open_timeout=30)


async def channels(ws: ClientConnection, *, text: bool = False) -> dict[int, bytes]:
    """Every channel's data until the server closes, decoding base64 text messages when `text`."""
    out: dict[int, bytes] = {}
    async for msg in ws:
        if text:
            assert isinstance(msg, str), msg
            channel, data = ord(msg[0]) - ord("0"), base64.b64decode(msg[1:])
        else:
            assert isinstance(msg, bytes), msg
            channel, data = msg[0], msg[1:]
        out[channel] = out.get(channel, b"") + data
    return out


EXEC = [("stdout", "1"), ("stderr", "1"), ("container", "c")]


async def test_exec_over_channel_k8s_io(node: int, kubectl: Kubectl, unique_ns: str, apiserver: str) -> None:
    """The conformance spec's exec: output on channel 1; success leaves the error channel empty, and a
    failure puts its message there, not a Status."""
    run_pod(kubectl, unique_ns, "shell", "sleep 3600")
    target = url(apiserver, unique_ns, "shell", "exec", [*EXEC, ("command", "echo"),
                                                         ("command", "remote execution test")])
    async with open_ws(target, "channel.k8s.io") as ws:
        assert ws.subprotocol == "channel.k8s.io"
        out = await channels(ws)
    assert out.get(1) == b"remote execution test\n" and not out.get(3)
    target = url(apiserver, unique_ns, "shell", "exec", [*EXEC, ("command", "sh"), ("command", "-c"),
                                                         ("command", "echo oops >&2; exit 3")])
    async with open_ws(target, "channel.k8s.io") as ws:
        out = await channels(ws)
    assert out[2] == b"oops\n"
    assert out[3].startswith(b"command terminated with non-zero exit code") and b"3" in out[3]


async def test_exec_over_v4_reports_the_status(node: int, kubectl: Kubectl, unique_ns: str, apiserver: str) -> None:
    run_pod(kubectl, unique_ns, "shell", "sleep 3600")
    target = url(apiserver, unique_ns, "shell", "exec", [*EXEC, ("command", "sh"), ("command", "-c"),
                                                         ("command", "exit 7")])
    async with open_ws(target, "v4.channel.k8s.io") as ws:
        out = await channels(ws)
    status = orjson.loads(out[3])
    assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "7"}]
    target = url(apiserver, unique_ns, "shell", "exec", [*EXEC, ("command", "true")])
    async with open_ws(target, "v4.channel.k8s.io") as ws:
        assert orjson.loads((await channels(ws))[3]) == {"metadata": {}, "status": "Success"}


async def test_exec_stdin_over_base64_and_v5(node: int, kubectl: Kubectl, unique_ns: str, apiserver: str) -> None:
    run_pod(kubectl, unique_ns, "shell", "sleep 3600")
    params = [*EXEC, ("stdin", "1"), ("command", "sh"), ("command", "-c"), ("command", "head -n 1 | tr a-z A-Z")]
    async with open_ws(url(apiserver, unique_ns, "shell", "exec", params), "base64.channel.k8s.io") as ws:
        assert ws.subprotocol == "base64.channel.k8s.io"
        await ws.send("0" + base64.b64encode(b"hello\n").decode())
        out = await channels(ws, text=True)
    assert out[1] == b"HELLO\n"
    params = [*EXEC, ("stdin", "1"), ("command", "cat")]
    async with open_ws(url(apiserver, unique_ns, "shell", "exec", params), "v5.channel.k8s.io") as ws:
        await ws.send(b"\x00over v5\n")
        await ws.send(b"\xff\x00")  # CLOSE stdin: cat sees EOF and exits
        out = await channels(ws)
    assert out[1] == b"over v5\n" and orjson.loads(out[3])["status"] == "Success"


async def test_attach_over_channel_k8s_io(node: int, kubectl: Kubectl, unique_ns: str, apiserver: str) -> None:
    run_pod(kubectl, unique_ns, "talker", "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.3; done")
    async with open_ws(url(apiserver, unique_ns, "talker", "attach", EXEC), "channel.k8s.io") as ws:
        assert ws.subprotocol == "channel.k8s.io"
        seen = b""
        while b"\n" not in seen:
            msg = await ws.recv()
            assert isinstance(msg, bytes)
            if msg[:1] == b"\x01":
                seen += msg[1:]
    assert seen.startswith(b"line ")


async def test_logs_over_websockets(node: int, kubectl: Kubectl, unique_ns: str, apiserver: str) -> None:
    """The conformance spec's logs: the body as binary messages until the server closes."""
    run_pod(kubectl, unique_ns, "alive", "echo container is alive; sleep 3600")
    wait(lambda: kubectl.run("-n", unique_ns, "logs", "alive").stdout)
    target = url(apiserver, unique_ns, "alive", "log", [("container", "c")])
    async with open_ws(target, "binary.k8s.io") as ws:
        assert ws.subprotocol == "binary.k8s.io"
        received = [msg async for msg in ws]
    assert all(isinstance(m, bytes) for m in received)
    assert b"".join(m for m in received if isinstance(m, bytes)) == b"container is alive\n"
    async with open_ws(target, "base64.binary.k8s.io") as ws:
        texts = [msg async for msg in ws]
    assert b"".join(base64.b64decode(t) for t in texts if isinstance(t, str)) == b"container is alive\n"
    with pytest.raises(InvalidStatus) as refused:
        async with open_ws(url(apiserver, unique_ns, "alive", "log", [("container", "nope")]), "binary.k8s.io"):
            pass
    assert refused.value.response.status_code == 400
    assert b"container nope is not valid for pod alive" in refused.value.response.body
    with pytest.raises(InvalidStatus) as refused:
        async with open_ws(target, "v4.channel.k8s.io"):
            pass
    assert refused.value.response.status_code == 403, "logs speak no channel protocol, as upstream"
