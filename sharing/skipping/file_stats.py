"""Per-file statistics of a files table, each row from the best source it has.

Rows whose checkpoint stored typed statistics (the `stats_parsed` column deltalog keeps
alongside a snapshot's files) are read from them: nothing is parsed, so a predicate on
a never-queried million-file snapshot costs a few vectorised casts. Every other row (one
that came from a JSON commit, or a checkpoint without typed statistics) has its `stats`
JSON parsed for the requested columns only, cached per chunk by a StatsCache. The files
table keeps the two columns in the same chunks (deltalog.file_chunks), so each chunk is
handled on its own and a chunk whose rows are all typed never touches its JSON.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import STATS_PARSED
from sharing.skipping import typed_stats
from sharing.skipping.stats import (
    ColumnStats,
    FileStats,
    StatsCache,
    StatsRequest,
    concat_file_stats,
    parse_stats,
    scatter_indices,
)


def file_stats(
    files: pa.Table,
    requests: Sequence[StatsRequest],
    cache: StatsCache | None,
    *,
    background: bool = False,
) -> FileStats:
    """numRecords and the requested columns' statistics, one row per file. `cache` None
    parses JSON without caching it; `background` is StatsCache.get's."""
    wanted = list(dict.fromkeys(requests))
    if STATS_PARSED not in files.column_names:
        return _json(files.column("stats"), wanted, cache, background)
    parts = [
        _batch_stats(batch, wanted, cache, background)
        for batch in files.select(["stats", STATS_PARSED]).to_batches()
        if batch.num_rows
    ]
    return concat_file_stats(parts, wanted)


def stats_ready(files: pa.Table, requests: Sequence[StatsRequest], cache: StatsCache) -> bool:
    """Can `file_stats` answer without parsing much JSON (typed, cached, or only a few
    rows of a chunk to parse)?"""
    wanted = list(dict.fromkeys(requests))
    if STATS_PARSED not in files.column_names:
        return cache.has(files.column("stats"), wanted)
    for batch in files.select(["stats", STATS_PARSED]).to_batches():
        plan = _plan(batch.column(0), batch.column(1), wanted)
        if plan is not None and plan.whole_chunk and not cache.has(batch.column(0), plan.requests):
            return False
    return True


class _Plan:
    """What one chunk's JSON must serve: `requests` for the rows in `rows` (None: every
    row, through the cache; a mask: just those rows, parsed on the spot)."""

    __slots__ = ("requests", "rows", "whole_chunk")

    def __init__(
        self, requests: list[StatsRequest], rows: pa.Array | None, whole_chunk: bool
    ) -> None:
        self.requests = requests
        self.rows = rows
        self.whole_chunk = whole_chunk


# Rows without typed statistics are parsed on their own (uncached) while they are at most
# this share of their chunk; beyond it the whole chunk's JSON is parsed, and cached.
_ROWS_ALONE = 0.25


def _plan(json_stats: pa.Array, typed: pa.Array, wanted: list[StatsRequest]) -> _Plan | None:
    """None when the typed statistics serve every row of the chunk."""
    n = len(typed)
    if typed.null_count == n or typed_stats.num_records(typed) is None:
        return _Plan(wanted, None, True)
    if any(typed_stats.column_stats(typed, r) is None for r in wanted):
        return _Plan(wanted, None, True)
    if not typed.null_count:
        return None
    # Rows whose typed statistics are null but that have JSON (e.g. from a commit); rows
    # with neither have no statistics at all.
    rows = pc.and_(typed.is_null(), json_stats.is_valid())
    count = rows.true_count
    if count == 0:
        return None
    if count > n * _ROWS_ALONE:
        return _Plan(wanted, None, True)
    return _Plan(wanted, rows, False)


def _json(
    stats: pa.Array | pa.ChunkedArray,
    requests: list[StatsRequest],
    cache: StatsCache | None,
    background: bool,
) -> FileStats:
    if cache is not None:
        return cache.get(stats, requests, background=background)
    chunks = stats.chunks if isinstance(stats, pa.ChunkedArray) else [stats]
    combined = pa.concat_arrays(chunks) if chunks else pa.array([], pa.string())
    return parse_stats(combined, requests)


def _batch_stats(
    batch: pa.RecordBatch, wanted: list[StatsRequest], cache: StatsCache | None, background: bool
) -> FileStats:
    json_stats, typed = batch.column(0), batch.column(1)
    plan = _plan(json_stats, typed, wanted)
    if plan is not None and typed.null_count == len(typed):
        return _json(json_stats, wanted, cache, background)
    records = typed_stats.num_records(typed)
    columns = {r: typed_stats.column_stats(typed, r) for r in wanted}
    if plan is None:
        assert records is not None
        return FileStats(records, {r: c for r, c in columns.items() if c is not None})
    if plan.rows is None:
        parsed = _json(json_stats, plan.requests, cache, background)
        has_typed = typed.is_valid() if typed.null_count else None
    else:
        # Just the rows without typed statistics, parsed on the spot and put back in place.
        few = parse_stats(json_stats.filter(plan.rows), plan.requests)
        where = scatter_indices(plan.rows)
        parsed = FileStats(
            few.num_records.take(where),
            {
                r: ColumnStats(c.min.take(where), c.max.take(where), c.null_count.take(where))
                for r, c in few.columns.items()
            },
        )
        has_typed = pc.invert(plan.rows)

    def pick(typed_values: pa.Array | None, json_values: pa.Array) -> pa.Array:
        if typed_values is None:
            return json_values
        if has_typed is None:
            return typed_values
        return pc.if_else(has_typed, typed_values, json_values)

    merged: dict[StatsRequest, ColumnStats] = {}
    for r in wanted:
        typed_column = columns[r]
        if typed_column is None:
            merged[r] = parsed.columns[r]
        else:
            json_column = parsed.columns[r]
            merged[r] = ColumnStats(
                pick(typed_column.min, json_column.min),
                pick(typed_column.max, json_column.max),
                pick(typed_column.null_count, json_column.null_count),
            )
    return FileStats(pick(records, parsed.num_records), merged)
