"""IntOrString scaling as upstream's GetScaledValueFromIntOrPercent: ints as they are, percentages
rounded the way the caller asks, and upstream's errors for everything else."""

from __future__ import annotations

from typing import Any

import pytest

from services.api.intstr import scaled_value


@pytest.mark.parametrize(("value", "total", "up", "down"), [
    (3, 10, 3, 3), ("50%", 5, 3, 2), ("50%", 4, 2, 2), ("1%", 1, 1, 0), ("0%", 7, 0, 0), ("100%", 7, 7, 7),
    ("34%", 3, 2, 1), ("30%", 7, 3, 2), ("10%", 0, 0, 0), ("25%", 10, 3, 2), ("+20%", 10, 2, 2),
])
def test_percentages_round_as_asked(value: int | str, total: int, up: int, down: int) -> None:
    assert scaled_value(value, total, round_up=True) == up
    assert scaled_value(value, total, round_up=False) == down


@pytest.mark.parametrize(("value", "message"), [
    ("5", "invalid value for IntOrString: invalid type: string is not a percentage"),
    ("x%", 'invalid value for IntOrString: invalid value "x%": strconv.Atoi: parsing "x": invalid syntax'),
    (" 5%", 'invalid value for IntOrString: invalid value " 5%": strconv.Atoi: parsing " 5": invalid syntax'),
    (True, "invalid value for IntOrString: invalid type: neither int nor percentage"),
    (None, "nil value for IntOrString"),
])
def test_what_is_neither_int_nor_percentage_is_refused(value: Any, message: str) -> None:
    with pytest.raises(ValueError) as err:
        scaled_value(value, 10, round_up=True)
    assert str(err.value) == message
