"""The kubelet's fsGroup on a `local` PersistentVolume, with the claim and volume read from a real
apiserver: `fsGroupChangePolicy: OnRootMismatch` walks the volume only while its root lacks the
group, `Always` on every mount, and hostPath volumes are never touched (upstream's local and
hostPath plugins)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import httpx

from kubelet_agent.pods.resolver import Resolver
from kubelet_agent.pods.volumes import VolumeManager
from services.client import Client, ClientConfig

GID = os.getgid() + 2345


async def claim(api: httpx.AsyncClient, ns: str, name: str, source: dict[str, Any]) -> None:
    """A PersistentVolume and a claim bound to it, as the binder leaves them."""
    pv = {"metadata": {"name": name}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], **source,
        "claimRef": {"namespace": ns, "name": name},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n"]}]}]}}}}
    assert (await api.post("/api/v1/persistentvolumes", json=pv)).status_code == 201
    pvc = {"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": name,
                                                "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}}}}
    r = await api.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", json=pvc)
    assert r.status_code == 201, r.text
    body = r.json()
    body["status"] = {"phase": "Bound"}
    r = await api.put(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}/status", json=body)
    assert r.status_code == 200, r.text


def pod(ns: str, claim_name: str, policy: str | None) -> dict[str, Any]:
    sc: dict[str, Any] = {"fsGroup": GID}
    if policy:
        sc["fsGroupChangePolicy"] = policy
    return {"metadata": {"name": "p", "namespace": ns, "uid": uuid.uuid4().hex}, "spec": {
        "securityContext": sc, "containers": [{"name": "c", "image": "busybox"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]}}


async def test_fs_group_on_local_volumes_follows_the_change_policy(apiserver: str, tmp_path: Path) -> None:
    ns = f"own-{uuid.uuid4().hex[:8]}"
    local, host = tmp_path / "local", tmp_path / "host"
    for d in (local, host):
        d.mkdir()
        (d / "file").write_text("x")
    async with httpx.AsyncClient(base_url=apiserver) as api, Client(ClientConfig(server=apiserver)) as client:
        assert (await api.post("/api/v1/namespaces", json={"metadata": {"name": ns}})).status_code == 201
        await claim(api, ns, f"{ns}-local", {"local": {"path": str(local)}})
        await claim(api, ns, f"{ns}-host", {"hostPath": {"path": str(host)}})
        volumes = VolumeManager(str(tmp_path / "kubelet"), Resolver(client, ttl=0))

        await volumes.setup(pod(ns, f"{ns}-local", "OnRootMismatch"), "", [])
        assert (local / "file").stat().st_gid == GID and local.stat().st_gid == GID
        os.chown(local / "file", -1, os.getgid())
        await volumes.setup(pod(ns, f"{ns}-local", "OnRootMismatch"), "", [])
        assert (local / "file").stat().st_gid == os.getgid(), "the root already matched: nothing walked"
        await volumes.setup(pod(ns, f"{ns}-local", None), "", [])
        assert (local / "file").stat().st_gid == GID, "Always (the default) walks it again"

        await volumes.setup(pod(ns, f"{ns}-host", "Always"), "", [])
        assert (host / "file").stat().st_gid == os.getgid(), "hostPath volumes keep their ownership"
