"""--enable-admission-plugins and --disable-admission-plugins on a real apiserver and etcd: a
disabled plugin stops acting (no quota enforced, nothing added to pods, creates in missing
namespaces), an enabled default-off one starts (AlwaysPullImages), and an unknown name is a usage
error at start-up, as upstream's."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, APIServerProcess, start_apiserver

DISABLED = "ResourceQuota,NamespaceLifecycle,ServiceAccount,Priority,DefaultTolerationSeconds"


@pytest.fixture(scope="module")
def changed_apiserver(etcd_server: str, workdir: Path) -> Iterator[APIServerProcess]:
    """An apiserver on its own etcd prefix with AlwaysPullImages on and the pod, quota and namespace plugins off."""
    server = start_apiserver([etcd_server], workdir / "admission-flags", "--etcd-prefix", "/admission-flags",
                             "--enable-admission-plugins=AlwaysPullImages", f"--disable-admission-plugins={DISABLED}")
    yield server
    server.stop()


@pytest.fixture
def api(changed_apiserver: APIServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=changed_apiserver.url, timeout=30) as client:
        yield client


@pytest.fixture
def ns(api: httpx.Client) -> str:
    name = f"flags-{uuid.uuid4().hex[:8]}"
    assert api.post("/api/v1/namespaces", json={"metadata": {"name": name}}).status_code == 201
    return name


def pod(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}


def test_disabled_resource_quota_enforces_nothing(api: httpx.Client, ns: str) -> None:
    r = api.post(f"/api/v1/namespaces/{ns}/resourcequotas", json={"metadata": {"name": "q"},
                                                                  "spec": {"hard": {"pods": "1"}}})
    assert r.status_code == 201, r.text
    quota = r.json()
    quota["status"] = {"hard": {"pods": "1"}, "used": {"pods": "1"}}
    assert api.put(f"/api/v1/namespaces/{ns}/resourcequotas/q/status", json=quota).status_code == 200
    for name in ("a", "b"):
        r = api.post(f"/api/v1/namespaces/{ns}/pods", json=pod(name))
        assert r.status_code == 201, r.text
    assert api.get(f"/api/v1/namespaces/{ns}/resourcequotas/q").json()["status"]["used"] == {"pods": "1"}


def test_disabled_pod_plugins_add_nothing_and_always_pull_images_runs(api: httpx.Client, ns: str) -> None:
    r = api.post(f"/api/v1/namespaces/{ns}/pods", json=pod("p"))
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    assert not {"priority", "preemptionPolicy", "serviceAccountName", "tolerations"} & set(spec)
    assert spec["containers"][0]["imagePullPolicy"] == "Always"
    refused = api.post(f"/api/v1/namespaces/{ns}/pods", json={**pod("q"), "spec": {**pod("q")["spec"],
                                                                                      "priorityClassName": "nope"}})
    assert refused.status_code == 201, "without Priority nothing resolves the class"


def test_disabled_namespace_lifecycle_allows_missing_namespaces(api: httpx.Client) -> None:
    missing = f"nowhere-{uuid.uuid4().hex[:8]}"
    r = api.post(f"/api/v1/namespaces/{missing}/configmaps", json={"metadata": {"name": "cm"}})
    assert r.status_code == 201, r.text


def test_default_chain_still_refuses_a_missing_namespace(apiserver: str) -> None:
    missing = f"nowhere-{uuid.uuid4().hex[:8]}"
    r = httpx.post(f"{apiserver}/api/v1/namespaces/{missing}/configmaps", json={"metadata": {"name": "cm"}})
    assert r.status_code == 404 and r.json()["message"] == f'namespaces "{missing}" not found'


@pytest.mark.parametrize(("flag", "message"), [
    ("--enable-admission-plugins=AlwaysPullImages,NoSuchPlugin",
     'enable-admission-plugins plugin "NoSuchPlugin" is unknown'),
    ("--disable-admission-plugins=NoSuchPlugin", 'disable-admission-plugins plugin "NoSuchPlugin" is unknown'),
])
def test_unknown_plugin_is_a_usage_error(flag: str, message: str) -> None:
    run = subprocess.run([sys.executable, "-m", "apiserver", "--secure-port", "0", "--insecure-port", "1", flag],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == f"apiserver: error: {message}"
