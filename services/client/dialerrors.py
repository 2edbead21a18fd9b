"""Connection failures worded as Go's net package words them, which is what upstream's apiserver shows
(`dial tcp 127.0.0.1:10259: connect: connection refused`) and what people search for."""

from __future__ import annotations

import errno

_CONNECT_ERRNOS = {
    errno.ECONNREFUSED: "connection refused",
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "network is unreachable",
    errno.ETIMEDOUT: "connection timed out",
}


def dial_error(exc: BaseException, host: str, port: int) -> str | None:
    """`dial tcp HOST:PORT: connect: ...` when `exc` (or what caused it) is a failed connect, else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _CONNECT_ERRNOS:
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            return f"dial tcp {address}: connect: {_CONNECT_ERRNOS[current.errno]}"
        if isinstance(current, BaseExceptionGroup):
            for inner in current.exceptions:
                found = dial_error(inner, host, port)
                if found:
                    return found
        current = current.__cause__ or current.__context__
    return None
