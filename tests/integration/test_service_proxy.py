"""services/proxy and pods/proxy against a real apiserver, with a loopback HTTP server as the endpoint.

The backend runs in this test process on 127.0.0.1; an Endpoints object points at it through a pod whose
status claims that IP, which is what the apiserver checks before it proxies (as upstream does).
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect
from websockets.sync.server import ServerConnection, serve

from services.runtime import pki
from tests.conftest import Kubectl
from tests.integration.test_authz import AUTHENTICATED, Cluster, _binding, _create, _eventually, _pki, _start

CHUNK = b"x" * (1 << 20)
BIG_MIB = 192


class Echo(BaseHTTPRequestHandler):
    """Answers every method with what it received; /big streams BIG_MIB MiB; /count counts an upload."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            data = b""
            while (size := int(self.rfile.readline().strip() or b"0", 16)):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return data
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _answer(self) -> None:
        if self.path.startswith("/redirect/"):
            port = self.server.server_address[1]
            where = {"abs": "/target/x/?y=1", "rel": "other", "host": f"http://127.0.0.1:{port}/t",
                     "elsewhere": "http://example.com/t"}[self.path.rsplit("/", 1)[1]]
            self.send_response(302)
            self.send_header("location", where)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if self.path.startswith("/big"):
            self.send_response(200)
            self.send_header("content-length", str(BIG_MIB * len(CHUNK)))
            self.end_headers()
            for _ in range(BIG_MIB):
                self.wfile.write(CHUNK)
            return
        if self.path.startswith("/count"):
            total = 0
            remaining = int(self.headers.get("content-length") or 0)
            while remaining:
                got = len(self.rfile.read(min(remaining, 1 << 20)))
                total += got
                remaining -= got
            body = json.dumps({"count": total}).encode()
        else:
            body = json.dumps({
                "method": self.command, "path": self.path, "body": self._body().decode(),
                "authorization": self.headers.get("authorization"), "x-custom": self.headers.get("x-custom"),
                "forwarded-for": self.headers.get("x-forwarded-for"),
            }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("x-backend", "echo")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _answer


def _serve(tls: ssl.SSLContext | None = None) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def backend() -> Iterator[int]:
    yield from _serve()


@pytest.fixture(scope="module")
def tls_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    ca = pki.create_ca("backend-ca")
    cert = pki.issue_serving_cert(ca, ["127.0.0.1"])
    root = tmp_path_factory.mktemp("tls-backend")
    cert.write(root / "b.crt", root / "b.key")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(root / "b.crt", root / "b.key")
    yield from _serve(ctx)


def _make_service(api: httpx.Client, ns: str, name: str, ports: list[tuple[str, int, int]],
                  pod_ip: str = "127.0.0.1", target_ref: bool = True) -> None:
    """A Service with `ports` (name, service port, backend port), its pod and a ready Endpoints subset."""
    base = f"/api/v1/namespaces/{ns}"
    assert api.post(f"{base}/services", json={"metadata": {"name": name}, "spec": {
        "ports": [{"name": n, "port": p, "targetPort": t} for n, p, t in ports]}}).status_code == 201
    pod = f"{name}-pod"
    r = api.post(f"{base}/pods", json={"metadata": {"name": pod}, "spec": {
        "containers": [{"name": "c", "image": "busybox"}]}})
    assert r.status_code == 201, r.text
    status = r.json()
    status["status"] = {"phase": "Running", "podIP": pod_ip, "podIPs": [{"ip": pod_ip}]}
    assert api.put(f"{base}/pods/{pod}/status", json=status).status_code == 200
    address: dict[str, Any] = {"ip": pod_ip}
    if target_ref:
        address["targetRef"] = {"kind": "Pod", "namespace": ns, "name": pod}
    r = api.post(f"{base}/endpoints", json={"metadata": {"name": name}, "subsets": [{
        "addresses": [address], "ports": [{"name": n, "port": t} for n, _, t in ports]}]})
    assert r.status_code == 201, r.text


@pytest.fixture
def api(apiserver: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=apiserver, timeout=60) as client:
        yield client


def _status(r: httpx.Response, code: int, message: str) -> None:
    assert r.status_code == code, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["code"] == code and body["message"] == message, body


def test_service_proxy_reaches_the_endpoint_by_port_name_and_number(api: httpx.Client, unique_ns: str,
                                                                    backend: int, kubectl: Kubectl) -> None:
    _make_service(api, unique_ns, "web", [("http", 80, backend)])
    base = f"/api/v1/namespaces/{unique_ns}/services"
    for ident in ("web:80", "web:http", "http:web:http"):
        r = api.get(f"{base}/{ident}/proxy/some/path", params={"a": "1", "b": "x y"},
                    headers={"x-custom": "kept", "authorization": "Bearer secret"})
        assert r.status_code == 200, r.text
        seen = r.json()
        assert seen["method"] == "GET" and seen["path"] == "/some/path?a=1&b=x+y"
        assert seen["x-custom"] == "kept" and seen["authorization"] is None, seen
        assert seen["forwarded-for"] == "127.0.0.1"
        assert r.headers["x-backend"] == "echo"
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        r = api.request(method, f"{base}/web:80/proxy/m", content=b"payload-" + method.encode())
        assert r.status_code == 200, r.text
        assert r.json() == {**r.json(), "method": method, "path": "/m", "body": f"payload-{method}"}
    r = api.head(f"{base}/web:80/proxy/")
    assert r.status_code == 200 and r.headers["x-backend"] == "echo" and r.content == b""
    raw = kubectl.run("get", "--raw", f"{base}/web:http/proxy/via-kubectl?q=1").stdout
    assert json.loads(raw)["path"] == "/via-kubectl?q=1"


def test_proxy_without_a_trailing_path_redirects(api: httpx.Client, unique_ns: str, backend: int) -> None:
    _make_service(api, unique_ns, "web", [("", 80, backend)])
    path = f"/api/v1/namespaces/{unique_ns}/services/web/proxy"
    r = api.get(path, params={"q": "1"})
    assert r.status_code == 301 and r.headers["location"] == f"{path}/?q=1"
    assert api.get(f"{path}/").json()["path"] == "/"


def test_redirects_come_back_through_the_proxy(api: httpx.Client, unique_ns: str, backend: int) -> None:
    _make_service(api, unique_ns, "web", [("", 80, backend)])
    prefix = f"/api/v1/namespaces/{unique_ns}/services/web/proxy"
    expected = {"abs": f"{prefix}/target/x/?y=1", "rel": "other", "host": f"{prefix}/t",
                "elsewhere": "http://example.com/t"}
    for case, location in expected.items():
        r = api.get(f"{prefix}/redirect/{case}")
        assert r.status_code == 302 and r.headers["location"] == location, (case, r.headers)


def test_websocket_upgrades_are_relayed(api: httpx.Client, apiserver: str, unique_ns: str) -> None:
    def echo(ws: ServerConnection) -> None:
        for message in ws:
            ws.send(f"{ws.request.path}:{message}")

    with serve(echo, "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        _make_service(api, unique_ns, "ws", [("", 80, server.socket.getsockname()[1])])
        url = apiserver.replace("http://", "ws://") + f"/api/v1/namespaces/{unique_ns}/services/ws/proxy/echo?x=1"
        with connect(url) as ws:
            ws.send("hello")
            assert ws.recv(timeout=10) == "/echo?x=1:hello"
        server.shutdown()


def test_https_scheme_skips_verification(api: httpx.Client, unique_ns: str, tls_backend: int) -> None:
    _make_service(api, unique_ns, "secure", [("https", 443, tls_backend)])
    r = api.get(f"/api/v1/namespaces/{unique_ns}/services/https:secure:https/proxy/tls")
    assert r.status_code == 200 and r.json()["path"] == "/tls", r.text


def test_service_proxy_errors_are_upstreams(api: httpx.Client, unique_ns: str, backend: int) -> None:
    base = f"/api/v1/namespaces/{unique_ns}/services"
    _status(api.get(f"{base}/nope:80/proxy/"), 404, 'services "nope" not found')
    _status(api.get(f"{base}/nope:http/proxy/"), 404, 'endpoints "nope" not found')
    _status(api.get(f"{base}/a:b:c:d/proxy/"), 400, 'invalid service request "a:b:c:d"')
    _status(api.get(f"{base}/ftp:web:80/proxy/"), 400, 'invalid service request "ftp:web:80"')
    _make_service(api, unique_ns, "web", [("http", 80, backend)])
    _status(api.get(f"{base}/web:81/proxy/"), 503, 'no service port 81 found for service "web"')
    _status(api.get(f"{base}/web:other/proxy/"), 503, 'no endpoints available for service "web:other"')
    assert api.post(f"{base}", json={"metadata": {"name": "empty"}, "spec": {"ports": [{"port": 80}]}}).is_success
    assert api.post(f"/api/v1/namespaces/{unique_ns}/endpoints", json={"metadata": {"name": "empty"}}).is_success
    _status(api.get(f"{base}/empty:80/proxy/"), 503, 'no endpoints available for service "empty"')
    # An address whose pod does not hold its IP, or that names no pod, is never proxied to.
    _make_service(api, unique_ns, "stale", [("", 80, backend)], target_ref=False)
    _status(api.get(f"{base}/stale/proxy/"), 503, 'no endpoints available for service "stale"')


@contextlib.contextmanager
def socket_bound() -> Iterator[int]:
    """A port that refuses connections: bound, never listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def test_a_dead_backend_is_a_status(api: httpx.Client, unique_ns: str) -> None:
    with socket_bound() as port:
        _make_service(api, unique_ns, "dead", [("", 80, port)])
        r = api.get(f"/api/v1/namespaces/{unique_ns}/services/dead/proxy/")
    assert r.status_code == 500, r.text
    assert r.json()["message"] == f"error trying to reach service: dial tcp 127.0.0.1:{port}: connect: " \
        "connection refused", r.text


def test_pod_proxy_errors_are_upstreams(api: httpx.Client, unique_ns: str) -> None:
    base = f"/api/v1/namespaces/{unique_ns}/pods"
    _status(api.get(f"{base}/missing:8080/proxy/"), 404, 'pods "missing" not found')
    _status(api.get(f"{base}/a:b:c:d/proxy/"), 400, 'invalid pod request "a:b:c:d"')
    assert api.post(base, json={"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "busybox"}]}}).status_code == 201
    _status(api.get(f"{base}/p:8080/proxy/"), 400, "address not allowed")
    pod = api.get(f"{base}/p").json()
    pod["status"] = {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}
    assert api.put(f"{base}/p/status", json=pod).status_code == 200
    _status(api.get(f"{base}/p:8080/proxy/"), 400, "address not allowed")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_large_bodies_stream_both_ways(api: httpx.Client, apiserver_process: Any, unique_ns: str,
                                       backend: int) -> None:
    _make_service(api, unique_ns, "big", [("", 80, backend)])
    path = f"/api/v1/namespaces/{unique_ns}/services/big/proxy"
    pid = apiserver_process.proc.pid
    before = _rss_kib(pid)
    peak = before
    received = 0
    with api.stream("GET", f"{path}/big") as r:
        assert r.status_code == 200
        for chunk in r.iter_raw():
            received += len(chunk)
            if received % (16 << 20) < len(chunk):
                peak = max(peak, _rss_kib(pid))
    assert received == BIG_MIB << 20

    def upload() -> Iterator[bytes]:
        nonlocal peak
        for i in range(BIG_MIB):
            if i % 16 == 0:
                peak = max(peak, _rss_kib(pid))
            yield CHUNK

    r = api.post(f"{path}/count", content=upload(), headers={"content-length": str(BIG_MIB << 20)})
    assert r.status_code == 200 and r.json() == {"count": BIG_MIB << 20}, r.text
    print(f"apiserver RSS grew by {(peak - before) / 1024:.1f} MiB proxying {BIG_MIB} MiB each way")
    assert (peak - before) < 64 * 1024, f"apiserver grew by {(peak - before) // 1024} MiB proxying {BIG_MIB} MiB"


@pytest.fixture(scope="module")
def rbac_cluster(etcd_server: str, workdir: Path) -> Iterator[Cluster]:
    root = workdir / "proxy-rbac"
    root.mkdir(parents=True, exist_ok=True)
    ca, _, _, admin = _pki(root)
    process, secure = _start(etcd_server, root)
    try:
        yield Cluster(secure, process.url, ca, admin, root, process)
    finally:
        process.stop()


def test_rbac_maps_methods_to_proxy_verbs(rbac_cluster: Cluster, backend: int) -> None:
    ns = f"proxy-{uuid.uuid4().hex[:6]}"
    with rbac_cluster.client("admin") as admin:
        _create(admin, "/api/v1/namespaces", {"metadata": {"name": ns}})
        _make_service(admin, ns, "web", [("", 80, backend)])
        _create(admin, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
            "metadata": {"name": "proxy-get"}, "rules": [
                {"verbs": ["get"], "apiGroups": [""], "resources": ["services/proxy"]},
                {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["services", "pods"]}]})
        _create(admin, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", _binding(
            "proxy-get", "proxy-get", [{"kind": "User", "name": "jane", "apiGroup": "rbac.authorization.k8s.io"}]))
        _create(admin, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
            "metadata": {"name": "proxy-create"}, "rules": [
                {"verbs": ["create"], "apiGroups": [""], "resources": ["services/proxy"]}]})
        _create(admin, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", _binding(
            "proxy-create", "proxy-create", [AUTHENTICATED]))
    path = f"/api/v1/namespaces/{ns}/services/web/proxy/x"
    with rbac_cluster.client("jane") as jane, rbac_cluster.client("bob") as bob:
        _eventually(lambda: jane.get(path).status_code == 200)
        assert jane.post(path, content=b"a").status_code == 200
        for method in ("PUT", "PATCH", "DELETE"):
            r = jane.request(method, path)
            assert r.status_code == 403, r.text
            verb = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
            assert f'cannot {verb} resource "services/proxy"' in r.json()["message"], r.text
        r = bob.get(path)
        assert r.status_code == 403 and 'cannot get resource "services/proxy"' in r.json()["message"], r.text
        assert bob.post(path, content=b"b").json()["method"] == "POST"
        r = jane.get(f"/api/v1/namespaces/{ns}/pods/web-pod/proxy/")
        assert r.status_code == 403 and 'resource "pods/proxy"' in r.json()["message"], r.text
