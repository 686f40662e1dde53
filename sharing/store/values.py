"""Values made safe for the store's bounded columns, before they are written.

A `varchar(n)` column refuses a longer value on PostgreSQL (SQLite stores anything), and
PostgreSQL refuses a NUL character in any text: one such value fails the whole statement it
is in. What a client sends (paths, names, user agents, claimed identities) is therefore cut
to its column's length — with a marker `…[+N]` saying how many characters were cut, so
evidence stays recognisable as cut — and NUL and lone surrogates become U+FFFD. Integers
are clamped to their column's range.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, String, Table

__all__ = [
    "INT32",
    "INT64",
    "REPLACEMENT",
    "bounded_text",
    "clamped",
    "integer_bounds",
    "text_limits",
]

REPLACEMENT = "\ufffd"
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_UNSTORABLE = {0: REPLACEMENT, **{code: REPLACEMENT for code in range(0xD800, 0xE000)}}


def bounded_text(value: object, limit: int) -> str:
    """`value` as text of at most `limit` characters that every dialect stores."""
    text = value if isinstance(value, str) else str(value)
    if "\x00" in text or _has_surrogate(text):
        text = text.translate(_UNSTORABLE)
    if len(text) <= limit:
        return text
    kept = limit
    for _ in range(3):  # the marker's width depends on the count it shows
        marker = f"…[+{len(text) - kept}]"
        kept = max(limit - len(marker), 0)
    return (text[:kept] + marker)[:limit]


def _has_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def clamped(value: int, bounds: tuple[int, int]) -> int:
    return min(max(value, bounds[0]), bounds[1])


def text_limits(table: Table, unbounded: dict[str, int]) -> dict[str, int]:
    """The length limit of each text column of `table`: its declared length, or for a
    column without one (TEXT) the limit `unbounded` gives it (every TEXT column must have
    one: a KeyError names one that does not)."""
    limits: dict[str, int] = {}
    for column in table.columns:
        if isinstance(column.type, String):
            length = column.type.length
            limits[column.name] = length if length is not None else unbounded[column.name]
    return limits


def integer_bounds(table: Table) -> dict[str, tuple[int, int]]:
    """The range of each integer column of `table` (BigInteger: 64 bits, Integer: 32)."""
    found: dict[str, tuple[int, int]] = {}
    for column in table.columns:
        if isinstance(column.type, BigInteger):
            found[column.name] = INT64
        elif isinstance(column.type, Integer):
            found[column.name] = INT32
    return found
