"""Patch, apply and table benchmarks (issue 3): strategic merge and apply latency on a Pod with
10 containers, Table rendering of 10,000 pods, and server-side apply's cost on update throughput.

Starts its own etcd and apiserver. Run: python bench/apply.py [--pods 10000] [--updates 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.apiserver import RawClient, pct, pod  # noqa: E402
from tests.conftest import start_apiserver, start_etcd_cluster  # noqa: E402

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def big_pod(name: str, image: str = "busybox:1.36") -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [
            {"name": f"c{i}", "image": image, "ports": [{"containerPort": 8000 + i}],
             "env": [{"name": f"E{j}", "value": str(j)} for j in range(5)],
             "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
            for i in range(10)
        ]},
    }


async def latency(client: httpx.AsyncClient, method: str, path: str, bodies: list[bytes], content_type: str,
                  params: dict[str, str] | None = None) -> list[float]:
    out = []
    for body in bodies:
        t0 = time.perf_counter()
        r = await client.request(method, path, content=body, headers={"content-type": content_type},
                                 params=params)
        out.append(time.perf_counter() - t0)
        if r.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:300]}")
    return out


async def throughput(url: str, ns: str, kind: str, total: int, clients: int = 16) -> float:
    """Updates/s of one object per client: `put` (read-modify-write) or `apply` (apply patches)."""
    parsed = httpx.URL(url)
    counter = iter(range(total))

    async def worker(w: int) -> None:
        name = f"u-{kind}-{w}"
        client = RawClient(parsed.host, parsed.port or 80)
        path = f"/api/v1/namespaces/{ns}/configmaps"
        status, body = await client.post(path, orjson.dumps({"metadata": {"name": name}, "data": {"v": "0"}}))
        assert status == 201, body
        obj = orjson.loads(body)
        async with httpx.AsyncClient(base_url=url) as hc:
            for i in counter:
                if kind == "put":
                    obj["data"] = {"v": str(i)}
                    r = await hc.put(f"{path}/{name}", content=orjson.dumps(obj),
                                     headers={"content-type": "application/json"})
                    obj = r.json()
                else:
                    cfg = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                           "data": {"v": str(i)}}
                    r = await hc.patch(f"{path}/{name}", content=orjson.dumps(cfg),
                                       params={"fieldManager": "bench", "force": "true"},
                                       headers={"content-type": "application/apply-patch+yaml"})
                if r.status_code != 200:
                    raise RuntimeError(f"{kind}: {r.status_code} {r.text[:200]}")
        await client.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    return total / (time.perf_counter() - t0)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--updates", type=int, default=2000)
    ap.add_argument("--server", help="use a running apiserver (URL)")
    args = ap.parse_args()
    members, server = [], None
    if args.server:
        url = args.server
    else:
        work = Path(tempfile.mkdtemp(prefix="pyk8s-bench-"))
        members = start_etcd_cluster(1, work)
        server = start_apiserver([members[0].client_url], work)
        url = server.url
    try:
        ns = f"patch-{int(time.time())}"
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            await c.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
            path = f"/api/v1/namespaces/{ns}/pods"
            n = 200
            for i in range(n):
                await c.post(path, json=big_pod(f"big-{i}"))
            smp = [orjson.dumps({"spec": {"containers": [{"name": "c3", "image": f"busybox:{i}"}]}})
                   for i in range(n)]
            smp_lat = []
            for i, body in enumerate(smp):
                smp_lat += await latency(c, "PATCH", f"{path}/big-{i}", [body],
                                         "application/strategic-merge-patch+json")
            print(f"strategic merge patch, Pod with 10 containers: p50 {pct(smp_lat, .5) * 1000:.1f} ms, "
                  f"p99 {pct(smp_lat, .99) * 1000:.1f} ms")
            apply_lat = []
            for i in range(n):
                body = orjson.dumps(big_pod(f"big-{i}", image="busybox:applied"))
                apply_lat += await latency(c, "PATCH", f"{path}/big-{i}", [body], "application/apply-patch+yaml",
                                           {"fieldManager": "bench", "force": "true"})
            print(f"server-side apply, Pod with 10 containers: p50 {pct(apply_lat, .5) * 1000:.1f} ms, "
                  f"p99 {pct(apply_lat, .99) * 1000:.1f} ms")

            tns = f"{ns}-table"
            await c.post("/api/v1/namespaces", json={"metadata": {"name": tns}})
            parsed = httpx.URL(url)
            clients = [RawClient(parsed.host, parsed.port or 80) for _ in range(32)]
            names = iter(range(args.pods))

            async def fill(rc: RawClient) -> None:
                for i in names:
                    status, body = await rc.post(f"/api/v1/namespaces/{tns}/pods", pod(f"t-{i:06d}"))
                    assert status == 201, body

            await asyncio.gather(*(fill(rc) for rc in clients))
            for rc in clients:
                await rc.close()
            runs = []
            for _ in range(5):
                t0 = time.perf_counter()
                r = await c.get(f"/api/v1/namespaces/{tns}/pods", headers={"accept": TABLE})
                runs.append(time.perf_counter() - t0)
                assert r.status_code == 200 and len(r.json()["rows"]) == args.pods
            print(f"Table of {args.pods} pods (kubectl get's request): median {statistics.median(runs) * 1000:.0f} ms")

        put_rate = await throughput(url, ns, "put", args.updates)
        apply_rate = await throughput(url, ns, "apply", args.updates)
        print(f"update throughput, 16 clients: PUT {put_rate:.0f}/s, server-side apply {apply_rate:.0f}/s "
              f"(apply is {(1 - apply_rate / put_rate) * 100:.0f}% slower)")
    finally:
        if server is not None:
            server.stop()
        for m in members:
            m.kill()


if __name__ == "__main__":
    asyncio.run(main())
