"""The one integer parser for text a client sends (body fields given as strings, URL
parameters, signed-URL expiries, `Range` headers).

Python's `int()` is the wrong tool for client input: it accepts any Unicode decimal digit
(`int("١") == 1`), surrounding whitespace and underscores, and raises on strings of more
than 4,300 digits, which became 500s. Here a number is ASCII digits with an optional sign
from the ones the field allows; its length is bounded before `int()` runs (leading zeros
do not count, as in Java's `Long.parseLong`), and the value must fit the field's type.
Callers turn the two failures into the protocol error their field has always answered.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "INT32",
    "INT64",
    "NUMBER_FORMAT_MESSAGE",
    "IntRange",
    "NotAnInteger",
    "OutOfRange",
    "parse_integer",
]

# The reference's text for a URL parameter that is not a Java number (NumberFormatException).
NUMBER_FORMAT_MESSAGE = "expected a number but the string didn't have the appropriate format"

_ASCII_DIGITS = frozenset("0123456789")


@dataclass(frozen=True, slots=True)
class IntRange:
    """The inclusive bounds of an integer field, named as the protocol names its type."""

    low: int
    high: int
    name: str

    @property
    def max_digits(self) -> int:
        """Digits of the widest value allowed: longer text is out of range without `int()`."""
        return max(len(str(abs(self.low))), len(str(self.high)))


INT32 = IntRange(-(2**31), 2**31 - 1, "int32")
INT64 = IntRange(-(2**63), 2**63 - 1, "int64")


class NotAnInteger(ValueError):
    """The text is not ASCII digits with an allowed sign."""


class OutOfRange(ValueError):
    """Well-formed digits whose value is outside the field's bounds."""

    def __init__(self, text: str, bounds: IntRange, negative: bool) -> None:
        super().__init__(f"not an {bounds.name} value")
        self.bounds = bounds
        self.negative = negative


def parse_integer(text: str, bounds: IntRange = INT64, *, signs: str = "+-") -> int:
    """The value of `text`: an optional sign (one of `signs`, which may be empty) and one
    or more ASCII digits, nothing else (no whitespace). NotAnInteger or OutOfRange."""
    digits = text
    negative = False
    if digits and digits[0] in "+-":
        if digits[0] not in signs:
            raise NotAnInteger(f"not an integer: sign {digits[0]!r} not allowed")
        negative = digits[0] == "-"
        digits = digits[1:]
    if not digits or not _ASCII_DIGITS.issuperset(digits):
        raise NotAnInteger("not an integer")
    significant = digits.lstrip("0")
    if len(significant) > bounds.max_digits:
        raise OutOfRange(text, bounds, negative)
    value = int(significant or "0")
    value = -value if negative else value
    if not bounds.low <= value <= bounds.high:
        raise OutOfRange(text, bounds, negative)
    return value
