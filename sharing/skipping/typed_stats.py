"""Statistics a checkpoint stores typed (`add.stats_parsed`), read as the JSON path's values.

A checkpoint written with `delta.checkpoint.writeStatsAsStruct` holds each file's
statistics as a typed struct, which deltalog keeps as the `stats_parsed` column of a
snapshot's files (see deltalog.actions). Nothing needs parsing: this module only brings a
requested column's min/max/nullCount into the value domain the JSON parser produces for
the same request (sharing.skipping.stats: int64, float64, bool, string, date32, or int64
microseconds for timestamps), so the bounds code cannot tell the two sources apart.

A column the struct lacks, or holds in a type that does not fit the request, is "not
available" (None): the caller then reads the JSON for it. A null struct (a file without
statistics, or a row that came from a JSON commit) is null in every column, and the caller
reads those rows' JSON too.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sharing.skipping.stats import ColumnStats, StatsRequest


def _field(struct: pa.Array, path: tuple[str, ...]) -> pa.Array | None:
    """The leaf at `path` (parent nulls propagated), or None when it is not there."""
    array = struct
    for part in path:
        if not pa.types.is_struct(array.type) or array.type.get_field_index(part) < 0:
            return None
        array = pc.struct_field(array, [part])
    return array


def num_records(typed: pa.Array) -> pa.Array | None:
    """numRecords of each row as int64 (null where unknown), None when absent."""
    records = _field(typed, ("numRecords",))
    if records is None or not pa.types.is_integer(records.type):
        return None
    return pc.cast(records, pa.int64())


def column_stats(typed: pa.Array, request: StatsRequest) -> ColumnStats | None:
    """min, max (in the request's domain) and nullCount of one column, or None when the
    typed statistics cannot serve this request."""
    path, json_type, conversion = request
    lo = _field(typed, ("minValues", *path))
    hi = _field(typed, ("maxValues", *path))
    nulls = _field(typed, ("nullCount", *path))
    if lo is None or hi is None:
        return None
    try:
        lo, hi = _as_domain(lo, json_type, conversion), _as_domain(hi, json_type, conversion)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # e.g. out of int64 range
        return None
    if lo is None or hi is None:
        return None
    if nulls is None or not pa.types.is_integer(nulls.type):
        null_count = pa.nulls(len(typed), pa.int64())
    else:
        null_count = pc.cast(nulls, pa.int64())
    return ColumnStats(lo, hi, null_count)


def _as_domain(values: pa.Array, json_type: pa.DataType, conversion: str) -> pa.Array | None:
    t = values.type
    if conversion == "date":
        return values if pa.types.is_date32(t) else None
    if conversion in ("ts", "ts_ntz"):
        if not pa.types.is_timestamp(t) or (conversion == "ts_ntz") != (t.tz is None):
            return None
        return _epoch_micros(values)
    if pa.types.is_int64(json_type):
        return pc.cast(values, pa.int64()) if pa.types.is_integer(t) else None
    if pa.types.is_float64(json_type):
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
            return pc.cast(values, pa.float64())
        return None
    if pa.types.is_boolean(json_type):
        return values if pa.types.is_boolean(t) else None
    if pa.types.is_string(json_type):
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return pc.cast(values, pa.string())
        return None
    return None


def _epoch_micros(values: pa.Array) -> pa.Array:
    """Microseconds since the epoch, rounded down (a bound must not move inwards)."""
    unit = values.type.unit
    raw = pc.cast(values, pa.int64())
    if unit == "us":
        return raw
    if unit == "ms":
        return pc.multiply_checked(raw, 1000)
    if unit == "s":
        return pc.multiply_checked(raw, 1_000_000)
    # ns: floor division (integer division truncates towards zero).
    quotient = pc.divide(raw, 1000)
    below = pc.and_(pc.less(raw, 0), pc.not_equal(pc.multiply(quotient, 1000), raw))
    return pc.subtract(quotient, pc.cast(below, pa.int64()))
