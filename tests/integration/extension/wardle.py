"""A small extension apiserver for the aggregation tests: `wardle.pyk8s.io/v1alpha1` flunders.

It trusts only requests that come through the front proxy (request-header authentication with the
settings the apiserver publishes in kube-system/extension-apiserver-authentication), and every
flunder it serves names in its annotations the user the proxy said sent the request. A watch sends
one ADDED event per flunder, then one MODIFIED event per --tick seconds until the client leaves.

    python -m tests.integration.extension.wardle --apiserver URL --port N --tls-cert-file F --tls-private-key-file F
"""

from __future__ import annotations

import argparse
import asyncio
import urllib.parse
from typing import Any

import httpx
import orjson

from services.auth.requestheader import (
    CONFIGMAP_NAME,
    CONFIGMAP_NAMESPACE,
    RequestHeaderAuthenticator,
    RequestHeaderConfig,
    peer_der,
)

GROUP, VERSION = "wardle.pyk8s.io", "v1alpha1"
PREFIX = f"/apis/{GROUP}/{VERSION}"
RESOURCES = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}", "resources": [
    {"name": "flunders", "singularName": "flunder", "namespaced": True, "kind": "Flunder",
     "verbs": ["get", "list", "watch"], "shortNames": ["fl"]}]}


_GVK = {"group": GROUP, "version": VERSION, "kind": "Flunder"}
_GET = {"get": {"x-kubernetes-action": "get", "x-kubernetes-group-version-kind": _GVK, "responses": {"200": {
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/io.pyk8s.wardle.v1alpha1.Flunder"}}}}}}}
OPENAPI = {"openapi": "3.0.0", "info": {"title": "wardle", "version": VERSION}, "paths": {
    f"{PREFIX}/namespaces/{{namespace}}/flunders/{{name}}": _GET}, "components": {
    "schemas": {"io.pyk8s.wardle.v1alpha1.Flunder": {
        "type": "object", "description": "A flunder of the wardle test API.",
        "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                       "spec": {"type": "object", "description": "What the flunder wants."}},
        "x-kubernetes-group-version-kind": [_GVK]}}}}


#: Watches being served right now; every flunder reports the count, so a test sees one end.
OPEN_WATCHES = [0]


def flunder(namespace: str, name: str, user: Any, rv: int = 1) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Flunder",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv),
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {"wardle/user": user.name, "wardle/groups": ",".join(user.groups),
                                         "wardle/extra": orjson.dumps(user.extra).decode(),
                                         "wardle/open-watches": str(OPEN_WATCHES[0])}}}


async def respond(writer: asyncio.StreamWriter, status: int, body: Any) -> None:
    data = orjson.dumps(body)
    writer.write(f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n"
                 f"connection: close\r\n\r\n".encode() + data)
    await writer.drain()


async def handle(auth: RequestHeaderAuthenticator, tick: float, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:] if ":" in line]
    user = auth.authenticate(peer_der(writer.transport), headers)  # type: ignore[arg-type]
    path, _, query = target.partition("?")
    params = urllib.parse.parse_qs(query)
    try:
        if user is None:
            await respond(writer, 401, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                        "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
            return
        parts = [p for p in path.removeprefix(PREFIX).split("/") if p]
        if method == "GET" and path == f"/openapi/v3{PREFIX}":
            await respond(writer, 200, OPENAPI)
        elif method != "GET" or not path.startswith(PREFIX):
            await respond(writer, 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                                        "reason": "NotFound", "message": "not found"})
        elif not parts:
            await respond(writer, 200, RESOURCES)
        elif len(parts) == 3 and parts[0] == "namespaces" and parts[2] == "flunders":
            items = [flunder(parts[1], "flunder-1", user)]
            if params.get("watch", [""])[0] in ("1", "true"):
                await watch(writer, items, tick)
            else:
                await respond(writer, 200, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "FlunderList",
                                            "metadata": {"resourceVersion": "1"}, "items": items})
        elif len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "flunders":
            await respond(writer, 200, flunder(parts[1], parts[3], user))
        else:
            await respond(writer, 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                                        "reason": "NotFound", "message": "not found"})
    except ConnectionError:
        pass
    finally:
        writer.close()


async def watch(writer: asyncio.StreamWriter, items: list[dict[str, Any]], tick: float) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")

    async def event(kind: str, obj: dict[str, Any]) -> None:
        data = orjson.dumps({"type": kind, "object": obj}) + b"\n"
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()

    OPEN_WATCHES[0] += 1
    try:
        for obj in items:
            await event("ADDED", obj)
        rv = 1
        while True:
            await asyncio.sleep(tick)
            rv += 1
            await event("MODIFIED", {**items[0], "metadata": {**items[0]["metadata"], "resourceVersion": str(rv)}})
    finally:
        OPEN_WATCHES[0] -= 1


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--apiserver", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tls-cert-file", required=True)
    p.add_argument("--tls-private-key-file", required=True)
    p.add_argument("--tick", type=float, default=0.5)
    args = p.parse_args()
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{args.apiserver}/api/v1/namespaces/{CONFIGMAP_NAMESPACE}/configmaps/"
                                    f"{CONFIGMAP_NAME}")
        response.raise_for_status()
    config = RequestHeaderConfig.from_configmap(response.json()["data"])
    auth = RequestHeaderAuthenticator(config)
    ctx = config.server_context(args.tls_cert_file, args.tls_private_key_file)
    server = await asyncio.start_server(lambda r, w: handle(auth, args.tick, r, w), "127.0.0.1", args.port, ssl=ctx)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
