"""The rows of a files table a response sends, taken only as they are written.

Skipping names the files a query keeps as row indices (sharing.skipping.select_files);
copying them out of a million-file table up front, their JSON stats strings above all
(hundreds of bytes a file), costs several times deciding which to keep, and holds a
second copy for as long as the response streams. So a large response keeps the indices
and takes one batch of rows at a time as it writes it (`row_batches`), and only a page
or a small response is taken whole (`take_rows`).

Arrow's `take` on a table of several chunks concatenates every column first (pyarrow
23: the whole stats column, for any number of rows), and a snapshot's files table keeps
a few chunks (see deltalog.file_chunks), so rows are taken from each chunk on its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

__all__ = ["row_batches", "take_rows"]


def take_rows(files: pa.Table, rows: pa.Array) -> pa.Table:
    """`files.take(rows)` (int64 indices, any order) without concatenating chunks."""
    batches = files.to_batches()
    if len(batches) <= 1:
        return files.take(rows)
    return _take(files.schema, batches, _starts(batches), rows)


def row_batches(files: pa.Table, rows: pa.Array | None, max_rows: int) -> Iterator[pa.RecordBatch]:
    """The rows `rows` of `files` (None: every row, in order) as record batches of at most
    `max_rows` rows, each taken when it is asked for."""
    if rows is None:
        yield from files.to_batches(max_chunksize=max_rows)
        return
    batches = files.to_batches()
    starts = _starts(batches)
    for first in range(0, len(rows), max_rows):
        window = rows.slice(first, max_rows)
        if len(batches) <= 1:
            yield from files.take(window).to_batches(max_chunksize=max_rows)
            continue
        for batch in _take(files.schema, batches, starts, window).to_batches():
            if batch.num_rows:
                yield batch


def _starts(batches: list[pa.RecordBatch]) -> np.ndarray:
    """Row number of each batch's first row, then the total."""
    return np.cumsum([0, *(batch.num_rows for batch in batches)], dtype=np.int64)


def _take(
    schema: pa.Schema, batches: list[pa.RecordBatch], starts: np.ndarray, rows: pa.Array
) -> pa.Table:
    positions = rows.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    order = None
    if len(positions) > 1 and bool((positions[1:] < positions[:-1]).any()):
        order = np.argsort(positions, kind="stable")
        positions = positions[order]
    if len(positions) and (positions[0] < 0 or positions[-1] >= starts[-1]):
        raise IndexError("row index out of bounds")
    cuts = np.searchsorted(positions, starts)
    parts = [
        batch.take(pa.array(positions[cuts[i] : cuts[i + 1]] - starts[i]))
        for i, batch in enumerate(batches)
        if cuts[i + 1] > cuts[i]
    ]
    taken = pa.Table.from_batches(parts, schema)
    if order is None:
        return taken
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    return taken.combine_chunks().take(pa.array(back))
