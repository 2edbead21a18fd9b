"""resource.Quantity parsing, rounding and canonical strings, checked against upstream's own expectations."""

from __future__ import annotations

from decimal import ROUND_UP, Decimal, localcontext

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from services.api.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    ERR_FORMAT_WRONG,
    ERR_SUFFIX,
    canonicalize_quantity,
    format_quantity,
    is_valid_quantity,
    parse_quantity,
    parse_quantity_with_format,
    quantity_format,
)

KI, MI, GI, TI, PI, EI = (1024**n for n in range(1, 7))
INT64_MAX = (1 << 63) - 1


def _nano(value: Decimal | int) -> Decimal:
    """The value upstream keeps: rounded up (away from zero) to a whole number of nanos."""
    with localcontext() as ctx:
        ctx.prec = 200
        return Decimal(value).quantize(Decimal("1e-9"), rounding=ROUND_UP)


def test_error_message_is_upstreams() -> None:
    assert ERR_FORMAT_WRONG == (
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


@pytest.mark.parametrize(
    ("text", "value", "fmt"),
    [
        ("0", "0", DECIMAL_SI),
        ("0n", "0", DECIMAL_SI),
        ("0Ki", "0", BINARY_SI),
        ("0T", "0", DECIMAL_SI),
        ("1", "1", DECIMAL_SI),
        ("1Ki", KI, BINARY_SI),
        ("8Ki", 8 * KI, BINARY_SI),
        ("7Mi", 7 * MI, BINARY_SI),
        ("6Gi", 6 * GI, BINARY_SI),
        ("5Ti", 5 * TI, BINARY_SI),
        ("4Pi", 4 * PI, BINARY_SI),
        ("3Ei", 3 * EI, BINARY_SI),
        ("100Ti", 100 * TI, BINARY_SI),
        ("5n", "5e-9", DECIMAL_SI),
        ("4u", "4e-6", DECIMAL_SI),
        ("3m", "3e-3", DECIMAL_SI),
        ("8k", "8e3", DECIMAL_SI),
        ("50k", "5e4", DECIMAL_SI),
        ("7M", "7e6", DECIMAL_SI),
        ("6G", "6e9", DECIMAL_SI),
        ("40T", "4e13", DECIMAL_SI),
        ("2P", "2e15", DECIMAL_SI),
        ("1E", "1e18", DECIMAL_SI),
        ("12E", "12e18", DECIMAL_SI),
        ("1E-3", "1e-3", DECIMAL_EXPONENT),
        ("1e3", "1e3", DECIMAL_EXPONENT),
        ("1E18", "1e18", DECIMAL_EXPONENT),
        ("1.3E+6", "13e5", DECIMAL_EXPONENT),
        ("1.53E12", "153e10", DECIMAL_EXPONENT),
        ("100.035k", "100035", DECIMAL_SI),
        ("0.001", "1e-3", DECIMAL_SI),
        ("0.0005k", "5e-1", DECIMAL_SI),
        ("0.50000", "5e-1", DECIMAL_SI),
        ("0.5e-2", "5e-3", DECIMAL_EXPONENT),
        ("10.035M", "10035e3", DECIMAL_SI),
        ("6.987654321G", "6987654321", DECIMAL_SI),
        ("1.01E", "101e16", DECIMAL_SI),
        # Rounding up to the nearest nano, away from zero.
        ("3.001n", "4e-9", DECIMAL_SI),
        ("1.1E-9", "2e-9", DECIMAL_EXPONENT),
        ("0.0000000001", "1e-9", DECIMAL_SI),
        ("0.5e-9", "1e-9", DECIMAL_EXPONENT),
        ("0.00000012345", "124e-9", DECIMAL_SI),
        ("-0.00000012345", "-124e-9", DECIMAL_SI),
        # BinarySI saturates at the largest int64.
        ("9Ei", (1 << 63) - 1, BINARY_SI),
        ("9223372036854775807Ki", (1 << 63) - 1, BINARY_SI),
        ("-9Ei", -((1 << 63) - 1), BINARY_SI),
        # Fractional binary values; below one they switch to DecimalSI.
        ("100.035Ki", "102435.84", BINARY_SI),
        ("0.5Mi", 512 * KI, BINARY_SI),
        ("0.025Ti", "27487790694.4", BINARY_SI),
        ("0.000000000001Ki", "2e-9", DECIMAL_SI),
        # Odd spellings upstream accepts.
        (".001", "1e-3", DECIMAL_SI),
        (".0001k", "1e-1", DECIMAL_SI),
        ("1.", "1", DECIMAL_SI),
        ("1.G", "1e9", DECIMAL_SI),
        (".", "0", DECIMAL_SI),
        ("-.", "0", DECIMAL_SI),
        ("+5", "5", DECIMAL_SI),
        ("-5m", "-5e-3", DECIMAL_SI),
        ("007", "7", DECIMAL_SI),
        # JSON numbers.
        (3, "3", DECIMAL_SI),
        (-2, "-2", DECIMAL_SI),
        (1.5, "1.5", DECIMAL_SI),
        (1e-05, "1e-5", DECIMAL_EXPONENT),
        (1e20, "1e20", DECIMAL_EXPONENT),
    ],
)
def test_parse(text: str | int | float, value: str | int, fmt: str) -> None:
    got, got_fmt = parse_quantity_with_format(text)
    assert got == Decimal(value)
    assert got_fmt == fmt
    assert parse_quantity(text) == Decimal(value)
    assert is_valid_quantity(text)
    if isinstance(text, str) and text[:1] not in "+-":
        assert parse_quantity("-" + text) == -Decimal(value)
        assert parse_quantity("+" + text) == Decimal(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", ERR_FORMAT_WRONG),
        ("1.1.M", ERR_FORMAT_WRONG),
        ("1+1.0M", ERR_FORMAT_WRONG),
        ("0.1am", ERR_FORMAT_WRONG),
        ("aoeu", ERR_FORMAT_WRONG),
        (" 1", ERR_FORMAT_WRONG),
        ("1 ", ERR_FORMAT_WRONG),
        ("1,5", ERR_FORMAT_WRONG),
        ("nan", ERR_FORMAT_WRONG),
        ("1Ki ", ERR_FORMAT_WRONG),
        ("0.1mi", ERR_SUFFIX),
        (".5i", ERR_SUFFIX),
        ("1i", ERR_SUFFIX),
        ("-3.01i", ERR_SUFFIX),
        ("-3.01e-", ERR_SUFFIX),
        ("1e", ERR_SUFFIX),
        ("1kk", ERR_SUFFIX),
        ("1Ki5", ERR_SUFFIX),
        ("1e99999999999", ERR_SUFFIX),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_quantity(text)
    assert str(info.value) == message
    assert not is_valid_quantity(text)


@pytest.mark.parametrize("bad", [True, None, float("inf"), float("nan"), ["1"]])
def test_parse_rejects_non_quantities(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)  # type: ignore[arg-type]
    assert not is_valid_quantity(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "like", "expected"),
    [
        # Upstream's TestQuantityString table.
        (GI, "1Ki", "1Gi"),
        (300 * MI, "1Ki", "300Mi"),
        (6 * KI, "1Ki", "6Ki"),
        (1001 * GI, "1Ki", "1001Gi"),
        (TI, "1Ki", "1Ti"),
        (5, "1Ki", "5"),
        (Decimal("0.5"), "1Ki", "500m"),
        (Decimal("1e9"), "", "1G"),
        (Decimal("1000e6"), "1M", "1G"),
        (1_000_000_000, "", "1G"),
        (Decimal("1e-3"), "", "1m"),
        (Decimal("80e-3"), "", "80m"),
        (Decimal("1080e-3"), "", "1080m"),
        (Decimal("108e-2"), "", "1080m"),
        (Decimal("10800e-4"), "", "1080m"),
        (Decimal("300e6"), "", "300M"),
        (Decimal("1e12"), "", "1T"),
        (Decimal("1234567e6"), "", "1234567M"),
        (Decimal("1234567e-3"), "1Ki", "1234567m"),
        (3000, "", "3k"),
        (1025, "1Ki", "1025"),
        (0, "", "0"),
        (0, "1Ki", "0"),
        (Decimal("-0.0"), "", "0"),
        (Decimal("1e9"), "1e3", "1e9"),
        (Decimal("1e-3"), "1e3", "1e-3"),
        (Decimal("1e-9"), "1e3", "1e-9"),
        (Decimal("80e-3"), "1e3", "80e-3"),
        (Decimal("300e6"), "1e3", "300e6"),
        (3000, "1e3", "3e3"),
        (0, "1e3", "0"),
        (Decimal("1e-9"), "", "1n"),
        (Decimal("1080e-9"), "", "1080n"),
        (Decimal("10800e-10"), "", "1080n"),
        (Decimal("1080e-6"), "", "1080u"),
        # Negatives mirror positives.
        (-GI, "1Ki", "-1Gi"),
        (Decimal("-0.5"), "", "-500m"),
        (Decimal("-1e9"), "1e3", "-1e9"),
        # Rounded up to the nano like upstream's stored values.
        (Decimal("0.0000000001"), "", "1n"),
        (Decimal("-1.0000000001"), "", "-1000000001n"),
        # Binary values that are not whole, or below 1024, fall back to DecimalSI.
        (Decimal("1536.5"), "1Ki", "1536500m"),
        (1023, "1Mi", "1023"),
        (1536, "1Gi", "1536"),
        (3 * EI, "1Ki", "3Ei"),
        # Beyond the largest SI suffix: exponent notation instead of a wrong bare number.
        (Decimal("1e21"), "", "1e21"),
    ],
)
def test_format(value: Decimal | int, like: str, expected: str) -> None:
    assert format_quantity(value, like) == expected
    assert parse_quantity(expected) == _nano(value)


def test_format_rejects_non_finite() -> None:
    with pytest.raises(ValueError):
        format_quantity(Decimal("NaN"))
    with pytest.raises(ValueError):
        format_quantity(Decimal("Infinity"))


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        # Upstream's TestQuantityParseEmit and the alternates of TestQuantityString.
        ("1Ki", "1Ki"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        ("307200Ki", "300Mi"),
        ("5000m", "5"),
        ("0.5", "500m"),
        ("0.001T", "1G"),
        ("1000u", "1m"),
        ("1.08", "1080m"),
        ("1080000000n", "1080m"),
        (".001e12", "1e9"),
        ("0.001e0", "1e-3"),
        ("1000e-12", "1e-9"),
        ("00", "0"),
        ("-1024Mi", "-1Gi"),
        ("100m", "100m"),
        ("2", "2"),
        ("128974848", "128974848"),
        ("129e6", "129e6"),
        ("123Mi", "123Mi"),
        (0.25, "250m"),
        (4, "4"),
    ],
)
def test_canonicalize(text: str | int | float, canonical: str) -> None:
    assert canonicalize_quantity(text) == canonical
    assert canonicalize_quantity(canonical) == canonical


def test_quantity_format() -> None:
    assert quantity_format("1Gi") == BINARY_SI
    assert quantity_format("500m") == DECIMAL_SI
    assert quantity_format("5e3") == DECIMAL_EXPONENT
    assert quantity_format("0.5Ki") == BINARY_SI
    assert quantity_format("0.0005Ki") == DECIMAL_SI
    with pytest.raises(ValueError):
        quantity_format("bogus")


# --------------------------------------------------------------------------------------------
# Properties

_nano_decimal = st.decimals(
    min_value=Decimal("-1e21"), max_value=Decimal("1e21"), places=9, allow_nan=False, allow_infinity=False
)
_like = st.sampled_from(["", "1", "1k", "1m", "1e3", "1E-3", "1Ki", "1Gi"])


@given(_nano_decimal, _like)
def test_property_format_round_trips(value: Decimal, like: str) -> None:
    assume(not like.endswith("i") or abs(value) <= INT64_MAX)
    text = format_quantity(value, like)
    assert parse_quantity(text) == value
    # A BinarySI amount that is no whole number of Ki is written without a suffix, as upstream's, and
    # that text reads back as DecimalSI: 625000 of "1Ki" is "625000", canonically "625k".
    read_back_as = like if not like.endswith("i") or text.endswith("i") else ""
    assert canonicalize_quantity(text) == format_quantity(value, read_back_as)


@given(st.integers(min_value=-(1 << 62), max_value=1 << 62), st.sampled_from(["1Ki", "1Mi", "1Gi"]))
def test_property_binary_round_trips(value: int, like: str) -> None:
    text = format_quantity(value, like)
    assert parse_quantity(text) == value
    assert text.endswith("i") == (value != 0 and value % 1024 == 0)


_grammar = r"[+-]?[0-9]{1,6}(\.[0-9]{0,12})?(|n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[+-]?[0-9]{1,2})"


@given(st.from_regex(_grammar, fullmatch=True))
def test_property_grammar_strings_parse_and_canonicalize_stably(text: str) -> None:
    value = parse_quantity(text)
    canonical = canonicalize_quantity(text)
    assert parse_quantity(canonical) == value
    assert canonicalize_quantity(canonical) == canonical
    assert value == _nano(value)
    if text.endswith("i"):
        assert abs(value) <= INT64_MAX
