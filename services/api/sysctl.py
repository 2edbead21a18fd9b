"""Sysctl names as the kernel and upstream's component-helpers read them: the dotted form of a
slashed name, and the kernel namespace (Net, IPC) a sysctl belongs to, which decides whether a pod
may set it at all."""

from __future__ import annotations

import re

NET = "Net"
IPC = "IPC"
_EXACT_NAMESPACES = {"kernel.sem": IPC}
_PREFIX_NAMESPACES = {"kernel.shm": IPC, "kernel.msg": IPC, "fs.mqueue.": IPC, "net.": NET}


def normalize_name(name: str) -> str:
    """A sysctl written with slashes (`net/ipv4/ip_forward`) in its dotted form: when the first
    separator is a slash, slashes and dots swap (so `a/b.c/d` names the key `a.b/c.d`)."""
    first = re.search(r"[./]", name)
    if first is None or first.group() == ".":
        return name
    return name.translate(str.maketrans("./", "/."))


def namespace_of(name: str) -> str:
    """The kernel namespace a dotted sysctl name (or name prefix) belongs to, "" when not namespaced."""
    if name in _EXACT_NAMESPACES:
        return _EXACT_NAMESPACES[name]
    return next((ns for prefix, ns in _PREFIX_NAMESPACES.items() if name.startswith(prefix)), "")
