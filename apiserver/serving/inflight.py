"""The max-in-flight filter: at most N read-only and M mutating requests at once, as upstream's
WithMaxInFlightLimit (`--max-requests-inflight`, `--max-mutating-requests-inflight`).

Long-running requests (watches, proxying, exec, attach, port-forward, logs) are not counted, as
upstream's BasicLongRunningRequestCheck. Past a limit the answer is upstream's: 429 with
`Retry-After: 1` and Go's http.Error text, except for system:masters, who are always served.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge

from apiserver.auth.authz import Attributes
from services.auth.identity import MASTERS

_READ_ONLY_VERBS = frozenset(("get", "list", "watch"))
_LONG_RUNNING_VERBS = frozenset(("watch", "proxy"))
_LONG_RUNNING_SUBRESOURCES = frozenset(("attach", "exec", "proxy", "log", "portforward"))

_INFLIGHT = Gauge("apiserver_current_inflight_requests", "Requests being served now, by kind.", ["request_kind"])
_DROPPED = Counter("apiserver_dropped_requests", "Requests refused with 429 by the max-in-flight filter.",
                   ["request_kind"])

TOO_MANY_BODY = b"Too many requests, please try again later.\n"
TOO_MANY_HEADERS = [(b"content-type", b"text/plain; charset=utf-8"), (b"x-content-type-options", b"nosniff"),
                    (b"retry-after", b"1"), (b"content-length", str(len(TOO_MANY_BODY)).encode())]


def long_running(attrs: Attributes) -> bool:
    """Whether a request may legitimately last as long as the client wants (upstream's check)."""
    if attrs.verb in _LONG_RUNNING_VERBS:
        return True
    if attrs.resource_request:
        return attrs.subresource in _LONG_RUNNING_SUBRESOURCES
    return attrs.path.startswith("/debug/pprof/")


class MaxInFlight:
    """Counts the requests being served; 0 as a limit means that kind is not limited."""

    def __init__(self, read_only: int, mutating: int) -> None:
        self.limits = {"readOnly": read_only, "mutating": mutating}
        self.current = {"readOnly": 0, "mutating": 0}
        # read when scraped: setting a labelled gauge on every request cost a quarter of the create rate
        for kind in self.current:
            _INFLIGHT.labels(kind).set_function(lambda kind=kind: self.current[kind])

    def admit(self, attrs: Attributes) -> str | None:
        """The kind whose slot the request now holds (give it back with `release`), "" when it is not
        counted, None when it must be refused."""
        if long_running(attrs):
            return ""
        kind = "readOnly" if attrs.verb in _READ_ONLY_VERBS else "mutating"
        limit = self.limits[kind]
        if not limit:
            return ""
        if self.current[kind] >= limit:
            if MASTERS in attrs.user.groups:
                return ""
            _DROPPED.labels(kind).inc()
            return None
        self.current[kind] += 1
        return kind

    def release(self, kind: str) -> None:
        self.current[kind] -= 1


async def too_many_requests(send: Any) -> None:
    """Upstream's answer past the limit (http.Error with a Retry-After header)."""
    await send({"type": "http.response.start", "status": 429, "headers": TOO_MANY_HEADERS})
    await send({"type": "http.response.body", "body": TOO_MANY_BODY})
