"""The ASGI application: routes, error bodies, health and metrics."""

from __future__ import annotations

import platform
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from apiserver.endpoints import discovery, openapi, proxy
from apiserver.endpoints.resources import ResourceHandler, parse_path
from services.api import errors

log = structlog.get_logger("apiserver.http")

_POD_STREAM = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/(log|exec|attach|portforward)$")
_NODE_PROXY = re.compile(r"^/api/v1/nodes/([^/]+)/proxy(?:/(.*))?$")

KUBE_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-pyk8s.0"}


def _status_response(err: errors.StatusError) -> Response:
    return Response(orjson.dumps(err.to_status()), err.code, media_type="application/json")


def version_info() -> dict[str, Any]:
    return {
        **KUBE_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-11-30T00:00:00Z",
        "goVersion": f"python{platform.python_version()}",
        "compiler": platform.python_implementation().lower(),
        "platform": f"linux/{'arm64' if platform.machine() == 'aarch64' else 'amd64'}",
    }


def create_app(server: Any) -> FastAPI:
    """Build the app around a running `apiserver.server.APIServer`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await server.start()
        try:
            yield
        finally:
            await server.stop()

    app = FastAPI(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)
    app.state.server = server
    app.state.catalog = server.catalog
    app.state.catalog_generation = 0

    def catalog_changed() -> None:
        app.state.catalog_generation += 1

    server.on_catalog_change = catalog_changed

    @app.exception_handler(errors.StatusError)
    async def status_error(request: Request, exc: errors.StatusError) -> Response:
        return _status_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            return _status_response(errors.method_not_allowed())
        return _status_response(errors.StatusError(
            exc.status_code, "NotFound" if exc.status_code == 404 else "BadRequest",
            "the server could not find the requested resource" if exc.status_code == 404 else str(exc.detail),
            {} if exc.status_code == 404 else None,
        ))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", path=request.url.path, method=request.method)
        return _status_response(errors.internal(f"{type(exc).__name__}: {exc}"))

    handler = ResourceHandler(server.stores, server.tokens)
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

    async def serve(request: Request, legacy: bool, path: str) -> Response:
        if not server.ready:
            raise errors.StatusError(503, "ServiceUnavailable", "the apiserver is starting")
        parts = [p for p in path.split("/") if p] if path else []
        target = parse_path(server.catalog, legacy, parts)
        if target is None:
            if request.method != "GET":
                raise errors.method_not_allowed()
            return discovery_response(request, legacy, parts)
        if request.method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise errors.method_not_allowed()
        return await handler.handle(request, target)

    def discovery_response(request: Request, legacy: bool, parts: list[str]) -> Response:
        catalog = server.catalog
        accept = request.headers.get("accept")
        if not parts:
            agg = discovery.wants_aggregated(accept)
            if agg is not None:
                version, content_type = agg
                body = discovery.aggregated(catalog, legacy, version)
                return Response(orjson.dumps(body), 200, media_type=content_type)
            if legacy:
                host = request.headers.get("host", "")
                return Response(orjson.dumps(discovery.api_versions(host)), media_type="application/json")
            return Response(orjson.dumps(discovery.api_group_list(catalog)), media_type="application/json")
        doc: dict[str, Any] | None
        if legacy:
            doc = discovery.api_resource_list(catalog, "", parts[0]) if len(parts) == 1 else None
        elif len(parts) == 1:
            doc = discovery.api_group_doc(catalog, parts[0])
        else:
            doc = discovery.api_resource_list(catalog, parts[0], parts[1])
        if doc is None:
            raise errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})
        return Response(orjson.dumps(doc), media_type="application/json")

    @app.api_route("/api", methods=methods)
    async def api_root(request: Request) -> Response:
        return await serve(request, True, "")

    @app.api_route("/api/{path:path}", methods=methods)
    async def api_path(request: Request, path: str) -> Response:
        return await serve(request, True, path)

    @app.api_route("/apis", methods=methods)
    async def apis_root(request: Request) -> Response:
        return await serve(request, False, "")

    @app.api_route("/apis/{path:path}", methods=methods)
    async def apis_path(request: Request, path: str) -> Response:
        return await serve(request, False, path)

    @app.get("/version")
    async def version() -> Response:
        return Response(orjson.dumps(version_info()), media_type="application/json")

    async def health(request: Request, checks: dict[str, bool]) -> Response:
        failed = [name for name, ok in checks.items() if not ok]
        verbose = "verbose" in request.query_params
        if verbose:
            lines = [f"[{'-' if name in failed else '+'}]{name} {'failed' if name in failed else 'ok'}"
                     for name in checks]
            lines.append("healthz check failed" if failed else "healthz check passed")
            return Response("\n".join(lines) + "\n", 500 if failed else 200, media_type="text/plain")
        return Response("ok" if not failed else "healthz check failed", 500 if failed else 200,
                        media_type="text/plain")

    @app.get("/healthz")
    async def healthz(request: Request) -> Response:
        return await health(request, {"ping": True, "etcd": server.etcd_healthy})

    @app.get("/livez")
    async def livez(request: Request) -> Response:
        return await health(request, {"ping": True})

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        return await health(request, {"ping": True, "etcd": server.etcd_healthy, "informer-sync": server.ready,
                                      "poststarthook/bootstrap": server.bootstrapped})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(openapi.router)
    app.state.serve = serve
    return app


class APIApp:
    """The ASGI entry point: resource paths go straight to the handler, the rest through FastAPI.

    Resource requests are the hot path; skipping the framework's routing and
    middleware stack for them roughly doubles request throughput.
    """

    def __init__(self, server: Any, kubelet: proxy.KubeletClientConfig = proxy.DEFAULT_CONFIG) -> None:
        self.app = create_app(server)
        self.server = server
        self.serve = self.app.state.serve
        self.state = self.app.state
        self.kubelet = kubelet

    async def _streams(self, scope: dict[str, Any], receive: Any, send: Any) -> bool:
        """Pod logs, exec, attach, port-forward and node proxying, relayed to the node's kubelet."""
        path: str = scope["path"]
        pod_match = _POD_STREAM.match(path)
        node_match = None if pod_match else _NODE_PROXY.match(path)
        if pod_match is None and node_match is None:
            return False
        try:
            if not self.server.ready:
                raise errors.StatusError(503, "ServiceUnavailable", "the apiserver is starting")
            nodes = self.server.store("", "v1", "nodes")
            if pod_match is not None:
                namespace, name, subresource = pod_match.groups()
                pod = await self.server.store("", "v1", "pods").get(namespace, name)
                node_name = (pod.get("spec") or {}).get("nodeName")
                node = await nodes.get(None, node_name) if node_name else None
            else:
                node = await nodes.get(None, node_match.group(1))
        except errors.StatusError as exc:
            if scope["type"] == "websocket":
                await send({"type": "websocket.http.response.start", "status": exc.code,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "websocket.http.response.body", "body": orjson.dumps(exc.to_status())})
            else:
                await _status_response(exc)(scope, receive, send)
            return True
        if pod_match is not None:
            await proxy.proxy_pod_subresource(scope, receive, send, pod, node, subresource, self.kubelet)
        else:
            await proxy.proxy_node(scope, receive, send, node, node_match.group(2) or "", self.kubelet)
        return True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and await self._streams(scope, receive, send):
            return
        if scope["type"] == "http":
            path: str = scope["path"]
            legacy = path == "/api" or path.startswith("/api/")
            if legacy or path == "/apis" or path.startswith("/apis/"):
                request = Request(scope, receive)
                try:
                    response = await self.serve(request, legacy, path[4:] if legacy else path[5:])
                except errors.StatusError as exc:
                    response = _status_response(exc)
                except Exception as exc:  # noqa: BLE001 - every failure must still be a Status
                    log.exception("unhandled error", path=path, method=scope.get("method"))
                    response = _status_response(errors.internal(f"{type(exc).__name__}: {exc}"))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
