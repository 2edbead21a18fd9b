"""Kubeconfig / in-cluster loading, typed errors, paths, retries and watch decoding of the client."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ssl
from pathlib import Path

import httpx
import orjson
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from services.api.catalog import Catalog
from services.api.errors import StatusError
from services.client import (
    AlreadyExists,
    Client,
    ClientConfig,
    ConfigError,
    Conflict,
    Gone,
    InternalError,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    error_from_response,
    gvr,
    in_cluster_config,
    load_config,
    load_kubeconfig,
    resource_path,
)

CATALOG = Catalog()
PODS = CATALOG.get("", "v1", "pods")
NODES = CATALOG.get("", "v1", "nodes")
DEPLOYMENTS = CATALOG.get("apps", "v1", "deployments")


def _self_signed(cn: str) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return cert_pem, key_pem


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _write(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def pki() -> tuple[str, str]:
    return _self_signed("admin")


def _kubeconfig(ca_pem: str, cert_pem: str, key_pem: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "admin@local",
        "clusters": [
            {"name": "local", "cluster": {"server": "https://127.0.0.1:6443/",
                                          "certificate-authority-data": _b64(ca_pem)}},
            {"name": "other", "cluster": {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True,
                                          "tls-server-name": "kubernetes"}},
        ],
        "users": [
            {"name": "admin", "user": {"client-certificate-data": _b64(cert_pem),
                                       "client-key-data": _b64(key_pem)}},
            {"name": "robot", "user": {"token": "s3cret"}},
            {"name": "files", "user": {"tokenFile": "token.txt", "client-certificate": "certs/c.pem"}},
        ],
        "contexts": [
            {"name": "admin@local", "context": {"cluster": "local", "user": "admin", "namespace": "kube-system"}},
            {"name": "robot@other", "context": {"cluster": "other", "user": "robot"}},
            {"name": "files@local", "context": {"cluster": "local", "user": "files"}},
            {"name": "broken", "context": {"cluster": "missing", "user": "robot"}},
        ],
    }


def test_current_context_with_inline_certificates(tmp_path: Path, pki: tuple[str, str]) -> None:
    cert_pem, key_pem = pki
    path = _write(tmp_path / "config", _kubeconfig(cert_pem, cert_pem, key_pem))
    cfg = load_kubeconfig(str(path))
    assert cfg.server == "https://127.0.0.1:6443"
    assert cfg.namespace == "kube-system"
    assert cfg.ca_data == cert_pem
    assert cfg.cert_data == cert_pem and cfg.key_data == key_pem
    ctx = cfg.ssl_context()
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert len(ctx.get_ca_certs()) == 1
    assert cfg.auth() is None


def test_named_context_token_and_insecure(tmp_path: Path, pki: tuple[str, str]) -> None:
    cert_pem, key_pem = pki
    path = _write(tmp_path / "config", _kubeconfig(cert_pem, cert_pem, key_pem))
    cfg = load_kubeconfig(str(path), context="robot@other")
    assert cfg.server == "https://10.0.0.1:6443"
    assert cfg.token == "s3cret"
    assert cfg.namespace == "default"
    assert cfg.tls_server_name == "kubernetes"
    ctx = cfg.ssl_context()
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_NONE
    request = httpx.Request("GET", "https://10.0.0.1:6443/api")
    flow = cfg.auth().sync_auth_flow(request)  # type: ignore[union-attr]
    assert next(flow).headers["Authorization"] == "Bearer s3cret"


def test_relative_paths_resolve_against_the_file(tmp_path: Path, pki: tuple[str, str]) -> None:
    cert_pem, key_pem = pki
    sub = tmp_path / "conf"
    sub.mkdir()
    (sub / "token.txt").write_text("from-file\n")
    path = _write(sub / "config", _kubeconfig(cert_pem, cert_pem, key_pem))
    cfg = load_kubeconfig(str(path), context="files@local")
    assert cfg.token == "from-file"
    assert cfg.token_file == str(sub / "token.txt")
    assert cfg.cert_file == str(sub / "certs" / "c.pem")


def test_missing_context_or_cluster_is_an_error(tmp_path: Path, pki: tuple[str, str]) -> None:
    cert_pem, key_pem = pki
    path = _write(tmp_path / "config", _kubeconfig(cert_pem, cert_pem, key_pem))
    with pytest.raises(ConfigError, match='context "nope" does not exist'):
        load_kubeconfig(str(path), context="nope")
    with pytest.raises(ConfigError, match='cluster "missing" does not exist'):
        load_kubeconfig(str(path), context="broken")


def test_kubeconfig_env_list_merges_first_wins(tmp_path: Path) -> None:
    first = _write(tmp_path / "a", {
        "clusters": [{"name": "c", "cluster": {"server": "http://first:1"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c"}}],
    })
    second = _write(tmp_path / "b", {
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "http://second:2"}},
                     {"name": "d", "cluster": {"server": "http://d:3"}}],
        "contexts": [{"name": "y", "context": {"cluster": "d"}}],
    })
    env = {"KUBECONFIG": f"{first}:{tmp_path / 'absent'}:{second}"}
    assert load_kubeconfig(environ=env).server == "http://first:1"
    assert load_kubeconfig(context="y", environ=env).server == "http://d:3"


def test_in_cluster_config(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_text("ca")
    (tmp_path / "namespace").write_text("team-a")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    cfg = in_cluster_config(tmp_path, env)
    assert cfg.server == "https://10.96.0.1:443"
    assert cfg.token == "sa-token" and cfg.token_file == str(tmp_path / "token")
    assert cfg.ca_file == str(tmp_path / "ca.crt")
    assert cfg.namespace == "team-a"
    v6 = in_cluster_config(tmp_path, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"})
    assert v6.server == "https://[fd00::1]:443"
    with pytest.raises(ConfigError):
        in_cluster_config(tmp_path, {})


def test_token_file_is_reread(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    auth = ClientConfig(server="https://x", token_file=str(token)).auth()
    request = httpx.Request("GET", "https://x/api")
    assert next(auth.sync_auth_flow(request)).headers["Authorization"] == "Bearer one"  # type: ignore[union-attr]
    token.write_text("two")
    auth._read_at = 0.0  # type: ignore[union-attr]  # as if the refresh interval had passed
    assert next(auth.sync_auth_flow(request)).headers["Authorization"] == "Bearer two"  # type: ignore[union-attr]


def test_load_config_precedence(tmp_path: Path) -> None:
    path = _write(tmp_path / "config", {
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "http://from-file:1"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c"}}],
    })
    assert load_config(str(path), environ={}).server == "http://from-file:1"
    assert load_config(str(path), master="http://override:9/", environ={}).server == "http://override:9"
    nothing = {"KUBECONFIG": str(tmp_path / "absent")}
    assert load_config(master="http://127.0.0.1:8080", environ=nothing).server == "http://127.0.0.1:8080"
    with pytest.raises(ConfigError):
        load_config(environ=nothing)


def test_resource_paths() -> None:
    assert resource_path(PODS, "ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert resource_path(PODS) == "/api/v1/pods"
    assert resource_path(NODES, "ignored", "n1") == "/api/v1/nodes/n1"
    assert resource_path(DEPLOYMENTS, "d", "web", "scale") == "/apis/apps/v1/namespaces/d/deployments/web/scale"
    assert resource_path(gvr("example.com/v1alpha1", "widgets", False)) == "/apis/example.com/v1alpha1/widgets"


def _status(code: int, reason: str, message: str = "m") -> bytes:
    return orjson.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                         "reason": reason, "message": message, "details": {"name": "x", "kind": "pods"}})


def test_errors_from_status_bodies() -> None:
    err = error_from_response(404, _status(404, "NotFound", 'pods "x" not found'))
    assert isinstance(err, NotFound) and isinstance(err, StatusError)
    assert err.message == 'pods "x" not found' and err.details == {"name": "x", "kind": "pods"}
    assert isinstance(error_from_response(409, _status(409, "AlreadyExists")), AlreadyExists)
    assert isinstance(error_from_response(409, _status(409, "Conflict")), Conflict)
    assert isinstance(error_from_response(422, _status(422, "Invalid")), Invalid)
    assert isinstance(error_from_response(410, _status(410, "Expired")), Gone)
    assert isinstance(error_from_response(500, _status(500, "InternalError")), InternalError)
    assert isinstance(error_from_response(502, b"bad gateway"), ServerError)
    plain = error_from_response(404, b"404 page not found")
    assert isinstance(plain, NotFound)
    assert plain.message.startswith("the server could not find the requested resource")
    throttled = error_from_response(429, _status(429, "TooManyRequests"), httpx.Headers({"Retry-After": "3"}))
    assert isinstance(throttled, TooManyRequests) and throttled.retry_after == 3.0


def _client(handler, **kwargs) -> Client:  # type: ignore[no-untyped-def]
    return Client(ClientConfig(server="http://apiserver.test"), transport=httpx.MockTransport(handler),
                  backoff_base=0.001, **kwargs)


async def test_retries_throttled_and_idempotent_server_errors() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if len(calls) == 1:
            return httpx.Response(429, headers={"Retry-After": "0"}, content=_status(429, "TooManyRequests"))
        if len(calls) == 2:
            return httpx.Response(503, content=_status(503, "ServiceUnavailable"))
        return httpx.Response(200, json={"kind": "Pod", "metadata": {"name": "x"}})

    async with _client(handler) as client:
        pod = await client.get(PODS, "x", "default")
    assert pod["metadata"]["name"] == "x"
    assert calls == ["GET", "GET", "GET"]


async def test_server_errors_on_writes_are_not_retried() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        return httpx.Response(500, content=_status(500, "InternalError"))

    async with _client(handler) as client:
        with pytest.raises(InternalError):
            await client.create(PODS, {"metadata": {"name": "x"}}, "default")
    assert calls == ["POST"]


async def test_retries_give_up_after_max() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ConnectError("refused", request=request)

    async with _client(handler, max_retries=2) as client:
        with pytest.raises(httpx.ConnectError):
            await client.list(PODS)
    assert calls == 3


async def test_request_shapes() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"kind": "Status", "status": "Success"})

    async with _client(handler) as client:
        await client.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 2}}, "d", patch_type="strategic")
        await client.patch(DEPLOYMENTS, "web", {"apiVersion": "apps/v1"}, "d", patch_type="apply",
                           field_manager="me", force=True)
        await client.delete(PODS, "p", "d", propagation_policy="Foreground", grace_period_seconds=0,
                            preconditions={"uid": "u1"})
        await client.list(PODS, "d", label_selector={"app": "web"}, limit=5, continue_="tok")
    strategic, apply, delete, listing = seen
    assert strategic.headers["content-type"] == "application/strategic-merge-patch+json"
    assert apply.headers["content-type"] == "application/apply-patch+yaml"
    assert apply.url.params["fieldManager"] == "me" and apply.url.params["force"] == "true"
    assert orjson.loads(delete.content) == {"kind": "DeleteOptions", "apiVersion": "v1",
                                            "propagationPolicy": "Foreground", "gracePeriodSeconds": 0,
                                            "preconditions": {"uid": "u1"}}
    assert listing.url.path == "/api/v1/namespaces/d/pods"
    assert dict(listing.url.params) == {"labelSelector": "app=web", "limit": "5", "continue": "tok"}


async def test_watch_decodes_lines_and_raises_gone_on_410_error_event() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "5"}}
    lines = [
        {"type": "ADDED", "object": pod},
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "7"}}},
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                     "message": "too old resource version: 1 (7)"}},
    ]
    body = b"".join(orjson.dumps(line) + b"\n" for line in lines)

    class Chunked(httpx.AsyncByteStream):
        """7-byte chunks, so events arrive split mid-object and must be reassembled."""

        async def __aiter__(self):  # type: ignore[no-untyped-def]
            for i in range(0, len(body), 7):
                yield body[i : i + 7]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params["watch"] == "true"
        assert request.url.params["allowWatchBookmarks"] == "true"
        return httpx.Response(200, stream=Chunked())

    seen = []
    async with _client(handler) as client:
        with pytest.raises(Gone, match="too old resource version"):
            async with client.watch(PODS, resource_version="1", timeout_seconds=30) as stream:
                async for event in stream:
                    seen.append(event)
    assert seen == [("ADDED", pod), ("BOOKMARK", lines[1]["object"])]


async def test_qps_limit_spaces_requests() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"kind": "PodList", "items": []})

    limited = Client(ClientConfig(server="http://apiserver.test", qps=20, burst=1),
                     transport=httpx.MockTransport(handler))
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with limited:
        for _ in range(6):
            await limited.list(PODS)
    assert loop.time() - start >= 0.24, "6 requests at 20 qps with burst 1 take at least 5 intervals"
