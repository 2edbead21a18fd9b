"""IntOrString scaling as apimachinery's intstr.GetScaledValueFromIntOrPercent: an int is itself, a
"N%" string is that share of a total rounded the way the caller asks, anything else is an error.

Deployments, StatefulSets, DaemonSets and PodDisruptionBudgets all size their rollouts and
budgets with it, each choosing the rounding upstream chose for that field.
"""

from __future__ import annotations

import re
from typing import Any

#: what Go's strconv.Atoi accepts: an optional sign and decimal digits, nothing else
_ATOI = re.compile(r"[+-]?[0-9]+")


def scaled_value(value: Any, total: int, round_up: bool) -> int:
    """`value` (an int or a "N%" string) against `total`; raise ValueError with upstream's message.

    None is an error as upstream's nil pointer is: a caller with a default applies it first
    (intstr.ValueOrDefault).
    """
    if value is None:
        raise ValueError("nil value for IntOrString")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("invalid value for IntOrString: invalid type: neither int nor percentage")
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise ValueError("invalid value for IntOrString: invalid type: string is not a percentage")
    digits = value[:-1]
    if not _ATOI.fullmatch(digits):
        raise ValueError(
            f'invalid value for IntOrString: invalid value "{value}": strconv.Atoi: parsing "{digits}": invalid syntax'
        )
    scaled = int(digits) * total
    return -(-scaled // 100) if round_up else scaled // 100
