"""Partition values: from the log's strings to typed values and Arrow columns.

The log keeps partition values as strings (`partitionValues`, keyed by physical name when
column mapping is on). A table has few distinct values per partition column, so columns
are built by parsing each distinct string once and gathering the results with Arrow.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.errors import DeltaError
from deltalog.paths import decode_path
from deltalog.schema import DecimalType, PrimitiveType, StructType, to_arrow_type

__all__ = [
    "PartitionValueError",
    "decode_path",
    "parse_partition_value",
    "partition_columns_as_arrow",
]

_INTEGER_TYPES = frozenset({"long", "integer", "short", "byte"})
_FLOATS = {"nan": float("nan"), "infinity": float("inf"), "-infinity": float("-inf")}
_FLOATS.update({"inf": float("inf"), "+infinity": float("inf"), "-inf": float("-inf")})
_TIMESTAMP = re.compile(
    r"^\s*([+-]?\d{4,})-(\d{1,2})-(\d{1,2})"
    r"(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?\s*$"
)
_EPOCH = dt.datetime(1970, 1, 1)


class PartitionValueError(DeltaError):
    """A partition value cannot be read as its column's type."""


def parse_partition_value(value: str | None, data_type: Any) -> Any:
    """The Python value of one serialized partition value (None for null).

    Timestamps come back as microseconds since the epoch (UTC for `timestamp`, wall clock
    for `timestamp_ntz`), dates as `datetime.date`, decimals as `Decimal`.
    """
    if value is None or value == "":
        return None  # the spec: an empty string for any type is a null partition value
    if isinstance(data_type, DecimalType):
        try:
            return Decimal(value.strip())
        except InvalidOperation as exc:
            raise PartitionValueError(f"invalid decimal partition value {value!r}") from exc
    if not isinstance(data_type, PrimitiveType):
        raise PartitionValueError(f"partition columns cannot have type {data_type!r}")
    name = data_type.name
    try:
        if name == "string":
            return value
        if name in _INTEGER_TYPES:
            return int(value.strip())
        if name in ("float", "double"):
            text = value.strip()
            special = _FLOATS.get(text.lower())
            return special if special is not None else float(text)
        if name == "boolean":
            lowered = value.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError(value)
            return lowered == "true"
        if name == "date":
            return dt.date.fromisoformat(value.strip())
        if name in ("timestamp", "timestamp_ntz"):
            return _timestamp_micros(value, utc=name == "timestamp")
        if name == "binary":
            return value.encode("utf-8")
    except (ValueError, OverflowError) as exc:
        raise PartitionValueError(f"invalid {name} partition value {value!r}") from exc
    raise PartitionValueError(f"partition columns cannot have type {name!r}")


def _timestamp_micros(value: str, *, utc: bool) -> int:
    """Microseconds since the epoch of `YYYY-MM-DD[ |T]hh:mm:ss[.f][Z|±hh:mm]`.

    Values without an offset are taken as UTC for `timestamp` (the log stores them
    without a zone) and as wall-clock time for `timestamp_ntz`; values with an offset
    are converted to UTC.
    """
    match = _TIMESTAMP.match(value)
    if not match:
        raise ValueError(value)
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    naive = dt.datetime(
        int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0)
    )
    micros = (naive - _EPOCH) // dt.timedelta(microseconds=1)
    if fraction:
        micros += int(fraction[:6].ljust(6, "0"))
    if zone and zone != "Z" and utc:
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset_minutes = int(digits[:2]) * 60 + int(digits[2:4] or 0)
        micros -= sign * offset_minutes * 60_000_000
    return micros


def _typed_array(values: list[Any], data_type: Any) -> pa.Array:
    arrow_type = to_arrow_type(data_type)
    try:
        if pa.types.is_timestamp(arrow_type):
            return pa.array(values, type=pa.int64()).cast(arrow_type)
        return pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise PartitionValueError(f"partition values do not fit {arrow_type}: {exc}") from exc


def partition_column(values: pa.Array | pa.ChunkedArray, data_type: Any) -> pa.Array:
    """A typed column from serialized partition values (strings, nulls allowed)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.string())
    if not pa.types.is_string(values.type):
        values = values.cast(pa.string())
    encoded = values.dictionary_encode()
    dictionary = encoded.dictionary.to_pylist()
    parsed = _typed_array([parse_partition_value(v, data_type) for v in dictionary], data_type)
    return parsed.take(encoded.indices)


def partition_columns_as_arrow(
    partition_values: pa.MapArray | pa.ChunkedArray,
    schema: StructType,
    partition_columns: Sequence[str],
    *,
    column_mapping_mode: str = "none",
) -> pa.Table:
    """One typed column per partition column, one row per file.

    `partition_values` is the `partitionValues` column of a file table (map string ->
    string). Columns are named by their logical names; values are looked up by physical
    name under column mapping. A missing key is a null value.
    """
    if isinstance(partition_values, pa.ChunkedArray):
        partition_values = (
            partition_values.combine_chunks()
            if partition_values.num_chunks
            else pa.array([], type=pa.map_(pa.string(), pa.string()))
        )
    columns: dict[str, pa.Array] = {}
    fields: list[pa.Field] = []
    for name in partition_columns:
        struct_field = schema.get(name)
        if struct_field is None:
            raise DeltaError(f"partition column {name!r} is not in the table schema")
        key = struct_field.name_for(column_mapping_mode)
        if len(partition_values):
            raw = pc.map_lookup(partition_values, pa.scalar(key, pa.string()), "first")
        else:
            raw = pa.array([], pa.string())
        columns[name] = partition_column(raw, struct_field.type)
        fields.append(pa.field(name, columns[name].type, nullable=True))
    return pa.Table.from_arrays(list(columns.values()), schema=pa.schema(fields))
