"""The apiserver's request path alone: creates and GETs driven through `APIApp` in-process, with no
sockets and no client, timed in process CPU (what a loaded machine disturbs least).

Starts its own etcd. Run: python bench/apiserver_path.py [--pods 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apiserver.endpoints.app import APIApp  # noqa: E402
from apiserver.server import APIServer, Options  # noqa: E402
from tests.conftest import start_etcd_cluster  # noqa: E402


async def call(app: APIApp, method: str, path: str, body: bytes = b"", query: bytes = b"") -> int:
    """One request through the whole ASGI app; its status code."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": query,
             "headers": [(b"content-type", b"application/json"), (b"host", b"bench")], "scheme": "http",
             "http_version": "1.1", "server": ("127.0.0.1", 0), "client": ("127.0.0.1", 0)}
    await app(scope, receive, send)
    return int(sent[0]["status"])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=2000)
    n = ap.parse_args().pods
    members = start_etcd_cluster(1, Path(tempfile.mkdtemp(prefix="pyk8s-bench-path-")))
    try:
        server = APIServer(Options(etcd_servers=[members[0].client_url]))
        app = APIApp(server)
        await server.start()
        await call(app, "POST", "/api/v1/namespaces", orjson.dumps({"metadata": {"name": "bench"}}))
        t0 = time.process_time()
        for i in range(n):
            pod = {"metadata": {"name": f"p{i}"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            assert await call(app, "POST", "/api/v1/namespaces/bench/pods", orjson.dumps(pod)) == 201
        t1 = time.process_time()
        await server.cache.wait_for(await server.etcd.current_revision(), 30)
        t2 = time.process_time()
        for i in range(n):
            assert await call(app, "GET", f"/api/v1/namespaces/bench/pods/p{i}", query=b"resourceVersion=0") == 200
        t3 = time.process_time()
        for i in range(n):
            assert await call(app, "GET", f"/api/v1/namespaces/bench/pods/p{i}") == 200
        t4 = time.process_time()
        print(f"CPU per request, {n} each: create {1e6 * (t1 - t0) / n:.0f} µs, GET from the watch cache "
              f"{1e6 * (t3 - t2) / n:.0f} µs, GET from etcd {1e6 * (t4 - t3) / n:.0f} µs")
        await server.stop()
    finally:
        for m in members:
            m.kill()


if __name__ == "__main__":
    asyncio.run(main())
