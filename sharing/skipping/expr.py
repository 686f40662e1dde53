"""The predicate tree both hint formats are translated into.

JSON `jsonPredicateHints` and SQL `predicateHints` end up as the same small tree, so one
evaluator serves both. Parsers never raise for a bad hint: a subtree they cannot
understand becomes `Unknown`, which the evaluator treats as "may be true, may be false"
for every file, so it never removes a file on its own.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
from dataclasses import dataclass

# Literal kinds. Values: bool, int, float, str, datetime.date, int (µs since the epoch, UTC).
BOOL = "bool"
INT = "int"
FLOAT = "float"
STRING = "string"
DATE = "date"
TIMESTAMP = "timestamp"
NULL = "null"
# A placeholder for `current_recipient('key')` in a partition filter (value: the key); it
# is replaced by the recipient's value before evaluation (sharing.slices.bind), and an
# unbound one compares with nothing.
PROPERTY = "property"

# Comparison operators, column on the left after normalisation.
EQ, LT, LE, GT, GE = "eq", "lt", "le", "gt", "ge"
FLIPPED = {EQ: EQ, LT: GT, LE: GE, GT: LT, GE: LE}

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True, slots=True)
class Column:
    """A column reference. `parts` is the nested path as written (`("a", "b")` for `a.b`);
    `dotted` says the parts came from splitting one JSON name on dots, so a top-level
    column whose name contains dots must be tried first. `value_type` is the JSON
    `valueType` (None for SQL, where the schema alone decides)."""

    parts: tuple[str, ...]
    value_type: str | None = None
    dotted: bool = False


@dataclass(frozen=True, slots=True)
class Literal:
    kind: str
    value: object


@dataclass(frozen=True, slots=True)
class Compare:
    op: str
    left: Column | Literal
    right: Column | Literal


@dataclass(frozen=True, slots=True)
class IsNull:
    child: Column | Literal


@dataclass(frozen=True, slots=True)
class And:
    children: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    children: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Not:
    child: Expr


@dataclass(frozen=True, slots=True)
class Unknown:
    """A part of a hint that could not be understood; it filters nothing."""

    reason: str


Expr = Compare | IsNull | And | Or | Not | Unknown


def columns_of(expr: Expr) -> list[Column]:
    """Every column the tree references (duplicates kept; order of appearance)."""
    out: list[Column] = []
    stack: list[object] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Column):
            out.append(node)
        elif isinstance(node, Compare):
            stack.extend((node.right, node.left))
        elif isinstance(node, IsNull):
            stack.append(node.child)
        elif isinstance(node, And | Or):
            stack.extend(reversed(node.children))
        elif isinstance(node, Not):
            stack.append(node.child)
    return out


# Literal text parsing shared by both hint formats -------------------------------------

_DATE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*$")
_TIMESTAMP = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|UTC|[+-]\d{2}(?::?\d{2})?)?\s*$",
    re.IGNORECASE,
)
_EPOCH = dt.datetime(1970, 1, 1)
_INTEGER = re.compile(r"^\s*[+-]?\d+\s*$")
_SPECIAL_FLOATS = {
    "nan": float("nan"),
    "+nan": float("nan"),
    "-nan": float("nan"),
    "infinity": float("inf"),
    "+infinity": float("inf"),
    "inf": float("inf"),
    "+inf": float("inf"),
    "-infinity": float("-inf"),
    "-inf": float("-inf"),
}


def parse_date(text: str) -> dt.date:
    """`yyyy-mm-dd` (one-digit month/day tolerated, as Spark does); ValueError otherwise."""
    match = _DATE.match(text)
    if not match:
        raise ValueError(f"not a date: {text!r}")
    return dt.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))


def parse_timestamp_micros(text: str) -> int:
    """Microseconds since the epoch of an ISO-8601 timestamp. An offset is applied; a value
    without one is read as UTC (which is also how wall-clock `timestamp_ntz` values are
    compared). A date alone is midnight."""
    match = _TIMESTAMP.match(text)
    if not match:
        raise ValueError(f"not a timestamp: {text!r}")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    naive = dt.datetime(
        int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0)
    )
    micros = (naive - _EPOCH) // dt.timedelta(microseconds=1)
    if fraction:
        micros += int(fraction[:6].ljust(6, "0"))
    if zone and zone.upper() not in ("Z", "UTC"):
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        minutes = int(digits[:2]) * 60 + int(digits[2:4] or 0)
        micros -= sign * minutes * 60_000_000
    return micros


def parse_int(text: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if not _INTEGER.match(text):
        raise ValueError(f"not an integer: {text!r}")
    value = int(text)
    if not lo <= value <= hi:
        raise ValueError(f"integer out of range: {text!r}")
    return value


def parse_float(text: str, *, single: bool = False) -> float:
    """A float; `single` rounds to float32, since a `float` column holds float32 values
    and a literal sent as `float` means the float32 nearest to its text."""
    special = _SPECIAL_FLOATS.get(text.strip().lower())
    value = special if special is not None else float(text)
    if single and value == value and abs(value) != float("inf"):
        try:
            value = struct.unpack("<f", struct.pack("<f", value))[0]
        except OverflowError:
            value = float("inf") if value > 0 else float("-inf")
    return value


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"not a boolean: {text!r}")
    return lowered == "true"
