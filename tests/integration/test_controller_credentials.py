"""--use-service-account-credentials against a real apiserver with RBAC: the controller-manager's own
identity creates each controller's kube-system service account and a TokenRequest token for it, the
controller's client is that account (bound by upstream's system:controller:* role, nothing more), and
the token is replaced before it expires."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller_manager import credentials
from controller_manager.credentials import ServiceAccountCredentials
from services.client import Client, ClientConfig, Forbidden, gvr
from services.runtime import pki
from tests.conftest import APIServerProcess, eventually, free_port, start_apiserver

SELF_REVIEWS = gvr("authentication.k8s.io/v1", "selfsubjectreviews", namespaced=False)
PODS = gvr("v1", "pods")
SECRETS = gvr("v1", "secrets")


@pytest.fixture(scope="module")
def apiserver(etcd_server: str, workdir: Path) -> Iterator[tuple[str, Path, APIServerProcess]]:
    root = workdir / f"credentials-{uuid.uuid4().hex[:6]}"
    root.mkdir(parents=True)
    ca = pki.create_ca("credentials-ca")
    ca.write(root / "ca.crt", root / "ca.key")
    pki.issue_serving_cert(ca, ["127.0.0.1"]).write(root / "apiserver.crt", root / "apiserver.key")
    pki.issue_client_cert(ca, "system:kube-controller-manager").write(root / "cm.crt", root / "cm.key")
    port = free_port()
    process = start_apiserver(
        [etcd_server], root, "--secure-port", str(port), "--tls-cert-file", str(root / "apiserver.crt"),
        "--tls-private-key-file", str(root / "apiserver.key"), "--client-ca-file", str(root / "ca.crt"),
        "--authorization-mode", "Node,RBAC", "--cert-dir", str(root / "certs"),
        "--etcd-prefix", f"/credentials-{uuid.uuid4().hex[:8]}",
    )
    try:
        yield f"https://127.0.0.1:{port}", root, process
    finally:
        process.stop()


async def whoami(client: Client) -> str:
    review = await client.create(SELF_REVIEWS, {"apiVersion": "authentication.k8s.io/v1",
                                                "kind": "SelfSubjectReview"})
    return str(review["status"]["userInfo"]["username"])


async def test_each_controller_gets_its_own_account_and_token(apiserver: tuple[str, Path, APIServerProcess],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    url, root, _ = apiserver
    root_client = Client(ClientConfig(server=url, ca_file=str(root / "ca.crt"), cert_file=str(root / "cm.crt"),
                                      key_file=str(root / "cm.key"), user_agent="kube-controller-manager"))
    creds = ServiceAccountCredentials(root_client)
    try:
        assert await whoami(root_client) == "system:kube-controller-manager"
        replicaset = await creds.client_for("replicaset-controller")
        assert await creds.client_for("replicaset-controller") is replicaset
        assert await whoami(replicaset) == "system:serviceaccount:kube-system:replicaset-controller"
        account = await root_client.get(credentials.SERVICE_ACCOUNTS, "replicaset-controller", "kube-system")
        assert account["metadata"]["namespace"] == "kube-system"
        # the role upstream binds: pods yes, secrets no
        await replicaset.list(PODS, "default")
        with pytest.raises(Forbidden):
            await replicaset.list(SECRETS, "default")
        # a refresh replaces the token the client sends, without a new client
        source = replicaset.config.token_source
        assert source is not None
        before = source.token
        monkeypatch.setattr(credentials, "REFRESH_AT", 0.01)
        task = asyncio.create_task(creds._keep_fresh("replicaset-controller", source, 1.0))
        async def replaced() -> bool:
            return source.token != before

        try:
            await eventually(replaced, limit=10, interval=0.02, what="a refreshed token")
        finally:
            task.cancel()
        assert await whoami(replicaset) == "system:serviceaccount:kube-system:replicaset-controller"
    finally:
        await creds.close()
        await root_client.close()
