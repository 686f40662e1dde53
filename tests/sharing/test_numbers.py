"""The one integer parser for client text: ASCII digits only, bounded before `int()`."""

from __future__ import annotations

import pytest

from sharing.numbers import INT32, INT64, IntRange, NotAnInteger, OutOfRange, parse_integer


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("7", 7),
        ("-7", -7),
        ("+7", 7),
        ("0000000000000000000000000042", 42),  # leading zeros do not count (Java's parseLong)
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
    ],
)
def test_values(text: str, value: int) -> None:
    assert parse_integer(text, INT64) == value


@pytest.mark.parametrize(
    "text", ["", "-", "+", " 1", "1 ", "1_0", "1.0", "0x1", "1e3", "١", "²", "１", "--1", "+-1"]
)
def test_not_integers(text: str) -> None:
    with pytest.raises(NotAnInteger):
        parse_integer(text, INT64)


@pytest.mark.parametrize(
    ("text", "bounds", "negative"),
    [
        ("9223372036854775808", INT64, False),
        ("-9223372036854775809", INT64, True),
        ("2147483648", INT32, False),
        ("-2147483649", INT32, True),
        ("9" * 4301, INT64, False),  # int() itself would raise beyond 4,300 digits
        ("-" + "1" * 100_000, INT64, True),
    ],
)
def test_out_of_range(text: str, bounds: IntRange, negative: bool) -> None:
    with pytest.raises(OutOfRange) as raised:
        parse_integer(text, bounds)
    assert raised.value.negative is negative


def test_signs_allowed_per_field() -> None:
    assert parse_integer("-3", INT32, signs="-") == -3
    with pytest.raises(NotAnInteger):
        parse_integer("+3", INT32, signs="-")
    with pytest.raises(NotAnInteger):
        parse_integer("-3", INT64, signs="")
    assert INT32.max_digits == 10
    assert INT64.max_digits == 19
