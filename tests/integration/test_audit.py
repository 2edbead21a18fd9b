"""Audit logging on a real apiserver: the policy's levels, a None rule, and a bad policy file."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, APIServerProcess, eventually, start_apiserver

TOKEN = "audit-jane-token"
POLICY = """
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  resources: [{group: "", resources: [secrets]}]
- level: RequestResponse
  verbs: [create]
  resources: [{group: "", resources: [configmaps]}]
  omitManagedFields: true
- level: Metadata
  userGroups: [system:authenticated]
"""


@pytest.fixture(scope="module")
def audited(etcd_server: str, workdir: Path) -> Iterator[tuple[APIServerProcess, Path]]:
    root = workdir / "audit"
    root.mkdir(parents=True, exist_ok=True)
    (root / "policy.yaml").write_text(POLICY)
    (root / "tokens.csv").write_text(f"{TOKEN},jane,1001,devs\n")
    log = root / "audit.log"
    process = start_apiserver([etcd_server], root, "--token-auth-file", str(root / "tokens.csv"),
                              "--etcd-prefix", f"/audit-{uuid.uuid4().hex[:8]}",
                              "--audit-policy-file", str(root / "policy.yaml"), "--audit-log-path", str(log))
    yield process, log
    process.stop()


def _events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


async def test_a_create_is_recorded_at_the_level_the_policy_says(audited: tuple[APIServerProcess, Path]) -> None:
    process, log = audited
    name = f"audited-{uuid.uuid4().hex[:6]}"
    secret = f"quiet-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=process.url, headers={"authorization": f"Bearer {TOKEN}",
                                                                "user-agent": "audit-test/1.0"}) as client:
        r = await client.post("/api/v1/namespaces/default/configmaps", json={
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
        assert r.status_code == 201, r.text
        assert r.headers["audit-id"]
        again = await client.post("/api/v1/namespaces/default/configmaps", json={
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
        assert again.status_code == 409
        assert (await client.get(f"/api/v1/namespaces/default/configmaps/{name}")).status_code == 200
        assert (await client.post("/api/v1/namespaces/default/secrets", json={
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret}})).status_code == 201

    def mine(event: dict[str, Any]) -> bool:
        return (event.get("objectRef") or {}).get("name") == name

    async def written() -> list[dict[str, Any]]:
        events = [e for e in _events(log) if mine(e)]
        return events if len(events) >= 3 else []

    events = await eventually(written, limit=30, what="the audit events of the configmap")
    created, conflict, got = events[:3]
    assert created["apiVersion"] == "audit.k8s.io/v1" and created["kind"] == "Event"
    assert created["auditID"] == r.headers["audit-id"]
    assert created["stage"] == "ResponseComplete"  # RequestReceived is omitted by the policy
    assert created["level"] == "RequestResponse"
    assert created["verb"] == "create"
    assert created["user"] == {"username": "jane", "uid": "1001", "groups": ["devs", "system:authenticated"]}
    assert created["userAgent"] == "audit-test/1.0"
    assert created["sourceIPs"] == ["127.0.0.1"]
    assert created["requestURI"] == "/api/v1/namespaces/default/configmaps"
    assert created["objectRef"] == {"resource": "configmaps", "namespace": "default", "name": name,
                                    "apiVersion": "v1"}
    assert created["responseStatus"] == {"metadata": {}, "code": 201}
    assert created["requestObject"]["data"] == {"k": "v"}
    assert created["responseObject"]["metadata"]["uid"]
    assert "managedFields" not in created["responseObject"]["metadata"]
    assert created["annotations"]["authorization.k8s.io/decision"] == "allow"
    assert created["requestReceivedTimestamp"] <= created["stageTimestamp"]

    assert conflict["responseStatus"]["code"] == 409
    assert conflict["responseStatus"]["reason"] == "AlreadyExists"

    assert got["verb"] == "get" and got["level"] == "Metadata"
    assert "requestObject" not in got and "responseObject" not in got
    assert got["responseStatus"] == {"metadata": {}, "code": 200}

    # the None rule: the secret's create is not in the log
    assert not [e for e in _events(log) if (e.get("objectRef") or {}).get("resource") == "secrets"]


def test_a_bad_policy_file_is_a_usage_error_naming_the_flag(workdir: Path) -> None:
    bad = workdir / "audit-bad-policy.yaml"
    bad.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n")
    result = subprocess.run([sys.executable, "-m", "apiserver", "--audit-policy-file", str(bad)], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--audit-policy-file" in result.stderr
    assert 'rules[0].level: Unsupported value: "Loud"' in result.stderr


async def test_a_watch_is_recorded_when_it_starts_and_when_it_ends(audited: tuple[APIServerProcess, Path]) -> None:
    process, log = audited
    marker = f"watch-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=process.url, headers={"authorization": f"Bearer {TOKEN}",
                                                                "user-agent": marker}, timeout=30) as client:
        r = await client.get("/api/v1/namespaces/default/configmaps", params={"watch": "1", "timeoutSeconds": "1"})
        assert r.status_code == 200

    async def written() -> list[dict[str, Any]]:
        events = [e for e in _events(log) if e.get("userAgent") == marker]
        return events if len(events) >= 2 else []

    started, complete = await eventually(written, limit=30, what="the watch's audit events")
    assert (started["stage"], complete["stage"]) == ("ResponseStarted", "ResponseComplete")
    assert started["verb"] == complete["verb"] == "watch"
    assert started["auditID"] == complete["auditID"]
    assert started["responseStatus"]["code"] == 200
    assert started["stageTimestamp"] <= complete["stageTimestamp"]
