"""Kubernetes resource quantities (apimachinery's resource.Quantity) as exact decimals.

Parsing follows upstream's grammar, rounding (up to the nearest nano, away from zero) and the
BinarySI ceiling of 2^63-1; formatting gives upstream's canonical string, which is what the
apiserver stores and echoes (`1024Mi` comes back as `1Gi`, `0.5` as `500m`).
"""

from __future__ import annotations

import decimal
import re
from decimal import ROUND_UP, Decimal

SPLIT_RE_STRING = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT_WRONG = f"quantities must match the regular expression '{SPLIT_RE_STRING}'"
ERR_SUFFIX = "unable to parse quantity's suffix"

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

# Exact arithmetic: every operation here (scaling, multiplying by 2^n, quantizing) has an exact
# result, so an unbounded precision never rounds behind our back.
_CTX = decimal.Context(
    prec=decimal.MAX_PREC,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    traps=[decimal.InvalidOperation, decimal.Overflow, decimal.DivisionByZero],
)
_NANO = Decimal("1e-9")
_INT64_MAX = (1 << 63) - 1
_MAX_BINARY = Decimal(_INT64_MAX)
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1

_QUANTITY_RE = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)")
_EXPONENT_RE = re.compile(r"[+-]?[0-9]+")

# suffix -> (base, exponent, format)
_SUFFIXES: dict[str, tuple[int, int, str]] = {
    "": (10, 0, DECIMAL_SI),
    "n": (10, -9, DECIMAL_SI),
    "u": (10, -6, DECIMAL_SI),
    "m": (10, -3, DECIMAL_SI),
    "k": (10, 3, DECIMAL_SI),
    "M": (10, 6, DECIMAL_SI),
    "G": (10, 9, DECIMAL_SI),
    "T": (10, 12, DECIMAL_SI),
    "P": (10, 15, DECIMAL_SI),
    "E": (10, 18, DECIMAL_SI),
    "Ki": (2, 10, BINARY_SI),
    "Mi": (2, 20, BINARY_SI),
    "Gi": (2, 30, BINARY_SI),
    "Ti": (2, 40, BINARY_SI),
    "Pi": (2, 50, BINARY_SI),
    "Ei": (2, 60, BINARY_SI),
}
_DECIMAL_SUFFIX_BY_EXPONENT = {e: s for s, (b, e, _) in _SUFFIXES.items() if b == 10}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def _interpret(suffix: str) -> tuple[int, int, str]:
    known = _SUFFIXES.get(suffix)
    if known is not None:
        return known
    if len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT_RE.fullmatch(suffix, 1):
        exponent = int(suffix[1:])
        # Upstream truncates the exponent to 32 bits; refusing it keeps the arithmetic sane.
        if _INT32_MIN <= exponent <= _INT32_MAX:
            return 10, exponent, DECIMAL_EXPONENT
    raise ValueError(ERR_SUFFIX)


def _as_text(text: str | int | float) -> str:
    if isinstance(text, bool):
        raise ValueError(ERR_FORMAT_WRONG)
    if isinstance(text, (int, float)):
        return repr(text)
    if not isinstance(text, str):
        raise ValueError(ERR_FORMAT_WRONG)
    return text


def _round_nano(value: Decimal) -> Decimal:
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -9:
        return value.quantize(_NANO, rounding=ROUND_UP, context=_CTX)
    return value


def _keeps_original(whole: str, fraction: str, exponent: int, fmt: str) -> bool:
    """Whether upstream's int64 fast path keeps the client's string verbatim instead of canonicalizing.

    ParseQuantity remembers the input when it fits an int64 without rounding and "looks canonical"
    by a cheap test, and String() then returns it as written (`80074.G`, `9216e0`, `01Ki` survive).
    """
    num = whole.lstrip("0") or "0"
    if fmt == BINARY_SI:
        if fraction:
            return False
        precision = 15 - len(num) - exponent * 3 // 10 - 1
        scale = 0
    else:
        precision = 18 - len(num) - len(fraction)
        scale = exponent
    if precision < 0:
        return False
    scale -= len(fraction)
    if scale < -9:
        return False
    shifted = num + fraction
    digits = int(shifted)
    if fmt == BINARY_SI:
        return digits << exponent <= _INT64_MAX and digits & 0x07 != 0
    return scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"


def _parse(text: str | int | float) -> tuple[Decimal, str, str | None]:
    """Value, format, and the input itself when upstream would echo it unchanged."""
    raw = _as_text(text)
    if not raw:
        raise ValueError(ERR_FORMAT_WRONG)
    if raw == "0":
        return Decimal(0), DECIMAL_SI, raw
    match = _QUANTITY_RE.fullmatch(raw)
    if match is None:
        raise ValueError(ERR_FORMAT_WRONG)
    sign, whole, fraction, suffix = match.groups()
    base, exponent, fmt = _interpret(suffix)
    original = raw if _keeps_original(whole, fraction or "", exponent, fmt) else None
    number = Decimal(f"{sign}{whole or '0'}.{fraction}" if fraction else f"{sign}{whole or '0'}")
    if base == 10:
        value = number.scaleb(exponent, context=_CTX)
    else:
        value = _CTX.multiply(number, Decimal(1 << exponent))
    value = _round_nano(value)
    if value.is_zero():
        return Decimal(0), fmt, original
    if fmt == BINARY_SI:
        magnitude = abs(value)
        if magnitude > _MAX_BINARY:
            value = _MAX_BINARY.copy_sign(value)
        elif 0 < magnitude < 1:
            fmt = DECIMAL_SI
    return value, fmt, original


def parse_quantity_with_format(text: str | int | float) -> tuple[Decimal, str]:
    """Parse a quantity and report the format (DecimalSI, BinarySI, DecimalExponent) it was written in."""
    value, fmt, _ = _parse(text)
    return value, fmt


def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a quantity (`500m`, `1Gi`, `1.5e3`, or a JSON number) to its exact value."""
    return parse_quantity_with_format(text)[0]


def is_valid_quantity(text: str | int | float) -> bool:
    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True


def quantity_format(text: str) -> str:
    """The format a quantity string is written in; its canonical form keeps that format."""
    return parse_quantity_with_format(text)[1]


def format_quantity(value: Decimal | int, like: str = "") -> str:
    """Upstream's canonical string for `value`, in the format of the quantity `like` (DecimalSI if empty).

    BinarySI is only used for whole numbers of at least 1024 in magnitude, as upstream does;
    anything else falls back to DecimalSI.
    """
    fmt = quantity_format(like) if like else DECIMAL_SI
    amount = Decimal(value)
    if not amount.is_finite():
        raise ValueError(f"cannot format {amount} as a quantity")
    amount = _round_nano(amount)
    if amount.is_zero():
        return "0"
    if fmt == BINARY_SI and (abs(amount) < 1024 or amount != amount.to_integral_value(context=_CTX)):
        fmt = DECIMAL_SI
    if fmt == BINARY_SI:
        whole = int(amount)
        sign = -1 if whole < 0 else 1
        whole = abs(whole)
        steps = 0
        while steps < len(_BINARY_SUFFIXES) - 1 and whole % 1024 == 0:
            whole //= 1024
            steps += 1
        return f"{sign * whole}{_BINARY_SUFFIXES[steps]}"
    sign_bit, digits, exponent = amount.normalize(context=_CTX).as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)))
    shift = exponent % 3
    if shift:
        mantissa *= 10**shift
        exponent -= shift
    number = f"-{mantissa}" if sign_bit else str(mantissa)
    if fmt == DECIMAL_SI:
        suffix = _DECIMAL_SUFFIX_BY_EXPONENT.get(exponent)
        if suffix is not None:
            return number + suffix
    return number if exponent == 0 else f"{number}e{exponent}"


def canonicalize_quantity(text: str | int | float) -> str:
    """The string upstream stores and serves for a quantity a client sent.

    Usually the canonical form (`1024Mi` -> `1Gi`), but upstream echoes some inputs verbatim
    (see `_keeps_original`), and so do we.
    """
    value, fmt, original = _parse(text)
    if original is not None:
        return original
    like = {DECIMAL_SI: "", BINARY_SI: "1Ki", DECIMAL_EXPONENT: "1e0"}[fmt]
    return format_quantity(value, like)
