"""Per-file statistics (`add.stats` JSON) as Arrow columns, parsed in bulk and cached.

A snapshot may have a million files, each with a few hundred bytes of stats JSON, and a
predicate needs only a handful of values from each: `numRecords`, and `minValues`,
`maxValues`, `nullCount` of the columns it mentions. The strings already sit back to back
in the Arrow string column's data buffer, so groups of rows are handed to Arrow's JSON
reader zero-copy (one JSON object after another), with an explicit schema naming only
the wanted fields, on a thread pool. A group the reader rejects (a stats string that is
not one JSON object, a value of an unexpected JSON type such as Spark's `"NaN"`) is parsed
row by row with orjson instead, so one odd file costs a group, not the table.

Parsing is the expensive part of filtering (order of a second per million files), so
results are cached per stats buffer: every request against the same snapshot (or a slice
of it) reuses them. The cache holds a reference to the buffers it keys on, so an address
cannot be reused by other data while its entry lives.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from deltalog.packed_stats import stats_text
from sharing.skipping.convert import convert
from sharing.skipping.expr import INT64_MAX, INT64_MIN

Path = tuple[str, ...]
# Physical path, JSON value type of min/max, conversion applied to min/max (see convert).
StatsRequest = tuple[Path, pa.DataType, str]

GROUP_BYTES = 2 * 1024 * 1024
_STRIPES = 64
_SPECIAL_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


@dataclass(frozen=True, slots=True)
class ColumnStats:
    """min/max (JSON value type, or converted) and nullCount (int64) of one column."""

    min: pa.Array
    max: pa.Array
    null_count: pa.Array


@dataclass(frozen=True, slots=True)
class FileStats:
    num_records: pa.Array
    columns: dict[StatsRequest, ColumnStats]


def concat_file_stats(parts: Sequence[FileStats], requests: Sequence[StatsRequest]) -> FileStats:
    """The statistics of consecutive row ranges as one (an empty one for no parts)."""
    if not parts:
        return parse_stats(pa.array([], pa.string()), requests)
    if len(parts) == 1:
        return parts[0]
    return FileStats(
        pa.concat_arrays([p.num_records for p in parts]),
        {
            r: ColumnStats(
                pa.concat_arrays([p.columns[r].min for p in parts]),
                pa.concat_arrays([p.columns[r].max for p in parts]),
                pa.concat_arrays([p.columns[r].null_count for p in parts]),
            )
            for r in requests
        },
    )


# Parsing -----------------------------------------------------------------------------


def parse_stats(stats: pa.Array, requests: Sequence[StatsRequest]) -> FileStats:
    """numRecords and the requested columns' stats for every row of a stats string array.
    Missing, null or malformed stats give nulls (the evaluator reads null as unknown);
    packed stats (deltalog.packed_stats) are unpacked first."""
    stats = stats_text(stats)
    if pa.types.is_large_string(stats.type):
        stats = stats.cast(pa.string())
    schema = _read_schema(requests)
    n = len(stats)
    if n == 0:
        return _extract(pa.table({f.name: pa.array([], f.type) for f in schema}), requests)
    groups = _groups(stats)
    tables = list(_executor().map(lambda g: _parse_group(g, schema), groups))
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return _extract(table, requests)


def _read_schema(requests: Sequence[StatsRequest]) -> pa.Schema:
    def nested(leaf_type: pa.DataType) -> pa.StructType:
        tree: dict[str, Any] = {}
        for path, json_type, _ in requests:
            node = tree
            for part in path[:-1]:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    break
            else:
                node.setdefault(path[-1], json_type if leaf_type is None else leaf_type)
        return _struct_of(tree)

    return pa.schema(
        [
            pa.field("numRecords", pa.int64()),
            pa.field("minValues", nested(None)),
            pa.field("maxValues", nested(None)),
            pa.field("nullCount", nested(pa.int64())),
        ]
    )


def _struct_of(tree: dict[str, Any]) -> pa.StructType:
    return pa.struct(
        [
            pa.field(name, _struct_of(value) if isinstance(value, dict) else value)
            for name, value in tree.items()
        ]
    )


def _offsets(stats: pa.Array) -> pa.Array:
    return pa.Array.from_buffers(
        pa.int32(), len(stats) + 1, [None, stats.buffers()[1]], offset=stats.offset
    )


def _groups(stats: pa.Array) -> list[pa.Array]:
    """Slices of about GROUP_BYTES of JSON each."""
    n = len(stats)
    offsets = _offsets(stats)
    total = offsets[n].as_py() - offsets[0].as_py()
    per_group = max(1024, int(n * GROUP_BYTES / max(total, 1)))
    return [stats.slice(start, per_group) for start in range(0, n, per_group)]


def _parse_group(group: pa.Array, schema: pa.Schema) -> pa.Table:
    usable = pc.fill_null(pc.greater(pc.binary_length(group), 0), False)
    n_usable = pc.sum(usable).as_py() or 0
    if n_usable == 0:
        return _null_table(schema, len(group))
    dense = group if n_usable == len(group) else group.filter(usable)
    try:
        table = _read_json(dense, schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        table = None
    if table is None or table.num_rows != n_usable:
        return _parse_rows(group, schema)
    if n_usable == len(group):
        return table
    # Scatter the parsed rows back to their positions; unusable rows become null.
    return table.take(scatter_indices(usable))


def scatter_indices(mask: pa.Array) -> pa.Array:
    """For `take`: at each True position of `mask` the index of that row among the rows
    `filter(mask)` kept, null elsewhere (results for a filtered subset put back in place)."""
    positions = pc.subtract(pc.cumulative_sum(pc.cast(mask, pa.int64())), 1)
    return pc.if_else(mask, positions, pa.scalar(None, pa.int64()))


def _read_json(dense: pa.Array, schema: pa.Schema) -> pa.Table:
    offsets = _offsets(dense)
    start, end = offsets[0].as_py(), offsets[len(dense)].as_py()
    data = dense.buffers()[2].slice(start, end - start)
    return pj.read_json(
        pa.BufferReader(data),
        read_options=pj.ReadOptions(use_threads=False, block_size=max(end - start, 1) + 1),
        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )


def _null_table(schema: pa.Schema, n: int) -> pa.Table:
    return pa.table({f.name: pa.nulls(n, f.type) for f in schema}, schema=schema)


def _parse_rows(group: pa.Array, schema: pa.Schema) -> pa.Table:
    """The slow, tolerant path: orjson per row, values of the wrong JSON type become null."""
    num_records: list[object] = []
    values: dict[str, list[dict[str, Any]]] = {"minValues": [], "maxValues": [], "nullCount": []}
    for text in group.to_pylist():
        try:
            doc = orjson.loads(text) if text else None
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            doc = {}
        num_records.append(_coerce(doc.get("numRecords"), pa.int64()))
        for key in values:
            section = doc.get(key)
            values[key].append(section if isinstance(section, dict) else {})
    columns = {"numRecords": pa.array(num_records, pa.int64())}
    for key, sections in values.items():
        struct_type = schema.field(key).type
        columns[key] = pa.array([_conform(s, struct_type) for s in sections], struct_type)
    return pa.table(columns, schema=schema)


def _conform(section: dict[str, Any], struct_type: pa.StructType) -> dict[str, Any]:
    out: dict[str, object] = {}
    for field in struct_type:
        value = section.get(field.name)
        if pa.types.is_struct(field.type):
            out[field.name] = _conform(value, field.type) if isinstance(value, dict) else None
        else:
            out[field.name] = _coerce(value, field.type)
    return out


def _coerce(value: object, arrow_type: pa.DataType) -> object:
    if value is None or isinstance(value, dict | list):
        return None
    if pa.types.is_int64(arrow_type):
        if isinstance(value, bool):
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return value if isinstance(value, int) and INT64_MIN <= value <= INT64_MAX else None
    if pa.types.is_float64(arrow_type):
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            return float(value)
        return _SPECIAL_FLOATS.get(value) if isinstance(value, str) else None
    if pa.types.is_boolean(arrow_type):
        return value if isinstance(value, bool) else None
    return value if isinstance(value, str) else None


def _extract(table: pa.Table, requests: Sequence[StatsRequest]) -> FileStats:
    table = table.combine_chunks()

    def leaf(section: str, path: Path) -> pa.Array:
        column = table.column(section).chunk(0) if table.num_rows else table.column(section)
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        for part in path:
            array = pc.struct_field(array, [part])
        return array

    columns = {
        request: ColumnStats(
            convert(leaf("minValues", request[0]), request[2]),
            convert(leaf("maxValues", request[0]), request[2]),
            leaf("nullCount", request[0]),
        )
        for request in requests
    }
    records = table.column("numRecords")
    records = records.combine_chunks() if isinstance(records, pa.ChunkedArray) else records
    return FileStats(records, columns)


_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """One small pool for the whole process: Arrow's JSON reader releases the GIL."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(
                max_workers=max(1, os.cpu_count() or 1), thread_name_prefix="stats-json"
            )
        return _EXECUTOR


# Caching -----------------------------------------------------------------------------


class _Entry:
    __slots__ = ("chunk", "columns", "num_records")

    def __init__(self, chunk: pa.Array) -> None:
        self.chunk = chunk  # keeps the keyed buffers alive
        self.num_records: pa.Array | None = None
        self.columns: dict[StatsRequest, ColumnStats] = {}


class StatsCache:
    """Parsed stats per stats buffer, LRU-bounded by the number of files held.

    A request on a slice of a cached chunk (same buffers, a sub-range) is served by slicing
    the cached columns; only columns not parsed before are parsed, for the whole chunk.
    """

    def __init__(self, max_files: int = 8_000_000) -> None:
        self.max_files = max_files
        self._entries: OrderedDict[tuple[int, int, int], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        # Parsing a chunk holds its stripe and lists what it parses in `_inflight`: a
        # request arriving meanwhile whose columns are all being parsed waits and reuses
        # the result instead of parsing the same text a second time; one needing other
        # columns parses them alongside rather than waiting for work it does not need.
        self._parsing = [threading.Lock() for _ in range(_STRIPES)]
        self._inflight: dict[tuple[int, int, int], set[StatsRequest]] = {}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def forget(self, stats: pa.ChunkedArray | pa.Array) -> None:
        """Drop what was parsed for the chunks of `stats` (a table no longer served)."""
        chunks = stats.chunks if isinstance(stats, pa.ChunkedArray) else [stats]
        with self._lock:
            for chunk in chunks:
                if len(chunk):
                    self._entries.pop(_key(chunk), None)

    def get(
        self,
        stats: pa.ChunkedArray | pa.Array,
        requests: Iterable[StatsRequest],
        *,
        background: bool = False,
    ) -> FileStats:
        """numRecords and the requested columns' stats, one row per element of `stats`.
        `background` (a warm-up) always waits for a parse of the same chunk in progress
        rather than competing with it for the CPU."""
        wanted = list(dict.fromkeys(requests))
        chunks = stats.chunks if isinstance(stats, pa.ChunkedArray) else [stats]
        if pa.types.is_large_string(stats.type):
            return parse_stats(pa.concat_arrays([c.cast(pa.string()) for c in chunks]), wanted)
        parts = [self._get_chunk(chunk, wanted, background) for chunk in chunks if len(chunk)]
        return concat_file_stats(parts, wanted)

    def has(self, stats: pa.ChunkedArray | pa.Array, requests: Iterable[StatsRequest]) -> bool:
        """Are these columns cached for every row of `stats` (no parsing needed)?"""
        wanted = list(requests)
        chunks = stats.chunks if isinstance(stats, pa.ChunkedArray) else [stats]
        with self._lock:
            for chunk in chunks:
                if not len(chunk):
                    continue
                entry = self._entries.get(_key(chunk))
                if entry is None or not _covers(entry.chunk, chunk):
                    return False
                if entry.num_records is None or any(r not in entry.columns for r in wanted):
                    return False
        return True

    def cached_requests(self, stats: pa.ChunkedArray | pa.Array) -> list[StatsRequest] | None:
        """The columns parsed so far for any chunk of `stats` (numRecords is parsed with
        every request, so [] means numRecords alone); None when nothing is cached."""
        chunks = stats.chunks if isinstance(stats, pa.ChunkedArray) else [stats]
        found: dict[StatsRequest, None] | None = None
        with self._lock:
            for chunk in chunks:
                entry = self._entries.get(_key(chunk)) if len(chunk) else None
                if entry is None or entry.num_records is None:
                    continue
                found = found if found is not None else {}
                found.update(dict.fromkeys(entry.columns))
        return None if found is None else list(found)

    def _get_chunk(
        self, chunk: pa.Array, wanted: list[StatsRequest], background: bool
    ) -> FileStats:
        key = _key(chunk)
        # Claim the chunk before taking its stripe, so a request arriving at any moment
        # of another's parse sees what is being parsed.
        with self._lock:
            inflight = self._inflight.get(key)
            if inflight is None:
                self._inflight[key] = set(wanted)
        if inflight is not None and not background and not inflight.issuperset(wanted):
            return self._get_chunk_locked(key, chunk, wanted)  # alongside, not after
        with self._parsing[hash(key) % _STRIPES]:
            with self._lock:
                self._inflight[key] = set(wanted)
            try:
                return self._get_chunk_locked(key, chunk, wanted)
            finally:
                with self._lock:
                    self._inflight.pop(key, None)

    def _get_chunk_locked(
        self, key: tuple[int, int, int], chunk: pa.Array, wanted: list[StatsRequest]
    ) -> FileStats:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and not _covers(entry.chunk, chunk):
                entry = None
            if entry is not None:
                self._entries.move_to_end(key)
            missing = wanted if entry is None else [r for r in wanted if r not in entry.columns]
            if entry is not None and entry.num_records is None:
                missing = wanted
        if entry is None:
            entry = _Entry(chunk)
        if missing or entry.num_records is None:
            parsed = parse_stats(entry.chunk, missing)
            with self._lock:
                entry.num_records = parsed.num_records
                entry.columns.update(parsed.columns)
                self._entries[key] = entry
                self._entries.move_to_end(key)
                self._evict()
        start = chunk.offset - entry.chunk.offset
        return _sliced(entry, wanted, start, len(chunk))

    def _evict(self) -> None:
        total = sum(len(e.chunk) for e in self._entries.values())
        while len(self._entries) > 1 and total > self.max_files:
            _, old = self._entries.popitem(last=False)
            total -= len(old.chunk)


def _key(chunk: pa.Array) -> tuple[int, int, int]:
    """The chunk's memory: validity, offsets and data buffers (kept alive by the entry);
    of packed stats, the struct's validity and its block references."""
    validity, offsets, data = (b.address if b is not None else 0 for b in chunk.buffers()[:3])
    return validity, offsets, data


def _sliced(entry: _Entry, wanted: list[StatsRequest], start: int, n: int) -> FileStats:
    assert entry.num_records is not None
    columns = {}
    for request in wanted:
        cached = entry.columns[request]
        columns[request] = ColumnStats(
            cached.min.slice(start, n),
            cached.max.slice(start, n),
            cached.null_count.slice(start, n),
        )
    return FileStats(entry.num_records.slice(start, n), columns)


def _covers(cached: pa.Array, chunk: pa.Array) -> bool:
    return bool(
        cached.offset <= chunk.offset
        and chunk.offset + len(chunk) <= cached.offset + len(cached)
        and cached.type == chunk.type
    )


DEFAULT_CACHE = StatsCache()
