"""docker-compose.yml, the images' lock file and `python -m deploy.compose pki` without a Docker engine
(tests/e2e/test_compose.py runs them with one)."""

from __future__ import annotations

import base64
import os
import tomllib
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from packaging.requirements import Requirement

from deploy import compose

REPO = Path(__file__).resolve().parents[2]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "deploy/images/requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_every_dependency_is_pinned_in_the_lock_within_its_range() -> None:
    pins = _lock()
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for text in dependencies:
        requirement = Requirement(text)
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in requirements.lock"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {requirement.specifier}"


def test_root_dockerignore_keeps_state_keys_and_tests_out() -> None:
    patterns = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".pyk8s", "tests", "**/*.key"} <= patterns
    assert not list((REPO / "deploy/images").glob("*.dockerignore")), "BuildKit-only ignore files are not read by both"


def test_compose_services_have_healthchecks_and_wait_on_health() -> None:
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    one_shot = {"pki", "setup"}
    for name, service in services.items():
        if name not in one_shot:
            assert "healthcheck" in service, f"{name} has no healthcheck"
        for need, how in (service.get("depends_on") or {}).items():
            wanted = "service_completed_successfully" if need in one_shot else "service_healthy"
            assert how == {"condition": wanted}, f"{name} -> {need}: {how}"
    assert services["apiserver"]["ports"] == ["127.0.0.1:${PYK8S_PORT:-6443}:6443"]


def _ptr_response(ip: str, name: str) -> bytes:
    query = compose._ptr_query(ip)
    header = query[:2] + b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00"
    encoded = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"
    answer = b"\xc0\x0c\x00\x0c\x00\x01\x00\x00\x02\x58" + len(encoded).to_bytes(2, "big") + encoded
    return header + query[12:] + answer


def test_ptr_answer_reads_docker_dns_names() -> None:
    assert compose.ptr_answer(_ptr_response("172.18.0.5", "pyk8s_node_1.pyk8s_default")) == "pyk8s_node_1.pyk8s_default"
    no_answer = compose._ptr_query("172.18.0.5")[:2] + b"\x81\x83\x00\x01\x00\x00\x00\x00\x00\x00" + \
        compose._ptr_query("172.18.0.5")[12:]
    assert compose.ptr_answer(no_answer) == ""


def _subject(kubeconfig: Path) -> tuple[str, list[str]]:
    user = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
    subject = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"])).subject
    return (subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value,
            [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)])


def test_pki_gives_each_component_its_identity_and_keeps_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compose, "ROOT", tmp_path / "volumes")
    monkeypatch.setattr(compose, "BOOTSTRAP_DIR", tmp_path / "volumes" / "node-bootstrap")
    host, owner_file = tmp_path / "host", tmp_path / "docker-compose.yml"
    host.mkdir()
    owner_file.write_text("")
    os.chown(owner_file, 4321, 4321)
    compose.write_pki(7443, host, owner_file)
    volumes = tmp_path / "volumes"
    assert _subject(volumes / "scheduler/kubeconfig") == ("system:kube-scheduler", [])
    assert _subject(volumes / "controller-manager/kubeconfig") == ("system:kube-controller-manager", [])
    assert _subject(volumes / "kube-proxy/kubeconfig") == ("system:kube-proxy", [])
    assert _subject(volumes / "hollow/kubeconfig") == ("pyk8s:hollow-nodes", [])
    admin = host / "admin.conf"
    assert (admin.stat().st_uid, admin.stat().st_mode & 0o777) == (4321, 0o600)
    assert yaml.safe_load(admin.read_text())["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:7443"
    assert (volumes / "pki/sa.key").stat().st_uid == compose.RUN_AS
    kept = {p: p.read_bytes() for p in [volumes / "pki/ca.key", volumes / "pki/sa.key", volumes / "pki/apiserver.crt",
                                         volumes / "node-bootstrap/token"]}
    compose.write_pki(7443, host, owner_file)
    assert {p: p.read_bytes() for p in kept} == kept
