"""File action rows kept in a bounded number of chunks, each with its reconciliation keys.

A long-running reader applies commit after commit to a snapshot's files. Appending each
commit's rows as a chunk of its own would leave, after a thousand refreshes, a table of a
thousand tiny chunks, and every consumer (filters, batching, response building) pays per
chunk: the issue that motivated this module measured queries 47x slower after 300 appends.

Rows live in record batches of at most CHUNK_ROWS rows, each paired with its keys, so a
commit that removes a few files copies only the batches holding them. After every change
adjacent batches are merged, left to right, while the later one has grown to at least
1/MERGE_RATIO of the earlier one and the two fit in CHUNK_ROWS. For a stream of small
appends this is a counter in base MERGE_RATIO: the tail holds at most a handful of
batches of geometrically growing size (3 or 4 for commits of 1 to 100 rows, where a
freshly loaded snapshot has 1 or 2), and each row is copied only O(log CHUNK_ROWS) times
over its life, so a refresh stays cheap. Full batches are never copied by a merge, so
batches backed by a memory-mapped file stay mapped. Batches shrunk by removals merge
with their neighbours by the same rule.

Merging creates new buffers, which invalidates caches keyed by buffer identity (parsed
statistics, file ids) for the merged rows only; the ratio keeps that amortised too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.packed_stats import concat_batches

CHUNK_ROWS = 16_384
MERGE_RATIO = 8

KeyFunction = Callable[[pa.RecordBatch], pa.Array]


@dataclass(frozen=True, eq=False)
class FileChunks:
    """Rows of one schema in record batches of at most CHUNK_ROWS rows; `keys[i]` holds
    the reconciliation key of each row of `batches[i]`."""

    schema: pa.Schema
    batches: tuple[pa.RecordBatch, ...]
    keys: tuple[pa.Array, ...]

    @classmethod
    def empty(cls, schema: pa.Schema) -> FileChunks:
        return cls(schema, (), ())

    @classmethod
    def build(cls, table: pa.Table, key_of: KeyFunction) -> FileChunks:
        """Chunks over the rows of `table` (its schema), with keys computed per batch."""
        batches = split_batches(table.to_batches(max_chunksize=CHUNK_ROWS))
        return _compacted(table.schema, batches, [flat(key_of(b)) for b in batches])

    @classmethod
    def restore(
        cls, schema: pa.Schema, batches: Sequence[pa.RecordBatch], keys: Sequence[pa.Array]
    ) -> FileChunks:
        """Chunks as they were saved (see deltalog.snapshot_store): taken as they are."""
        return cls(schema, tuple(batches), tuple(keys))

    @property
    def num_rows(self) -> int:
        return sum(b.num_rows for b in self.batches)

    @property
    def num_chunks(self) -> int:
        return len(self.batches)

    @cached_property
    def table(self) -> pa.Table:
        """All rows as one table whose chunks are the batches (no copy)."""
        if not self.batches:
            return self.schema.empty_table()
        return pa.Table.from_batches(self.batches, schema=self.schema)

    @cached_property
    def key_column(self) -> pa.ChunkedArray:
        return pa.chunked_array(self.keys, pa.string())

    def without(self, touched: pa.Array) -> FileChunks:
        """The rows whose key is not in `touched`; only batches holding a match are
        copied (filtered), every other batch is kept as it is."""
        if not self.batches or len(touched) == 0:
            return self
        hit = pc.is_in(self.key_column, value_set=touched)
        if not pc.any(hit).as_py():
            return self
        hits = hit.combine_chunks()
        batches: list[pa.RecordBatch] = []
        keys: list[pa.Array] = []
        offset = 0
        changed = False
        for batch, key in zip(self.batches, self.keys, strict=True):
            n = batch.num_rows
            mask = hits.slice(offset, n)
            offset += n
            if mask.true_count:
                keep = pc.invert(mask)
                batch, key = batch.filter(keep), key.filter(keep)
                changed = True
            batches.append(batch)
            keys.append(key)
        if not changed:
            return self
        return _compacted(self.schema, batches, keys)

    def appended(self, rows: pa.Table, key_of: KeyFunction) -> FileChunks:
        """These chunks followed by `rows` (same schema), compacted."""
        if rows.num_rows == 0:
            return self
        new = split_batches(rows.to_batches(max_chunksize=CHUNK_ROWS))
        return _compacted(
            self.schema,
            [*self.batches, *new],
            [*self.keys, *(flat(key_of(b)) for b in new)],
        )


def flat(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


def split_batches(batches: Sequence[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """Batches of at most CHUNK_ROWS rows (zero-copy slices), empty ones left out."""
    out: list[pa.RecordBatch] = []
    for batch in batches:
        for start in range(0, batch.num_rows, CHUNK_ROWS):
            out.append(batch.slice(start, CHUNK_ROWS))
    return out


class ChunkSink:
    """The merging of the module docstring, online: batches pushed in row order come out
    (through `emit`) as the chunks `FileChunks` would hold, each as soon as no later
    batch can merge into it, so a stream of any length is compacted holding at most
    about two chunks' worth of rows (deltalog.snapshot_store writes a checkpoint to its
    file that way)."""

    def __init__(self, emit: Callable[[pa.RecordBatch, pa.Array], None]) -> None:
        self._emit = emit
        self._groups: list[list[tuple[pa.RecordBatch, pa.Array]]] = []
        self._sizes: list[int] = []

    def push(self, batch: pa.RecordBatch, keys: pa.Array) -> None:
        if batch.num_rows == 0:
            return
        self._groups.append([(batch, keys)])
        self._sizes.append(batch.num_rows)
        sizes = self._sizes
        while (
            len(sizes) >= 2
            and sizes[-2] + sizes[-1] <= CHUNK_ROWS
            and sizes[-1] * MERGE_RATIO >= sizes[-2]
        ):
            last, size = self._groups.pop(), sizes.pop()
            self._groups[-1].extend(last)
            sizes[-1] += size
        # A group followed by one it cannot absorb (together over CHUNK_ROWS) never merges
        # again (groups only grow), and neither does anything before it.
        final = 0
        for i in range(len(sizes) - 1):
            if sizes[i] + sizes[i + 1] > CHUNK_ROWS:
                final = i + 1
        self._flush(final)

    def finish(self) -> None:
        self._flush(len(self._groups))

    def _flush(self, count: int) -> None:
        for group in self._groups[:count]:
            if len(group) == 1:
                self._emit(*group[0])
            else:
                self._emit(
                    concat_batches([b for b, _ in group]),
                    pa.concat_arrays([k for _, k in group]),
                )
        del self._groups[:count]
        del self._sizes[:count]


def _compacted(
    schema: pa.Schema, batches: Sequence[pa.RecordBatch], keys: Sequence[pa.Array]
) -> FileChunks:
    """Merge adjacent batches by the rule of the module docstring; each merged group is
    copied once, however many merges formed it."""
    out_batches: list[pa.RecordBatch] = []
    out_keys: list[pa.Array] = []

    def emit(batch: pa.RecordBatch, key: pa.Array) -> None:
        out_batches.append(batch)
        out_keys.append(key)

    sink = ChunkSink(emit)
    for batch, key in zip(batches, keys, strict=True):
        sink.push(batch, key)
    sink.finish()
    return FileChunks(schema, tuple(out_batches), tuple(out_keys))
