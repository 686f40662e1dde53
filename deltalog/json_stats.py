"""Typed statistics for files that have only JSON ones: a `stats_parsed` column built in
bulk from the `stats` strings, so data skipping on a stored snapshot reads typed values
instead of parsing JSON (see deltalog.snapshot_store, which writes it into the stored file
for every later process and restart to map).

Typed is `numRecords` and, per column of an integer, floating point, boolean, string,
decimal, date or timestamp type (physical names, the first `MAX_COLUMNS` leaves), its
`minValues`, `maxValues` and `nullCount`, each value exactly what data skipping makes of the
JSON (sharing.skipping.stats): integers as int64, floats and decimals as the float64 the
JSON number reads as, booleans, strings, dates as date32, and timestamps (written as ISO
strings, truncated to milliseconds; readers widen the max) as microseconds, UTC for
`timestamp` (a value without an offset is UTC) and wall-clock for `timestamp_ntz` (where a
value with an offset is not typed). The strings are handed to Arrow's JSON reader in
groups, zero-copy, with an explicit schema naming only those fields (dates and timestamps
read as strings, then converted in bulk by `temporal_values`); a group the reader or a
conversion rejects (an odd value such as `"NaN"`, malformed JSON, a timestamp form Arrow
does not cast) is left null, and a null `stats_parsed` means "read this row's JSON", which
readers of the column already do for rows that came from commits.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from deltalog.actions import STATS_PARSED, Metadata
from deltalog.file_chunks import FileChunks
from deltalog.packed_stats import stats_text
from deltalog.schema import (
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructType,
    column_mapping_mode,
    parse_schema,
)

__all__ = ["MAX_COLUMNS", "stats_type", "temporal_values", "typed_stats", "with_typed_stats"]

# Delta collects statistics for the first 32 leaf columns by default.
MAX_COLUMNS = 32
GROUP_BYTES = 4 * 1024 * 1024

_VALUE_TYPES: dict[str, pa.DataType] = {
    "byte": pa.int64(),
    "short": pa.int64(),
    "integer": pa.int64(),
    "long": pa.int64(),
    "float": pa.float64(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
# An offset at the end of an ISO timestamp.
_ZONE = r"(?:[zZ]|[+-]\d{2}(?::?\d{2})?)$"


def temporal_values(strings: pa.Array, target: pa.DataType) -> pa.Array | None:
    """Statistics strings as `target` (date32, or timestamp[us] with or without a UTC
    zone), in bulk with Arrow's casts; None when a cast rejects a value (the caller reads
    those values another way). Timestamps: an offset is applied, none means UTC (or
    wall-clock time for a zone-less target, where a value with an offset is null)."""
    try:
        if pa.types.is_date32(target):
            return pc.cast(strings, pa.date32())
        zoned = pc.fill_null(pc.match_substring_regex(strings, _ZONE), False)
        any_zoned = zoned.true_count > 0
        naive_part = (
            pc.if_else(zoned, pa.scalar(None, pa.string()), strings) if any_zoned else strings
        )
        naive = pc.cast(pc.cast(naive_part, pa.timestamp("us")), pa.int64())
        if target.tz is None or not any_zoned:
            return pc.cast(naive, target)
        zoned_part = pc.if_else(zoned, strings, pa.scalar(None, pa.string()))
        aware = pc.cast(pc.cast(zoned_part, pa.timestamp("us", tz="UTC")), pa.int64())
        return pc.cast(pc.if_else(zoned, aware, naive), target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def stats_type(metadata: Metadata) -> pa.StructType | None:
    """The struct type of the typed statistics of a table's files, or None when no column
    has a type this module types."""
    try:
        schema = parse_schema(metadata.schema_string)
        mode = column_mapping_mode(metadata.configuration)
    except Exception:  # a schema deltalog cannot read: no typed statistics, no failure
        return None
    partitions = set(metadata.partition_columns)
    budget = [MAX_COLUMNS]

    def leaves(struct: StructType, top: bool) -> tuple[list[pa.Field], list[pa.Field]]:
        values: list[pa.Field] = []
        counts: list[pa.Field] = []
        for field in struct:
            if budget[0] <= 0:
                break
            if top and field.name in partitions:
                continue  # partition values are not in the statistics
            name = field.name_for(mode)
            kind: DataType = field.type
            if isinstance(kind, StructType):
                inner_values, inner_counts = leaves(kind, False)
                if inner_values:
                    values.append(pa.field(name, pa.struct(inner_values)))
                if inner_counts:
                    counts.append(pa.field(name, pa.struct(inner_counts)))
                continue
            budget[0] -= 1
            if isinstance(kind, DecimalType):
                value_type: pa.DataType | None = pa.float64()
            elif isinstance(kind, (ArrayType, MapType)) or not isinstance(kind, PrimitiveType):
                continue
            else:
                value_type = _VALUE_TYPES.get(kind.name)
            if value_type is None:
                continue
            values.append(pa.field(name, value_type))
            counts.append(pa.field(name, pa.int64()))
        return values, counts

    values, counts = leaves(schema, True)
    if not values:
        return None
    return pa.struct(
        [
            pa.field("numRecords", pa.int64()),
            pa.field("minValues", pa.struct(values)),
            pa.field("maxValues", pa.struct(values)),
            pa.field("nullCount", pa.struct(counts)),
        ]
    )


def typed_stats(stats: pa.Array, struct: pa.StructType) -> pa.StructArray:
    """`struct` values for each row of a `stats` string array (null where a row has no
    statistics or its group could not be read); packed statistics are unpacked first."""
    stats = stats_text(stats)
    if pa.types.is_large_string(stats.type):
        stats = stats.cast(pa.string())
    groups = _groups(stats)
    if len(groups) > 1:  # the reader releases the GIL: groups are parsed on every core
        parts = list(_executor().map(lambda g: _group(stats.slice(*g), struct), groups))
    else:
        parts = [_group(stats.slice(start, size), struct) for start, size in groups]
    if not parts:
        return pa.array([], struct)
    chunks = pa.chunked_array(parts, struct).combine_chunks()
    return chunks


def with_typed_stats(chunks: FileChunks, metadata: Metadata) -> FileChunks | None:
    """`chunks` (a snapshot's files) with a `stats_parsed` column built from their JSON
    statistics; None when they have one already or nothing can be typed."""
    if STATS_PARSED in chunks.schema.names:
        return None
    struct = stats_type(metadata)
    if struct is None:
        return None
    schema = chunks.schema.append(pa.field(STATS_PARSED, struct))
    batches = [
        pa.RecordBatch.from_arrays(
            [*batch.columns, typed_stats(batch.column("stats"), struct)], schema=schema
        )
        for batch in chunks.batches
    ]
    return FileChunks.restore(schema, batches, chunks.keys)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=max(1, os.cpu_count() or 1), thread_name_prefix="json-stats"
            )
        return _pool


def _groups(stats: pa.Array) -> list[tuple[int, int]]:
    """(start, length) slices of about GROUP_BYTES of JSON each."""
    n = len(stats)
    if n == 0:
        return []
    total = max(1, _data_end(stats, n) - _data_end(stats, 0))
    per_group = max(1024, int(n * GROUP_BYTES / total))
    return [(start, min(per_group, n - start)) for start in range(0, n, per_group)]


def _data_end(stats: pa.Array, index: int) -> int:
    offsets = pa.Array.from_buffers(
        pa.int32(), len(stats) + 1, [None, stats.buffers()[1]], offset=stats.offset
    )
    return int(offsets[index].as_py())


def _as_read(data_type: pa.DataType) -> pa.DataType:
    """The type the JSON reader is asked for: dates and timestamps as their strings."""
    if pa.types.is_struct(data_type):
        return pa.struct([pa.field(f.name, _as_read(f.type)) for f in data_type])
    if pa.types.is_date32(data_type) or pa.types.is_timestamp(data_type):
        return pa.string()
    return data_type


def _as_typed(values: pa.Array, data_type: pa.DataType) -> pa.Array | None:
    """Read `values` (of `_as_read(data_type)`) as `data_type`; None when a value does
    not convert."""
    if values.type == data_type:
        return values
    if pa.types.is_struct(data_type):
        children = []
        for i, field in enumerate(data_type):
            child = _as_typed(pc.struct_field(values, [i]), field.type)
            if child is None:
                return None
            children.append(child)
        mask = values.is_null() if values.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(data_type), mask=mask)
    return temporal_values(values, data_type)


def _group(group: pa.Array, struct: pa.StructType) -> pa.StructArray:
    schema = pa.schema([pa.field(f.name, _as_read(f.type)) for f in struct])
    usable = pc.fill_null(pc.greater(pc.binary_length(group), 0), False)
    n_usable = int(pc.sum(usable).as_py() or 0)
    if n_usable == 0:
        return pa.nulls(len(group), struct)
    dense = group if n_usable == len(group) else group.filter(usable)
    start, end = _data_end(dense, 0), _data_end(dense, len(dense))
    data = dense.buffers()[2].slice(start, end - start)
    try:
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(end - start, 1) + 1),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.nulls(len(group), struct)
    if table.num_rows != n_usable:  # e.g. a string holding two objects: trust none
        return pa.nulls(len(group), struct)
    read = pa.StructArray.from_arrays(
        [table.column(name).combine_chunks() for name in schema.names], fields=list(schema)
    )
    parsed = _as_typed(read, struct)
    if parsed is None:
        return pa.nulls(len(group), struct)
    if n_usable == len(group):
        return parsed
    positions = pc.subtract(pc.cumulative_sum(pc.cast(usable, pa.int64())), 1)
    return parsed.take(pc.if_else(usable, positions, pa.scalar(None, pa.int64())))
