"""Service-account tokens live only as long as what they name, and only on the cluster whose key signed them.

A real apiserver with a secure port and anonymous auth off: a token bound to a Pod, Secret or Node
(made by the real `kubectl create token`) gets 401 once that object is gone or was recreated with
another UID, as does any token whose ServiceAccount is gone; a legacy Secret-based token dies with its
Secret. Two apiservers with their own signing keys refuse each other's tokens; one restarted on its
key still accepts the tokens it signed before.
"""

from __future__ import annotations

import base64
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from services.runtime import pki
from tests.conftest import KUBECTL, APIServerProcess, free_port, start_apiserver

REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


@dataclass
class Server:
    process: APIServerProcess
    secure: str
    ca: Path
    key: Path

    def with_token(self, token: str, path: str = "/api/v1/namespaces/default/serviceaccounts") -> int:
        tls = ssl.create_default_context(cafile=self.ca)
        with httpx.Client(verify=tls, headers={"Authorization": f"Bearer {token}"}) as c:
            return c.get(self.secure + path).status_code

    def review(self, token: str) -> dict:
        with httpx.Client(base_url=self.process.url) as c:
            return c.post(REVIEWS, json={"spec": {"token": token}}).json()["status"]

    def kubectl(self, *args: str) -> str:
        result = subprocess.run([KUBECTL, "--server", self.process.url, *args], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout


def _start(etcd: str, root: Path, key: Path, prefix: str, *extra: str) -> Server:
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "ca.crt").exists():
        ca = pki.create_ca("tokens-test-ca")
        ca.write(root / "ca.crt", root / "ca.key")
        pki.issue_serving_cert(ca, ["localhost", "127.0.0.1"]).write(root / "apiserver.crt", root / "apiserver.key")
    pki.load_or_create_service_account_key(key, key.with_suffix(".pub"))
    port = free_port()
    process = start_apiserver(
        [etcd], root, "--secure-port", str(port), "--tls-cert-file", str(root / "apiserver.crt"),
        "--tls-private-key-file", str(root / "apiserver.key"), "--anonymous-auth=false",
        f"--service-account-signing-key-file={key}", "--etcd-prefix", prefix, *extra)
    return Server(process, f"https://127.0.0.1:{port}", root / "ca.crt", key)


@pytest.fixture(scope="module")
def server(etcd_server: str, workdir: Path) -> Iterator[Server]:
    root = workdir / "token-binding"
    s = _start(etcd_server, root, root / "sa.key", f"/tokens-{uuid.uuid4().hex[:8]}")
    yield s
    s.process.stop()


def wait_status(server: Server, token: str, want: int, limit: float = 15.0) -> None:
    """The watch cache sees a delete a moment after the write returns; wait for it, never sleep blindly."""
    deadline = time.monotonic() + limit
    while (got := server.with_token(token)) != want:
        assert time.monotonic() < deadline, f"expected {want}, still {got}"
        time.sleep(0.1)


def _uid(server: Server, *args: str) -> str:
    return server.kubectl("get", *args, "-o", "jsonpath={.metadata.uid}")


def test_pod_bound_token_dies_with_its_pod(server: Server) -> None:
    server.kubectl("create", "serviceaccount", "pod-bound")
    server.kubectl("run", "holder", "--image=busybox", "--overrides", '{"spec":{"serviceAccountName":"pod-bound"}}')
    token = server.kubectl("create", "token", "pod-bound", "--bound-object-kind=Pod",
                           "--bound-object-name=holder").strip()
    assert server.with_token(token) == 200
    review = server.review(token)
    assert review["authenticated"] is True
    assert review["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["holder"]

    first_uid = _uid(server, "pod", "holder")
    server.kubectl("delete", "pod", "holder", "--grace-period=0", "--force")
    wait_status(server, token, 401)
    assert server.review(token) == {"authenticated": False, "error": "service account token has been invalidated"}

    server.kubectl("run", "holder", "--image=busybox", "--overrides", '{"spec":{"serviceAccountName":"pod-bound"}}')
    second_uid = _uid(server, "pod", "holder")
    assert server.with_token(token) == 401
    assert server.review(token)["error"] == \
        f"pod UID ({second_uid}) does not match service account pod ref claim ({first_uid})"


def test_secret_and_node_bound_tokens_die_with_their_objects(server: Server) -> None:
    server.kubectl("create", "serviceaccount", "obj-bound")
    server.kubectl("create", "secret", "generic", "anchor", "--from-literal=a=b")
    with httpx.Client(base_url=server.process.url) as c:
        assert c.post("/api/v1/nodes", json={"metadata": {"name": "token-node"}}).status_code == 201
    by_secret = server.kubectl("create", "token", "obj-bound", "--bound-object-kind=Secret",
                               "--bound-object-name=anchor").strip()
    by_node = server.kubectl("create", "token", "obj-bound", "--bound-object-kind=Node",
                             "--bound-object-name=token-node").strip()
    assert server.with_token(by_secret) == 200 and server.with_token(by_node) == 200
    server.kubectl("run", "on-node", "--image=busybox", "--overrides",
                   '{"spec":{"serviceAccountName":"obj-bound","nodeName":"token-node"}}')
    by_pod = server.kubectl("create", "token", "obj-bound", "--bound-object-kind=Pod",
                            "--bound-object-name=on-node").strip()
    extra = server.review(by_pod)["user"]["extra"]
    assert extra["authentication.kubernetes.io/node-name"] == ["token-node"]
    assert extra["authentication.kubernetes.io/node-uid"] == [_uid(server, "node", "token-node")]

    server.kubectl("delete", "secret", "anchor")
    wait_status(server, by_secret, 401)
    assert server.with_token(by_node) == 200
    server.kubectl("delete", "node", "token-node")
    wait_status(server, by_node, 401)
    assert server.review(by_node)["error"] == "service account token has been invalidated"
    assert server.with_token(by_pod) == 200, "a pod's token names its node but is bound to the pod only"


def test_token_dies_with_its_service_account(server: Server) -> None:
    server.kubectl("create", "serviceaccount", "shortlived")
    token = server.kubectl("create", "token", "shortlived").strip()
    old_uid = _uid(server, "serviceaccount", "shortlived")
    assert server.with_token(token) == 200
    server.kubectl("delete", "serviceaccount", "shortlived")
    wait_status(server, token, 401)
    assert server.review(token)["error"] == 'serviceaccounts "shortlived" not found'
    server.kubectl("create", "serviceaccount", "shortlived")
    new_uid = _uid(server, "serviceaccount", "shortlived")
    wait_status(server, token, 401)
    assert server.review(token)["error"] == f"service account UID ({new_uid}) does not match claim ({old_uid})"


def test_legacy_secret_token_lives_as_long_as_its_secret(server: Server) -> None:
    server.kubectl("create", "serviceaccount", "legacy")
    sa_uid = _uid(server, "serviceaccount", "legacy")
    key = serialization.load_pem_private_key(server.key.read_bytes(), password=None)
    prefix = "kubernetes.io/serviceaccount/"
    token = jwt.encode({"iss": "kubernetes/serviceaccount", "sub": "system:serviceaccount:default:legacy",
                        prefix + "namespace": "default", prefix + "secret.name": "legacy-token",
                        prefix + "service-account.name": "legacy", prefix + "service-account.uid": sa_uid},
                       key, algorithm="ES256")  # type: ignore[arg-type]
    secret = {"metadata": {"name": "legacy-token", "annotations": {"kubernetes.io/service-account.name": "legacy"}},
              "type": "kubernetes.io/service-account-token",
              "data": {"token": base64.b64encode(token.encode()).decode()}}
    with httpx.Client(base_url=server.process.url) as c:
        assert c.post("/api/v1/namespaces/default/secrets", json=secret).status_code == 201, "create secret"
        wait_status(server, token, 200)
        assert server.review(token)["user"]["username"] == "system:serviceaccount:default:legacy"
        patched = c.patch("/api/v1/namespaces/default/secrets/legacy-token",
                          json={"data": {"token": base64.b64encode(b"another").decode()}},
                          headers={"Content-Type": "application/merge-patch+json"})
        assert patched.status_code == 200, patched.text
        wait_status(server, token, 401)
        assert server.review(token)["error"] == "token does not match server's copy"
        assert c.delete("/api/v1/namespaces/default/secrets/legacy-token").status_code == 200
    wait_status(server, token, 401)
    assert server.review(token)["error"] == "token has been invalidated"


def test_keys_are_per_cluster_and_survive_restarts(etcd_server: str, workdir: Path) -> None:
    prefix = f"/tokens-keys-{uuid.uuid4().hex[:8]}"
    one = _start(etcd_server, workdir / "keys-one", workdir / "keys-one" / "pki" / "sa.key", prefix)
    two = _start(etcd_server, workdir / "keys-two", workdir / "keys-two" / "pki" / "sa.key", prefix)
    try:
        one.kubectl("create", "serviceaccount", "roamer")
        token = one.kubectl("create", "token", "roamer").strip()
        assert one.with_token(token) == 200
        assert two.with_token(token) == 401, "a token from another cluster's key must not verify"
        assert two.review(token) == {"authenticated": False,
                                     "error": "invalid bearer token, Signature verification failed"}

        one.process.stop()
        one = _start(etcd_server, workdir / "keys-one", one.key, prefix)
        assert one.with_token(token) == 200, "the key is kept, so tokens outlive a restart"

        # --service-account-key-file is repeatable: trusting one's public key as well accepts its tokens.
        two.process.stop()
        two = _start(etcd_server, workdir / "keys-two", two.key, prefix,
                     f"--service-account-key-file={two.key.with_suffix('.pub')}",
                     f"--service-account-key-file={one.key.with_suffix('.pub')}")
        assert two.with_token(token) == 200
    finally:
        one.process.stop()
        two.process.stop()
