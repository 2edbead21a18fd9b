"""etcd client cost: CPU per Txn in this process, grpcio's asyncio stack against pyk8s's own gRPC/HTTP/2
client (apiserver/storage/grpc_wire.py), and etcd's own CPU per Txn alongside.

Each round puts N keys with a 1.5 KB value from C concurrent callers on one connection, as the
apiserver does under load. Starts its own single-member etcd.
Run: python bench/etcd_client.py [--calls 5000] [--concurrency 16] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import uvloop
from aetcd import rpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apiserver.storage.grpc_wire import Connection  # noqa: E402
from tests.conftest import start_etcd_cluster  # noqa: E402

VALUE = b"x" * 1500
TXN = "/etcdserverpb.KV/Txn"


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def put(key: str) -> rpc.TxnRequest:
    return rpc.TxnRequest(success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key.encode(), value=VALUE))])


async def measure(name: str, call: Callable[[rpc.TxnRequest], Awaitable[object]], calls: int, concurrency: int,
                  etcd_pid: int) -> None:
    async def worker(w: int, n: int) -> None:
        for j in range(n):
            await call(put(f"/bench/{name}/{w}/{j}"))

    await worker(-1, 50)
    c0, t0, e0 = own_cpu(), time.perf_counter(), process_cpu(etcd_pid)
    await asyncio.gather(*(worker(w, calls // concurrency) for w in range(concurrency)))
    c1, t1, e1 = own_cpu(), time.perf_counter(), process_cpu(etcd_pid)
    done = calls // concurrency * concurrency
    print(f"{name:>9}: {(c1 - c0) / done * 1e6:5.0f} µs client CPU per Txn, etcd {(e1 - e0) / done * 1e6:5.0f} µs, "
          f"{done / (t1 - t0):6.0f} Txn/s", flush=True)


async def grpcio_round(target: str, calls: int, concurrency: int, etcd_pid: int) -> None:
    channel = grpc.aio.insecure_channel(target)
    stub = rpc.KVStub(channel)
    try:
        await measure("grpcio", lambda req: stub.Txn(req, timeout=5), calls, concurrency, etcd_pid)
    finally:
        await channel.close()


async def wire_round(host: str, port: int, calls: int, concurrency: int, etcd_pid: int) -> None:
    conn = await Connection.open(host, port)

    async def call(req: rpc.TxnRequest) -> object:
        return rpc.TxnResponse.FromString(await conn.unary(TXN, req.SerializeToString(), 5))

    try:
        await measure("grpc_wire", call, calls, concurrency, etcd_pid)
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    member = start_etcd_cluster(1, Path(tempfile.mkdtemp(prefix="bench-etcd-client-")))[0]
    host, _, port = member.client_url.split("://")[1].partition(":")
    assert member.proc is not None
    try:
        for _ in range(args.rounds):
            uvloop.run(grpcio_round(f"{host}:{port}", args.calls, args.concurrency, member.proc.pid))
            uvloop.run(wire_round(host, int(port), args.calls, args.concurrency, member.proc.pid))
    finally:
        member.kill()


if __name__ == "__main__":
    main()
