"""What data at rest and in transit cost: Secret creates through a real apiserver, on etcd in cleartext
and on etcd over TLS with client certs, with Secrets stored as plaintext or encrypted by each provider;
then the provider's own CPU per value.

Each case is its own apiserver process (plain HTTP in front, so only the etcd side differs) creating
N Secrets of about 1 KB from C concurrent clients; its CPU per create is the steadier number on a
shared machine, where throughput moves with whatever else runs.
Run: flock /tmp/pyk8s-bench.lock python bench/encryption.py [--creates 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apiserver.storage.encryption import parse_config  # noqa: E402
from tests.conftest import etcd_apiserver_flags, etcd_pki, start_apiserver, start_etcd_cluster  # noqa: E402

PROVIDERS = {
    "aescbc": {"aescbc": {"keys": [{"name": "k", "secret": base64.b64encode(os.urandom(32)).decode()}]}},
    "aesgcm": {"aesgcm": {"keys": [{"name": "k", "secret": base64.b64encode(os.urandom(32)).decode()}]}},
    "secretbox": {"secretbox": {"keys": [{"name": "k", "secret": base64.b64encode(os.urandom(32)).decode()}]}},
}
PAYLOAD = base64.b64encode(os.urandom(700)).decode()


def config(provider: str) -> str:
    return yaml.safe_dump({"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
                           "resources": [{"resources": ["secrets"], "providers": [PROVIDERS[provider]]}]})


def process_cpu(pid: int) -> float:
    """Seconds of CPU a process has used (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_kms_plugin(work: Path) -> subprocess.Popen[bytes]:
    """The tests' KMS v2 plugin, for the kmsv2 case."""
    socket = work / "kms.sock"
    proc = subprocess.Popen([sys.executable, "-m", "tests.kms_plugin", str(socket)],
                            cwd=Path(__file__).resolve().parent.parent)
    deadline = time.monotonic() + 20
    while not socket.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the KMS plugin did not start")
        time.sleep(0.05)
    PROVIDERS["kmsv2"] = {"kms": {"apiVersion": "v2", "name": "bench", "endpoint": f"unix://{socket}"}}
    return proc


async def creates(url: str, count: int, concurrency: int, run: str) -> tuple[float, list[float]]:
    base = f"{url}/api/v1/namespaces/default/secrets"
    latencies: list[float] = []
    names = iter(range(count))

    async def worker(http: httpx.AsyncClient) -> None:
        for i in names:
            started = time.perf_counter()
            r = await http.post(base, json={"metadata": {"name": f"{run}-{i}"}, "data": {"blob": PAYLOAD}})
            latencies.append(time.perf_counter() - started)
            assert r.status_code == 201, r.text

    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
        return time.perf_counter() - started, latencies


async def provider_cost(rounds: int = 20000) -> None:
    value = ('{"kind":"Secret","data":{"blob":"' + PAYLOAD + '"}}').encode()
    print(f"\nprovider CPU per value ({len(value)} bytes), µs:")
    print(f"{'provider':<10} {'encrypt':>8} {'decrypt':>8}")
    for name in PROVIDERS:
        transformers = parse_config(config(name))
        transformers.register("/registry/secrets/", "", "secrets")
        await transformers.start()
        t = transformers.for_key("/registry/secrets/a/b")
        assert t is not None
        started = time.perf_counter()
        for _ in range(rounds):
            stored = await t.to_storage(value, "/registry/secrets/a/b")
        encrypt = (time.perf_counter() - started) / rounds * 1e6
        started = time.perf_counter()
        for _ in range(rounds):
            await t.from_storage(stored, "/registry/secrets/a/b")
        decrypt = (time.perf_counter() - started) / rounds * 1e6
        print(f"{name:<10} {encrypt:>8.1f} {decrypt:>8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--creates", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pyk8s-bench-encryption-"))
    pki = etcd_pki(work / "pki")
    plain = start_etcd_cluster(1, work / "etcd-plain")
    tls = start_etcd_cluster(1, work / "etcd-tls", tls=pki)
    plugin = start_kms_plugin(work)
    secure = etcd_apiserver_flags(pki)
    cases = [("plain etcd", plain[0].client_url, [], None), ("TLS etcd", tls[0].client_url, secure, None)]
    cases += [(f"TLS etcd, {p}", tls[0].client_url, secure, p) for p in PROVIDERS]
    print(f"{args.creates} Secret creates, {args.concurrency} concurrent clients")
    print(f"{'case':<22} {'creates/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'apiserver CPU µs/create':>24}")
    try:
        for n, (label, url, flags, provider) in enumerate(cases):
            extra = [*flags, "--etcd-prefix", f"/bench-{n}"]
            if provider is not None:
                path = work / f"{provider}.yaml"
                path.write_text(config(provider))
                extra += ["--encryption-provider-config", str(path)]
            server = start_apiserver([url], work / f"apiserver-{n}", *extra)
            try:
                asyncio.run(creates(server.url, 200, args.concurrency, "warm"))
                cpu = process_cpu(server.proc.pid)
                elapsed, lat = asyncio.run(creates(server.url, args.creates, args.concurrency, "run"))
                cpu = process_cpu(server.proc.pid) - cpu
            finally:
                server.stop()
            lat.sort()
            print(f"{label:<22} {args.creates / elapsed:>10.0f} {statistics.median(lat) * 1e3:>8.1f} "
                  f"{lat[int(len(lat) * 0.99) - 1] * 1e3:>8.1f} {cpu / args.creates * 1e6:>24.0f}")
        asyncio.run(provider_cost())
    finally:
        for m in plain + tls:
            m.kill()
        plugin.terminate()
        plugin.wait(10)


if __name__ == "__main__":
    main()
