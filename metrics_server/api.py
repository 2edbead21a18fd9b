"""`metrics.k8s.io/v1beta1` as an extension apiserver: discovery, NodeMetrics and PodMetrics (get and
list, label selectors, the Table kubectl asks for), each request authenticated by the front proxy's
headers or a TokenReview and authorized by a SubjectAccessReview, as upstream's delegating apiservers do.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx
import orjson
import structlog

from metrics_server.storage import Storage, Usage
from services.api.quantity import format_quantity, parse_quantity
from services.api.selectors import LabelSelector
from services.auth.delegated import AccessReviewer, AuthError, TokenWebhook, bearer_token
from services.auth.identity import UserInfo
from services.auth.requestheader import RequestHeaderAuthenticator, peer_der
from services.client.errors import ApiError

log = structlog.get_logger("metrics_server.api")

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
PREFIX = f"/apis/{API_VERSION}"
OPEN_PATHS = ("/healthz", "/livez", "/readyz")
RESOURCES = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION, "resources": [
    {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics", "verbs": ["get", "list"]},
    {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics", "verbs": ["get", "list"]},
]}
_TABLE_COLUMNS = [
    {"name": "Name", "type": "string", "format": "name", "description": "Name of the resource", "priority": 0},
    {"name": "CPU", "type": "string", "format": "", "description": "CPU usage", "priority": 0},
    {"name": "Memory", "type": "string", "format": "", "description": "Memory usage", "priority": 0},
    {"name": "Window", "type": "string", "format": "", "description": "Time window for the metrics", "priority": 0},
]

Obj = dict[str, Any]
Lister = Callable[[], list[Obj]]


def _rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _duration(seconds: float) -> str:
    """A Go duration as metav1.Duration prints it (`10.5s`, `1m0s`)."""
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{round(rest, 3):g}s"


def _quantities(cores: float, memory: int) -> Obj:
    """Canonical quantities, as upstream's scaled nanocores and binary bytes serialize (`250m`, `64Mi`)."""
    return {"cpu": format_quantity(Decimal(round(cores * 1e9)) / 10**9), "memory": format_quantity(memory, "1Ki")}


def _status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    out: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                "reason": reason, "code": code}
    if details is not None:
        out["details"] = details
    return out


def _not_found(resource: str, name: str) -> tuple[int, Obj]:
    return 404, _status(404, "NotFound", f'{resource}.{GROUP} "{name}" not found',
                        {"name": name, "group": GROUP, "kind": resource})


class MetricsAPI:
    def __init__(self, storage: Storage, nodes: Lister, pods: Lister, requestheader: RequestHeaderAuthenticator,
                 tokens: TokenWebhook | None, access: AccessReviewer | None, ready: Callable[[], bool]) -> None:
        self.storage = storage
        self.nodes = nodes
        self.pods = pods
        self.requestheader = requestheader
        self.tokens = tokens
        self.access = access
        self.ready = ready

    # -- objects -------------------------------------------------------------------------------------------
    def node_metrics(self, node: Obj) -> Obj | None:
        meta = node.get("metadata") or {}
        usage = self.storage.node(meta.get("name", ""))
        if usage is None:
            return None
        return {"kind": "NodeMetrics", "apiVersion": API_VERSION,
                "metadata": {"name": meta.get("name"), "creationTimestamp": _rfc3339(time.time()),
                             "labels": meta.get("labels") or {}},
                "timestamp": _rfc3339(usage.at), "window": _duration(usage.window),
                "usage": _quantities(usage.cores, usage.memory)}

    def pod_metrics(self, pod: Obj) -> Obj | None:
        meta = pod.get("metadata") or {}
        containers = self.storage.pod(meta.get("namespace", ""), meta.get("name", ""))
        if containers is None:
            return None
        first: Usage = next(iter(containers.values()))
        return {"kind": "PodMetrics", "apiVersion": API_VERSION,
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                             "creationTimestamp": _rfc3339(time.time()), "labels": meta.get("labels") or {}},
                "timestamp": _rfc3339(first.at), "window": _duration(first.window),
                "containers": [{"name": name, "usage": _quantities(u.cores, u.memory)}
                               for name, u in sorted(containers.items())]}

    # -- serving -------------------------------------------------------------------------------------------
    async def __call__(self, scope: Obj, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        if path in OPEN_PATHS:
            ok = path == "/livez" or self.ready()
            await self._send(send, 200 if ok else 500, b"ok" if ok else b"not ready", "text/plain")
            return
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        try:
            user = await self._authenticate(scope, receive, headers)
            code, body = await self._serve(scope, user, headers)
        except AuthError as exc:
            code = exc.status
            reason = {401: "Unauthorized", 403: "Forbidden"}.get(exc.status, "InternalError")
            body = _status(exc.status, reason, str(exc))
        await self._send(send, code, orjson.dumps(body), "application/json")

    async def _send(self, send: Any, code: int, body: bytes, content_type: str) -> None:
        headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": code, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _authenticate(self, scope: Obj, receive: Any, headers: list[tuple[str, str]]) -> UserInfo:
        transport = getattr(getattr(receive, "__self__", None), "transport", None)
        user = self.requestheader.authenticate(peer_der(transport), headers)
        if user is not None:
            return user
        token = bearer_token(headers)
        if token and self.tokens is not None:
            found = await self.tokens.authenticate(token)
            if found is not None:
                return found
        raise AuthError(401, "Unauthorized")

    async def _authorize(self, user: UserInfo, attributes: dict[str, str], non_resource: bool = False) -> None:
        if self.access is None:
            return
        try:
            allowed = await self.access.allowed(user, attributes, non_resource)
        except (ApiError, httpx.HTTPError, OSError) as exc:
            raise AuthError(500, f"authorization failed: {exc}") from exc
        if not allowed:
            what = attributes.get("path") if non_resource else \
                f'{attributes.get("resource")}.{GROUP}' + (f' "{attributes["name"]}"' if attributes.get("name") else "")
            raise AuthError(403, f'{what} is forbidden: User "{user.name}" cannot {attributes["verb"]} '
                                 f"{'path' if non_resource else 'resource'}")

    async def _serve(self, scope: Obj, user: UserInfo, headers: list[tuple[str, str]]) -> tuple[int, Obj]:
        path: str = scope["path"]
        method = scope.get("method", "GET")
        if path in (PREFIX, PREFIX + "/"):
            await self._authorize(user, {"verb": "get", "path": path}, non_resource=True)
            return 200, RESOURCES
        if not path.startswith(PREFIX + "/"):
            await self._authorize(user, {"verb": "get", "path": path}, non_resource=True)
            return 404, _status(404, "NotFound", "the server could not find the requested resource", {})
        parts = [urllib.parse.unquote(p) for p in path[len(PREFIX):].split("/") if p]
        namespace = ""
        if len(parts) >= 3 and parts[0] == "namespaces":
            namespace, parts = parts[1], parts[2:]
        if not parts or parts[0] not in ("nodes", "pods") or len(parts) > 2 or (parts[0] == "nodes" and namespace):
            return 404, _status(404, "NotFound", "the server could not find the requested resource", {})
        resource, name = parts[0], parts[1] if len(parts) == 2 else ""
        if method != "GET":
            return 405, _status(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                         "resource")
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        verb = "get" if name else ("watch" if query.get("watch", [""])[0] in ("1", "true") else "list")
        attrs = {"verb": verb, "group": GROUP, "version": VERSION, "resource": resource}
        if namespace:
            attrs["namespace"] = namespace
        if name:
            attrs["name"] = name
        await self._authorize(user, attrs)
        if verb == "watch":
            return 405, _status(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                         "resource")
        accept = next((v for k, v in headers if k.lower() == "accept"), "")
        return self._read(resource, namespace, name, query, "as=Table" in accept.replace(" ", ""))

    def _read(self, resource: str, namespace: str, name: str, query: dict[str, list[str]],
              table: bool) -> tuple[int, Obj]:
        objects = self.nodes() if resource == "nodes" else [
            p for p in self.pods() if not namespace or (p.get("metadata") or {}).get("namespace") == namespace]
        render = self.node_metrics if resource == "nodes" else self.pod_metrics
        kind = "NodeMetrics" if resource == "nodes" else "PodMetrics"
        if name:
            found = next((o for o in objects if (o.get("metadata") or {}).get("name") == name), None)
            metrics = render(found) if found is not None else None
            if metrics is None:
                return _not_found(resource, name)
            return 200, self._table([metrics]) if table else metrics
        try:
            selector = LabelSelector.parse(query.get("labelSelector", [""])[0])
        except ValueError as exc:
            return 400, _status(400, "BadRequest", str(exc))
        items = [m for o in objects if selector.matches((o.get("metadata") or {}).get("labels") or {})
                 if (m := render(o)) is not None]
        items.sort(key=lambda m: (m["metadata"].get("namespace") or "", m["metadata"]["name"]))
        if table:
            return 200, self._table(items)
        return 200, {"kind": f"{kind}List", "apiVersion": API_VERSION, "metadata": {}, "items": items}

    @staticmethod
    def _table(items: list[Obj]) -> Obj:
        rows = []
        for m in items:
            usages = [m["usage"]] if "usage" in m else [c["usage"] for c in m["containers"]]
            cpu = sum(parse_quantity(u["cpu"]) for u in usages)
            memory = sum(int(parse_quantity(u["memory"])) for u in usages)
            partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": m["metadata"]}
            rows.append({"cells": [m["metadata"]["name"], f"{round(cpu * 1000)}m", f"{memory // (1024 * 1024)}Mi",
                                   m["window"]], "object": partial})
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "columnDefinitions": _TABLE_COLUMNS,
                "rows": rows}
