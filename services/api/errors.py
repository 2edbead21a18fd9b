"""API errors as upstream's metav1.Status, shared by the apiserver and its clients."""

from __future__ import annotations

from typing import Any


class StatusError(Exception):
    """An error that travels over the wire as a `Status` object with an HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:
            del status["reason"]  # metav1.Status omits an empty reason, as a webhook's denial often has
        if self.details is not None:
            status["details"] = self.details
        return status

    @classmethod
    def from_status(cls, status: dict[str, Any], code: int | None = None) -> StatusError:
        return cls(
            int(status.get("code") or code or 500),
            status.get("reason", ""),
            status.get("message", ""),
            status.get("details"),
        )


def _details(name: str | None, group: str, kind: str) -> dict[str, Any]:
    details: dict[str, Any] = {"kind": kind}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def qualified(resource: str, group: str) -> str:
    """`pods` or `deployments.apps`, the way upstream names a resource in messages."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> StatusError:
    return StatusError(
        404, "NotFound", f'{qualified(resource, group)} "{name}" not found', _details(name, group, resource)
    )


def already_exists(resource: str, group: str, name: str) -> StatusError:
    return StatusError(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        _details(name, group, resource),
    )


def conflict(resource: str, group: str, name: str, why: str) -> StatusError:
    return StatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        _details(name, group, resource),
    )


STALE_WRITE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> StatusError:
    """422 with one cause per field path, formatted as upstream's field.ErrorList."""
    parts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    if len(parts) == 1:
        summary = parts[0]
    else:
        summary = "[" + ", ".join(parts) + "]"
    qualified_kind = f"{kind}.{group}" if group else kind
    details = _details(name, group, kind)
    details["causes"] = causes
    return StatusError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def gone(message: str) -> StatusError:
    return StatusError(410, "Expired", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> StatusError:
    return StatusError(405, "MethodNotAllowed", message)


def forbidden(resource: str, group: str, name: str, why: str) -> StatusError:
    target = f'{qualified(resource, group)} "{name}"' if name else qualified(resource, group)
    return StatusError(403, "Forbidden", f"{target} is forbidden: {why}", _details(name, group, resource))


def too_large(message: str = "Request entity too large: limit is 3145728") -> StatusError:
    return StatusError(413, "RequestEntityTooLarge", message)


def not_acceptable(message: str) -> StatusError:
    return StatusError(406, "NotAcceptable", message)


def unsupported_media_type(content_type: str) -> StatusError:
    return StatusError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: application/json, "
        f'application/yaml, application/vnd.kubernetes.protobuf; got "{content_type}"',
    )


def internal(message: str) -> StatusError:
    return StatusError(500, "InternalError", f"Internal error occurred: {message}")


def timeout(message: str) -> StatusError:
    return StatusError(504, "Timeout", message)


def too_large_resource_version(wanted: int, current: int) -> StatusError:
    """504 with the cause client-go's IsTooLargeResourceVersion looks for (it relists on it)."""
    return StatusError(504, "Timeout", f"Too large resource version: {wanted}, current: {current}", {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    })


def cause(field: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
    """One entry of Status.details.causes."""
    return {"reason": reason, "message": message, "field": field}
