"""Kubelet TLS bootstrap and client-certificate rotation against a real etcd, a TLS apiserver with RBAC and
bootstrap-token authentication, and a real controller-manager signing and approving: a hollow kubelet given
only a bootstrap kubeconfig ends up as system:node:<name> with a certificate in --cert-dir, and one whose
certificate is near its end renews it as itself."""

from __future__ import annotations

import base64
import datetime
import json
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
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubelet_agent.certificate.bootstrap import write_node_kubeconfig
from kubelet_agent.certificate.request import new_key
from kubelet_agent.certificate.store import FileStore
from services.client import ClientConfig
from services.runtime import pki
from tests.conftest import REPO, APIServerProcess, free_port, start_apiserver

CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
TOKEN_ID, TOKEN_SECRET = "jn7abc", "0123456789joinab"
NODE_GROUP = "system:bootstrappers:kubeadm:default-node-token"


@dataclass
class Plane:
    secure: str
    root: Path
    ca: pki.CertKey
    apiserver: APIServerProcess

    def client(self) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.root / "ca.crt"))
        context.load_cert_chain(str(self.root / "admin.crt"), str(self.root / "admin.key"))
        return httpx.Client(base_url=self.secure, verify=context, timeout=15)


@pytest.fixture(scope="module")
def plane(etcd_server: str, workdir: Path) -> Iterator[Plane]:
    root = workdir / "kubelet-tls-bootstrap"
    root.mkdir(parents=True, exist_ok=True)
    ca = pki.create_ca("tls-bootstrap-ca")
    ca.write(root / "ca.crt", root / "ca.key")
    pki.issue_serving_cert(ca, ["localhost", "127.0.0.1"]).write(root / "apiserver.crt", root / "apiserver.key")
    pki.issue_client_cert(ca, "kubernetes-admin", ["system:masters"]).write(root / "admin.crt", root / "admin.key")
    port = free_port()
    apiserver = start_apiserver(
        [etcd_server], root, "--secure-port", str(port), "--tls-cert-file", str(root / "apiserver.crt"),
        "--tls-private-key-file", str(root / "apiserver.key"), "--client-ca-file", str(root / "ca.crt"),
        "--authorization-mode", "RBAC", "--enable-bootstrap-token-auth", "--cert-dir", str(root / "certs"),
        "--etcd-prefix", f"/tlsboot-{uuid.uuid4().hex[:8]}")
    log = open(root / "controller-manager.log", "ab")  # noqa: SIM115 - handed to the child
    cm = subprocess.Popen(
        [sys.executable, "-m", "controller_manager", "--master", apiserver.url, "--secure-port", "0",
         "--leader-elect=false", "--controllers", "csrsigning,csrapproving",
         "--cluster-signing-cert-file", str(root / "ca.crt"), "--cluster-signing-key-file", str(root / "ca.key"),
         "--log-format", "console"], cwd=REPO, stdout=log, stderr=log)
    plane = Plane(f"https://127.0.0.1:{port}", root, ca, apiserver)
    with plane.client() as admin:
        expires = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        r = admin.post("/api/v1/namespaces/kube-system/secrets", json={
            "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": f"bootstrap-token-{TOKEN_ID}", "namespace": "kube-system"},
            "stringData": {"token-id": TOKEN_ID, "token-secret": TOKEN_SECRET, "expiration": expires,
                           "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
                           "auth-extra-groups": NODE_GROUP}})
        assert r.status_code == 201, r.text
        # Until the Node authorizer decides what a kubelet may do, RBAC's system:node role stands in for it.
        r = admin.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json={
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "test-nodes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]})
        assert r.status_code == 201, r.text
    try:
        yield plane
    finally:
        cm.terminate()
        cm.wait(10)
        apiserver.stop()


def eventually(check: Callable[[], Any], timeout: float = 45, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def bootstrap_kubeconfig(plane: Plane, path: Path) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "tls-bootstrap-token-user@kubernetes",
        "clusters": [{"name": "kubernetes", "cluster": {
            "server": plane.secure,
            "certificate-authority-data": base64.b64encode((plane.root / "ca.crt").read_bytes()).decode()}}],
        "users": [{"name": "tls-bootstrap-token-user", "user": {"token": f"{TOKEN_ID}.{TOKEN_SECRET}"}}],
        "contexts": [{"name": "tls-bootstrap-token-user@kubernetes",
                      "context": {"cluster": "kubernetes", "user": "tls-bootstrap-token-user"}}]}))
    return path


def start_kubelet(node: str, workdir: Path, *flags: str) -> subprocess.Popen[bytes]:
    log = open(workdir / f"kubelet-{node}.log", "ab")  # noqa: SIM115 - handed to the child
    return subprocess.Popen(
        [sys.executable, "-m", "kubelet_agent", "--hollow", "--hostname-override", node, "--node-ip", "127.0.0.1",
         "--port", "0", "--healthz-port", "0", "--root-dir", str(workdir / "root"), "--log-format", "console",
         "--kubeconfig", str(workdir / "kubelet.conf"), "--cert-dir", str(workdir / "pki"), *flags],
        cwd=REPO, stdout=log, stderr=log)


def whoami(plane: Plane, kubeconfig: Path) -> dict[str, Any]:
    config = yaml.safe_load(kubeconfig.read_text())
    user = config["users"][0]["user"]
    context = ssl.create_default_context(cafile=str(plane.root / "ca.crt"))
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    with httpx.Client(base_url=plane.secure, verify=context, timeout=15) as node:
        r = node.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                      json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert r.status_code == 201, r.text
    return r.json()["status"]["userInfo"]


def node_ready(plane: Plane, name: str) -> bool:
    with plane.client() as admin:
        r = admin.get(f"/api/v1/nodes/{name}")
    if r.status_code != 200:
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in r.json()["status"].get("conditions", []))


def test_kubelet_bootstraps_its_client_certificate_with_a_bootstrap_token(plane: Plane, tmp_path: Path) -> None:
    boot = bootstrap_kubeconfig(plane, tmp_path / "bootstrap-kubelet.conf")
    kubelet = start_kubelet("boot-a", tmp_path, "--bootstrap-kubeconfig", str(boot))
    try:
        eventually(lambda: node_ready(plane, "boot-a"), what="node boot-a Ready")
        current = tmp_path / "pki" / "kubelet-client-current.pem"
        assert current.is_symlink() and current.resolve().name.startswith("kubelet-client-2")
        cert = x509.load_pem_x509_certificate(current.read_bytes())
        assert cert.subject.rfc4514_string() == "CN=system:node:boot-a,O=system:nodes"
        assert cert.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
        cert.verify_directly_issued_by(plane.ca.cert)
        assert not (tmp_path / "pki" / "kubelet-client.key.tmp").exists()
        me = whoami(plane, tmp_path / "kubelet.conf")
        assert me["username"] == "system:node:boot-a"
        assert "system:nodes" in me["groups"]
        with plane.client() as admin:
            csrs = [c for c in admin.get(CSRS).json()["items"] if c["metadata"]["name"].startswith("node-csr-")
                    and c["spec"]["username"] == f"system:bootstrap:{TOKEN_ID}"]
        assert len(csrs) == 1, csrs
        assert csrs[0]["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
        assert sorted(csrs[0]["spec"]["usages"]) == ["client auth", "digital signature"]
        assert [c["reason"] for c in csrs[0]["status"]["conditions"]] == ["AutoApproved"]
    finally:
        kubelet.terminate()
        kubelet.wait(15)
    # A restart with the kubeconfig in place uses it and asks for nothing.
    kubelet = start_kubelet("boot-a", tmp_path, "--bootstrap-kubeconfig", str(boot))
    try:
        log = tmp_path / "kubelet-boot-a.log"
        eventually(lambda: log.read_text().count("kubelet started") == 2, what="the restarted kubelet")
        assert log.read_text().count("requesting a client certificate") == 1
        with plane.client() as admin:
            names = [c["metadata"]["name"] for c in admin.get(CSRS).json()["items"]
                     if c["spec"]["username"] == f"system:bootstrap:{TOKEN_ID}"]
        assert len(names) == 1, names
    finally:
        kubelet.terminate()
        kubelet.wait(15)


def aging_certificate(ca: pki.CertKey, node: str) -> tuple[bytes, Any]:
    """A node client certificate 57 of its 60 minutes old: past every rotation deadline (the latest falls
    at 90 %, 54 minutes)."""
    key = new_key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")]))
            .issuer_name(ca.cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=57))
            .not_valid_after(now + datetime.timedelta(minutes=3))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca.key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), key


def test_kubelet_rotates_a_certificate_near_its_end_as_itself(plane: Plane, tmp_path: Path) -> None:
    store = FileStore(tmp_path / "pki")
    cert_pem, key = aging_certificate(plane.ca, "rot-b")
    first = store.update(cert_pem, key)
    write_node_kubeconfig(tmp_path / "kubelet.conf", ClientConfig(server=plane.secure,
                                                                  ca_file=str(plane.root / "ca.crt")), store.current)
    old_serial = x509.load_pem_x509_certificate(cert_pem).serial_number
    kubelet = start_kubelet("rot-b", tmp_path, "--rotate-certificates")
    try:
        def rotated() -> x509.Certificate | None:
            cert = x509.load_pem_x509_certificate(store.current.read_bytes())
            return cert if cert.serial_number != old_serial else None

        cert = eventually(rotated, what="a rotated certificate")
        assert store.current.resolve() != first.resolve() and first.exists()
        assert cert.subject.rfc4514_string() == "CN=system:node:rot-b,O=system:nodes"
        assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=300)
        with plane.client() as admin:
            csrs = [c for c in admin.get(CSRS).json()["items"] if c["spec"]["username"] == "system:node:rot-b"]
        assert len(csrs) == 1 and csrs[0]["metadata"]["name"].startswith("csr-"), csrs
        assert csrs[0]["status"]["conditions"][0]["message"] == (
            "Auto approving self kubelet client certificate after SubjectAccessReview.")
        # The node keeps working after the swap: it registers and turns Ready through the new certificate.
        eventually(lambda: node_ready(plane, "rot-b"), what="node rot-b Ready")
        assert whoami(plane, tmp_path / "kubelet.conf")["username"] == "system:node:rot-b"
        assert "rotated the certificate" in (tmp_path / "kubelet-rot-b.log").read_text()
    finally:
        kubelet.terminate()
        kubelet.wait(15)


def test_kubelet_serves_a_certificate_of_the_kubelet_serving_signer_once_approved(plane: Plane, tmp_path: Path) -> None:
    boot = bootstrap_kubeconfig(plane, tmp_path / "bootstrap-kubelet.conf")
    kubelet = start_kubelet("srv-c", tmp_path, "--bootstrap-kubeconfig", str(boot), "--rotate-server-certificates")
    try:
        def serving_csr() -> dict[str, Any] | None:
            with plane.client() as admin:
                items = admin.get(CSRS).json()["items"]
            return next((c for c in items if c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
                         and c["spec"]["username"] == "system:node:srv-c"), None)

        csr = eventually(serving_csr, what="the kubelet's serving CSR")
        assert sorted(csr["spec"]["usages"]) == ["digital signature", "server auth"]
        assert "status" not in csr or not csr["status"].get("conditions"), "serving CSRs wait for an approver"
        csr["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "TestApproved",
                                         "message": "approved by the test"}]}
        with plane.client() as admin:
            r = admin.put(f"{CSRS}/{csr['metadata']['name']}/approval", json=csr)
            assert r.status_code == 200, r.text

        def port() -> int:
            with plane.client() as admin:
                node = admin.get("/api/v1/nodes/srv-c").json()
            return int(((node.get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint", {})
                       .get("Port") or 0)

        kubelet_port = eventually(port, what="the kubelet's port")

        def served() -> x509.Certificate | None:
            pem = ssl.get_server_certificate(("127.0.0.1", kubelet_port))
            cert = x509.load_pem_x509_certificate(pem.encode())
            return cert if cert.issuer == plane.ca.cert.subject else None

        cert = eventually(served, what="the signed serving certificate on the kubelet API")
        assert cert.subject.rfc4514_string() == "CN=system:node:srv-c,O=system:nodes"
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "srv-c" in sans.get_values_for_type(x509.DNSName)
        assert (tmp_path / "pki" / "kubelet-server-current.pem").is_symlink()
    finally:
        kubelet.terminate()
        kubelet.wait(15)
