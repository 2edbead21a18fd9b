"""What admission learns about a request besides its object, and what it tells the client besides
its answer: upstream keeps both in the request's context (request.UserFrom, warning.AddWarning,
audit.AddAuditAnnotation), and so do we, in a context variable the HTTP layer sets per request.

The endpoint layer opens a `Request` for each API request; plugins read `current().user` and add
warnings (sent as `Warning: 299` headers, which kubectl prints) and audit annotations (merged into
the request's audit event). Outside a request `current()` is an empty request nobody reads.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field

from services.auth.identity import UserInfo


@dataclass
class Request:
    """One API request as admission sees it."""

    user: UserInfo | None = None
    warnings: list[str] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)

    def warn(self, text: str) -> None:
        """A warning for the client; the same text twice is sent once."""
        if text and text not in self.warnings:
            self.warnings.append(text)

    def annotate(self, key: str, value: str) -> None:
        """An audit annotation; as upstream, the first value set for a key wins."""
        self.annotations.setdefault(key, value)


_current: contextvars.ContextVar[Request | None] = contextvars.ContextVar("admission_request", default=None)


def current() -> Request:
    """The request being served (a throwaway one outside any request)."""
    return _current.get() or Request()


@contextlib.contextmanager
def serving(user: UserInfo | None) -> Iterator[Request]:
    """Make a fresh Request current while the caller serves one API request."""
    req = Request(user)
    token = _current.set(req)
    try:
        yield req
    finally:
        _current.reset(token)
