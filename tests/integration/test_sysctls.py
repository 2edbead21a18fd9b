"""Pod sysctls: the apiserver rejects malformed and repeated names (upstream's validateSysctls), and a
hollow kubelet admits only the safe sysctls and those of --allowed-unsafe-sysctls, rejecting the rest
with reason SysctlForbidden, as upstream's sysctl allowlist."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.client import Client, gvr
from tests.conftest import REPO, eventually, hollow_kubelet_args

PODS = gvr("v1", "pods")
NODE = "hollow-sysctl-0"
PATTERN = r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"


def _pod(name: str, sysctls: list[dict[str, str]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}],
                     "securityContext": {"sysctls": sysctls}, **spec}}


def test_invalid_sysctls_are_rejected(apiserver: str, unique_ns: str) -> None:
    body = _pod("invalid", [{"name": "foo-", "value": "bar"}, {"name": "kernel.shmmax", "value": "100000000"},
                            {"name": "safe-and-unsafe", "value": "100000000"}, {"name": "bar..", "value": "42"},
                            {"name": "kernel.shmmax", "value": "1"}, {"name": "", "value": "1"},
                            {"name": "a" * 254, "value": "1"}])
    r = httpx.post(f"{apiserver}/api/v1/namespaces/{unique_ns}/pods", json=body)
    assert r.status_code == 422, r.text
    causes = [(c["field"], c["message"]) for c in r.json()["details"]["causes"]]
    detail = f"must have at most 253 characters and match regex {PATTERN}"
    assert causes == [
        ("spec.securityContext.sysctls[0].name", f'Invalid value: "foo-": {detail}'),
        ("spec.securityContext.sysctls[3].name", f'Invalid value: "bar..": {detail}'),
        ("spec.securityContext.sysctls[4].name", 'Duplicate value: "kernel.shmmax"'),
        ("spec.securityContext.sysctls[5].name", "Required value"),
        ("spec.securityContext.sysctls[6].name", f'Invalid value: "{"a" * 254}": {detail}'),
    ]
    assert "safe-and-unsafe" not in r.text


def test_host_namespaces_forbid_their_sysctls(apiserver: str, unique_ns: str) -> None:
    body = _pod("hostnet", [{"name": "net/ipv4/ip_local_port_range", "value": "1024 65535"},
                            {"name": "kernel.msgmax", "value": "1"}, {"name": "kernel.shm_rmid_forced", "value": "1"}],
                hostNetwork=True, hostIPC=True)
    r = httpx.post(f"{apiserver}/api/v1/namespaces/{unique_ns}/pods", json=body)
    assert r.status_code == 422, r.text
    assert [(c["field"], c["message"]) for c in r.json()["details"]["causes"]] == [
        ("spec.securityContext.sysctls[0].name",
         "Invalid value: \"net/ipv4/ip_local_port_range\": may not be specified when 'hostNetwork' is true"),
        ("spec.securityContext.sysctls[1].name",
         "Invalid value: \"kernel.msgmax\": may not be specified when 'hostIPC' is true"),
        ("spec.securityContext.sysctls[2].name",
         "Invalid value: \"kernel.shm_rmid_forced\": may not be specified when 'hostIPC' is true"),
    ]
    template = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}],
                             "securityContext": {"sysctls": [{"name": "bad..", "value": "1"}]}}}}}
    r = httpx.post(f"{apiserver}/apis/apps/v1/namespaces/{unique_ns}/deployments", json=template)
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "spec.template.spec.securityContext.sysctls[0].name"


@pytest.fixture
async def client(apiserver: str) -> AsyncIterator[Client]:
    c = Client(apiserver)
    yield c
    await c.close()


async def test_kubelet_admits_safe_and_allowed_unsafe_sysctls_only(
        kubeconfig: Path, workdir: Path, client: Client, unique_ns: str) -> None:
    pods = {
        "safe": [{"name": "kernel.shm_rmid_forced", "value": "1"},
                 {"name": "net.ipv4.ip_local_port_range", "value": "32768 60999"}],
        "slashed": [{"name": "kernel/shm_rmid_forced", "value": "1"}],
        "allowed-unsafe": [{"name": "kernel.msgmax", "value": "10000"}],
        "unsafe": [{"name": "net.core.somaxconn", "value": "1024"}],
    }
    for name, sysctls in pods.items():
        await client.create(PODS, _pod(name, sysctls), unique_ns)
    log = await asyncio.to_thread(open, workdir / "hollow-sysctl.log", "ab")
    proc = await asyncio.create_subprocess_exec(
        *hollow_kubelet_args(kubeconfig, "hollow-sysctl", 1), "--allowed-unsafe-sysctls", "kernel.msg*,fs.mqueue.*",
        cwd=REPO, stdout=log, stderr=log)
    try:
        async def phases() -> dict[str, str] | None:
            got = {n: (await client.get(PODS, n, unique_ns))["status"].get("phase", "") for n in pods}
            return got if "Pending" not in got.values() and "" not in got.values() else None

        assert await eventually(phases, 60.0) == {"safe": "Running", "slashed": "Running",
                                                  "allowed-unsafe": "Running", "unsafe": "Failed"}
        status = (await client.get(PODS, "unsafe", unique_ns))["status"]
        assert status["reason"] == "SysctlForbidden"
        assert status["message"] == 'Pod was rejected: forbidden sysctl: "net.core.somaxconn" not allowlisted'
    finally:
        proc.terminate()
        await proc.wait()
        log.close()
