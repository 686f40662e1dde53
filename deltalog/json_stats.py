"""Typed statistics for files that have only JSON ones: a `stats_parsed` column built in
bulk from the `stats` strings, so data skipping on a stored snapshot reads typed values
instead of parsing JSON (see deltalog.snapshot_store, which writes it into the stored file
for every later process and restart to map).

Only what converts exactly is typed: `numRecords` and, per column of an integer, floating
point, boolean or string type (physical names, the first `MAX_COLUMNS` leaves), its
`minValues`, `maxValues` (as their JSON value types: int64, float64, bool, string) and
`nullCount`. Dates, timestamps and decimals stay JSON. The strings are handed to Arrow's
JSON reader in groups, zero-copy, with an explicit schema naming only those fields; a group
the reader rejects (an odd value such as `"NaN"`, malformed JSON) is left null, and a null
`stats_parsed` means "read this row's JSON", which readers of the column already do for
rows that came from commits.
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
from deltalog.schema import (
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructType,
    column_mapping_mode,
    parse_schema,
)

__all__ = ["MAX_COLUMNS", "stats_type", "typed_stats", "with_typed_stats"]

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
}


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
            if isinstance(kind, (ArrayType, MapType)) or not isinstance(kind, PrimitiveType):
                continue
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
    statistics or its group could not be read)."""
    if pa.types.is_large_string(stats.type):
        stats = stats.cast(pa.string())
    schema = pa.schema(list(struct))
    groups = _groups(stats)
    if len(groups) > 1:  # the reader releases the GIL: groups are parsed on every core
        parts = list(_executor().map(lambda g: _group(stats.slice(*g), schema), groups))
    else:
        parts = [_group(stats.slice(start, size), schema) for start, size in groups]
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


def _group(group: pa.Array, schema: pa.Schema) -> pa.StructArray:
    struct = pa.struct(list(schema))
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
    parsed = pa.StructArray.from_arrays(
        [table.column(name).combine_chunks() for name in schema.names], fields=list(schema)
    )
    if n_usable == len(group):
        return parsed
    positions = pc.subtract(pc.cumulative_sum(pc.cast(usable, pa.int64())), 1)
    return parsed.take(pc.if_else(usable, positions, pa.scalar(None, pa.int64())))
