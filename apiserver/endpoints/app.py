"""The apiserver's front door: one request from the socket to the resource's store.

`APIApp.__call__` is the handler chain, in upstream's order (DefaultBuildHandlerChain, outermost
first): authenticate, audit, impersonate, max-in-flight, authorize. An authorized request then goes to
the node and pod streams and proxies, to `APIPaths.serve` for everything under `/api` and `/apis`
(discovery, reviews, ComponentStatus, then `ResourceHandler`: decode the body once, size and depth
capped, and run the verb on the resource's `RESTStore` or subresource REST object; the store runs the
request's guards (RBAC escalation, CSR signers and subjects) on the object it would write, then
mutating admission, the strategy, validating admission, and writes to etcd), and to the FastAPI app of
`create_app` for the rest (version, health, metrics, OpenAPI).
"""

from __future__ import annotations

import platform
import re
import time
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import orjson
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from apiserver.admission import request as admission_request
from apiserver.audit.recorder import Auditor
from apiserver.auth import reviews
from apiserver.auth.authn import (
    Authenticator,
    Credentials,
    impersonate,
    load_token_file,
    peer_certificate,
    read_credentials,
)
from apiserver.auth.authz import (
    ALLOW,
    AlwaysAllow,
    AlwaysDeny,
    Attributes,
    Chain,
    forbidden,
    request_attributes,
    split_path,
)
from apiserver.auth.bootstrap_policy import node_rules
from apiserver.auth.bootstraptoken import BootstrapTokenAuthenticator
from apiserver.auth.node_authorizer import NodeAuthorizer, NodeGraph
from apiserver.auth.rbac import RBAC_GROUP, RBACAuthorizer, escalation_allowed
from apiserver.endpoints.handlers import discovery, proxy
from apiserver.endpoints.handlers.resources import Guard, ResourceHandler, Target, parse_path
from apiserver.endpoints.openapi import spec as openapi
from apiserver.endpoints.serialization import fieldvalidation, typecheck
from apiserver.endpoints.serialization.negotiation import body_read, decode_body, decoded_body, negotiate, read_body
from apiserver.registry import certificates, componentstatus
from apiserver.serving.inflight import MaxInFlight, long_running, too_many_requests
from services.api import errors
from services.auth.identity import MASTERS, UserInfo

log = structlog.get_logger("apiserver.http")

_POD_STREAM = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/(log|exec|attach|portforward)$")
_NODE_PROXY = re.compile(r"^/api/v1/nodes/([^/]+)/proxy(?:/(.*))?$")
_OBJECT_PROXY = re.compile(r"^/api/v1/namespaces/([^/]+)/(services|pods)/([^/]+)/proxy(/.*)?$")

KUBE_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-pyk8s.0"}
REVIEW_GROUPS = ("authentication.k8s.io", "authorization.k8s.io")
_UPGRADE_SUBRESOURCES = ("exec", "attach", "portforward")


def _status_response(err: errors.StatusError) -> Response:
    # A body refused for its size was left unread: close the connection after the answer, as Go's server
    # does, instead of reading (and discarding) the rest to keep the connection alive.
    headers = {"connection": "close"} if err.code == 413 else None
    return Response(orjson.dumps(err.to_status()), err.code, headers=headers, media_type="application/json")


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
    """The paths outside `/api` and `/apis` (version, health, metrics, OpenAPI) and the lifespan that
    starts and stops the `apiserver.server.APIServer`."""

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
    return app


def build_authorizer(server: Any) -> tuple[Chain, RBACAuthorizer]:
    """The --authorization-mode chain, in the order given, and the RBAC authorizer (whether in the
    chain or not: the escalation guard asks it what a user holds)."""
    rbac = RBACAuthorizer(*(server.store(RBAC_GROUP, "v1", plural).cache
                            for plural in ("roles", "clusterroles", "rolebindings", "clusterrolebindings")))
    modes = {"AlwaysAllow": AlwaysAllow, "AlwaysDeny": AlwaysDeny, "RBAC": lambda: rbac,
             "Node": lambda: NodeAuthorizer(NodeGraph(server.store("", "v1", "pods").cache,
                                                      server.store("", "v1", "persistentvolumes").cache), node_rules())}
    return Chain([modes[m]() for m in server.options.authorization_modes]), rbac


def build_authenticator(server: Any) -> Authenticator:
    """Client certificates, bearer tokens (service accounts, the token file, bootstrap tokens), anonymous."""
    options = server.options
    return Authenticator(
        server.tokens, load_token_file(options.token_auth_file) if options.token_auth_file else None,
        options.anonymous_auth, lambda plural: server.store("", "v1", plural),
        bootstrap=BootstrapTokenAuthenticator(lambda: server.store("", "v1", "secrets").cache, server.ctx.root)
        if options.enable_bootstrap_token_auth else None,
    )


def _raw_path(scope: dict[str, Any]) -> str | None:
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else None


def _segments(request: Request, path: str) -> list[str]:
    """The path segments after `/api` or `/apis`, from the path as sent: `%2F` stays inside a name."""
    raw = _raw_path(request.scope)
    if raw is None:
        return [p for p in path.split("/") if p]
    return split_path(raw)[1:]


def request_user(request: Request) -> UserInfo:
    """The user APIApp authenticated for this request."""
    return request.scope["pyk8s.user"]


def _request_object(scope: dict[str, Any]) -> Any:
    """The body the handler read, decoded as it was (JSON, YAML, protobuf); None when there is none."""
    raw = body_read(scope)
    if not raw:
        return None
    content_type = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"content-type"), None)
    try:
        return decode_body(raw, content_type)
    except errors.StatusError:
        return None


async def _refuse(scope: dict[str, Any], receive: Any, send: Any, exc: errors.StatusError) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.http.response.start", "status": exc.code,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "websocket.http.response.body", "body": orjson.dumps(exc.to_status())})
        return
    await _status_response(exc)(scope, receive, send)


class APIApp:
    """The ASGI entry point and its filter chain, in upstream's order: authenticate, audit,
    impersonate, max-in-flight, authorize; then `/api` and `/apis` go straight to `APIPaths` and the rest
    through FastAPI.

    Resource requests are the hot path; skipping the framework's routing and
    middleware stack for them roughly doubles request throughput.
    """

    def __init__(self, server: Any, kubelet: proxy.KubeletClientConfig = proxy.DEFAULT_CONFIG,
                 audit: Auditor | None = None, inflight: MaxInFlight | None = None) -> None:
        self.app = create_app(server)
        self.server = server
        self.kubelet = kubelet
        self.authenticator = build_authenticator(server)
        self.authorizer, rbac = build_authorizer(server)
        self.audit = audit
        self.inflight = inflight
        self.api = APIPaths(server, ResourceHandler(server.stores, server.tokens), self.authenticator,
                            self.authorizer, rbac)

    def _authenticate(self, scope: dict[str, Any], receive: Any, creds: Credentials) -> UserInfo:
        """Who sent the request; a 401 StatusError when its credentials are refused."""
        secure = scope.get("scheme") in ("https", "wss")
        return self.authenticator.authenticate(creds, peer_certificate(receive) if secure else None, secure)

    def _authorize(self, attrs: Attributes) -> tuple[str, str, Attributes]:
        """(decision, reason, the attributes decided on): a WebSocket exec, attach or port-forward is a GET
        but starts a process or a tunnel, so upstream (AuthorizePodWebsocketUpgradeCreatePermission) also
        wants `create` on the subresource."""
        if self.authorizer.always_allow or MASTERS in attrs.user.groups:
            return ALLOW, "", attrs
        decision, reason = self.authorizer.authorize(attrs)
        if decision == ALLOW and attrs.verb == "get" and attrs.resource == "pods" \
                and attrs.subresource in _UPGRADE_SUBRESOURCES:
            attrs = replace(attrs, verb="create")
            decision, reason = self.authorizer.authorize(attrs)
        return decision, reason, attrs

    async def _object_proxy(self, scope: dict[str, Any], receive: Any, send: Any) -> bool:
        """services/proxy and pods/proxy: the request relayed to a ready endpoint or the pod's IP."""
        raw = scope.get("raw_path") or scope["path"].encode()
        match = _OBJECT_PROXY.match(raw.split(b"?", 1)[0].decode("latin-1"))
        if match is None:
            return False
        namespace, resource, ident, rest = (urllib.parse.unquote(g) if i < 3 else g
                                            for i, g in enumerate(match.groups()))

        def getter(plural: str) -> proxy.Getter:
            return lambda ns, name: self.server.store("", "v1", plural).get(ns, name)

        async def locate() -> str:
            if not self.server.ready:
                raise errors.StatusError(503, "ServiceUnavailable", "the apiserver is starting")
            if resource == "services":
                return await proxy.service_location(namespace, ident, getter("services"), getter("endpoints"),
                                                    getter("pods"))
            return await proxy.pod_location(namespace, ident, getter("pods"))

        await proxy.proxy_to(scope, receive, send, locate, rest, self.kubelet)
        return True

    async def _streams(self, scope: dict[str, Any], receive: Any, send: Any) -> bool:
        """Pod logs, exec, attach, port-forward and node proxying, relayed to the node's kubelet."""
        if await self._object_proxy(scope, receive, send):
            return True
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
            await _refuse(scope, receive, send, exc)
            return True
        if pod_match is not None:
            await proxy.proxy_pod_subresource(scope, receive, send, pod, node, subresource, self.kubelet)
        else:
            await proxy.proxy_node(scope, receive, send, node, node_match.group(2) or "", self.kubelet)
        return True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        received = time.time()
        creds = read_credentials(scope["headers"])
        try:
            requester = self._authenticate(scope, receive, creds)
        except errors.StatusError as exc:
            if self.audit is not None:
                self.audit.failed_authentication(scope, received, exc, "bearer" if creds.token else "")
            await _refuse(scope, receive, send, exc)
            return
        attrs = request_attributes(requester, scope.get("method", "GET"), scope["path"],
                                   scope.get("query_string", b""), _raw_path(scope))
        record = None
        if self.audit is not None:
            record = self.audit.begin(scope, attrs, received, long_running(attrs))
            send = record.wrap_send(send)
        slot = ""
        try:
            try:
                if creds.impersonate:
                    attrs.user = impersonate(requester, creds.impersonate, self.authorizer.authorize)
                    if record is not None:
                        record.impersonated(attrs.user)
                if self.inflight is not None and scope["type"] == "http":
                    admitted = self.inflight.admit(attrs)
                    if admitted is None:
                        await too_many_requests(send)
                        return
                    slot = admitted
                decision, reason, decided = self._authorize(attrs)
                if record is not None:
                    record.authorized(decision, reason)
                if decision != ALLOW:
                    raise forbidden(decided, reason)
            except errors.StatusError as exc:
                await _refuse(scope, receive, send, exc)
                return
            scope["pyk8s.user"] = attrs.user
            with admission_request.serving(attrs.user) as admitted:
                await self._route(scope, receive, send)
            if record is not None:
                record.annotate(admitted.annotations)
        except Exception as exc:
            if record is not None:
                record.panicked(exc)
                record = None
            raise
        finally:
            if slot:
                self.inflight.release(slot)  # type: ignore[union-attr]
            if record is not None:
                record.finish(lambda: _request_object(scope))

    async def _route(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.server.ready and await self.server.aggregator.serve(scope, receive, send, scope["pyk8s.user"]):
            return
        if await self._streams(scope, receive, send):
            return
        if scope["type"] == "http":
            path: str = scope["path"]
            legacy = path == "/api" or path.startswith("/api/")
            if legacy or path == "/apis" or path.startswith("/apis/"):
                request = Request(scope, receive)
                try:
                    response = await self.api.serve(request, legacy, path[4:] if legacy else path[5:])
                except errors.StatusError as exc:
                    response = _status_response(exc)
                except Exception as exc:  # noqa: BLE001 - every failure must still be a Status
                    log.exception("unhandled error", path=path, method=scope.get("method"))
                    response = _status_response(errors.internal(f"{type(exc).__name__}: {exc}"))
                for warning in fieldvalidation.warning_headers(admission_request.current().warnings):
                    response.headers.append("Warning", warning)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class APIPaths:
    """Every path under `/api` and `/apis` once the request is authorized: discovery documents, the
    review APIs, ComponentStatus, the write guards (RBAC escalation, CSR signers and subjects), then the
    resource handler."""

    def __init__(self, server: Any, handler: ResourceHandler, authenticator: Authenticator, authorizer: Chain,
                 rbac: RBACAuthorizer) -> None:
        self.server = server
        self.handler = handler
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.rbac = rbac
        options = server.options
        self.components = componentstatus.Components(server.etcd.current_revision, options.scheduler_health_url,
                                                     options.controller_manager_health_url)

    async def serve(self, request: Request, legacy: bool, path: str) -> Response:
        if not self.server.ready:
            raise errors.StatusError(503, "ServiceUnavailable", "the apiserver is starting")
        parts = _segments(request, path)
        target = parse_path(self.server.catalog, legacy, parts)
        if target is None:
            if request.method != "GET":
                raise errors.method_not_allowed()
            return self.discovery_response(request, legacy, parts)
        if request.method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise errors.method_not_allowed()
        group = target.res.group
        if group in REVIEW_GROUPS and request.method == "POST" and not target.subresource \
                and target.res.kind in reviews.REVIEW_KINDS:
            return await self.review(request, target)
        if not group and target.res.plural == "componentstatuses" and not target.subresource:
            return await self.component_statuses(request, target)
        guard = None
        if group == RBAC_GROUP and request.method in ("POST", "PUT", "PATCH"):
            guard = self.guard_escalation(request, target)
        if group == certificates.GROUP and target.subresource in ("approval", "status") \
                and request.method in ("PUT", "PATCH"):
            guard = self.guard_signer(request, target)
        if group == certificates.GROUP and request.method == "POST" and not target.subresource:
            guard = self.restrict_subject(target)
        return await self.handler.handle(request, target, guard)

    async def component_statuses(self, request: Request, target: Target) -> Response:
        """Probed on every request, never stored; upstream marks the API deprecated in a Warning."""
        params = request.query_params
        if request.method != "GET" or params.get("watch", "").lower() in ("true", "1"):
            raise errors.method_not_allowed()
        rep = negotiate(request.headers.get("accept"), is_list=target.name is None,
                        include_object=params.get("includeObject", "Metadata"))
        store = self.server.store("", "v1", "componentstatuses")
        if target.name:
            status = await componentstatus.get_status(self.components, target.name)
            response = self.handler.render(status, rep, target.res)
        else:
            items: list[Any] = await componentstatus.list_statuses(self.components)
            response = self.handler.render_list(store, items, {"resourceVersion": ""}, rep)
        response.headers["Warning"] = componentstatus.DEPRECATION_WARNING
        return response

    async def review(self, request: Request, target: Target) -> Response:
        """The review APIs answer from this apiserver's own authenticators and authorizers."""
        raw = await read_body(request)
        body = await decoded_body(request) if raw.strip() else None
        kind = target.res.kind
        if isinstance(body, dict):
            wrong_type = typecheck.type_error(target.res.api_version, kind, body)
            if wrong_type is not None:
                raise wrong_type
        user = request_user(request)
        if kind == "TokenReview":
            out = reviews.token_review(self.authenticator, body)
        elif kind == "SelfSubjectReview":
            out = reviews.self_subject_review(body, user)
        else:
            out = reviews.access_review(kind, body, user, self.authorizer, target.namespace)
        return Response(orjson.dumps(out), 201, media_type="application/json")

    def guard_escalation(self, request: Request, target: Target) -> Guard | None:
        """Nobody grants what they do not hold, unless allowed to `escalate` (roles) or `bind` (bindings):
        checked on the object the write would store, once decoded (and patched)."""
        user = request_user(request)
        if self.authorizer.always_allow or escalation_allowed(user) or target.subresource:
            return None
        res = target.res

        def check(obj: dict[str, Any], current: dict[str, Any] | None) -> None:
            name = target.name or str((obj.get("metadata") or {}).get("name") or "")
            refusal = self.rbac.escalation_refusal(self.authorizer.allowed, user, res.kind, target.namespace or "",
                                                   name, obj, current)
            if refusal:
                raise errors.forbidden(res.plural, RBAC_GROUP, name, refusal)

        return check

    def guard_signer(self, request: Request, target: Target) -> Guard | None:
        """Upstream's CertificateApproval and CertificateSigning admission: approving or denying needs
        `approve`, issuing a certificate `sign`, on the request's signer (or its domain's wildcard)."""
        if self.authorizer.always_allow:
            return None
        user = request_user(request)

        def check(obj: dict[str, Any], current: dict[str, Any] | None) -> None:
            if current is None:
                return
            verb = certificates.signer_verb(target.subresource, obj, current)
            if not verb:
                return
            signer = str((current.get("spec") or {}).get("signerName") or "")
            for name in certificates.signer_names(signer):
                decision, _ = self.authorizer.authorize(Attributes(
                    user, verb, True, api_group=certificates.GROUP, api_version="*", resource=certificates.SIGNERS,
                    name=name))
                if decision == ALLOW:
                    return
            raise errors.forbidden(target.res.plural, certificates.GROUP, target.name or "",
                                   f'user not permitted to {verb} requests with signerName "{signer}"')

        return check

    @staticmethod
    def restrict_subject(target: Target) -> Guard:
        """Upstream's CertificateSubjectRestriction admission on a new CSR."""

        def check(obj: dict[str, Any], current: dict[str, Any] | None) -> None:
            refusal = certificates.subject_restriction(obj)
            if refusal:
                name = str((obj.get("metadata") or {}).get("name") or "")
                raise errors.forbidden(target.res.plural, certificates.GROUP, name, refusal)

        return check

    def discovery_response(self, request: Request, legacy: bool, parts: list[str]) -> Response:
        catalog = self.server.catalog
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
