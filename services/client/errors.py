"""Typed API errors built from the `Status` body the apiserver answers with.

Callers catch `NotFound`, `Conflict`, ... instead of comparing codes; every class is
a `StatusError`, so the code, reason, message and details stay available.
"""

from __future__ import annotations

from typing import Any

import orjson

from services.api.errors import StatusError


class ApiError(StatusError):
    """Any error answer from the apiserver; `retry_after` is set when the server asked for a pause."""

    retry_after: float | None = None


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class MethodNotAllowed(ApiError):
    pass


class NotAcceptable(ApiError):
    pass


class Conflict(ApiError):
    pass


class AlreadyExists(ApiError):
    pass


class Gone(ApiError):
    """410: the resourceVersion or continue token is too old; the caller must relist."""


class RequestEntityTooLarge(ApiError):
    pass


class UnsupportedMediaType(ApiError):
    pass


class Invalid(ApiError):
    pass


class TooManyRequests(ApiError):
    pass


class ServerError(ApiError):
    """Any 5xx answer."""


class InternalError(ServerError):
    pass


class ServiceUnavailable(ServerError):
    pass


class ServerTimeout(ServerError):
    pass


_BY_REASON: dict[str, type[ApiError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "MethodNotAllowed": MethodNotAllowed,
    "NotAcceptable": NotAcceptable,
    "Conflict": Conflict,
    "AlreadyExists": AlreadyExists,
    "Gone": Gone,
    "Expired": Gone,
    "RequestEntityTooLarge": RequestEntityTooLarge,
    "UnsupportedMediaType": UnsupportedMediaType,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
    "InternalError": InternalError,
    "ServiceUnavailable": ServiceUnavailable,
    "ServerTimeout": ServerTimeout,
    "Timeout": ServerTimeout,
}

_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    406: NotAcceptable,
    409: Conflict,
    410: Gone,
    413: RequestEntityTooLarge,
    415: UnsupportedMediaType,
    422: Invalid,
    429: TooManyRequests,
    500: InternalError,
    503: ServiceUnavailable,
    504: ServerTimeout,
}

# What client-go says when the body is not a Status, so messages read the same.
_GENERIC_MESSAGES: dict[int, str] = {
    400: "the server rejected our request for an unknown reason",
    401: "the server has asked for the client to provide credentials",
    403: "the server does not allow access to the requested resource",
    404: "the server could not find the requested resource",
    405: "the server does not allow this method on the requested resource",
    409: "the server reported a conflict",
    410: "the server reported that the requested resource is gone",
    415: "the server does not support the media type",
    422: "the server rejected our request due to an error in our request",
    429: "the server has received too many requests and has asked us to try again later",
    500: "an error on the server has prevented the request from succeeding",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, "
    "but may still be processing the request",
}


def error_class(code: int, reason: str = "") -> type[ApiError]:
    """The reason decides first (409 is Conflict or AlreadyExists), then the code; 410 is always Gone."""
    if code == 410:
        return Gone
    cls = _BY_REASON.get(reason)
    if cls is not None:
        return cls
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    return ServerError if code >= 500 else ApiError


def error_from_status(status: dict[str, Any], code: int | None = None) -> ApiError:
    """Build the typed error for a `Status` object, e.g. one carried by a watch ERROR event."""
    status_code = int(status.get("code") or code or 500)
    reason = status.get("reason") or ""
    err = error_class(status_code, reason)(
        status_code, reason, status.get("message") or "", status.get("details")
    )
    retry = (status.get("details") or {}).get("retryAfterSeconds")
    if retry:
        err.retry_after = float(retry)
    return err


def error_from_response(code: int, body: bytes, headers: Any = None) -> ApiError:
    """Build the typed error for an HTTP answer; a body that is not a Status gets client-go's wording."""
    status: dict[str, Any] | None = None
    if body:
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            status = decoded
    if status is None:
        message = _GENERIC_MESSAGES.get(code, f"the server responded with the status code {code}")
        text = body.decode("utf-8", "replace").strip() if body else ""
        if text and len(text) < 1024:
            message = f"{message} ({text})"
        status = {"code": code, "message": message, "reason": _reason_for(code)}
    err = error_from_status(status, code)
    if headers is not None:
        retry = _parse_retry_after(headers.get("retry-after"))
        if retry is not None:
            err.retry_after = retry
    return err


def _reason_for(code: int) -> str:
    cls = _BY_CODE.get(code)
    if cls is None:
        return "InternalError" if code >= 500 else "Unknown"
    for reason, candidate in _BY_REASON.items():
        if candidate is cls:
            return reason
    return "Unknown"


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(seconds, 0.0)


#: the Status cause an apiserver gives for a create into a namespace being deleted
NAMESPACE_TERMINATING_CAUSE = "NamespaceTerminating"


def namespace_terminating(exc: BaseException) -> bool:
    """A create refused because its namespace is Terminating (a Forbidden naming NamespaceTerminating),
    which controllers expect during namespace deletion and do not report as a failure."""
    if not isinstance(exc, Forbidden):
        return False
    causes = (exc.details or {}).get("causes") or []
    return any(c.get("reason") == NAMESPACE_TERMINATING_CAUSE for c in causes) or "being terminated" in str(exc)
