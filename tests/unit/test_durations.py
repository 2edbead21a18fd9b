"""The one Go-duration parser every component's flags and config files use."""

from __future__ import annotations

import argparse

import pytest

from services.runtime.durations import duration, duration_flag, go_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0), ("1h0m0s", 3600.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5h", 5400.0), (".5s", 0.5),
    ("-2s", -2.0), ("+3m", 180.0), ("100us", 1e-4), ("100µs", 1e-4), ("7ns", 7e-9),
])
def test_go_duration_accepts_what_go_accepts(text: str, seconds: float) -> None:
    assert go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "1x", "s", "1h 2m", "forever", "-", "1.2.3s"])
def test_go_duration_refuses_with_gos_message(text: str) -> None:
    with pytest.raises(ValueError, match=f'time: invalid duration "{text}"'):
        go_duration(text)


def test_flags_and_config_files_also_take_plain_seconds() -> None:
    assert duration("30") == 30.0 and duration(" 2m ") == 120.0 and duration(5) == 5.0
    assert duration_flag("1m0s") == 60.0
    with pytest.raises(argparse.ArgumentTypeError, match='invalid duration "soon"'):
        duration_flag("soon")
