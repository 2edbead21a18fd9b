"""API aggregation against a real apiserver, etcd, kubectl and a small extension apiserver process
(tests/integration/extension/wardle.py) that trusts only the front proxy's client certificate."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.runtime import pki
from tests.conftest import REPO, APIServerProcess, Kubectl, free_port, start_apiserver
from tests.integration.extension.frontproxy import front_proxy_flags

APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"
WARDLE = "v1alpha1.wardle.pyk8s.io"


@dataclass
class Aggregated:
    url: str
    kubectl: Kubectl
    namespace: str
    wardle_port: int
    wardle_ca: pki.CertKey
    apiserver: APIServerProcess


def _wait(check: Any, timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(0.2)


def _condition(url: str, name: str) -> dict[str, Any] | None:
    obj = httpx.get(f"{url}{APISERVICES}/{name}").json()
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "Available"), None)


def _apiservice(name: str, group: str, namespace: str, service: str, ca: bytes | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": group, "version": name.split(".", 1)[0], "groupPriorityMinimum": 1000,
                            "versionPriority": 15, "service": {"namespace": namespace, "name": service}}
    if ca is not None:
        spec["caBundle"] = base64.b64encode(ca).decode()
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def aggregated(etcd_server: str, workdir: Path) -> Iterator[Aggregated]:
    root = workdir / f"aggregator-{uuid.uuid4().hex[:6]}"
    root.mkdir(parents=True)
    apiserver = start_apiserver([etcd_server], root, "--etcd-prefix", f"/agg-{uuid.uuid4().hex[:8]}",
                                *front_proxy_flags(root))
    url = apiserver.url
    kubeconfig = root / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": url}}], "users": [{"name": "t", "user": {}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}))
    namespace = "wardle"
    wardle_ca = pki.create_ca("wardle-ca")
    pki.issue_serving_cert(wardle_ca, [f"api.{namespace}.svc"]).write(root / "wardle.crt", root / "wardle.key")
    port = free_port()
    log = open(root / "wardle.log", "ab")  # noqa: SIM115 - handed to the child
    wardle = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.extension.wardle", "--apiserver", url, "--port", str(port),
         "--tls-cert-file", str(root / "wardle.crt"), "--tls-private-key-file", str(root / "wardle.key")],
        cwd=REPO, stdout=log, stderr=log)
    try:
        with httpx.Client(base_url=url) as c:
            assert c.post("/api/v1/namespaces", json={"metadata": {"name": namespace}}).status_code == 201
            assert c.post(f"/api/v1/namespaces/{namespace}/services", json={
                "metadata": {"name": "api"}, "spec": {"ports": [{"port": 443, "targetPort": port}]}}).status_code == 201
            assert c.post(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", json={
                "metadata": {"name": "api-1", "labels": {"kubernetes.io/service-name": "api"}},
                "addressType": "IPv4", "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
                "ports": [{"name": "", "port": port, "protocol": "TCP"}]}).status_code == 201
            r = c.post(APISERVICES, json=_apiservice(WARDLE, "wardle.pyk8s.io", namespace, "api",
                                                     wardle_ca.cert_pem()))
            assert r.status_code == 201, r.text
        _wait(lambda: (_condition(url, WARDLE) or {}).get("status") == "True", what="wardle Available")
        yield Aggregated(url, Kubectl(kubeconfig), namespace, port, wardle_ca, apiserver)
    finally:
        wardle.terminate()
        wardle.wait(10)
        apiserver.stop()


def test_extension_api_is_discovered_and_served_through_the_apiserver(aggregated: Aggregated) -> None:
    k = aggregated.kubectl
    out = k.run("api-resources", "--api-group=wardle.pyk8s.io").stdout
    assert "flunders" in out and "fl" in out and "wardle.pyk8s.io/v1alpha1" in out and "Flunder" in out, out
    groups = httpx.get(f"{aggregated.url}/apis").json()["groups"]
    wardle = next(g for g in groups if g["name"] == "wardle.pyk8s.io")
    assert wardle["preferredVersion"] == {"groupVersion": "wardle.pyk8s.io/v1alpha1", "version": "v1alpha1"}
    assert httpx.get(f"{aggregated.url}/apis/wardle.pyk8s.io").json()["kind"] == "APIGroup"
    listed = k.json("get", "flunders", "-n", aggregated.namespace)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["flunder-1"]
    # The extension apiserver learned the user from the front proxy's headers (the test listener's user).
    assert listed["items"][0]["metadata"]["annotations"]["wardle/user"] == "system:unsecured"
    # An impersonated user, groups and extra reach it as X-Remote-User/-Group/-Extra-.
    one = k.json("get", "flunder", "flunder-9", "-n", aggregated.namespace, "--as=jane", "--as-group=devs",
                 "--as-group=qa")
    notes = one["metadata"]["annotations"]
    assert notes["wardle/user"] == "jane"
    assert notes["wardle/groups"].split(",")[:2] == ["devs", "qa"]


def test_openapi_v3_includes_the_extension_documents(aggregated: Aggregated) -> None:
    index = httpx.get(f"{aggregated.url}/openapi/v3").json()["paths"]
    assert "apis/wardle.pyk8s.io/v1alpha1" in index and "apis/apps/v1" in index
    out = aggregated.kubectl.run("explain", "flunders").stdout
    assert "KIND:       Flunder" in out and "A flunder of the wardle test API." in out, out


def test_client_headers_cannot_claim_a_user(aggregated: Aggregated) -> None:
    r = httpx.get(f"{aggregated.url}/apis/wardle.pyk8s.io/v1alpha1/namespaces/wardle/flunders/x",
                  headers={"X-Remote-User": "mallory", "X-Remote-Group": "system:masters"})
    assert r.status_code == 200
    notes = r.json()["metadata"]["annotations"]
    assert notes["wardle/user"] == "system:unsecured" and "mallory" not in notes["wardle/groups"]


def test_extension_apiserver_refuses_requests_not_from_the_front_proxy(aggregated: Aggregated) -> None:
    direct = httpx.get(f"https://127.0.0.1:{aggregated.wardle_port}/apis/wardle.pyk8s.io/v1alpha1",
                       headers={"X-Remote-User": "mallory"}, verify=False)
    assert direct.status_code == 401


def test_watch_streams_through_the_proxy(aggregated: Aggregated) -> None:
    path = f"{aggregated.url}/apis/wardle.pyk8s.io/v1alpha1/namespaces/wardle/flunders?watch=1"
    seen: list[dict[str, Any]] = []
    started = time.monotonic()
    with httpx.stream("GET", path, timeout=httpx.Timeout(10, read=10)) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            seen.append(json.loads(line))
            if len(seen) == 3:
                break
        # Events arrive as the extension apiserver sends them (one per 0.5 s), not when the stream ends.
        assert [e["type"] for e in seen] == ["ADDED", "MODIFIED", "MODIFIED"]
        assert time.monotonic() - started < 8
        assert _open_watches(aggregated) == 1
    # The client left: the proxy closes its stream to the extension apiserver too.
    _wait(lambda: _open_watches(aggregated) == 0, 10, "the upstream watch to close")


def _open_watches(aggregated: Aggregated) -> int:
    r = httpx.get(f"{aggregated.url}/apis/wardle.pyk8s.io/v1alpha1/namespaces/wardle/flunders/count")
    return int(r.json()["metadata"]["annotations"]["wardle/open-watches"])


def test_available_condition_and_printer_columns(aggregated: Aggregated) -> None:
    url, ns = aggregated.url, aggregated.namespace
    other_ca = pki.create_ca("not-wardle")
    with httpx.Client(base_url=url) as c:
        r = c.post(APISERVICES, json=_apiservice("v1.badca.pyk8s.io", "badca.pyk8s.io", ns, "api",
                                                 other_ca.cert_pem()))
        assert r.status_code == 201, r.text
        assert c.post(APISERVICES, json=_apiservice("v1.nosvc.pyk8s.io", "nosvc.pyk8s.io", ns,
                                                    "missing")).status_code == 201
    bad = _wait(lambda: (c := _condition(url, "v1.badca.pyk8s.io")) and c["status"] == "False" and c,
                what="bad CA unavailable")
    assert bad["reason"] == "FailedDiscoveryCheck" and "https://127.0.0.1:" in bad["message"]
    missing = _wait(lambda: (c := _condition(url, "v1.nosvc.pyk8s.io")) and c["status"] == "False" and c,
                    what="missing service unavailable")
    assert missing["reason"] == "ServiceNotFound"
    assert missing["message"] == f'service/missing in "{ns}" is not present'
    unavailable = httpx.get(f"{url}/apis/nosvc.pyk8s.io/v1/foos")
    assert unavailable.status_code == 503 and unavailable.json()["reason"] == "ServiceUnavailable"
    table = aggregated.kubectl.run("get", "apiservices").stdout.splitlines()
    assert table[0].split() == ["NAME", "SERVICE", "AVAILABLE", "AGE"]
    rows = {line.split()[0]: line.split()[1:3] for line in table[1:]}
    assert rows[WARDLE] == [f"{ns}/api", "True"]
    assert rows["v1.nosvc.pyk8s.io"][0] == f"{ns}/missing"
    assert " ".join(line for line in table if line.startswith("v1.nosvc")).split()[2:4] == ["False",
                                                                                           "(ServiceNotFound)"]
    assert rows["v1.apps"] == ["Local", "True"]


def test_apiservice_validation_names_the_field(aggregated: Aggregated) -> None:
    body = _apiservice("v1.wrong.pyk8s.io", "right.pyk8s.io", "wardle", "api")
    body["spec"]["insecureSkipTLSVerify"] = True
    body["spec"]["caBundle"] = base64.b64encode(b"x").decode()
    r = httpx.post(f"{aggregated.url}{APISERVICES}", json=body)
    assert r.status_code == 422
    fields = {c["field"] for c in r.json()["details"]["causes"]}
    assert fields == {"metadata.name", "spec.insecureSkipTLSVerify"}
    assert 'must be v1.right.pyk8s.io' in r.text
