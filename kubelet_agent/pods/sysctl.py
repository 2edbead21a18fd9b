"""The kubelet's sysctl admission, as upstream's sysctl allowlist: a pod may set only the safe
sysctls (those namespaced by the kernel and known to be harmless, each from the kernel version that
namespaces it) and those `--allowed-unsafe-sysctls` names or prefixes (`net.core.*`). Anything else is
rejected with reason SysctlForbidden; so are net and IPC sysctls of pods sharing the host's namespace."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from services.api.sysctl import IPC, NET, namespace_of, normalize_name

FORBIDDEN_REASON = "SysctlForbidden"

# (name, the first kernel that namespaces it), upstream's safe sysctls of v1.32.
SAFE_SYSCTLS: tuple[tuple[str, tuple[int, int]], ...] = (
    ("kernel.shm_rmid_forced", (0, 0)),
    ("net.ipv4.ip_local_port_range", (0, 0)),
    ("net.ipv4.tcp_syncookies", (0, 0)),
    ("net.ipv4.ping_group_range", (0, 0)),
    ("net.ipv4.ip_unprivileged_port_start", (0, 0)),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
)


def kernel_version(release: str | None = None) -> tuple[int, int]:
    """(major, minor) of the running kernel (or of `release`)."""
    match = re.match(r"(\d+)\.(\d+)", release if release is not None else os.uname().release)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


class SysctlAllowlist:
    """The sysctls pods on this node may set: exact names and `prefix*` patterns."""

    def __init__(self, unsafe: Iterable[str] = (), kernel: tuple[int, int] | None = None) -> None:
        kernel = kernel if kernel is not None else kernel_version()
        self.names: dict[str, str] = {}
        self.prefixes: dict[str, str] = {}
        patterns = [name for name, since in SAFE_SYSCTLS if kernel >= since] + list(unsafe)
        for raw in patterns:
            pattern = normalize_name(raw.strip())
            if not pattern:
                continue
            if pattern.endswith("*"):
                prefix = pattern[:-1]
                namespace = namespace_of(prefix)
                if not namespace:
                    raise ValueError(f'the sysctls "{prefix}" are not known to be namespaced')
                self.prefixes[prefix] = namespace
            else:
                namespace = namespace_of(pattern)
                if not namespace:
                    raise ValueError(f'the sysctls "{pattern}" are not known to be namespaced')
                self.names[pattern] = namespace

    def _check(self, name: str, host_net: bool, host_ipc: bool) -> str | None:
        name = normalize_name(name)
        namespace = self.names.get(name)
        if namespace is None:
            namespace = next((ns for prefix, ns in self.prefixes.items() if name.startswith(prefix)), None)
        if namespace is None:
            return f'"{name}" not allowlisted'
        if (namespace == IPC and host_ipc) or (namespace == NET and host_net):
            return f'"{name}" not allowed with host {namespace} enabled'
        return None

    def admit(self, pod: dict[str, Any]) -> tuple[str, str] | None:
        """None when every sysctl of the pod is allowed, else (SysctlForbidden, message)."""
        spec = pod.get("spec") or {}
        for sysctl in (spec.get("securityContext") or {}).get("sysctls") or ():
            problem = self._check(str(sysctl.get("name") or ""), bool(spec.get("hostNetwork")),
                                  bool(spec.get("hostIPC")))
            if problem is not None:
                return FORBIDDEN_REASON, f"forbidden sysctl: {problem}"
        return None


def sandbox_sysctls(spec: dict[str, Any]) -> dict[str, str]:
    """The pod's sysctls as the CRI sandbox config carries them: dotted names."""
    return {normalize_name(str(s.get("name") or "")): str(s.get("value") or "")
            for s in (spec.get("securityContext") or {}).get("sysctls") or ()}
