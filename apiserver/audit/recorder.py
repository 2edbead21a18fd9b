"""The audit hook at the apiserver's front door: one audit.k8s.io/v1 Event per stage of each request the
policy audits, as upstream's WithAudit filter records them.

RequestReceived when the request is authenticated; ResponseStarted when a long-running request (a
watch, exec, proxy) sends its headers; ResponseComplete when the answer is done; Panic when the handler
raised. The request body the handler read and the response body are decoded only for the levels that
log them (Request, RequestResponse), or to name the object of a create and the Status of a failure.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from apiserver.audit.backend import LogBackend
from apiserver.audit.policy import NONE, REQUEST, REQUEST_RESPONSE, Decision, Policy
from apiserver.auth.authz import Attributes, request_attributes
from services.api import errors
from services.auth.identity import UserInfo

_NOBODY = UserInfo("")
#: a failure's Status is small; bigger error bodies are not worth keeping for the audit log
_ERROR_BODY_LIMIT = 64 * 1024


def micro_time(seconds: float) -> str:
    """metav1.MicroTime as JSON writes it."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return ""


def source_ips(scope: dict[str, Any]) -> list[str]:
    """X-Forwarded-For, then X-Real-Ip, then the peer, as upstream's utilnet.SourceIPs lists them."""
    ips: list[str] = []
    for text in [*_header(scope, b"x-forwarded-for").split(","), _header(scope, b"x-real-ip")]:
        try:
            ips.append(str(ipaddress.ip_address(text.strip())))
        except ValueError:
            continue
    client = scope.get("client")
    if client and (not ips or ips[-1] != client[0]):
        ips.append(client[0])
    return ips


def _request_uri(scope: dict[str, Any]) -> str:
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else scope["path"]
    query = scope.get("query_string") or b""
    return f"{path}?{query.decode('latin-1')}" if query else path


def _object_ref(attrs: Attributes) -> dict[str, str] | None:
    if not attrs.resource_request:
        return None
    ref = {"resource": attrs.resource, "namespace": attrs.namespace, "name": attrs.name,
           "apiGroup": attrs.api_group, "apiVersion": attrs.api_version, "subresource": attrs.subresource}
    return {k: v for k, v in ref.items() if v}


def _without_managed_fields(obj: Any) -> Any:
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        items = obj.get("items")
        if isinstance(items, list):
            for item in items:
                _without_managed_fields(item)
    return obj


class Auditor:
    """The policy and the backend; `begin` opens the record of one request."""

    def __init__(self, policy: Policy, backend: LogBackend) -> None:
        self.policy = policy
        self.backend = backend

    def begin(self, scope: dict[str, Any], attrs: Attributes, received: float, long_running: bool) -> AuditRecord:
        return AuditRecord(self, self.policy.decide(attrs), scope, attrs, received, long_running)

    def failed_authentication(self, scope: dict[str, Any], received: float, exc: errors.StatusError,
                              attempted: str) -> None:
        """A 401, audited as upstream's WithFailedAuthenticationAudit: no user, stage ResponseStarted."""
        attrs = request_attributes(_NOBODY, scope.get("method", "GET"), scope["path"], scope.get("query_string", b""))
        record = AuditRecord(self, self.policy.decide(attrs), scope, attrs, received, False)
        if record.decision.level == NONE:
            return
        record.event["user"] = {}
        record.event["responseStatus"] = {"metadata": {}, "code": exc.code,
                                          "message": f"Authentication failed, attempted: {attempted}"}
        record.emit("ResponseStarted")


class AuditRecord:
    """The Event of one request, written at each stage the policy does not omit."""

    def __init__(self, auditor: Auditor, decision: Decision, scope: dict[str, Any], attrs: Attributes,
                 received: float, long_running: bool) -> None:
        self.auditor = auditor
        self.decision = decision
        self.scope = scope
        self.long_running = long_running
        self.audit_id = _header(scope, b"audit-id") or str(uuid.uuid4())
        self.status = 0
        self.content_type = ""
        self.body: list[bytes] = []
        self.body_size = 0
        self.event: dict[str, Any] = {}
        if decision.level == NONE:
            return
        self.event = {
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": decision.level, "auditID": self.audit_id,
            "stage": "", "requestURI": _request_uri(scope), "verb": attrs.verb, "user": attrs.user.to_dict(),
            "sourceIPs": source_ips(scope), "userAgent": _header(scope, b"user-agent"),
            "requestReceivedTimestamp": micro_time(received),
        }
        ref = _object_ref(attrs)
        if ref is not None:
            self.event["objectRef"] = ref
        self.emit("RequestReceived")

    @property
    def audited(self) -> bool:
        return self.decision.level != NONE

    def emit(self, stage: str) -> None:
        if stage in self.decision.omit_stages:
            return
        event = dict(self.event)
        event["stage"] = stage
        event["stageTimestamp"] = micro_time(datetime.now(UTC).timestamp())
        self.auditor.backend.process(event)

    def impersonated(self, user: UserInfo) -> None:
        if self.audited:
            self.event["impersonatedUser"] = user.to_dict()

    def authorized(self, decision: str, reason: str) -> None:
        if self.audited:
            self.event.setdefault("annotations", {}).update({
                "authorization.k8s.io/decision": "allow" if decision == "allow" else "forbid",
                "authorization.k8s.io/reason": reason})

    def wrap_send(self, send: Any) -> Any:
        audit_id = self.audit_id.encode("latin-1")

        async def audited_send(message: dict[str, Any]) -> None:
            kind = message["type"]
            if kind in ("http.response.start", "websocket.http.response.start"):
                message = {**message, "headers": [*message.get("headers", ()), (b"audit-id", audit_id)]}
                self._started(message["status"], message["headers"])
            elif kind == "websocket.accept":
                self._started(101, ())
            elif kind in ("http.response.body", "websocket.http.response.body"):
                self._keep(message.get("body", b""))
            await send(message)

        return audited_send

    def _started(self, status: int, headers: Any) -> None:
        self.status = status
        for name, value in headers:
            if name == b"content-type":
                self.content_type = value.decode("latin-1")
        if self.audited and self.long_running:
            self.event["responseStatus"] = {"metadata": {}, "code": status}
            self.emit("ResponseStarted")

    def _keep(self, chunk: bytes) -> None:
        if not self.audited or not chunk or self.long_running:
            return
        if self.decision.level != REQUEST_RESPONSE and (self.status < 400 or self.body_size > _ERROR_BODY_LIMIT):
            return
        self.body.append(chunk)
        self.body_size += len(chunk)

    def finish(self, request_object: Callable[[], Any]) -> None:
        """The ResponseComplete event; `request_object` decodes the body the handler read, if any."""
        if not self.audited:
            return
        response = self._response_object()
        status: dict[str, Any] = {"metadata": {}, "code": self.status}
        if self.status >= 400 and isinstance(response, dict) and response.get("kind") == "Status":
            status.update({k: response[k] for k in ("status", "message", "reason", "details") if k in response})
        self.event["responseStatus"] = status
        added = self.scope.get("pyk8s.audit_annotations")
        if added:
            self.event["annotations"] = {**added, **(self.event.get("annotations") or {})}
        self._request_object(request_object)
        if self.decision.level == REQUEST_RESPONSE and response is not None:
            self.event["responseObject"] = self._trimmed(response)
        self.emit("ResponseComplete")

    def panicked(self, exc: BaseException) -> None:
        if not self.audited:
            return
        self.event["responseStatus"] = {"metadata": {}, "status": "Failure", "reason": "InternalError",
                                        "message": f"APIServer panic'd: {exc}", "code": 500}
        self.emit("Panic")

    def _trimmed(self, obj: Any) -> Any:
        return _without_managed_fields(obj) if self.decision.omit_managed_fields else obj

    def _response_object(self) -> Any:
        if not self.body or "json" not in self.content_type:
            return None
        try:
            return orjson.loads(b"".join(self.body))
        except orjson.JSONDecodeError:
            return None

    def _request_object(self, decode: Callable[[], Any]) -> None:
        """The object the client sent: logged at Request and above; names the object of a create always."""
        ref = self.event.get("objectRef")
        if self.decision.level not in (REQUEST, REQUEST_RESPONSE) and (ref is None or "name" in ref):
            return
        obj = decode()
        if obj is None:
            return
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if ref is not None and isinstance(meta, dict):
            for key in ("name", "namespace", "uid", "resourceVersion"):
                if key not in ref and meta.get(key):
                    ref[key] = meta[key]
        if self.decision.level in (REQUEST, REQUEST_RESPONSE):
            self.event["requestObject"] = self._trimmed(obj)
