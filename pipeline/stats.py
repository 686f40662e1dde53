"""File statistics as Delta writers record them in `add.stats`: numRecords, and per leaf
column minValues / maxValues / nullCount (the keys readers use to skip files).

Bounds must never exclude a row: strings longer than `STRING_PREFIX` keep a truncated
minimum and no maximum; timestamps are recorded in milliseconds, the maximum rounded up;
floating columns holding NaN and decimals get null counts only.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

STRING_PREFIX = 32


def file_stats(table: pa.Table) -> str:
    """The `stats` JSON of a data file holding `table`'s rows."""
    minimums: dict[str, Any] = {}
    maximums: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    for field in table.schema:
        column = table.column(field.name)
        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        _collect(field, array, minimums, maximums, nulls)
    document: dict[str, Any] = {"numRecords": table.num_rows}
    if table.num_rows:
        document["minValues"] = minimums
        document["maxValues"] = maximums
    document["nullCount"] = nulls
    return orjson.dumps(document).decode()


def _collect(
    field: pa.Field,
    array: pa.Array,
    minimums: dict[str, Any],
    maximums: dict[str, Any],
    nulls: dict[str, Any],
) -> None:
    if pa.types.is_struct(field.type):
        inner_min: dict[str, Any] = {}
        inner_max: dict[str, Any] = {}
        inner_nulls: dict[str, Any] = {}
        flattened = array.flatten() if len(array) else [pa.array([], f.type) for f in field.type]
        for child_field, child in zip(field.type, flattened, strict=True):
            _collect(child_field, child, inner_min, inner_max, inner_nulls)
        nulls[field.name] = inner_nulls
        if inner_min:
            minimums[field.name] = inner_min
        if inner_max:
            maximums[field.name] = inner_max
        return
    nulls[field.name] = array.null_count
    if array.null_count == len(array):
        return
    bounds = _bounds(array)
    if bounds is None:
        return
    low, high = bounds
    if low is not None:
        minimums[field.name] = low
    if high is not None:
        maximums[field.name] = high


def _bounds(array: pa.Array) -> tuple[Any, Any] | None:
    kind = array.type
    if pa.types.is_floating(kind):
        if pc.any(pc.is_nan(array)).as_py():
            return None
    elif not (
        pa.types.is_integer(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_date(kind)
        or pa.types.is_timestamp(kind)
    ):
        return None
    extremes = pc.min_max(array)
    low, high = extremes["min"].as_py(), extremes["max"].as_py()
    if isinstance(low, str):
        return low[:STRING_PREFIX], (high if len(high) <= STRING_PREFIX else None)
    if isinstance(low, dt.datetime):
        return _instant(low, round_up=False), _instant(high, round_up=True)
    if isinstance(low, dt.date):
        return low.isoformat(), high.isoformat()
    return low, high


def _instant(value: dt.datetime, *, round_up: bool) -> str:
    """Milliseconds, as Delta's stats hold timestamps (a maximum rounded up)."""
    micros = value.microsecond % 1000
    value = value.replace(microsecond=value.microsecond - micros)
    if round_up and micros:
        value += dt.timedelta(milliseconds=1)
    text = value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    return text + ("Z" if value.tzinfo is not None else "")
