"""Joining machines' API: CertificateSigningRequests (validation, approval, signer permissions, the
signing, approving and cleaning controllers), bootstrap tokens (authentication, cleanup, the signed
cluster-info ConfigMap) and `pyk8s token`, against a real etcd, a TLS apiserver with RBAC and a real
controller-manager, driven with httpx, kubectl and the pyk8s command."""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from services.runtime import pki
from tests.conftest import KUBECTL, REPO, APIServerProcess, free_port, start_apiserver

CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
SECRETS = "/api/v1/namespaces/kube-system/secrets"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
NODE_GROUP = "system:bootstrappers:kubeadm:default-node-token"
JANE_TOKEN = "jane-csr-token"


@dataclass
class Plane:
    secure: str
    ca: Path
    ca_key: Path
    admin: tuple[str, str]
    workdir: Path
    apiserver: APIServerProcess
    controller_manager: subprocess.Popen[bytes]

    def client(self, token: str | None = None, cert: tuple[str, str] | None = None) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.ca))
        if cert is not None:
            context.load_cert_chain(*cert)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.secure, verify=context, headers=headers, timeout=15)

    def admin_client(self) -> httpx.Client:
        return self.client(cert=self.admin)

    @property
    def kubeconfig(self) -> Path:
        path = self.workdir / "admin.kubeconfig"
        if not path.exists():
            path.write_text(json.dumps({
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": self.secure, "certificate-authority": str(self.ca)}}],
                "users": [{"name": "u", "user": {"client-certificate": self.admin[0], "client-key": self.admin[1]}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }))
        return path

    def kubectl(self, *args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        config = kubeconfig or self.kubeconfig
        return subprocess.run([KUBECTL, "--kubeconfig", str(config), *args], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "KUBECACHEDIR": str(config) + "-cache"})


@pytest.fixture(scope="module")
def plane(etcd_server: str, workdir: Path) -> Iterator[Plane]:
    root = workdir / "certificates"
    root.mkdir(parents=True, exist_ok=True)
    ca = pki.create_ca("csr-test-ca")
    ca.write(root / "ca.crt", root / "ca.key")
    pki.issue_serving_cert(ca, ["localhost", "127.0.0.1"]).write(root / "apiserver.crt", root / "apiserver.key")
    pki.issue_client_cert(ca, "kubernetes-admin", ["system:masters"]).write(root / "admin.crt", root / "admin.key")
    (root / "tokens.csv").write_text(f"{JANE_TOKEN},jane,2001\n")
    port = free_port()
    apiserver = start_apiserver(
        [etcd_server], root, "--secure-port", str(port), "--tls-cert-file", str(root / "apiserver.crt"),
        "--tls-private-key-file", str(root / "apiserver.key"), "--client-ca-file", str(root / "ca.crt"),
        "--authorization-mode", "RBAC", "--enable-bootstrap-token-auth", "--token-auth-file", str(root / "tokens.csv"),
        "--cert-dir", str(root / "certs"), "--etcd-prefix", f"/csr-{uuid.uuid4().hex[:8]}",
    )
    log = open(root / "controller-manager.log", "ab")  # noqa: SIM115 - handed to the child
    cm = subprocess.Popen(
        [sys.executable, "-m", "controller_manager", "--master", apiserver.url, "--secure-port", "0",
         "--leader-elect=false", "--controllers", "csrsigning,csrapproving,csrcleaner,tokencleaner,bootstrapsigner",
         "--cluster-signing-cert-file", str(root / "ca.crt"), "--cluster-signing-key-file", str(root / "ca.key"),
         "--csr-cleaner-period", "1s", "--log-format", "console"],
        cwd=REPO, stdout=log, stderr=log,
    )
    plane = Plane(f"https://127.0.0.1:{port}", root / "ca.crt", root / "ca.key",
                  (str(root / "admin.crt"), str(root / "admin.key")), root, apiserver, cm)
    try:
        yield plane
    finally:
        cm.terminate()
        cm.wait(10)
        apiserver.stop()


def eventually(check: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def new_request(common_name: str, organizations: tuple[str, ...] = (), dns: tuple[str, ...] = ()) -> tuple[str, bytes]:
    """(base64 PEM CSR, PEM key) for a fresh EC key."""
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    csr = builder.sign(key, hashes.SHA256())
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode(), pem_key


def csr_body(name: str, request: str, signer: str, usages: list[str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name}, "spec": {"request": request, "signerName": signer, "usages": usages, **spec}}


def token_secret(token_id: str, secret: str, expires: datetime | None, usages: tuple[str, ...] = (
        "authentication", "signing"), groups: str = NODE_GROUP) -> dict[str, Any]:
    data = {"token-id": token_id, "token-secret": secret, "auth-extra-groups": groups}
    data.update({f"usage-bootstrap-{u}": "true" for u in usages})
    if expires is not None:
        data["expiration"] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"}, "stringData": data}


def whoami(client: httpx.Client) -> httpx.Response:
    return client.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                       json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})


def test_bootstrap_token_csr_is_auto_approved_signed_and_authenticates_as_the_node(plane: Plane) -> None:
    with plane.admin_client() as admin:
        r = admin.post(SECRETS, json=token_secret("abc123", "0123456789abcdef", datetime.now(UTC) + timedelta(hours=1)))
        assert r.status_code == 201, r.text
    with plane.client(token="abc123.0123456789abcdef") as bootstrap:
        me = whoami(bootstrap)
        assert me.status_code == 201, me.text
        info = me.json()["status"]["userInfo"]
        assert info["username"] == "system:bootstrap:abc123"
        assert set(info["groups"]) == {"system:bootstrappers", NODE_GROUP, "system:authenticated"}
        assert whoami(plane.client(token="abc123.0123456789abcdee")).status_code == 401
    with plane.admin_client() as admin:
        review = admin.post("/apis/authentication.k8s.io/v1/tokenreviews", json={
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": "abc123.0123456789abcdef"}}).json()["status"]
    assert review["authenticated"] is True and review["user"]["username"] == "system:bootstrap:abc123", review
    with plane.client(token="abc123.0123456789abcdef") as bootstrap:

        request, key = new_request("system:node:node-a", ("system:nodes",))
        body = csr_body("node-a-client", request, "kubernetes.io/kube-apiserver-client-kubelet",
                        ["digital signature", "client auth"], username="someone-else", groups=["system:masters"])
        r = bootstrap.post(CSRS, json=body)
        assert r.status_code == 201, r.text
        spec = r.json()["spec"]
        assert spec["username"] == "system:bootstrap:abc123"
        assert "system:masters" not in spec["groups"] and NODE_GROUP in spec["groups"]

        def issued() -> dict[str, Any] | None:
            csr = bootstrap.get(f"{CSRS}/node-a-client").json()
            return csr if (csr.get("status") or {}).get("certificate") else None

        csr = eventually(issued, what="the node client certificate")
    approved = [c for c in csr["status"]["conditions"] if c["type"] == "Approved"]
    assert approved and approved[0]["reason"] == "AutoApproved"
    assert approved[0]["message"] == "Auto approving kubelet client certificate after SubjectAccessReview."
    cert = x509.load_pem_x509_certificate(base64.b64decode(csr["status"]["certificate"]))
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(plane.ca.read_bytes()))
    (plane.workdir / "node-a.crt").write_bytes(base64.b64decode(csr["status"]["certificate"]))
    (plane.workdir / "node-a.key").write_bytes(key)
    with plane.client(cert=(str(plane.workdir / "node-a.crt"), str(plane.workdir / "node-a.key"))) as node:
        me = whoami(node)
        assert me.status_code == 201, me.text
        info = me.json()["status"]["userInfo"]
    assert info["username"] == "system:node:node-a"
    assert "system:nodes" in info["groups"]


def test_kubectl_certificate_approve_and_deny(plane: Plane) -> None:
    approve_me, _ = new_request("jane")
    deny_me, _ = new_request("john")
    manifest = plane.workdir / "client-csrs.yaml"
    manifest.write_text(yaml.safe_dump_all([
        csr_body("jane-client", approve_me, "kubernetes.io/kube-apiserver-client", ["client auth"],
                 expirationSeconds=3600),
        csr_body("john-client", deny_me, "kubernetes.io/kube-apiserver-client", ["client auth"]),
    ]))
    created = plane.kubectl("create", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    explained = plane.kubectl("explain", "csr.spec.signerName")
    assert explained.returncode == 0 and "FIELD: signerName" in explained.stdout, explained.stderr
    resources = plane.kubectl("api-resources", "--api-group", "certificates.k8s.io", "--no-headers").stdout.split()
    assert resources == ["certificatesigningrequests", "csr", "certificates.k8s.io/v1", "false",
                         "CertificateSigningRequest"]
    listed = plane.kubectl("get", "csr", "jane-client")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"]
    assert row.split()[2:] == ["kubernetes.io/kube-apiserver-client", "kubernetes-admin", "1h", "Pending"]

    approved = plane.kubectl("certificate", "approve", "jane-client")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == "certificatesigningrequest.certificates.k8s.io/jane-client approved"
    denied = plane.kubectl("certificate", "deny", "john-client")
    assert denied.returncode == 0, denied.stderr
    assert denied.stdout.strip() == "certificatesigningrequest.certificates.k8s.io/john-client denied"

    def condition(name: str) -> str:
        out = plane.kubectl("get", "csr", name, "--no-headers").stdout.split()
        return out[-1] if out else ""

    eventually(lambda: condition("jane-client") == "Approved,Issued", what="jane's certificate")
    assert condition("john-client") == "Denied"
    with plane.admin_client() as admin:
        jane = admin.get(f"{CSRS}/jane-client").json()
        john = admin.get(f"{CSRS}/john-client").json()
    cert = x509.load_pem_x509_certificate(base64.b64decode(jane["status"]["certificate"]))
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert timedelta(minutes=60) <= lifetime <= timedelta(minutes=66)
    assert "certificate" not in john["status"]
    # a decision stays: kubectl refuses to deny what is approved, and so does the server when asked directly
    again = plane.kubectl("certificate", "deny", "--force", "jane-client")
    assert again.returncode != 0 and "already Approved" in again.stderr, again.stderr
    jane["status"]["conditions"].append({"type": "Denied", "status": "True", "reason": "Changed my mind"})
    with plane.admin_client() as admin:
        r = admin.put(f"{CSRS}/jane-client/approval", json=jane)
    assert r.status_code == 422 and "Approved and Denied conditions are mutually exclusive" in r.text, r.text


def test_approving_needs_approve_on_the_signer(plane: Plane) -> None:
    request, _ = new_request("jane")
    with plane.admin_client() as admin:
        assert admin.post(CSRS, json=csr_body("signer-rbac", request, "example.com/custom", ["client auth"])
                          ).status_code == 201
        for kind, body in (("clusterroles", {"metadata": {"name": "csr-approval-writer"}, "rules": [
                {"verbs": ["get", "update"], "apiGroups": ["certificates.k8s.io"],
                 "resources": ["certificatesigningrequests", "certificatesigningrequests/approval"]}]}),
                           ("clusterrolebindings", {"metadata": {"name": "csr-approval-writer"},
                                                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                                "kind": "ClusterRole", "name": "csr-approval-writer"},
                                                    "subjects": [{"kind": "User", "name": "jane",
                                                                  "apiGroup": "rbac.authorization.k8s.io"}]})):
            assert admin.post(f"{RBAC}/{kind}", json=body).status_code == 201
    with plane.client(token=JANE_TOKEN) as jane:
        csr = jane.get(f"{CSRS}/signer-rbac").json()
        csr["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "Mine", "message": "ok"}]}
        refused = jane.put(f"{CSRS}/signer-rbac/approval", json=csr)
        assert refused.status_code == 403, refused.text
        assert refused.json()["message"] == ('certificatesigningrequests.certificates.k8s.io "signer-rbac" is '
                                             'forbidden: user not permitted to approve requests with signerName '
                                             '"example.com/custom"')
        with plane.admin_client() as admin:
            assert admin.post(f"{RBAC}/clusterroles", json={"metadata": {"name": "example-approver"}, "rules": [
                {"verbs": ["approve"], "apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
                 "resourceNames": ["example.com/*"]}]}).status_code == 201
            assert admin.post(f"{RBAC}/clusterrolebindings", json={
                "metadata": {"name": "example-approver"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "example-approver"},
                "subjects": [{"kind": "User", "name": "jane", "apiGroup": "rbac.authorization.k8s.io"}]},
            ).status_code == 201

        def approve() -> bool:
            return jane.put(f"{CSRS}/signer-rbac/approval", json=csr).status_code == 200

        eventually(approve, what="jane's approval with `approve` on example.com/*")
        # signing is a separate permission: jane may not issue the certificate herself
        signed = jane.get(f"{CSRS}/signer-rbac").json()
        signed["status"]["certificate"] = base64.b64encode(
            pki.issue_client_cert(pki.create_ca(), "jane").cert_pem()).decode()
        assert jane.put(f"{CSRS}/signer-rbac/status", json=signed).status_code == 403


def test_csr_validation(plane: Plane) -> None:
    request, _ = new_request("someone")
    with plane.admin_client() as admin:
        def invalid(body: dict[str, Any]) -> set[str]:
            r = admin.post(CSRS, json=body)
            assert r.status_code == 422, r.text
            return {c["field"] for c in r.json()["details"]["causes"]}

        not_pem = base64.b64encode(b"hello").decode()
        assert invalid(csr_body("bad-1", not_pem, "example.com/x", ["client auth"])) == {"spec.request"}
        assert invalid(csr_body("bad-2", request, "", ["client auth"])) == {"spec.signerName"}
        assert invalid(csr_body("bad-3", request, "nodomain", ["client auth"])) == {"spec.signerName"}
        assert invalid(csr_body("bad-4", request, "example.com/x", ["flying"])) == {"spec.usages[0]"}
        assert invalid(csr_body("bad-5", request, "example.com/x", ["client auth"],
                                expirationSeconds=599)) == {"spec.expirationSeconds"}
        der = bytearray(x509.load_pem_x509_csr(base64.b64decode(request)).public_bytes(serialization.Encoding.DER))
        der[-1] ^= 1  # the signature's last byte
        tampered = x509.load_der_x509_csr(bytes(der)).public_bytes(serialization.Encoding.PEM)
        assert invalid(csr_body("bad-6", base64.b64encode(tampered).decode(), "example.com/x",
                                ["client auth"])) == {"spec.request"}

        masters, _ = new_request("root", ("system:masters",))
        r = admin.post(CSRS, json=csr_body("masters", masters, "kubernetes.io/kube-apiserver-client", ["client auth"]))
        assert r.status_code == 403, r.text
        assert r.json()["message"] == ('certificatesigningrequests.certificates.k8s.io "masters" is forbidden: use of '
                                       'kubernetes.io/kube-apiserver-client signer with system:masters group is not '
                                       'allowed')
        assert admin.post(CSRS, json=csr_body("good", request, "example.com/x", ["client auth"])).status_code == 201
        csr = admin.get(f"{CSRS}/good").json()
        selected = admin.get(CSRS, params={"fieldSelector": "spec.signerName=example.com/x"}).json()["items"]
        assert [c["metadata"]["name"] for c in selected] == ["good"]
        both = {**csr, "status": {"conditions": [{"type": "Approved", "status": "True"},
                                                 {"type": "Denied", "status": "True"}]}}
        r = admin.put(f"{CSRS}/good/approval", json=both)
        assert r.status_code == 422 and "mutually exclusive" in r.text, r.text
        cert = base64.b64encode(pki.issue_client_cert(pki.create_ca(), "someone").cert_pem()).decode()
        r = admin.put(f"{CSRS}/good/status", json={**csr, "status": {"certificate": cert}})
        assert r.status_code == 422 and r.json()["details"]["causes"][0]["field"] == "status.certificate", r.text
        # the main resource changes neither spec nor status
        changed = admin.put(f"{CSRS}/good", json={**csr, "spec": {**csr["spec"], "signerName": "example.com/y"},
                                                    "status": {"certificate": cert}})
        assert changed.status_code == 200, changed.text
        assert changed.json()["spec"]["signerName"] == "example.com/x" and not changed.json().get("status")
        approved = admin.put(f"{CSRS}/good/approval", json={**csr, "status": {"conditions": [
            {"type": "Approved", "status": "True", "reason": "Test"}]}})
        assert approved.status_code == 200, approved.text
        removed = admin.put(f"{CSRS}/good/approval", json={**approved.json(), "status": {"conditions": []}})
        assert removed.status_code == 422, removed.text
        not_cert = base64.b64encode(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").decode()
        r = admin.put(f"{CSRS}/good/status", json={**approved.json(), "status": {
            **approved.json()["status"], "certificate": not_cert}})
        assert r.status_code == 422, r.text


def test_kubelet_client_csr_with_the_wrong_subject_fails(plane: Plane) -> None:
    request, _ = new_request("system:node:node-b", ("evil",))
    with plane.admin_client() as admin:
        assert admin.post(CSRS, json=csr_body("wrong-subject", request, "kubernetes.io/kube-apiserver-client-kubelet",
                                              ["digital signature", "client auth"])).status_code == 201
    approved = plane.kubectl("certificate", "approve", "wrong-subject")
    assert approved.returncode == 0, approved.stderr

    def failed() -> dict[str, Any] | None:
        with plane.admin_client() as admin:
            csr = admin.get(f"{CSRS}/wrong-subject").json()
        return next((c for c in csr["status"].get("conditions", []) if c["type"] == "Failed"), None)

    condition = eventually(failed, what="the Failed condition")
    assert condition["reason"] == "SignerValidationFailure"
    assert condition["message"] == "subject organization is not system:nodes"
    with plane.admin_client() as admin:
        assert "certificate" not in admin.get(f"{CSRS}/wrong-subject").json()["status"]
    assert plane.kubectl("get", "csr", "wrong-subject", "--no-headers").stdout.split()[-1] == "Approved,Failed"


def test_decided_csrs_are_cleaned_up_after_an_hour(plane: Plane) -> None:
    request, _ = new_request("old")
    an_hour_ago = (datetime.now(UTC) - timedelta(minutes=61)).strftime("%Y-%m-%dT%H:%M:%SZ")
    with plane.admin_client() as admin:
        for name in ("old-denied", "fresh-denied"):
            assert admin.post(CSRS, json=csr_body(name, request, "example.com/x", ["client auth"])).status_code == 201
            csr = admin.get(f"{CSRS}/{name}").json()
            cond = {"type": "Denied", "status": "True", "reason": "Test"}
            if name == "old-denied":
                cond["lastUpdateTime"] = an_hour_ago
            assert admin.put(f"{CSRS}/{name}/approval", json={**csr, "status": {"conditions": [cond]}}
                             ).status_code == 200
        eventually(lambda: admin.get(f"{CSRS}/old-denied").status_code == 404, what="the old CSR's deletion")
        assert admin.get(f"{CSRS}/fresh-denied").status_code == 200


def test_expired_bootstrap_token_is_rejected_and_cleaned_up(plane: Plane) -> None:
    with plane.admin_client() as admin:
        soon = datetime.now(UTC) + timedelta(seconds=4)
        assert admin.post(SECRETS, json=token_secret("exp001", "aaaaaaaaaaaaaaaa", soon)).status_code == 201
        with plane.client(token="exp001.aaaaaaaaaaaaaaaa") as bootstrap:
            assert whoami(bootstrap).status_code == 201
            eventually(lambda: whoami(bootstrap).status_code == 401, what="the expired token's rejection")
        eventually(lambda: admin.get(f"{SECRETS}/bootstrap-token-exp001").status_code == 404,
                   what="the token cleaner")
        # a token without the authentication usage never authenticates
        assert admin.post(SECRETS, json=token_secret("sig001", "bbbbbbbbbbbbbbbb", None, ("signing",))
                          ).status_code == 201
        assert whoami(plane.client(token="sig001.bbbbbbbbbbbbbbbb")).status_code == 401


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_cluster_info_is_public_and_signed_with_each_token(plane: Plane) -> None:
    from deploy.clusterinfo import ensure_cluster_info

    async def write() -> None:
        context = ssl.create_default_context(cafile=str(plane.ca))
        context.load_cert_chain(*plane.admin)
        async with httpx.AsyncClient(verify=context) as http:
            await ensure_cluster_info(http, plane.secure, plane.secure, plane.ca)

    import asyncio

    asyncio.run(write())
    path = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
    with plane.admin_client() as admin:
        assert admin.post(SECRETS, json=token_secret("jws001", "cccccccccccccccc", None)).status_code == 201
        assert admin.post(SECRETS, json=token_secret("auth01", "dddddddddddddddd", None, ("authentication",))
                          ).status_code == 201
    with plane.client() as anonymous:
        def signed() -> dict[str, str] | None:
            r = anonymous.get(path)
            assert r.status_code == 200, r.text
            data = r.json()["data"]
            return data if "jws-kubeconfig-jws001" in data else None

        data = eventually(signed, what="the cluster-info signature")
        assert "jws-kubeconfig-auth01" not in data
        content = data["kubeconfig"]
        config = yaml.safe_load(content)
        assert config["clusters"][0]["cluster"]["server"] == plane.secure
        assert base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]) == plane.ca.read_bytes()
        header, empty, signature = data["jws-kubeconfig-jws001"].split(".")
        assert empty == ""
        payload = base64.urlsafe_b64encode(content.encode()).decode().rstrip("=")
        assert jwt.get_unverified_header(f"{header}.{payload}.{signature}") == {"alg": "HS256", "kid": "jws001"}
        verified = jwt.api_jws.decode(f"{header}.{payload}.{signature}", "cccccccccccccccc", algorithms=["HS256"])
        assert verified.decode() == content
        with pytest.raises(jwt.InvalidSignatureError):
            jwt.api_jws.decode(f"{header}.{payload}.{signature}", "cccccccccccccccd", algorithms=["HS256"])
        with plane.admin_client() as admin:
            assert admin.delete(f"{SECRETS}/bootstrap-token-jws001").status_code == 200
        eventually(lambda: "jws-kubeconfig-jws001" not in anonymous.get(path).json()["data"],
                   what="the deleted token's signature to go")
        assert anonymous.get("/api/v1/namespaces/kube-public/configmaps").status_code == 403


def pyk8s(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO)


def test_pyk8s_token_create_list_delete(plane: Plane) -> None:
    created = pyk8s("token", "create", "--kubeconfig", str(plane.kubeconfig), "--ttl", "2h",
                    "--description", "for node-c")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", token), created.stdout
    forever = pyk8s("token", "create", "abcdef.0123456789abcdef", "--kubeconfig", str(plane.kubeconfig), "--ttl", "0",
                    "--groups", "system:bootstrappers:workers", "--usages", "authentication")
    assert forever.returncode == 0 and forever.stdout.strip() == "abcdef.0123456789abcdef", forever.stderr
    with plane.client(token=token) as joining:
        assert whoami(joining).json()["status"]["userInfo"]["username"] == f"system:bootstrap:{token[:6]}"

    listed = pyk8s("token", "list", "--kubeconfig", str(plane.kubeconfig))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == ["TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA GROUPS"]
    rows = {re.split(r"\s{2,}", line)[0]: re.split(r"\s{2,}", line.strip()) for line in lines[1:]}
    mine = rows[token]
    assert mine[1] in ("1h", "2h") and mine[3:] == ["authentication,signing", "for node-c", NODE_GROUP]
    assert datetime.fromisoformat(mine[2].replace("Z", "+00:00")) > datetime.now(UTC) + timedelta(minutes=110)
    assert rows["abcdef.0123456789abcdef"][1:] == ["<forever>", "<never>", "authentication", "<none>",
                                                   "system:bootstrappers:workers"]
    # columns line up as Go's tabwriter sets them
    assert len({line.index(" ") for line in lines if not line.startswith("TOKEN")}) == 1

    deleted = pyk8s("token", "delete", token[:6], "abcdef.0123456789abcdef", "--kubeconfig", str(plane.kubeconfig))
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == [f'bootstrap token "{token[:6]}" deleted',
                                           'bootstrap token "abcdef" deleted']
    listed_again = pyk8s("token", "list", "--kubeconfig", str(plane.kubeconfig)).stdout
    after = [line.split()[0] for line in listed_again.splitlines()]
    assert token not in after and "abcdef.0123456789abcdef" not in after and "abc123.0123456789abcdef" in after
    missing = pyk8s("token", "delete", "zzzzzz", "--kubeconfig", str(plane.kubeconfig))
    assert missing.returncode == 1 and 'bootstrap token "zzzzzz" not found' in missing.stderr


def test_kubelet_serving_csr_gets_a_serving_certificate_for_its_names(plane: Plane) -> None:
    request, _ = new_request("system:node:node-d", ("system:nodes",), dns=("node-d",))
    with plane.admin_client() as admin:
        assert admin.post(CSRS, json=csr_body("node-d-serving", request, "kubernetes.io/kubelet-serving",
                                              ["digital signature", "server auth"])).status_code == 201
    approved = plane.kubectl("certificate", "approve", "node-d-serving")
    assert approved.returncode == 0, approved.stderr

    def issued() -> str:
        with plane.admin_client() as admin:
            return (admin.get(f"{CSRS}/node-d-serving").json().get("status") or {}).get("certificate", "")

    cert = x509.load_pem_x509_certificate(base64.b64decode(eventually(issued, what="the serving certificate")))
    assert cert.subject.rfc4514_string() == "CN=system:node:node-d,O=system:nodes"
    assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == ["node-d"]
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]
    # a serving request without names is refused by the signer
    nameless, _ = new_request("system:node:node-e", ("system:nodes",))
    with plane.admin_client() as admin:
        assert admin.post(CSRS, json=csr_body("node-e-serving", nameless, "kubernetes.io/kubelet-serving",
                                              ["digital signature", "server auth"])).status_code == 201
    assert plane.kubectl("certificate", "approve", "node-e-serving").returncode == 0
    eventually(lambda: plane.kubectl("get", "csr", "node-e-serving", "--no-headers").stdout.split()[-1]
               == "Approved,Failed", what="the nameless serving request to fail")
