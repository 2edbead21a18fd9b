"""A pod's fsGroup applied to its volumes (upstream's SetVolumeOwnership): every file and directory
gets the group, read (and for writable volumes write) permission for it, and directories the setgid
bit, so what containers create later inherits the group too.

With `fsGroupChangePolicy: OnRootMismatch` a volume whose root directory already has the group, the
permissions and the setgid bit is left alone, so a large persistent volume is not walked on every
mount; `Always` (the default) walks it each time."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

READ_ONLY_MASK = 0o440
READ_WRITE_MASK = 0o660
EXEC_MASK = 0o110


def fs_group(pod: dict[str, Any]) -> int | None:
    value = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return int(value) if value is not None else None


def change_policy(pod: dict[str, Any]) -> str:
    return ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroupChangePolicy") or "Always"


def file_mode(mode: int, readonly: bool) -> int:
    """The mode a regular file ends with once the fsGroup is applied."""
    return mode | (READ_ONLY_MASK if readonly else READ_WRITE_MASK)


def root_matches(root: Path, gid: int, readonly: bool) -> bool:
    """Upstream's requiresPermissionChange, negated: `root` is a directory of `gid` whose mode has the
    group's permissions and the setgid bit already."""
    try:
        info = root.stat()
    except OSError:
        return False
    wanted = (READ_ONLY_MASK if readonly else READ_WRITE_MASK) | EXEC_MASK
    return info.st_gid == gid and stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) & wanted == wanted \
        and bool(info.st_mode & stat.S_ISGID)


def set_volume_ownership(root: Path, gid: int, readonly: bool, policy: str) -> bool:
    """Apply the fsGroup to a mounted volume unless OnRootMismatch finds its root already right;
    whether anything was walked. Blocking: run it in a thread."""
    if policy == "OnRootMismatch" and root_matches(root, gid, readonly):
        return False
    apply(root, gid, readonly)
    return True


def apply(root: Path, gid: int, readonly: bool) -> None:
    """Give everything under `root` (symlinks not followed) to `gid`. Blocking: run it in a thread."""
    for parent, dirs, files in os.walk(root):
        _change(Path(parent), gid, readonly)
        for name in [*dirs, *files]:
            path = Path(parent, name)
            if path.is_symlink() or name in files:
                _change(path, gid, readonly)


def _change(path: Path, gid: int, readonly: bool) -> None:
    os.lchown(path, -1, gid)
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        mode = file_mode(mode, readonly) | stat.S_ISGID | EXEC_MASK
    else:
        mode = file_mode(mode, readonly)
    os.chmod(path, mode)
