"""The kubelet's sysctl allowlist: safe sysctls by kernel version, unsafe patterns, host namespaces."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet_agent.pods.sysctl import SysctlAllowlist, kernel_version, sandbox_sysctls
from services.api.sysctl import normalize_name


def _pod(*names: str, **spec: Any) -> dict[str, Any]:
    return {"spec": {"securityContext": {"sysctls": [{"name": n, "value": "1"} for n in names]}, **spec}}


def test_safe_sysctls_follow_the_kernel() -> None:
    old = SysctlAllowlist(kernel=(4, 4))
    assert old.admit(_pod("net.ipv4.ip_local_reserved_ports")) is None
    assert old.admit(_pod("net.ipv4.tcp_keepalive_time")) == (
        "SysctlForbidden", 'forbidden sysctl: "net.ipv4.tcp_keepalive_time" not allowlisted')
    assert SysctlAllowlist(kernel=(6, 1)).admit(_pod("net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_wmem")) is None
    assert kernel_version("6.1.0-28-amd64") == (6, 1)


def test_unsafe_patterns_and_host_namespaces() -> None:
    allow = SysctlAllowlist(["kernel.msg*", "net.core.somaxconn"], kernel=(6, 1))
    assert allow.admit(_pod("kernel.msgmax", "kernel/msgmnb", "net.core.somaxconn")) is None
    assert allow.admit(_pod("net.core.rmem_max"))[1] == 'forbidden sysctl: "net.core.rmem_max" not allowlisted'
    assert allow.admit(_pod("net.core.somaxconn", hostNetwork=True))[1] == (
        'forbidden sysctl: "net.core.somaxconn" not allowed with host Net enabled')
    assert allow.admit(_pod("kernel.msgmax", hostIPC=True))[1] == (
        'forbidden sysctl: "kernel.msgmax" not allowed with host IPC enabled')
    with pytest.raises(ValueError, match='the sysctls "kernel.hostname" are not known to be namespaced'):
        SysctlAllowlist(["kernel.hostname"])
    with pytest.raises(ValueError, match='the sysctls "vm." are not known to be namespaced'):
        SysctlAllowlist(["vm.*"])


def test_slashed_names_are_dotted_for_the_runtime() -> None:
    assert normalize_name("net/ipv4/conf/eth0.100/forwarding") == "net.ipv4.conf.eth0/100.forwarding"
    assert normalize_name("kernel.shm_rmid_forced") == "kernel.shm_rmid_forced"
    spec = _pod("kernel/shm_rmid_forced")["spec"]
    assert sandbox_sysctls(spec) == {"kernel.shm_rmid_forced": "1"}
