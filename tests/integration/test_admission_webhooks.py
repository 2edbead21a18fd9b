"""Admission webhooks against a real apiserver, etcd and a real webhook: an HTTPS server process the tests
start, with a certificate of their own CA, reached through a Service and its EndpointSlice (the
apiserver resolves it to the endpoint) or by URL. kubectl shows what the webhooks answer.

Every configuration here only matches namespaces labelled for its own test, and is deleted after it,
so the session's other tests never meet these webhooks.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.runtime.pki import create_ca, issue_serving_cert
from tests.conftest import REPO, Kubectl, free_port, start_apiserver

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
MUTATING = f"{ADMISSION}/mutatingwebhookconfigurations"
VALIDATING = f"{ADMISSION}/validatingwebhookconfigurations"
SERVER = REPO / "tests" / "integration" / "webhook_server.py"


@dataclass
class WebhookServer:
    port: int
    ca_pem: bytes
    ca_file: Path
    namespace: str
    service: str = "webhook"

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def calls(self) -> list[dict[str, Any]]:
        return httpx.get(self.url("/calls"), verify=ssl.create_default_context(cafile=self.ca_file), timeout=10).json()

    def client_config(self, path: str, by_url: bool = False) -> dict[str, Any]:
        if by_url:
            return {"url": self.url(path), "caBundle": self.ca_bundle}
        return {"service": {"namespace": self.namespace, "name": self.service, "path": path, "port": 443},
                "caBundle": self.ca_bundle}


@pytest.fixture
def api(apiserver: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=apiserver, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def webhook(apiserver: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServer]:
    """The webhook process, and the Service + EndpointSlice in front of it."""
    namespace = f"webhook-system-{os.getpid() % 10000}"
    workdir = tmp_path_factory.mktemp("webhook")
    ca = create_ca("webhook-test-ca")
    serving = issue_serving_cert(ca, [f"webhook.{namespace}.svc", "127.0.0.1"])
    serving.write(workdir / "tls.crt", workdir / "tls.key")
    (workdir / "ca.crt").write_bytes(ca.cert_pem())
    port = free_port()
    log = open(workdir / "server.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([sys.executable, str(SERVER), "127.0.0.1", str(port), str(workdir / "tls.crt"),
                             str(workdir / "tls.key")], cwd=REPO, stdout=log, stderr=log)
    server = WebhookServer(port, ca.cert_pem(), workdir / "ca.crt", namespace)
    deadline = time.monotonic() + 20
    while True:
        try:
            server.calls()
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError((workdir / "server.log").read_text()) from None
            time.sleep(0.1)
    with httpx.Client(base_url=apiserver, timeout=30) as client:
        assert client.post("/api/v1/namespaces", json={"metadata": {"name": namespace}}).status_code == 201
        assert client.post(f"/api/v1/namespaces/{namespace}/services", json={
            "metadata": {"name": "webhook"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}).status_code == 201
        assert client.post(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", json={
            "metadata": {"name": "webhook-1", "labels": {"kubernetes.io/service-name": "webhook"}},
            "addressType": "IPv4", "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}]}).status_code == 201
        yield server
        client.delete(f"/api/v1/namespaces/{namespace}")
    proc.kill()
    proc.wait()
    log.close()


@pytest.fixture
def scoped(api: httpx.Client, unique_ns: str) -> Iterator[tuple[str, Callable[..., str]]]:
    """The test's namespace, labelled for its webhooks, and a maker of configurations matching only it
    (deleted after the test)."""
    label = uuid.uuid4().hex[:12]
    r = api.patch(f"/api/v1/namespaces/{unique_ns}", json={"metadata": {"labels": {"webhook-test": label}}},
                  headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    made: list[str] = []

    def make(kind: str, name: str, client_config: dict[str, Any], *, resources: tuple[str, ...] = ("pods",),
             operations: tuple[str, ...] = ("CREATE",), **extra: Any) -> str:
        collection = MUTATING if kind == "mutating" else VALIDATING
        hook = {"name": f"{name}.webhooks.pyk8s.io", "clientConfig": client_config,
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": list(resources),
                           "operations": list(operations)}],
                "namespaceSelector": {"matchLabels": {"webhook-test": label}},
                "sideEffects": "None", "admissionReviewVersions": ["v1"], **extra}
        config_name = f"{name}-{label}"
        body = {"metadata": {"name": config_name}, "webhooks": [hook]}
        r = api.post(collection, json=body)
        assert r.status_code == 201, r.text
        made.append(f"{collection}/{config_name}")
        return config_name

    yield unique_ns, make
    for path in made:
        api.delete(path)


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def _until(check: Callable[[], Any], limit: float = 20) -> Any:
    """Webhook configurations take effect once the apiserver's watch cache has them: wait for that."""
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def _create_until_mutated(api: httpx.Client, ns: str, prefix: str) -> httpx.Response:
    count = iter(range(10_000))

    def attempt() -> httpx.Response | None:
        r = api.post(f"/api/v1/namespaces/{ns}/pods", json=_pod(f"{prefix}-{next(count)}"))
        assert r.status_code == 201, r.text
        return r if r.json()["metadata"]["labels"].get("mutated-by") == "test-webhook" else None

    r = _until(attempt)
    assert r is not None, "the mutating webhook never took effect"
    return r


def test_webhook_configuration_validation_and_defaults(api: httpx.Client, kubectl: Kubectl) -> None:
    bad = {"metadata": {"name": "bad-hooks"}, "webhooks": [
        {"name": "nodots", "clientConfig": {"url": "http://example.com/x?y=1"},
         "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["EXPLODE"]}],
         "sideEffects": "Some", "admissionReviewVersions": ["v2"], "timeoutSeconds": 31,
         "matchConditions": [{"name": "c", "expression": "object.metadata.name ==="}]},
    ]}
    r = api.post(VALIDATING, json=bad)
    assert r.status_code == 422, r.text
    status = r.json()
    assert status["reason"] == "Invalid" and status["details"]["kind"] == "ValidatingWebhookConfiguration"
    fields = {c["field"] for c in status["details"]["causes"]}
    assert {"webhooks[0].name", "webhooks[0].clientConfig.url", "webhooks[0].rules[0].operations[0]",
            "webhooks[0].sideEffects", "webhooks[0].admissionReviewVersions", "webhooks[0].timeoutSeconds",
            "webhooks[0].matchConditions[0].expression"} <= fields, fields
    assert any("'https' is the only allowed URL scheme" in c["message"] for c in status["details"]["causes"])
    assert api.get(f"{VALIDATING}/bad-hooks").status_code == 404

    good = {"metadata": {"name": "defaults-check"}, "webhooks": [
        {"name": "defaults.webhooks.pyk8s.io", "sideEffects": "None", "admissionReviewVersions": ["v1"],
         "clientConfig": {"service": {"namespace": "default", "name": "nowhere"}},
         "rules": [{"apiGroups": ["nothing.pyk8s.io"], "apiVersions": ["v1"], "resources": ["*"],
                    "operations": ["*"]}]}]}
    r = api.post(MUTATING, json=good)
    assert r.status_code == 201, r.text
    try:
        hook = r.json()["webhooks"][0]
        assert hook["failurePolicy"] == "Fail" and hook["matchPolicy"] == "Equivalent"
        assert hook["timeoutSeconds"] == 10 and hook["reinvocationPolicy"] == "Never"
        assert hook["namespaceSelector"] == {} and hook["objectSelector"] == {}
        assert hook["rules"][0]["scope"] == "*" and hook["clientConfig"]["service"]["port"] == 443
        out = kubectl.run("get", "mutatingwebhookconfigurations", "defaults-check").stdout
        assert out.split("\n")[0].split() == ["NAME", "WEBHOOKS", "AGE"] and out.split("\n")[1].split()[1] == "1"
        resources = kubectl.run("api-resources", "--api-group=admissionregistration.k8s.io", "-o", "wide").stdout
        assert "mutatingwebhookconfigurations" in resources and "validatingwebhookconfigurations" in resources
    finally:
        api.delete(f"{MUTATING}/defaults-check")


def test_webhook_mutates_pods_and_rejects_a_bad_one(
    api: httpx.Client, kubectl: Kubectl, webhook: WebhookServer, scoped: tuple[str, Callable[..., str]],
) -> None:
    ns, make = scoped
    make("mutating", "mutate", webhook.client_config("/mutate"))
    make("validating", "validate", webhook.client_config("/validate", by_url=True))
    r = _create_until_mutated(api, ns, "good")
    assert r.headers.get("warning") == '299 - "mutated by the test webhook"', r.headers
    # The mutation went through the Service: the apiserver resolved it to the EndpointSlice's address and
    # named the Service in TLS, with upstream's timeout query.
    calls = [c for c in webhook.calls() if c["path"] == "/mutate" and c["namespace"] == ns]
    assert all(c["restartPolicy"] == "Always" for c in calls), "webhooks see the defaulted object"
    assert calls and calls[-1]["operation"] == "CREATE" and calls[-1]["kind"] == "Pod"
    assert calls[-1]["query"] == "timeout=10s" and calls[-1]["host"] == f"webhook.{webhook.namespace}.svc:443"

    def bad_refused() -> subprocess.CompletedProcess[str] | None:
        out = kubectl.run("create", "-n", ns, "-f", "-", stdin=json.dumps(_pod("evil", bad="true")), check=False)
        return out if out.returncode != 0 else None

    out = _until(bad_refused)
    assert out is not None, "the validating webhook never took effect"
    assert ('Error from server: error when creating "STDIN": admission webhook '
            '"validate.webhooks.pyk8s.io" denied the request: objects labelled bad=true are not allowed'
            ) in out.stderr, out.stderr
    assert "Warning: mutated by the test webhook" in out.stderr
    r = api.post(f"/api/v1/namespaces/{ns}/pods", json=_pod("evil", bad="true"))
    assert r.status_code == 403
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": 'admission webhook "validate.webhooks.pyk8s.io" denied the request: objects '
                                   "labelled bad=true are not allowed", "code": 403}
    assert api.get(f"/api/v1/namespaces/{ns}/pods/evil").status_code == 404

    # A dry run calls side-effect-free webhooks too, and stores nothing.
    r = api.post(f"/api/v1/namespaces/{ns}/pods?dryRun=All", json=_pod("dry"))
    assert r.status_code == 201 and r.json()["metadata"]["labels"]["mutated-by"] == "test-webhook"
    assert api.get(f"/api/v1/namespaces/{ns}/pods/dry").status_code == 404
    assert any(c["name"] == "dry" and c["dryRun"] is True for c in webhook.calls())


def test_failure_policy_and_timeout(
    api: httpx.Client, kubectl: Kubectl, webhook: WebhookServer, scoped: tuple[str, Callable[..., str]],
) -> None:
    ns, make = scoped
    closed = free_port()
    ignored = make("validating", "slow-ignored", webhook.client_config("/slow"), failurePolicy="Ignore",
                   timeoutSeconds=1)
    make("validating", "refused-ignored", {"url": f"https://127.0.0.1:{closed}/x", "caBundle": webhook.ca_bundle},
         failurePolicy="Ignore")

    def slow_called() -> bool:
        api.post(f"/api/v1/namespaces/{ns}/pods", json=_pod(f"w-{uuid.uuid4().hex[:6]}"))
        return any(c["path"] == "/slow" and c["namespace"] == ns for c in webhook.calls())

    assert _until(slow_called), "the slow webhook never took effect"
    started = time.monotonic()
    r = api.post(f"/api/v1/namespaces/{ns}/pods", json=_pod("despite-slow"))
    took = time.monotonic() - started
    assert r.status_code == 201, r.text
    assert 0.9 <= took < 4, took
    api.delete(f"{VALIDATING}/{ignored}")

    make("validating", "slow-fail", webhook.client_config("/slow"), failurePolicy="Fail", timeoutSeconds=1)

    def refused() -> httpx.Response | None:
        r = api.post(f"/api/v1/namespaces/{ns}/pods", json=_pod(f"p-{uuid.uuid4().hex[:6]}"))
        return r if r.status_code == 500 else None

    r = _until(refused)
    assert r is not None
    name = "slow-fail.webhooks.pyk8s.io"
    shown = f"https://webhook.{webhook.namespace}.svc:443/slow?timeout=1s"
    text = f'failed calling webhook "{name}": failed to call webhook: Post "{shown}": context deadline exceeded'
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": f"Internal error occurred: {text}", "reason": "InternalError",
                        "details": {"causes": [{"message": text}]}, "code": 500}
    metrics = api.get("/metrics").text
    assert 'apiserver_admission_webhook_fail_open_count_total{name="slow-ignored.webhooks.pyk8s.io",' \
           'type="validating"}' in metrics
    assert 'apiserver_admission_webhook_rejection_count_total{error_type="calling_webhook_error",' \
           f'name="{name}",operation="CREATE",rejection_code="500",type="validating"}}' in metrics

    def refused_by_closed_port() -> subprocess.CompletedProcess[str] | None:
        out = kubectl.run("create", "configmap", "-n", ns, f"cm-{uuid.uuid4().hex[:6]}", check=False)
        return out if "connection refused" in out.stderr else None

    make("mutating", "cm-closed", {"url": f"https://127.0.0.1:{closed}/x", "caBundle": webhook.ca_bundle},
         resources=("configmaps",))
    out = _until(refused_by_closed_port)
    assert out is not None
    assert 'failed calling webhook "cm-closed.webhooks.pyk8s.io": failed to call webhook: Post ' \
           f'"https://127.0.0.1:{closed}/x?timeout=10s"' in out.stderr, out.stderr


def test_selectors_and_match_conditions(
    api: httpx.Client, webhook: WebhookServer, scoped: tuple[str, Callable[..., str]],
) -> None:
    ns, make = scoped
    make("mutating", "selected", webhook.client_config("/mutate"),
         objectSelector={"matchExpressions": [{"key": "skip-me", "operator": "DoesNotExist"}]},
         matchConditions=[{"name": "not-excluded", "expression": "!object.metadata.name.startsWith('plain-')"},
                          {"name": "creates", "expression": "request.operation == 'CREATE'"}])
    _create_until_mutated(api, ns, "picked")
    r = api.post(f"/api/v1/namespaces/{ns}/pods", json=_pod("by-label", **{"skip-me": "yes"}))
    assert r.status_code == 201 and "mutated-by" not in r.json()["metadata"]["labels"]
    r = api.post(f"/api/v1/namespaces/{ns}/pods", json=_pod("plain-pod"))
    assert r.status_code == 201 and "mutated-by" not in (r.json()["metadata"].get("labels") or {})
    seen = {c["name"] for c in webhook.calls() if c["namespace"] == ns}
    assert "by-label" not in seen and "plain-pod" not in seen
    # Another namespace is outside the namespaceSelector.
    r = api.post("/api/v1/namespaces/default/pods", json=_pod(f"elsewhere-{uuid.uuid4().hex[:6]}"))
    assert r.status_code == 201 and "mutated-by" not in (r.json()["metadata"].get("labels") or {})
    api.delete(f"/api/v1/namespaces/default/pods/{r.json()['metadata']['name']}?gracePeriodSeconds=0")

    # A condition that errors at run time (no such key) fails closed under failurePolicy Fail.
    make("validating", "broken-condition", webhook.client_config("/validate"),
         matchConditions=[{"name": "missing", "expression": "object.spec.nothere == 'x'"}])

    def refused() -> httpx.Response | None:
        r = api.post(f"/api/v1/namespaces/{ns}/pods", json=_pod(f"c-{uuid.uuid4().hex[:6]}"))
        return r if r.status_code == 500 else None

    r = _until(refused)
    assert r is not None
    assert "failed to evaluate match conditions: expression 'missing' resulted in error: no such key: nothere" \
        in r.json()["message"], r.json()


def test_deletes_subresources_and_reinvocation(
    api: httpx.Client, webhook: WebhookServer, scoped: tuple[str, Callable[..., str]],
) -> None:
    ns, make = scoped
    make("validating", "guard", webhook.client_config("/validate"), resources=("configmaps", "pods/status"),
         operations=("DELETE", "UPDATE"))
    make("mutating", "a-stamp", webhook.client_config("/stamp"), reinvocationPolicy="IfNeeded")
    make("mutating", "b-label", webhook.client_config("/label-later"))
    make("mutating", "c-strip", webhook.client_config("/strip-tolerations"))
    r = api.post(f"/api/v1/namespaces/{ns}/configmaps",
                 json={"metadata": {"name": "keep", "labels": {"protected": "true"}}})
    assert r.status_code == 201

    def delete_refused() -> httpx.Response | None:
        r = api.delete(f"/api/v1/namespaces/{ns}/configmaps/keep")
        return r if r.status_code == 400 else None

    r = _until(delete_refused)
    assert r is not None, "the delete webhook never took effect"
    assert r.json()["message"] == 'admission webhook "guard.webhooks.pyk8s.io" denied the request: protected ' \
                                  "objects stay"
    assert api.get(f"/api/v1/namespaces/{ns}/configmaps/keep").status_code == 200
    assert any(c["operation"] == "DELETE" and c["name"] == "keep" and c["hasOld"] for c in webhook.calls())

    # The stamping webhook ran first, then was called again because the later webhook added a label.
    def stamped() -> dict[str, Any] | None:
        r = api.post(f"/api/v1/namespaces/{ns}/pods", json=_pod(f"s-{uuid.uuid4().hex[:6]}", app="x"))
        assert r.status_code == 201, r.text
        meta = r.json()["metadata"]
        return meta if meta.get("annotations", {}).get("stamp") == "added-later,app" else None

    meta = _until(stamped)
    assert meta is not None, "the reinvoked webhook never saw the later label"
    # The webhooks changed the pod, so the built-in plugins ran once more: DefaultTolerationSeconds put back
    # the tolerations the last webhook took away.
    tolerations = api.get(f"/api/v1/namespaces/{ns}/pods/{meta['name']}").json()["spec"]["tolerations"]
    assert {t["key"] for t in tolerations} == {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}

    # pods/status goes through the webhooks as a subresource (the guard does not see pod creates).
    r = api.post(f"/api/v1/namespaces/{ns}/pods", json=_pod("flagged", bad="true"))
    assert r.status_code == 201, r.text
    pod = r.json()
    pod["status"] = {"phase": "Pending", "message": "x"}
    r = api.put(f"/api/v1/namespaces/{ns}/pods/flagged/status", json=pod)
    assert r.status_code == 403, r.text
    assert any(c["subResource"] == "status" and c["name"] == "flagged" for c in webhook.calls())


POLICIES = f"{ADMISSION}/validatingadmissionpolicies"
BINDINGS = f"{ADMISSION}/validatingadmissionpolicybindings"


@pytest.fixture
def policies(api: httpx.Client, unique_ns: str) -> Iterator[tuple[str, str, Callable[[str, dict[str, Any]], None]]]:
    """The test's namespace, the label its policies select it by, and a maker of policies and bindings
    (deleted after the test)."""
    label = uuid.uuid4().hex[:12]
    r = api.patch(f"/api/v1/namespaces/{unique_ns}", json={"metadata": {"labels": {"policy-test": label}}},
                  headers={"content-type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    made: list[str] = []

    def make(collection: str, body: dict[str, Any]) -> None:
        r = api.post(collection, json=body)
        assert r.status_code == 201, r.text
        made.append(f"{collection}/{body['metadata']['name']}")

    yield unique_ns, label, make
    for path in reversed(made):
        api.delete(path)


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}}}


def test_validating_admission_policy_denies_and_warns(
    api: httpx.Client, kubectl: Kubectl, policies: tuple[str, str, Callable[[str, dict[str, Any]], None]],
) -> None:
    ns, label, make = policies
    bad = {"metadata": {"name": f"bad-{label}"}, "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                "resources": ["deployments"], "operations": ["CREATE"]}]},
        "validations": [{"expression": "object.spec.replicas <="}]}}
    r = api.post(POLICIES, json=bad)
    assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "spec.validations[0].expression"
    r = api.post(BINDINGS, json={"metadata": {"name": f"bad-{label}"}, "spec": {
        "policyName": "x", "validationActions": ["Deny", "Warn"]}})
    assert r.status_code == 422 and "must not contain both Deny and Warn" in r.text, r.text

    limit = f"replica-limit-{label}"
    make(POLICIES, {"metadata": {"name": limit}, "spec": {
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {"namespaceSelector": {"matchLabels": {"policy-test": label}},
                             "resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                "resources": ["deployments"], "operations": ["CREATE", "UPDATE"]}]},
        "variables": [{"name": "limit", "expression": "int(params.data.maxReplicas)"}],
        "validations": [{"expression": "object.spec.replicas <= variables.limit",
                         "messageExpression": "'replicas must be no greater than ' + string(variables.limit)"}]}})
    make(BINDINGS, {"metadata": {"name": limit}, "spec": {
        "policyName": limit, "validationActions": ["Deny"],
        "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}})
    assert api.post(f"/api/v1/namespaces/{ns}/configmaps",
                    json={"metadata": {"name": "limits"}, "data": {"maxReplicas": "5"}}).status_code == 201
    # The status controller type-checked the policy against Deployments and ConfigMaps: nothing to report.
    checked = _until(lambda: api.get(f"{POLICIES}/{limit}").json().get("status", {}).get("observedGeneration"))
    assert checked == 1 and api.get(f"{POLICIES}/{limit}").json()["status"]["typeChecking"] == {}
    table = kubectl.run("get", "validatingadmissionpolicybindings", limit).stdout.split("\n")
    assert table[0].split() == ["NAME", "POLICYNAME", "PARAMREF", "AGE"] and table[1].split()[1:3] == [limit,
                                                                                                      "*/limits"]

    def denied() -> subprocess.CompletedProcess[str] | None:
        out = kubectl.run("create", "-n", ns, "-f", "-", stdin=json.dumps(_deployment("big", 10)), check=False)
        return out if out.returncode != 0 else None

    out = _until(denied)
    assert out is not None, "the policy never took effect"
    message = (f"ValidatingAdmissionPolicy '{limit}' with binding '{limit}' denied request: replicas must be no "
               "greater than 5")
    assert f'The deployments "big" is invalid: : {message}' in out.stderr, out.stderr
    r = api.post(f"/apis/apps/v1/namespaces/{ns}/deployments", json=_deployment("big", 10))
    assert r.status_code == 422
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": f'deployments.apps "big" is forbidden: {message}', "reason": "Invalid",
                        "details": {"name": "big", "group": "apps", "kind": "deployments",
                                    "causes": [{"message": message}]}, "code": 422}
    assert api.post(f"/apis/apps/v1/namespaces/{ns}/deployments", json=_deployment("small", 3)).status_code == 201

    # Without its param the binding fails closed (failurePolicy Fail), by its actions.
    assert api.delete(f"/api/v1/namespaces/{ns}/configmaps/limits").status_code == 200

    def param_missing() -> httpx.Response | None:
        r = api.post(f"/apis/apps/v1/namespaces/{ns}/deployments", json=_deployment(f"d-{uuid.uuid4().hex[:6]}", 1))
        return r if r.status_code == 422 else None

    r = _until(param_missing)
    assert r is not None and "no params found for policy binding with `Deny` parameterNotFoundAction" in \
        r.json()["message"], r

    typo = f"typo-{label}"
    make(POLICIES, {"metadata": {"name": typo}, "spec": {
        "matchConstraints": {"namespaceSelector": {"matchLabels": {"policy-test": label}},
                             "resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                "resources": ["deployments"], "operations": ["CREATE"]}]},
        "validations": [{"expression": "object.replicas > 1"}]}})
    status = _until(lambda: api.get(f"{POLICIES}/{typo}").json().get("status", {}).get("typeChecking"))
    assert status == {"expressionWarnings": [{
        "fieldRef": "spec.validations[0].expression",
        "warning": "apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'replicas'\n"
                   " | object.replicas > 1\n | ......^"}]}, status

    latest = f"no-latest-{label}"
    make(POLICIES, {"metadata": {"name": latest}, "spec": {
        "matchConstraints": {"namespaceSelector": {"matchLabels": {"policy-test": label}},
                             "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                                "operations": ["CREATE"]}]},
        "matchConditions": [{"name": "not-exempt", "expression": "!('exempt' in object.metadata.labels)"}],
        "validations": [{"expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
                         "message": "the latest tag is discouraged"}]}})
    make(BINDINGS, {"metadata": {"name": latest}, "spec": {"policyName": latest,
                                                           "validationActions": ["Warn", "Audit"]}})
    warning = (f"299 - \"Validation failed for ValidatingAdmissionPolicy '{latest}' with binding '{latest}': the "
               'latest tag is discouraged"')

    def warned() -> httpx.Response | None:
        body = _pod(f"l-{uuid.uuid4().hex[:6]}", app="x")
        body["spec"]["containers"][0]["image"] = "busybox:latest"
        r = api.post(f"/api/v1/namespaces/{ns}/pods", json=body)
        assert r.status_code == 201, r.text
        return r if r.headers.get("warning") == warning else None

    assert _until(warned) is not None, "the warning never came"
    body = _pod("exempted", exempt="yes")
    body["spec"]["containers"][0]["image"] = "busybox:latest"
    r = api.post(f"/api/v1/namespaces/{ns}/pods", json=body)
    assert r.status_code == 201 and "warning" not in r.headers


AUDIT_POLICY = """
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create]
  resources: [{group: "", resources: [pods]}]
- level: None
"""


def test_webhook_and_policy_audit_annotations(etcd_server: str, workdir: Path, webhook: WebhookServer) -> None:
    """What webhooks and Audit bindings annotate lands in the request's audit event."""
    root = workdir / "webhook-audit"
    root.mkdir(parents=True, exist_ok=True)
    (root / "policy.yaml").write_text(AUDIT_POLICY)
    log = root / "audit.log"
    server = start_apiserver([etcd_server], root, "--etcd-prefix", f"/webhook-audit-{uuid.uuid4().hex[:8]}",
                             "--audit-policy-file", str(root / "policy.yaml"), "--audit-log-path", str(log))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            r = api.post(MUTATING, json={"metadata": {"name": "audit"}, "webhooks": [{
                "name": "audit.webhooks.pyk8s.io", "clientConfig": webhook.client_config("/mutate", by_url=True),
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
                "sideEffects": "None", "admissionReviewVersions": ["v1"]}]})
            assert r.status_code == 201, r.text
            r = api.post(POLICIES, json={"metadata": {"name": "audited"}, "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                        "resources": ["pods"], "operations": ["CREATE"]}]},
                "validations": [{"expression": "object.metadata.name != 'noted'", "message": "noted pod"}],
                "auditAnnotations": [{"key": "image", "valueExpression": "object.spec.containers[0].image"}]}})
            assert r.status_code == 201, r.text
            r = api.post(BINDINGS, json={"metadata": {"name": "audited"}, "spec": {
                "policyName": "audited", "validationActions": ["Audit"]}})
            assert r.status_code == 201, r.text

            def annotated() -> dict[str, str] | None:
                name = f"noted-{uuid.uuid4().hex[:4]}"
                r = api.post("/api/v1/namespaces/default/pods", json=_pod(name))
                assert r.status_code == 201, r.text
                r = api.post("/api/v1/namespaces/default/pods", json=_pod("noted"))
                api.delete("/api/v1/namespaces/default/pods/noted?gracePeriodSeconds=0")
                events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
                found = [e.get("annotations") or {} for e in events if (e.get("objectRef") or {}).get("name")
                         == "noted" and e["stage"] == "ResponseComplete"]
                return found[-1] if found and any(
                    k.startswith("validation.policy") for k in found[-1]) else None

            notes = _until(annotated)
            assert notes is not None, "no annotated audit event"
            assert notes["audit.webhooks.pyk8s.io/mutated"] == "yes"
            assert json.loads(notes["mutation.webhook.admission.k8s.io/round_0_index_0"]) == {
                "configuration": "audit", "webhook": "audit.webhooks.pyk8s.io", "mutated": True}
            assert notes["audited/image"] == "busybox"
            assert json.loads(notes["validation.policy.admission.k8s.io/validation_failure"]) == [{
                "message": "noted pod", "policy": "audited", "binding": "audited", "expressionIndex": 0,
                "validationActions": ["Audit"]}]
    finally:
        server.stop()


GADGETS = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "gadgets.webhooks.pyk8s.io"},
           "spec": {"group": "webhooks.pyk8s.io", "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                    "versions": [{"name": v, "served": True, "storage": v == "v1", "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
                        for v in ("v1", "v1beta1")]}}


def test_webhooks_on_custom_resources_and_equivalent_versions(
    api: httpx.Client, kubectl: Kubectl, webhook: WebhookServer, scoped: tuple[str, Callable[..., str]],
) -> None:
    ns, make = scoped
    kubectl.run("apply", "-f", "-", stdin=json.dumps(GADGETS))
    try:
        assert _until(lambda: api.get("/apis/webhooks.pyk8s.io/v1beta1").status_code == 200)
        rules = [{"apiGroups": ["webhooks.pyk8s.io"], "apiVersions": ["v1"], "resources": ["gadgets"],
                  "operations": ["CREATE"]}]
        make("mutating", "gadgets", webhook.client_config("/mutate"), rules=rules)

        def mutated() -> dict[str, Any] | None:
            body = {"apiVersion": "webhooks.pyk8s.io/v1beta1", "kind": "Gadget",
                    "metadata": {"generateName": "g-"}, "spec": {"size": 1}}
            r = api.post(f"/apis/webhooks.pyk8s.io/v1beta1/namespaces/{ns}/gadgets", json=body)
            assert r.status_code == 201, r.text
            return r.json() if (r.json()["metadata"].get("labels") or {}).get("mutated-by") else None

        gadget = _until(mutated)
        assert gadget is not None, "the webhook never saw the custom resource"
        call = next(c for c in webhook.calls() if c["kind"] == "Gadget" and c["name"] == gadget["metadata"]["name"])
        assert (call["version"], call["requestVersion"]) == ("v1", "v1beta1")
        # The webhook got the object in the version its rules name; the client gets its own back, patched.
        assert call["objectVersion"] == "webhooks.pyk8s.io/v1" and gadget["apiVersion"] == "webhooks.pyk8s.io/v1beta1"
        make("validating", "gadgets-exact", webhook.client_config("/validate"), matchPolicy="Exact",
             rules=[{**rules[0], "operations": ["DELETE"]}])
        r = api.post(f"/apis/webhooks.pyk8s.io/v1/namespaces/{ns}/gadgets", json={
            "apiVersion": "webhooks.pyk8s.io/v1", "kind": "Gadget", "metadata": {"name": "kept", "labels": {
                "protected": "true"}}})
        assert r.status_code == 201

        def refused() -> httpx.Response | None:
            r = api.delete(f"/apis/webhooks.pyk8s.io/v1/namespaces/{ns}/gadgets/kept?dryRun=All")
            return r if r.status_code == 400 else None

        assert _until(refused) is not None, "the delete webhook never took effect"
        # matchPolicy Exact: a delete through v1beta1 is not the v1 the rules name.
        assert api.delete(f"/apis/webhooks.pyk8s.io/v1beta1/namespaces/{ns}/gadgets/kept").status_code == 200
    finally:
        api.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.webhooks.pyk8s.io")
