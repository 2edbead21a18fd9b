"""Admission webhook benchmark: what one webhook adds to a create, and what the webhook plugins cost when
no webhook is configured.

Starts its own etcd, two apiservers (one as shipped, one with MutatingAdmissionWebhook,
ValidatingAdmissionPolicy and ValidatingAdmissionWebhook disabled, i.e. the chain before the plugins
existed) and the tests' HTTPS
webhook process behind a Service and EndpointSlice. Sequential pod creates from one keep-alive client,
in interleaved rounds so the machine's load hits every case alike; prints p50/p90 per case.
Run: python bench/webhook_admission.py [--creates 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.runtime.pki import create_ca, issue_serving_cert  # noqa: E402
from tests.conftest import REPO, free_port, start_apiserver, start_etcd_cluster  # noqa: E402

NS = "bench-webhooks"
PLUGINS = "MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook"
POLICY = {"metadata": {"name": "bench-policy"}, "spec": {
    "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                            "operations": ["CREATE"]}]},
    "validations": [{"expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))"}]}}
BINDING = {"metadata": {"name": "bench-policy"}, "spec": {"policyName": "bench-policy",
                                                          "validationActions": ["Deny"]}}


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def start_webhook(workdir: Path) -> tuple[subprocess.Popen[bytes], int, str]:
    ca = create_ca("bench-webhook-ca")
    serving = issue_serving_cert(ca, [f"webhook.{NS}.svc", "127.0.0.1"])
    serving.write(workdir / "tls.crt", workdir / "tls.key")
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "integration" / "webhook_server.py"), "127.0.0.1",
                             str(port), str(workdir / "tls.crt"), str(workdir / "tls.key")], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port, base64.b64encode(ca.cert_pem()).decode()


def setup(api: httpx.Client, port: int) -> None:
    api.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
    api.post(f"/api/v1/namespaces/{NS}/services", json={
        "metadata": {"name": "webhook"}, "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}})
    api.post(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices", json={
        "metadata": {"name": "webhook-1", "labels": {"kubernetes.io/service-name": "webhook"}},
        "addressType": "IPv4", "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}]})


def hook_config(kind: str, path: str, ca: str) -> tuple[str, dict[str, Any]]:
    collection = f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations"
    return collection, {"metadata": {"name": f"bench-{kind}"}, "webhooks": [{
        "name": f"{kind}.bench.pyk8s.io", "sideEffects": "None", "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"namespace": NS, "name": "webhook", "path": path}, "caBundle": ca},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]}]}


def creates(api: httpx.Client, count: int, tag: str) -> list[float]:
    times = []
    for i in range(count):
        body = {"metadata": {"name": f"{tag}-{i}"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        started = time.perf_counter()
        r = api.post(f"/api/v1/namespaces/{NS}/pods", json=body)
        times.append(time.perf_counter() - started)
        if r.status_code != 201:
            raise RuntimeError(r.text)
    return times


def wait_active(api: httpx.Client, label: str | None) -> None:
    """Until a create shows the webhook took effect (the mutating one labels, the validating one is called)."""
    deadline = time.monotonic() + 20
    i = 0
    while time.monotonic() < deadline:
        i += 1
        r = api.post(f"/api/v1/namespaces/{NS}/pods", json={"metadata": {"name": f"probe-{label}-{i}"},
                                                             "spec": {"containers": [{"name": "c", "image": "b"}]}})
        if label is None or (r.json()["metadata"].get("labels") or {}).get("mutated-by") == label:
            return
        time.sleep(0.1)
    raise RuntimeError("webhook never took effect")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--creates", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="pyk8s-bench-webhooks-"))
    members = start_etcd_cluster(1, workdir / "etcd")
    shipped = start_apiserver([members[0].client_url], workdir / "shipped")
    without = start_apiserver([members[0].client_url], workdir / "without", f"--disable-admission-plugins={PLUGINS}")
    proc, port, ca = start_webhook(workdir)
    results: dict[str, list[float]] = {k: [] for k in ("plugins off", "plugins on, no webhook",
                                                       "one validating webhook", "one mutating webhook",
                                                       "one validating policy")}
    try:
        with httpx.Client(base_url=shipped.url, timeout=30) as api, \
                httpx.Client(base_url=without.url, timeout=30) as off:
            setup(api, port)
            wait_active(api, None)
            for r in range(args.rounds):
                results["plugins off"] += creates(off, args.creates, f"off-{r}")
                results["plugins on, no webhook"] += creates(api, args.creates, f"on-{r}")
                collection, body = hook_config("validating", "/validate", ca)
                api.post(collection, json=body)
                time.sleep(0.5)
                results["one validating webhook"] += creates(api, args.creates, f"val-{r}")
                api.delete(f"{collection}/{body['metadata']['name']}")
                collection, body = hook_config("mutating", "/mutate", ca)
                api.post(collection, json=body)
                wait_active(api, "test-webhook")
                results["one mutating webhook"] += creates(api, args.creates, f"mut-{r}")
                api.delete(f"{collection}/{body['metadata']['name']}")
                policies = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
                bindings = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
                api.post(policies, json=POLICY)
                api.post(bindings, json=BINDING)
                time.sleep(0.5)
                results["one validating policy"] += creates(api, args.creates, f"pol-{r}")
                api.delete(f"{bindings}/bench-policy")
                api.delete(f"{policies}/bench-policy")
                time.sleep(0.5)
    finally:
        proc.kill()
        shipped.stop()
        without.stop()
        for m in members:
            m.kill()
    base = statistics.median(results["plugins on, no webhook"])
    for name, times in results.items():
        p50 = statistics.median(times)
        print(f"{name:26s} n={len(times):5d}  p50 {p50 * 1000:6.2f} ms  p90 {pct(times, 0.9) * 1000:6.2f} ms"
              f"  p50 vs no webhook {1000 * (p50 - base):+6.2f} ms")


if __name__ == "__main__":
    main()
