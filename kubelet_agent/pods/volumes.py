"""Pod volumes on the node's disk: emptyDir, hostPath, configMap, secret, downwardAPI, projected
(with bound service-account tokens) and claims bound to hostPath/local volumes.

Content volumes are written with upstream's atomic writer: a fresh timestamped directory, then one
rename of the `..data` symlink, so a running container sees either the old files or the new ones.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubelet_agent.pods import ownership
from kubelet_agent.pods.env import EnvError, field_value, resource_value
from kubelet_agent.pods.resolver import Resolver
from kubelet_agent.pods.util import quantity

Payload = dict[str, tuple[bytes, int]]

PLUGIN_DIRS = {
    "emptyDir": "kubernetes.io~empty-dir",
    "configMap": "kubernetes.io~configmap",
    "secret": "kubernetes.io~secret",
    "downwardAPI": "kubernetes.io~downward-api",
    "projected": "kubernetes.io~projected",
}


class VolumeError(Exception):
    """A volume cannot be set up yet; the pod waits in ContainerCreating with a FailedMount event."""


@dataclass
class MountedVolume:
    path: str
    readonly: bool = False
    #: a `local` PersistentVolume: the kubelet manages its ownership (fsGroup), as upstream's local
    #: plugin does; hostPath ones it leaves alone
    local: bool = False


def write_atomic(target: Path, payload: Payload) -> bool:
    """Make `target` hold exactly `payload`; True when anything changed."""
    target.mkdir(parents=True, exist_ok=True)
    data_link = target / "..data"
    if data_link.is_symlink():
        current = target / os.readlink(data_link)
        if _same_content(current, payload):
            return False
    stamp = target / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.time_ns() % 10**9}"
    stamp.mkdir()
    for rel, (content, mode) in payload.items():
        path = stamp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.chmod(path, mode)
    os.chmod(stamp, 0o755)
    tmp = target / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(stamp.name, tmp)
    old = os.readlink(data_link) if data_link.is_symlink() else None
    os.rename(tmp, data_link)
    tops = {rel.split("/", 1)[0] for rel in payload}
    for top in tops:
        link = target / top
        if not link.is_symlink():
            os.symlink(f"..data/{top}", link)
    for entry in target.iterdir():
        if entry.name.startswith(".."):
            continue
        if entry.is_symlink() and entry.name not in tops:
            entry.unlink()
    if old and old != stamp.name:
        shutil.rmtree(target / old, ignore_errors=True)
    return True


def _same_content(directory: Path, payload: Payload) -> bool:
    if not directory.is_dir():
        return False
    found: dict[str, tuple[bytes, int]] = {}
    for path in directory.rglob("*"):
        if path.is_file():
            found[str(path.relative_to(directory))] = (path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
    return found == payload


def _items(data: dict[str, bytes], items: list[dict[str, Any]] | None, default_mode: int, optional: bool,
           what: str) -> Payload:
    if not items:
        return {k: (v, default_mode) for k, v in data.items()}
    out: Payload = {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise VolumeError(f"configmap references non-existent config key: {item['key']}"
                              if what == "configmap" else f"references non-existent secret key: {item['key']}")
        out[item["path"]] = (data[item["key"]], item.get("mode", default_mode))
    return out


def _mounts_under(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir() if os.path.ismount(p)]


def check_host_path(path: str, kind: str) -> None:
    """hostPath `type` checks, creating the path for the *OrCreate types, like upstream."""
    p = Path(path)
    if kind == "DirectoryOrCreate":
        if not p.exists():
            p.mkdir(parents=True, mode=0o755)
            os.chmod(p, 0o755)
        kind = "Directory"
    elif kind == "FileOrCreate":
        if not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch(0o644)
        kind = "File"
    checks = {
        "Directory": (p.is_dir, "a directory"),
        "File": (p.is_file, "a file"),
        "Socket": (p.is_socket, "a socket file"),
        "CharDevice": (p.is_char_device, "a character device"),
        "BlockDevice": (p.is_block_device, "a block device"),
    }
    if kind in checks:
        ok, label = checks[kind]
        if not ok():
            raise VolumeError(f"hostPath type check failed: {path} is not {label}")


class VolumeManager:
    """Sets up and tears down one node's pod volumes under `<root-dir>/pods/<uid>/volumes`."""

    def __init__(self, root_dir: str, resolver: Resolver, *, ca_file: str | None = None,
                 allocatable: dict[str, str] | None = None) -> None:
        self.root = Path(root_dir)
        self.resolver = resolver
        self.ca_file = ca_file
        self.allocatable = allocatable or {}
        self._tokens: dict[tuple[str, str, str, int], tuple[bytes, float]] = {}

    def pod_dir(self, uid: str) -> Path:
        return self.root / "pods" / uid

    async def setup(self, pod: dict[str, Any], pod_ip: str, host_ips: list[str]) -> dict[str, MountedVolume]:
        """Every volume of the pod, ready to mount; raises VolumeError for what is not there yet."""
        uid = pod["metadata"]["uid"]
        out: dict[str, MountedVolume] = {}
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            out[vol["name"]] = await self._setup_one(pod, uid, vol, pod_ip, host_ips)
        return out

    async def _setup_one(self, pod: dict[str, Any], uid: str, vol: dict[str, Any], pod_ip: str,
                         host_ips: list[str]) -> MountedVolume:
        name = vol["name"]
        ns = pod["metadata"].get("namespace", "default")
        if "hostPath" in vol:
            hp = vol["hostPath"]
            await asyncio.to_thread(check_host_path, hp["path"], hp.get("type") or "")
            return MountedVolume(hp["path"])
        gid = ownership.fs_group(pod)
        if "persistentVolumeClaim" in vol:
            mounted = await self._claim(ns, vol["persistentVolumeClaim"])
            if mounted.local and not mounted.readonly and gid is not None:
                await asyncio.to_thread(ownership.set_volume_ownership, Path(mounted.path), gid, False,
                                        ownership.change_policy(pod))
            return mounted
        if "emptyDir" in vol:
            path = self.pod_dir(uid) / "volumes" / PLUGIN_DIRS["emptyDir"] / name
            if await self._empty_dir(path, vol["emptyDir"] or {}) and gid is not None:
                await asyncio.to_thread(ownership.apply, path, gid, False)
            return MountedVolume(str(path))
        for kind in ("configMap", "secret", "downwardAPI", "projected"):
            if kind in vol:
                payload = await self._payload(pod, kind, vol[kind] or {}, pod_ip, host_ips)
                if payload is None:
                    payload = {}
                if gid is not None:
                    payload = {rel: (data, ownership.file_mode(mode, True)) for rel, (data, mode) in payload.items()}
                path = self.pod_dir(uid) / "volumes" / PLUGIN_DIRS[kind] / name
                if await asyncio.to_thread(write_atomic, path, payload) and gid is not None:
                    await asyncio.to_thread(ownership.apply, path, gid, True)
                return MountedVolume(str(path), readonly=True)
        raise VolumeError(f"volume {name!r}: unsupported volume type")

    async def _empty_dir(self, path: Path, source: dict[str, Any]) -> bool:
        """Create the emptyDir unless it exists; True when it was created now."""
        if await asyncio.to_thread(path.is_dir):
            return False
        await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(os.chmod, path, 0o777)
        if source.get("medium") == "Memory":
            opts = "mode=0777"
            if source.get("sizeLimit"):
                opts += f",size={int(quantity(source['sizeLimit']))}"
            proc = await asyncio.create_subprocess_exec(
                "mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            _, err = await proc.communicate()
            if proc.returncode != 0:
                raise VolumeError(f"mount tmpfs at {path}: {err.decode().strip()}")
        return True

    async def _claim(self, ns: str, source: dict[str, Any]) -> MountedVolume:
        claim = await self.resolver.pvc(ns, source["claimName"])
        if claim is None:
            raise VolumeError(f'persistentvolumeclaim "{source["claimName"]}" not found')
        volume_name = (claim.get("spec") or {}).get("volumeName")
        if not volume_name or (claim.get("status") or {}).get("phase") not in (None, "Bound"):
            raise VolumeError(f'persistentvolumeclaim "{source["claimName"]}" is not bound')
        pv = await self.resolver.pv(volume_name)
        if pv is None:
            raise VolumeError(f'persistentvolume "{volume_name}" not found')
        spec = pv.get("spec") or {}
        path = (spec.get("hostPath") or {}).get("path") or (spec.get("local") or {}).get("path")
        if not path:
            raise VolumeError(f'persistentvolume "{volume_name}": only hostPath and local volumes can be mounted')
        if "hostPath" in spec:
            await asyncio.to_thread(check_host_path, path, spec["hostPath"].get("type") or "DirectoryOrCreate")
        return MountedVolume(path, readonly=bool(source.get("readOnly")), local="local" in spec)

    async def _payload(self, pod: dict[str, Any], kind: str, source: dict[str, Any], pod_ip: str,
                       host_ips: list[str]) -> Payload | None:
        ns = pod["metadata"].get("namespace", "default")
        mode = source.get("defaultMode", 0o644)
        if kind == "configMap":
            cm = await self.resolver.configmap(ns, source["name"])
            if cm is None:
                if source.get("optional"):
                    return None
                raise VolumeError(f'configmap "{source["name"]}" not found')
            data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
            data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
            return _items(data, source.get("items"), mode, bool(source.get("optional")), "configmap")
        if kind == "secret":
            secret = await self.resolver.secret(ns, source["secretName"])
            if secret is None:
                if source.get("optional"):
                    return None
                raise VolumeError(f'secret "{source["secretName"]}" not found')
            data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
            return _items(data, source.get("items"), mode, bool(source.get("optional")), "secret")
        if kind == "downwardAPI":
            return self._downward(pod, source.get("items") or [], mode, pod_ip, host_ips)
        out: Payload = {}
        for src in source.get("sources") or []:
            if "serviceAccountToken" in src:
                tok = src["serviceAccountToken"]
                out[tok["path"]] = (await self._token(pod, tok), 0o600 if "defaultMode" not in source else mode)
            elif "configMap" in src:
                out.update(await self._payload(pod, "configMap", {**src["configMap"], "defaultMode": mode},
                                               pod_ip, host_ips) or {})
            elif "secret" in src:
                sec = dict(src["secret"])
                sec["secretName"] = sec.pop("name", "")
                out.update(await self._payload(pod, "secret", {**sec, "defaultMode": mode}, pod_ip, host_ips) or {})
            elif "downwardAPI" in src:
                out.update(self._downward(pod, src["downwardAPI"].get("items") or [], mode, pod_ip, host_ips))
        return out

    def _downward(self, pod: dict[str, Any], items: list[dict[str, Any]], mode: int, pod_ip: str,
                  host_ips: list[str]) -> Payload:
        out: Payload = {}
        for item in items:
            try:
                if "fieldRef" in item:
                    value = field_value(pod, item["fieldRef"]["fieldPath"], pod_ip, host_ips)
                else:
                    value = resource_value(pod, item["resourceFieldRef"], item["resourceFieldRef"].get(
                        "containerName", ""), self.allocatable)
            except EnvError as exc:
                raise VolumeError(str(exc)) from exc
            out[item["path"]] = (value.encode(), item.get("mode", mode))
        return out

    async def _token(self, pod: dict[str, Any], source: dict[str, Any]) -> bytes:
        """A TokenRequest token, refreshed once 80% of its lifetime has passed (as upstream)."""
        meta = pod["metadata"]
        sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        expiration = int(source.get("expirationSeconds") or 3600)
        audience = source.get("audience") or ""
        key = (meta["uid"], sa, audience, expiration)
        cached = self._tokens.get(key)
        now = time.time()
        if cached is not None and now < cached[1]:
            return cached[0]
        try:
            status = await self.resolver.token(meta.get("namespace", "default"), sa, pod,
                                               [audience] if audience else [], expiration)
        except Exception as exc:  # noqa: BLE001 - surfaced as a mount failure the pod waits on
            raise VolumeError(f"failed to fetch token: {exc}") from exc
        token = (status.get("token") or "").encode()
        self._tokens[key] = (token, now + 0.8 * expiration)
        return token

    async def teardown(self, uid: str) -> None:
        """Unmount memory-backed emptyDirs and remove the pod's directory."""
        base = self.pod_dir(uid)
        empty = base / "volumes" / PLUGIN_DIRS["emptyDir"]
        for path in await asyncio.to_thread(_mounts_under, empty):
            proc = await asyncio.create_subprocess_exec("umount", str(path))
            await proc.wait()
        for key in [k for k in self._tokens if k[0] == uid]:
            del self._tokens[key]
        await asyncio.to_thread(shutil.rmtree, base, True)
