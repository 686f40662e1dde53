"""Vectorised conversion of statistics strings (dates, ISO timestamps) to Arrow values.

Writers format these differently (`Z`, `+01:00`, no offset for timestamp_ntz, odd
precisions); Arrow's casts handle the common forms in bulk (deltalog.json_stats's
`temporal_values`, the same conversion the snapshot store's typed statistics use), and
anything they reject is parsed once per distinct string in Python. A value that parses
nowhere becomes null, which the evaluator reads as "unknown".
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.json_stats import temporal_values
from sharing.skipping.expr import parse_date, parse_timestamp_micros


def convert(values: pa.Array, conversion: str) -> pa.Array:
    """`date` -> date32, `ts`/`ts_ntz` -> int64 µs since the epoch, "" -> unchanged."""
    if conversion == "date":
        return dates(values)
    if conversion in ("ts", "ts_ntz"):
        return micros(values, ntz=conversion == "ts_ntz")
    return values


def dates(values: pa.Array) -> pa.Array:
    converted = temporal_values(values, pa.date32())
    if converted is not None:
        return converted
    return _per_distinct(values, pa.date32(), _date_or_none)


def _date_or_none(text: str) -> object:
    try:
        return parse_date(text)
    except ValueError:
        return None


_ZONE = r"(?:[zZ]|[+-]\d{2}(?::?\d{2})?)$"


def micros(values: pa.Array, *, ntz: bool) -> pa.Array:
    """Microseconds since the epoch of ISO timestamps (offset applied; none means UTC,
    or wall-clock time for timestamp_ntz, where a value with an offset is unknown)."""
    converted = temporal_values(values, pa.timestamp("us", tz=None if ntz else "UTC"))
    if converted is not None:
        return pc.cast(converted, pa.int64())
    return _per_distinct(values, pa.int64(), lambda t: _micros_or_none(t, ntz=ntz))


def _micros_or_none(text: str, *, ntz: bool) -> object:
    if ntz and re.search(_ZONE, text.strip()):
        return None
    try:
        return parse_timestamp_micros(text)
    except (ValueError, OverflowError):
        return None


def _per_distinct(
    values: pa.Array, arrow_type: pa.DataType, parse: Callable[[str], object]
) -> pa.Array:
    """The slow path for odd values: parse each distinct string once in Python."""
    encoded = pc.dictionary_encode(values)
    parsed = pa.array(
        [None if v is None else parse(v) for v in encoded.dictionary.to_pylist()], arrow_type
    )
    return parsed.take(encoded.indices)
