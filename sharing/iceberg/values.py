"""Delta values in Iceberg form: partition tuples and column bounds from Delta statistics.

Bounds are only given where a Delta statistic is a safe Iceberg bound (an Iceberg reader
skips a file whose bounds exclude a predicate, so a bound tighter than the data loses
rows):
- minimums are always safe: a string minimum cut to a prefix is still at most every value,
  a timestamp minimum truncated to milliseconds is still at most the true minimum;
- string maximums are dropped when they may have been cut: Delta writers keep a prefix of
  `delta.dataSkippingStringPrefixLength` characters (32 by default), so a maximum that
  long (or longer) is not used, a shorter one is exact;
- timestamp maximums are truncated to milliseconds by Delta writers, so they are widened
  by 999 microseconds;
- `NaN`, infinities written as strings and values that do not parse give no bound; floats
  and doubles keep their bounds (Delta, like Iceberg, leaves NaN out of them);
- booleans and binary columns get no bounds (Delta does not collect them);
- null counts are given only when the statistics are tight (`tightBounds` not false: after
  a deletion vector, Delta may keep the counts of the whole physical file, which are not
  a null count of the live rows, though min/max stay valid bounds).
Bounds use Iceberg's single-value binary serialization (little-endian numbers, UTF-8
strings, big-endian two's complement unscaled decimals).
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from deltalog.partitions import PartitionValueError, parse_partition_value
from deltalog.schema import DataType, DecimalType, PrimitiveType
from sharing.iceberg.schema import Leaf

DEFAULT_STRING_PREFIX = 32
STRING_PREFIX_KEY = "delta.dataSkippingStringPrefixLength"
MS_TRUNCATION_WIDENING = 999
_EPOCH_DATE = dt.date(1970, 1, 1)


def string_prefix_length(configuration: Mapping[str, str]) -> int:
    """The length Delta writers cut string statistics to, for a table's properties."""
    try:
        return max(1, int(configuration.get(STRING_PREFIX_KEY, DEFAULT_STRING_PREFIX)))
    except ValueError:
        return DEFAULT_STRING_PREFIX


def partition_value(text: str | None, delta_type: DataType) -> Any:
    """A partition value as the Avro writer takes it (None for null): ints, floats,
    strings, dates, timestamps as microseconds, decimals as `Decimal`."""
    return parse_partition_value(text, delta_type)


Pairs = list[dict[str, Any]]
"""An Iceberg int-keyed map as a manifest holds it: `{"key": field id, "value": v}` records
in field id order."""


class Bounds:
    """Lower and upper bounds and null counts of one data file, as manifest maps (None:
    empty), each in field id order."""

    __slots__ = ("lower_pairs", "null_count_pairs", "upper_pairs")

    def __init__(self, lower: Pairs, upper: Pairs, null_counts: Pairs) -> None:
        self.lower_pairs = lower or None
        self.upper_pairs = upper or None
        self.null_count_pairs = null_counts or None

    @property
    def lower(self) -> dict[int, bytes]:
        return {p["key"]: p["value"] for p in self.lower_pairs or ()}

    @property
    def upper(self) -> dict[int, bytes]:
        return {p["key"]: p["value"] for p in self.upper_pairs or ()}

    @property
    def null_counts(self) -> dict[int, int]:
        return {p["key"]: p["value"] for p in self.null_count_pairs or ()}


_NO_BOUNDS = Bounds([], [], [])


def file_bounds(stats: Mapping[str, Any] | None, leaves: Sequence[Leaf], prefix: int) -> Bounds:
    """The safe Iceberg bounds and null counts of a file from its Delta statistics."""
    return BoundsReader(leaves, prefix)(stats)


Encoder = Callable[[Any], "bytes | None"]


class BoundsReader:
    """`file_bounds` for many files of one schema: the per-column work (where a column's
    statistics are, how its values are encoded, the field id order of the maps) is decided
    once, so each file costs a few dictionary lookups per column."""

    def __init__(self, leaves: Sequence[Leaf], prefix: int) -> None:
        self.columns = [
            (
                leaf.field_id,
                leaf.stats_path[0] if len(leaf.stats_path) == 1 else None,
                leaf.stats_path,
                _encoder(leaf.delta_type, upper=False, prefix=prefix),
                _encoder(leaf.delta_type, upper=True, prefix=prefix),
            )
            for leaf in sorted(leaves, key=lambda leaf: leaf.field_id)
        ]

    def __call__(self, stats: Mapping[str, Any] | None) -> Bounds:
        if not stats:
            return _NO_BOUNDS
        minimums = _mapping(stats.get("minValues"))
        maximums = _mapping(stats.get("maxValues"))
        tight = stats.get("tightBounds", True) is not False
        nulls = _mapping(stats.get("nullCount")) if tight else None
        lower: Pairs = []
        upper: Pairs = []
        null_counts: Pairs = []
        # A top-level column's statistic is one `get` (`name`), a nested one's a walk.
        for field_id, name, path, encode_lower, encode_upper in self.columns:
            if minimums is not None:
                value = minimums.get(name) if name is not None else _lookup(minimums, path)
                encoded = encode_lower(value)
                if encoded is not None:
                    lower.append({"key": field_id, "value": encoded})
            if maximums is not None:
                value = maximums.get(name) if name is not None else _lookup(maximums, path)
                encoded = encode_upper(value)
                if encoded is not None:
                    upper.append({"key": field_id, "value": encoded})
            if nulls is not None:
                count = nulls.get(name) if name is not None else _lookup(nulls, path)
                if type(count) is int and count >= 0:
                    null_counts.append({"key": field_id, "value": count})
        return Bounds(lower, upper, null_counts)


def _mapping(value: Any) -> Mapping[str, Any] | None:
    if type(value) is dict or isinstance(value, Mapping):
        return value
    return None


def _lookup(values: Mapping[str, Any], path: Sequence[str]) -> Any:
    if len(path) == 1:
        return values.get(path[0])
    node: Any = values
    for step in path:
        if type(node) is not dict and not isinstance(node, Mapping):
            return None
        node = node.get(step)
    return node


_INT = struct.Struct("<i").pack
_LONG = struct.Struct("<q").pack


def _encoder(delta_type: DataType, *, upper: bool, prefix: int) -> Encoder:
    """The encoder of one column's bound: fast paths for the common JSON value types, the
    general `_encode` for everything else (the same results)."""

    def general(value: Any) -> bytes | None:
        return _encode(value, delta_type, upper=upper, prefix=prefix)

    name = delta_type.name if isinstance(delta_type, PrimitiveType) else None
    if name in ("integer", "short", "byte", "long"):
        pack = _LONG if name == "long" else _INT

        def integer(value: Any) -> bytes | None:
            if type(value) is int:
                try:
                    return pack(value)
                except struct.error:
                    return None
            return general(value)

        return integer
    if name == "string":

        def string(value: Any) -> bytes | None:
            if type(value) is str:
                if upper and len(value) >= prefix:
                    return None  # possibly cut to the prefix: not an upper bound
                return value.encode("utf-8")
            return None

        return string
    return general


def _encode(value: Any, delta_type: DataType, *, upper: bool, prefix: int) -> bytes | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    try:
        if isinstance(delta_type, DecimalType):
            return _decimal(value, delta_type)
        if not isinstance(delta_type, PrimitiveType):
            return None
        name = delta_type.name
        if name in ("integer", "short", "byte"):
            return struct.pack("<i", int(value)) if _is_integer(value) else None
        if name == "long":
            return struct.pack("<q", int(value)) if _is_integer(value) else None
        if name in ("float", "double"):
            if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
                return None  # "NaN", "Infinity" and the like
            number = float(value)
            if number != number or number in (float("inf"), float("-inf")):
                return None
            return struct.pack("<f" if name == "float" else "<d", number)
        if name == "string":
            if not isinstance(value, str):
                return None
            if upper and len(value) >= prefix:
                return None  # possibly cut to the prefix: not an upper bound
            return value.encode("utf-8")
        if name == "date":
            if not isinstance(value, str):
                return None
            return struct.pack("<i", (dt.date.fromisoformat(value) - _EPOCH_DATE).days)
        if name in ("timestamp", "timestamp_ntz"):
            if not isinstance(value, str):
                return None
            micros = parse_partition_value(value, delta_type)
            if not isinstance(micros, int):
                return None
            if upper:
                micros += MS_TRUNCATION_WIDENING
            return struct.pack("<q", micros)
    except (ValueError, OverflowError, struct.error, PartitionValueError, InvalidOperation):
        return None
    return None


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, Decimal) and value == value.to_integral_value()


def _decimal(value: Any, delta_type: DecimalType) -> bytes | None:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal, str)):
        return None  # a float has lost digits already: no bound
    number = Decimal(str(value))
    if not number.is_finite():
        return None
    scaled = number.scaleb(delta_type.scale)
    unscaled = scaled.to_integral_value()
    if scaled != unscaled:
        return None  # more digits than the scale: not this column's value
    return _twos_complement(int(unscaled))


def _twos_complement(value: int) -> bytes:
    """The minimal big-endian two's complement bytes of `value` (Iceberg decimals)."""
    length = 1
    while not -(1 << (8 * length - 1)) <= value < (1 << (8 * length - 1)):
        length += 1
    return value.to_bytes(length, "big", signed=True)
