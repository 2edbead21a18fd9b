"""What `pyk8s up` gives a joining machine, end to end: the public cluster-info ConfigMap with the CA and
the API's address, signed by the bootstrapsigner with a token `pyk8s token create` made, and that
token authenticating to the apiserver (`--enable-bootstrap-token-auth` on up's apiserver)."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import jwt
import pytest
import yaml

from tests.e2e.test_pyk8s_cli import free_port, pyk8s, up

CLUSTER_INFO = "/api/v1/namespaces/kube-public/configmaps/cluster-info"


@pytest.fixture
async def state_dir(tmp_path: Path) -> AsyncIterator[Path]:
    directory = tmp_path / "state"
    yield directory
    await pyk8s("down", "--state-dir", str(directory))


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
async def test_up_serves_signed_cluster_info_and_bootstrap_tokens_authenticate(state_dir: Path) -> None:
    port = free_port()
    await up(state_dir, "--port", str(port))
    code, out, err = await pyk8s("token", "create", "--state-dir", str(state_dir), "--ttl", "10m")
    assert code == 0, err
    token = out.strip()
    token_id, secret = token.split(".")
    server = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(state_dir / "pki" / "ca.crt"))
    async with httpx.AsyncClient(base_url=server, verify=context, timeout=10) as anonymous:
        deadline = asyncio.get_running_loop().time() + 30
        data: dict[str, str] = {}
        while asyncio.get_running_loop().time() < deadline:
            r = await anonymous.get(CLUSTER_INFO)
            assert r.status_code == 200, r.text
            data = r.json()["data"]
            if f"jws-kubeconfig-{token_id}" in data:
                break
            await asyncio.sleep(0.3)
        assert f"jws-kubeconfig-{token_id}" in data, data
        cluster = yaml.safe_load(data["kubeconfig"])["clusters"][0]["cluster"]
        assert base64.b64decode(cluster["certificate-authority-data"]) == (state_dir / "pki" / "ca.crt").read_bytes()
        assert cluster["server"] == server
        header, _, signature = data[f"jws-kubeconfig-{token_id}"].split(".")
        payload = base64.urlsafe_b64encode(data["kubeconfig"].encode()).decode().rstrip("=")
        assert jwt.api_jws.decode(f"{header}.{payload}.{signature}", secret, algorithms=["HS256"]).decode() == \
            data["kubeconfig"]
        r = await anonymous.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                 json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                                 headers={"authorization": f"Bearer {token}"})
        assert r.status_code == 201, r.text
        assert r.json()["status"]["userInfo"]["username"] == f"system:bootstrap:{token_id}"
