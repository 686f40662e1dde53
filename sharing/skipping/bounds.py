"""What is known about one column in each file: value bounds and null possibilities.

A partition column is a point (every row has the file's partition value); a data column
has the range its statistics allow. Both become `Bounds` arrays so one set of comparison
rules serves both. Each bound is conservative about how writers produce statistics:

* string `maxValues` may be a truncated prefix (Spark keeps 32 UTF-16 units and appends a
  tie-breaker; older writers' tie-breaker U+FFFD sorts below supplementary characters), so
  a long max only bounds values through its prefix without the last character;
* timestamps are truncated to milliseconds, so the max is widened by 999 µs;
* float/double follow Spark's order (NaN above +Infinity, NaN = NaN), and writers that
  leave NaN out of min/max make `maxValues` no bound for `>`/`>=`; it still bounds the
  values that can equal a (non-NaN) literal;
* a null bound, or a stats value that does not parse, is unknown, never "empty".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.partitions import partition_column
from sharing.skipping.columns import (
    D_LOSSY,
    K_BOOL,
    K_DATE,
    K_DECIMAL,
    K_FLOAT,
    K_INT,
    K_STRING,
    K_TS,
    K_TS_NTZ,
    ResolvedColumn,
)
from sharing.skipping.stats import ColumnStats, StatsRequest

# Spark's default string stats prefix length, in UTF-16 code units. A prefix cut before a
# surrogate pair that does not fit is one unit shorter, hence the "- 1" where it is used.
STRING_PREFIX_UNITS = 32
TIMESTAMP_MAX_WIDENING_US = 999

Mask: TypeAlias = pa.Array | bool


@dataclass(frozen=True, slots=True)
class Bounds:
    """Per file: `lo` <= every non-null value; every non-null value <= `hi` (None: no upper
    bound at all); `hi_eq` bounds the values that could equal a non-NaN literal;
    `hi_prefix`, where not null, replaces `hi` by "a value's first len(hi_prefix)
    characters are <= hi_prefix". `exact` says lo == hi == v proves every value is v.
    `has_value`/`has_null`: may the file hold a non-null / a null value."""

    lo: pa.Array | None
    hi: pa.Array | None
    hi_eq: pa.Array | None
    hi_prefix: pa.Array | None
    exact: bool
    has_value: Mask
    has_null: Mask


def partition_bounds(raw: pa.Array, column: ResolvedColumn, domain: str) -> Bounds:
    """Bounds of a partition column from its serialized values (nulls = null partition)."""
    typed = partition_column(raw, column.data_type)
    values = _domain_values(_normalise_partition(typed, column), column, domain)
    is_null = pc.is_null(typed)
    if column.kind == K_FLOAT:
        values = pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), values)
    lo = hi = values
    if domain == D_LOSSY:
        lo, hi = _widen(values, -1), _widen(values, 1)
    return Bounds(
        lo=lo,
        hi=hi,
        hi_eq=hi,
        hi_prefix=None,
        exact=domain != D_LOSSY,
        has_value=pc.invert(is_null),
        has_null=is_null,
    )


def _normalise_partition(typed: pa.Array, column: ResolvedColumn) -> pa.Array:
    if column.kind in (K_TS, K_TS_NTZ):
        return pc.cast(typed, pa.int64())
    if column.kind == K_DECIMAL:
        return pc.cast(typed, pa.float64())
    if column.kind == K_INT:
        return pc.cast(typed, pa.int64())
    if column.kind == K_FLOAT:
        return pc.cast(typed, pa.float64())
    return typed


def _domain_values(values: pa.Array, column: ResolvedColumn, domain: str) -> pa.Array:
    if domain == D_LOSSY and not pa.types.is_floating(values.type):
        return pc.cast(values, pa.float64())
    return values


def stats_request(column: ResolvedColumn) -> StatsRequest:
    """What to parse for this column: its physical path, the JSON value type of min/max,
    and the conversion applied before caching (dates and timestamps arrive as text)."""
    if column.kind == K_INT:
        return column.physical_path, pa.int64(), ""
    if column.kind in (K_FLOAT, K_DECIMAL):
        return column.physical_path, pa.float64(), ""
    if column.kind == K_BOOL:
        return column.physical_path, pa.bool_(), ""
    if column.kind == K_DATE:
        return column.physical_path, pa.string(), "date"
    if column.kind == K_TS:
        return column.physical_path, pa.string(), "ts"
    if column.kind == K_TS_NTZ:
        return column.physical_path, pa.string(), "ts_ntz"
    return column.physical_path, pa.string(), ""


def stats_bounds(
    stats: ColumnStats, num_records: pa.Array, column: ResolvedColumn, domain: str
) -> Bounds:
    """Bounds of a data column from its parsed statistics."""
    has_null, has_value = null_masks(stats, num_records)
    lo, hi = stats.min, stats.max
    hi_eq: pa.Array | None
    hi_prefix = None
    exact = domain != D_LOSSY
    if column.kind == K_FLOAT:
        if column.single_precision:
            lo = _via_float32(lo)
            hi = _via_float32(hi)
        hi_eq = pc.if_else(pc.is_nan(hi), pa.scalar(float("inf")), hi)
        hi = None
        exact = False
    elif column.kind == K_STRING:
        hi, hi_prefix = _string_max(hi)
        hi_eq = hi
    elif column.kind in (K_TS, K_TS_NTZ):
        hi = pc.add(hi, TIMESTAMP_MAX_WIDENING_US)
        hi_eq = hi
    else:
        hi_eq = hi
    if domain == D_LOSSY:
        lo = _widen(_domain_values(lo, column, domain), -1)
        hi = None if hi is None else _widen(_domain_values(hi, column, domain), 1)
        hi_eq = None if hi_eq is None else _widen(_domain_values(hi_eq, column, domain), 1)
    return Bounds(
        lo=lo,
        hi=hi,
        hi_eq=hi_eq,
        hi_prefix=hi_prefix,
        exact=exact,
        has_value=has_value,
        has_null=has_null,
    )


def _widen(values: pa.Array, direction: int) -> pa.Array:
    """Move float64 values a few ulps outwards: conversions to float64 (Arrow's decimal
    cast, JSON numbers) may be off by an ulp, and a bound must stay a bound."""
    slack = pc.add(pc.multiply(pc.abs(values), 1e-15), 1e-300)
    return pc.add(values, slack) if direction > 0 else pc.subtract(values, slack)


def null_masks(stats: ColumnStats, num_records: pa.Array) -> tuple[Mask, Mask]:
    """(may hold a null, may hold a non-null value) from nullCount and numRecords: the
    spec gives nullCount meaning only when it is 0 or equals numRecords. A column no file
    with rows has nulls in (the usual case) is settled by two reductions."""
    nc, nr = stats.null_count, num_records
    counts = pc.min_max(nc)
    if counts["min"].as_py() == 0 and counts["max"].as_py() == 0:
        least_rows = pc.min(nr).as_py()
        if least_rows is None or least_rows > 0:
            # No file can be all null; only files with unknown nullCount may hold nulls.
            return (pc.is_null(nc) if nc.null_count else False), True
    no_rows = pc.fill_null(pc.equal(nr, 0), False)
    all_null = pc.or_(pc.fill_null(pc.equal(nc, nr), False), no_rows)
    no_null = pc.or_(pc.fill_null(pc.equal(nc, 0), False), no_rows)
    return pc.invert(no_null), pc.invert(all_null)


def _via_float32(values: pa.Array) -> pa.Array:
    """A float column's stats printed as decimal text: back to the float32 they denote."""
    return pc.cast(pc.cast(values, pa.float32(), safe=False), pa.float64())


def _string_max(maxes: pa.Array) -> tuple[pa.Array, pa.Array | None]:
    """(hi, hi_prefix): rows whose max may be a truncated prefix get hi = null and a
    prefix bound (the max without its last character, which may be a tie-breaker)."""
    units = pc.utf8_length(maxes)
    if not pc.all(pc.fill_null(pc.string_is_ascii(maxes), True)).as_py():
        supplementary = pc.count_substring_regex(maxes, r"[\x{10000}-\x{10FFFF}]")
        units = pc.add(units, supplementary)
    maybe_truncated = pc.fill_null(pc.greater_equal(units, STRING_PREFIX_UNITS - 1), False)
    if not pc.any(maybe_truncated).as_py():
        return maxes, None
    prefix = pc.if_else(
        maybe_truncated, pc.utf8_slice_codeunits(maxes, 0, -1), pa.scalar(None, pa.string())
    )
    hi = pc.if_else(maybe_truncated, pa.scalar(None, pa.string()), maxes)
    return hi, prefix
