"""TokenRequest, TokenReview and the review APIs against a real apiserver."""

from __future__ import annotations

import base64
import uuid

import httpx
import orjson

from tests.conftest import Kubectl, eventually


def test_token_request_and_review(apiserver: str) -> None:
    ns = f"tok-{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=apiserver) as c:
        assert c.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
        sa = c.post(f"/api/v1/namespaces/{ns}/serviceaccounts", json={"metadata": {"name": "bot"}}).json()
        r = c.post(f"/api/v1/namespaces/{ns}/serviceaccounts/bot/token",
                   json={"spec": {"audiences": ["vault"], "expirationSeconds": 700}})
        assert r.status_code == 201, r.text
        token = r.json()["status"]["token"]
        assert r.json()["status"]["expirationTimestamp"].endswith("Z")
        review = c.post("/apis/authentication.k8s.io/v1/tokenreviews",
                        json={"spec": {"token": token, "audiences": ["vault"]}}).json()["status"]
        assert review["authenticated"] is True
        assert review["user"]["username"] == f"system:serviceaccount:{ns}:bot"
        assert review["user"]["uid"] == sa["metadata"]["uid"]
        assert f"system:serviceaccounts:{ns}" in review["user"]["groups"]
        wrong = c.post("/apis/authentication.k8s.io/v1/tokenreviews",
                       json={"spec": {"token": token, "audiences": ["other"]}}).json()["status"]
        assert wrong["authenticated"] is False and "audiences" in wrong["error"]
        forged = c.post("/apis/authentication.k8s.io/v1/tokenreviews",
                        json={"spec": {"token": token[:-4] + "AAAA"}}).json()["status"]
        assert forged["authenticated"] is False
        too_short = c.post(f"/api/v1/namespaces/{ns}/serviceaccounts/bot/token",
                           json={"spec": {"expirationSeconds": 60}})
        assert too_short.status_code == 422
        for garbage in ({"spec": "x"}, {"spec": {"boundObjectRef": 7}}, {"spec": {"audiences": [1]}}, [1]):
            bad = c.post(f"/api/v1/namespaces/{ns}/serviceaccounts/bot/token", json=garbage)
            assert bad.status_code == 400 and bad.json()["kind"] == "Status", bad.text
        for path in ("authentication.k8s.io/v1/tokenreviews", "authorization.k8s.io/v1/subjectaccessreviews"):
            bad = c.post(f"/apis/{path}", json={"spec": [1]})
            assert bad.status_code == 400 and bad.json()["kind"] == "Status", bad.text
        missing = c.post(f"/api/v1/namespaces/{ns}/serviceaccounts/nobody/token", json={"spec": {}})
        assert missing.status_code == 404
        fresh = c.post(f"/api/v1/namespaces/{ns}/serviceaccounts/bot/token", json={}).json()["status"]["token"]
        me = c.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json={},
                    headers={"authorization": f"Bearer {fresh}"})
        assert me.json()["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:bot"


def test_access_reviews_with_kubectl(kubectl: Kubectl) -> None:
    assert kubectl.run("auth", "can-i", "create", "pods").stdout.strip() == "yes"
    assert "*.*" in kubectl.run("auth", "can-i", "--list").stdout
    # The plain-HTTP test port stands for upstream's old insecure port: system:unsecured, a system:master.
    assert "system:unsecured" in kubectl.run("auth", "whoami").stdout


def _claims(token: str) -> dict:
    payload = token.split(".")[1]
    return orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


async def test_token_bound_to_a_pod_names_its_node_when_the_node_exists(apiserver: str) -> None:
    ns = f"tok-{uuid.uuid4().hex[:6]}"
    node_name = f"{ns}-node"
    container = {"name": "c", "image": "busybox"}
    async with httpx.AsyncClient(base_url=apiserver) as c:
        assert (await c.post("/api/v1/namespaces", json={"metadata": {"name": ns}})).status_code == 201
        sa = await c.post(f"/api/v1/namespaces/{ns}/serviceaccounts", json={"metadata": {"name": "bot"}})
        assert sa.status_code == 201
        node = (await c.post("/api/v1/nodes", json={"metadata": {"name": node_name}})).json()
        try:
            for pod, on in (("placed", node_name), ("stray", f"{ns}-gone")):
                created = await c.post(f"/api/v1/namespaces/{ns}/pods", json={
                    "metadata": {"name": pod}, "spec": {"nodeName": on, "containers": [container]}})
                assert created.status_code == 201, created.text

            async def cached() -> bool:
                # The token names the node the watch cache holds, as upstream's reads its node informer.
                r = await c.get(f"/api/v1/nodes/{node_name}", params={"resourceVersion": "0"})
                return r.status_code == 200

            await eventually(cached, what="the node in the watch cache")
            tokens = {}
            for pod in ("placed", "stray"):
                r = await c.post(f"/api/v1/namespaces/{ns}/serviceaccounts/bot/token",
                                 json={"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod}}})
                assert r.status_code == 201, r.text
                tokens[pod] = _claims(r.json()["status"]["token"])["kubernetes.io"]
            assert tokens["placed"]["pod"]["name"] == "placed"
            assert tokens["placed"]["node"] == {"name": node_name, "uid": node["metadata"]["uid"]}
            assert tokens["stray"]["pod"]["name"] == "stray" and "node" not in tokens["stray"]
        finally:
            await c.delete(f"/api/v1/nodes/{node_name}")
            await c.delete(f"/api/v1/namespaces/{ns}")
