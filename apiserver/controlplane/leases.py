"""Each apiserver's liveness record for the `kubernetes` Service, as upstream's lease endpoint reconciler keeps it.

One key per advertised IP under `<prefix>/masterleases/`, holding a minimal v1 Endpoints with that IP and
attached to an etcd lease of `ttl` seconds. A live apiserver rewrites its key every reconcile interval, so
the key outlives it by at most the TTL; etcd deletes the key of one that stopped refreshing it.
"""

from __future__ import annotations

import asyncio

import orjson

from apiserver.storage.etcd import EtcdStore, KeyExists, RevisionMismatch

#: Upstream's DefaultEndpointReconcilerTTL.
DEFAULT_TTL = 15
_WRITE_ATTEMPTS = 5


class MasterLeases:
    """The set of live apiserver IPs, read and written straight in etcd (they are no API resource)."""

    def __init__(self, etcd: EtcdStore, root: str, ttl: int = DEFAULT_TTL) -> None:
        self.etcd = etcd
        self.prefix = f"{root}masterleases/"
        self.ttl = ttl

    def key(self, ip: str) -> str:
        return self.prefix + ip

    async def update(self, ip: str) -> None:
        """Create or refresh the lease of `ip`; every write starts its TTL over."""
        key = self.key(ip)
        for _ in range(_WRITE_ATTEMPTS):
            current = await self.etcd.get(key)
            generation = 0
            if current is not None:
                try:
                    generation = int(orjson.loads(current.value).get("metadata", {}).get("generation") or 0)
                except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                    generation = 0
            # The generation changes on every write, so each refresh is a real write that renews the lease.
            record = orjson.dumps({
                "kind": "Endpoints", "apiVersion": "v1",
                "metadata": {"name": ip, "generation": generation + 1},
                "subsets": [{"addresses": [{"ip": ip}]}],
            })
            try:
                if current is None:
                    await self.etcd.create(key, record, ttl=self.ttl)
                else:
                    await self.etcd.update(key, record, current.mod_revision, ttl=self.ttl)
                return
            except (KeyExists, RevisionMismatch):
                # Another apiserver advertising the same IP refreshed it in between.
                await asyncio.sleep(0.01)
        raise RuntimeError(f"could not refresh the lease {key}: it kept changing under us")

    async def list(self) -> list[str]:
        """The IPs whose leases are alive, in key order."""
        kvs, _, _ = await self.etcd.list(self.prefix)
        ips: list[str] = []
        for kv in kvs:
            try:
                subsets = orjson.loads(kv.value).get("subsets") or []
                addresses = (subsets[0].get("addresses") or []) if subsets else []
            except (orjson.JSONDecodeError, AttributeError, TypeError, IndexError):
                continue
            ips.extend(str(a["ip"]) for a in addresses[:2] if isinstance(a, dict) and a.get("ip"))
        return ips

    async def remove(self, ip: str) -> bool:
        """Delete the lease of `ip`; False when there was none."""
        key = self.key(ip)
        for _ in range(_WRITE_ATTEMPTS):
            current = await self.etcd.get(key)
            if current is None:
                return False
            try:
                await self.etcd.delete(key, current.mod_revision)
                return True
            except RevisionMismatch:
                await asyncio.sleep(0.01)
        raise RuntimeError(f"could not remove the lease {key}: it kept changing under us")
