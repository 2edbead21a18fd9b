"""Input meant to freeze or mislead the apiserver: alias bombs, deep nesting, endless bodies, encoded
slashes and forged continue tokens each get upstream's 4xx, and the apiserver keeps answering others."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from tests.conftest import APIServerProcess

YAML = {"content-type": "application/yaml"}
MERGE = {"content-type": "application/merge-patch+json"}


@pytest.fixture
async def client(apiserver: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=apiserver, timeout=60) as c:
        yield c


@pytest.fixture
async def ns(client: httpx.AsyncClient) -> str:
    name = f"hostile-{uuid.uuid4().hex[:8]}"
    r = await client.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


def alias_bomb(levels: int = 10) -> bytes:
    """A ConfigMap whose data nests `levels` lists of ten aliases of the list before: 10**levels leaves."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * 10)}]" for k in range(1, levels)]
    return ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n"
            + "".join(f"  {line}\n" for line in lines)).encode()


async def slowest_get(client: httpx.AsyncClient, hostile: Awaitable[Any]) -> tuple[Any, float]:
    """The hostile request's outcome and the slowest of the GETs answered while it ran."""
    task = asyncio.ensure_future(hostile)
    slowest = 0.0
    while True:
        started = time.monotonic()
        r = await client.get("/api/v1/namespaces/default")
        assert r.status_code == 200
        slowest = max(slowest, time.monotonic() - started)
        if task.done():
            return task.result(), slowest
        await asyncio.sleep(0.02)


async def test_yaml_alias_bomb_is_refused_without_stalling_others(client: httpx.AsyncClient, ns: str) -> None:
    body = alias_bomb()
    r, slowest = await slowest_get(client, client.post(f"/api/v1/namespaces/{ns}/configmaps", content=body,
                                                        headers=YAML))
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "BadRequest"
    assert "document contains excessive aliasing" in r.json()["message"]
    assert slowest < 1.0
    review = body.replace(b"kind: ConfigMap", b"kind: SelfSubjectAccessReview").replace(
        b"apiVersion: v1", b"apiVersion: authorization.k8s.io/v1")
    r, slowest = await slowest_get(client, client.post(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", content=review, headers=YAML))
    assert r.status_code == 400 and "excessive aliasing" in r.json()["message"], r.text
    assert slowest < 1.0
    assert (await client.get(f"/api/v1/namespaces/{ns}/configmaps/bomb")).status_code == 404


async def test_yaml_with_a_few_aliases_is_still_accepted(client: httpx.AsyncClient, ns: str) -> None:
    body = (b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: anchors\n  labels: &l {app: web}\n"
            b"  annotations: *l\ndata:\n  a: &v hello\n  b: *v\n")
    r = await client.post(f"/api/v1/namespaces/{ns}/configmaps", content=body, headers=YAML)
    assert r.status_code == 201, r.text
    assert r.json()["metadata"]["annotations"] == {"app": "web"} and r.json()["data"] == {"a": "hello", "b": "hello"}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


async def test_deep_nesting_is_a_clean_400(client: httpx.AsyncClient, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    assert (await client.post(path, json={"metadata": {"name": "deep"}})).status_code == 201
    deep = b'{"metadata":{"annotations":' + b'{"n":' * 300 + b'"x"' + b"}" * 300 + b"}}"
    r = await client.patch(f"{path}/deep", content=deep, headers=MERGE)
    assert r.status_code == 400, r.text
    assert "exceeded max depth" in r.json()["message"]
    r = await client.post(path, content=b'{"metadata":{"name":"deeper","labels":' + b"[" * 2000 + b"]" * 2000 + b"}}",
                          headers={"content-type": "application/json"})
    assert r.status_code == 400 and "exceeded max depth" in r.json()["message"], r.text
    yaml_deep = b"metadata:\n  name: deep-yaml\n  annotations: " + b"[" * 300 + b"]" * 300 + b"\n"
    r = await client.post(path, content=b"apiVersion: v1\nkind: ConfigMap\n" + yaml_deep, headers=YAML)
    assert r.status_code == 400 and "exceeded max depth" in r.json()["message"], r.text
    obj = (await client.get(f"{path}/deep")).json()
    assert "annotations" not in obj["metadata"]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def _endless_post(base: str, path: str, total: int) -> tuple[int, bytes, int]:
    """POST a chunked body of `total` bytes that never announces its length; (status, body, bytes sent) as
    soon as the server answers."""
    url = urlsplit(base)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n".encode())
    sent = 0
    chunk = b" " * (256 * 1024)

    async def pump() -> None:
        nonlocal sent
        while sent < total:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            sent += len(chunk)

    pumping = asyncio.ensure_future(pump())
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        status = int(head.split(b" ", 2)[1])
        length = next(int(h.split(b":", 1)[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
        body = await asyncio.wait_for(reader.readexactly(length), 30)
    finally:
        pumping.cancel()
        writer.close()
    return status, body, sent


async def test_endless_body_is_cut_off_at_the_limit(client: httpx.AsyncClient, apiserver_process: APIServerProcess,
                                                    apiserver: str) -> None:
    before = _rss_kib(apiserver_process.proc.pid)
    total = 400 * 1024 * 1024
    for path in ("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "/api/v1/namespaces/default/configmaps"):
        (status, body, sent), slowest = await slowest_get(client, _endless_post(apiserver, path, total))
        assert status == 413, body
        status_obj = orjson.loads(body)
        assert status_obj["reason"] == "RequestEntityTooLarge"
        assert status_obj["message"] == "Request entity too large: limit is 3145728"
        assert sent < total // 4
        assert slowest < 1.0
    assert _rss_kib(apiserver_process.proc.pid) - before < 100 * 1024


async def test_encoded_slash_is_part_of_a_name_not_a_collection(client: httpx.AsyncClient, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    assert (await client.post(path, json={"metadata": {"name": "keep"}})).status_code == 201
    for name in ("%2F", "%2f", "a%2Fb", "%2E%2E", "a%25b"):
        r = await client.delete(f"{path}/{name}")
        assert r.status_code == 400, (name, r.text)
        assert r.json()["message"].startswith("Name parameter invalid: "), r.text
    r = await client.get(f"{path}/%2F")
    assert r.json()["message"] == "Name parameter invalid: \"/\": may not contain '/'"
    r = await client.get(f"/api/v1/namespaces/{ns}%2Fx/configmaps/keep")
    assert r.status_code == 400 and r.json()["message"].startswith("Namespace parameter invalid: "), r.text
    assert (await client.get(f"{path}/keep")).status_code == 200


def _token(rv: Any, start: str = "x\x00") -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def test_forged_continue_tokens(client: httpx.AsyncClient, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    for name in ("a", "b", "c"):
        assert (await client.post(path, json={"metadata": {"name": name}})).status_code == 201
    # A negative revision is upstream's "continue inconsistently": the rest at the newest revision.
    r = await client.get(path, params={"limit": "1", "continue": _token(-1, "a\x00")})
    assert r.status_code == 200, r.text
    listed = r.json()
    assert int(listed["metadata"]["resourceVersion"]) > 0
    assert [i["metadata"]["name"] for i in listed["items"]] == ["b"]
    for token, why in ((_token(0), "incorrect encoded start resourceVersion"), (_token(5, ""), "start key empty"),
                       (_token("7"), "wrong type"), (_token(5, "../../secrets/"), "continue key is not valid")):
        r = await client.get(path, params={"limit": "1", "continue": token})
        assert r.status_code == 400, r.text
        assert r.json()["message"].startswith("invalid continue token: ") and why in r.json()["message"]


DEEP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "deeps.hostile.pyk8s.io"},
    "spec": {"group": "hostile.pyk8s.io", "scope": "Namespaced",
             "names": {"plural": "deeps", "singular": "deep", "kind": "Deep"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


async def test_patch_that_nests_too_deep_is_a_clean_400(client: httpx.AsyncClient, ns: str) -> None:
    r = await client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=DEEP_CRD)
    assert r.status_code in (201, 409), r.text
    path = f"/apis/hostile.pyk8s.io/v1/namespaces/{ns}/deeps"

    async def served() -> bool:
        return (await client.get(path)).status_code == 200

    deadline = time.monotonic() + 30
    while not await served():
        assert time.monotonic() < deadline, "the custom resource was never served"
        await asyncio.sleep(0.2)
    r = await client.post(path, json={"apiVersion": "hostile.pyk8s.io/v1", "kind": "Deep",
                                      "metadata": {"name": "d"}, "spec": nested(150)})
    assert r.status_code == 201, r.text
    pointer = "/spec" + "/n" * 148
    patch = [{"op": "add", "path": pointer + "/more", "value": nested(150)}]
    r = await client.patch(f"{path}/d", json=patch, headers={"content-type": "application/json-patch+json"})
    assert r.status_code == 400, r.text
    assert "exceeded max depth" in r.json()["message"]
    stored = (await client.get(f"{path}/d")).json()
    assert stored["spec"] == nested(150)


async def test_json_patch_copy_bomb_is_refused_without_stalling_others(client: httpx.AsyncClient, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    r = await client.post(path, json={"metadata": {"name": "copied", "labels": {"a": "b" * 60}}})
    assert r.status_code == 201, r.text
    # Each copy doubles metadata: 40 of them would make it 2**40 times larger.
    bomb = [{"op": "copy", "from": "/metadata", "path": f"/metadata/x{i}"} for i in range(40)]
    json_patch = {"content-type": "application/json-patch+json"}
    r, slowest = await slowest_get(client, client.patch(f"{path}/copied", json=bomb, headers=json_patch))
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith("Unable to complete the copy, the accumulated size increase of copy is ")
    assert r.json()["message"].endswith(", exceeding the limit 3145728")
    assert slowest < 1.0
    many = [{"op": "test", "path": "/kind", "value": "ConfigMap"}] * 10001
    r = await client.patch(f"{path}/copied", json=many, headers=json_patch)
    assert r.status_code == 413, r.text
    assert r.json()["message"] == ("Request entity too large: The allowed maximum operations in a JSON patch is "
                                   "10000, got 10001")
    assert (await client.get(f"{path}/copied")).json()["metadata"]["labels"] == {"a": "b" * 60}
