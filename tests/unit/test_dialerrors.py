"""Connection failures worded as Go's net package words them."""

from __future__ import annotations

import errno

from services.client.dialerrors import dial_error


def _wrapped(inner: BaseException) -> Exception:
    try:
        try:
            raise inner
        except OSError as exc:
            raise RuntimeError("All connection attempts failed") from exc
    except RuntimeError as outer:
        return outer


def test_refused_is_worded_as_go_does() -> None:
    exc = _wrapped(ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"))
    assert dial_error(exc, "10.0.0.1", 80) == "dial tcp 10.0.0.1:80: connect: connection refused"
    assert dial_error(exc, "fd00::1", 443) == "dial tcp [fd00::1]:443: connect: connection refused"


def test_inside_an_exception_group() -> None:
    group = ExceptionGroup("many", [ValueError("x"), OSError(errno.EHOSTUNREACH, "unreachable")])
    assert dial_error(group, "10.0.0.1", 80) == "dial tcp 10.0.0.1:80: connect: no route to host"


def test_other_failures_are_left_to_the_caller() -> None:
    assert dial_error(_wrapped(OSError(errno.EACCES, "denied")), "h", 1) is None
    assert dial_error(ValueError("x"), "h", 1) is None
