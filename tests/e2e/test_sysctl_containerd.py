"""Sysctls reach a real container: the kubelet passes a pod's safe sysctls (dotted or slashed) to the
CRI sandbox and runc sets them in the pod's namespaces, so the container reads them in /proc/sys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Kubectl
from tests.e2e.containerd_fixture import Containerd, containerd  # noqa: F401 - fixture
from tests.e2e.kubelet_fixture import wait
from tests.e2e.test_kubelet_containerd import KubeletProcess, apply, status


@pytest.fixture(scope="module")
def kubelet(kubeconfig: Path, containerd: Containerd) -> Iterator[KubeletProcess]:  # noqa: F811
    k = KubeletProcess(kubeconfig, containerd, containerd.base)
    k.start()
    yield k
    k.stop()


def test_pod_sees_its_sysctls(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    # busybox's `read` got nothing from /proc/sys here, so the values go through cat.
    script = ("set -- $(cat /proc/sys/net/ipv4/ip_local_port_range); test \"$1 $2\" = \"1024 50000\" || exit 3; "
              "test \"$(cat /proc/sys/kernel/shm_rmid_forced)\" = 1 || exit 4")
    apply(kubectl, unique_ns, {"metadata": {"name": "sysctls"}, "spec": {
        "restartPolicy": "Never",
        "securityContext": {"sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 50000"},
                                        {"name": "kernel/shm_rmid_forced", "value": "1"}]},
        "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", script]}]}})
    s = wait(lambda: (st := status(kubectl, unique_ns, "sysctls")).get("phase") in ("Succeeded", "Failed") and st,
             90)
    assert s["phase"] == "Succeeded", str(s["containerStatuses"][0]["state"])
    assert s["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_unsafe_sysctl_is_rejected_before_any_container(kubelet: KubeletProcess, kubectl: Kubectl,
                                                        unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "unsafe"}, "spec": {
        "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "10000"}]},
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}})
    s = wait(lambda: (st := status(kubectl, unique_ns, "unsafe")).get("phase") == "Failed" and st, 60)
    assert s["reason"] == "SysctlForbidden"
    assert s["message"] == 'Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted'
