"""What admission knows of the request it runs in, beyond the object: who asks, and what the plugins
hand back besides a verdict (warnings for the client, annotations for the audit event).

The front door begins one context per request; plugins read and add to it wherever the store calls
them, so the store's admission calls carry only the object.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from services.auth.identity import UserInfo


@dataclass(slots=True)
class RequestContext:
    user: UserInfo | None = None
    #: warnings for the client, sent as `Warning` headers
    warnings: list[str] = field(default_factory=list)
    #: audit annotations, merged into the request's audit event (the first value of a key wins, as upstream)
    annotations: dict[str, str] = field(default_factory=dict)

    def warn(self, text: str) -> None:
        if text and text not in self.warnings:
            self.warnings.append(text)

    def annotate(self, key: str, value: str) -> None:
        self.annotations.setdefault(key, value)


_CURRENT: ContextVar[RequestContext | None] = ContextVar("pyk8s_admission_request", default=None)


def begin(user: UserInfo | None) -> RequestContext:
    """A new context for the request running in the current task (and the tasks it starts)."""
    ctx = RequestContext(user)
    _CURRENT.set(ctx)
    return ctx


def current() -> RequestContext:
    """The current request's context; a detached one where no request began (tests, internal writes)."""
    ctx = _CURRENT.get()
    return ctx if ctx is not None else RequestContext()
