"""JSON statistics held compressed: the `stats` column of a snapshot loaded in memory.

A file's `stats` JSON is most of what a snapshot holds (two thirds of a million-file
table's Arrow data in the snapshot benchmark), yet it is read only where a response line
is written and where data skipping parses it. So a snapshot loaded in memory keeps it
packed: the strings of each run of BLOCK_ROWS rows are compressed together (zstd, level
1: runs of similar JSON compress 10 to 60 times), and each row holds a reference to its
block and its place in it. The column stays an Arrow column of the files table, so
filtering, taking, slicing and concatenating rows carry the references along, and every
reader turns whatever rows it holds back into the exact strings with `stats_text`,
decompressing only the blocks those rows use.

Layout (PACKED_STATS): a struct, null where the file has no stats, of
- `block`: dictionary-encoded binary, one dictionary value per block: a header
  [rows: u32][size of the compressed offsets: u32][size of the text: u32], then the
  block's string offsets (from 0) compressed, then its text compressed;
- `row`: the row's place in its block.

A snapshot mapped from a snapshot store keeps plain strings (the store file is shared
page cache, and Arrow IPC files cannot hold a dictionary that changes between batches).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

BLOCK_ROWS = 1024
PACKED_STATS = pa.struct(
    [
        pa.field("block", pa.dictionary(pa.int32(), pa.binary())),
        pa.field("row", pa.uint16()),
    ]
)
_HEADER = struct.Struct("<III")
_CODEC = pa.Codec("zstd", compression_level=1) if pa.Codec.is_available("zstd") else None


def is_packed(data_type: pa.DataType) -> bool:
    return bool(data_type == PACKED_STATS)


def can_pack() -> bool:
    """Does this pyarrow build have the codec (wheels do)? Without it stats stay strings."""
    return _CODEC is not None


def pack_stats(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A string column of stats JSON as a PACKED_STATS column (already packed: as is)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if is_packed(values.type):
        return values
    assert _CODEC is not None
    if not pa.types.is_string(values.type):
        values = values.cast(pa.string())
    n = len(values)
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, n + 1, values.offset * 4) if n else None
    data = buffers[2] if n and buffers[2] is not None else pa.py_buffer(b"")
    blobs: list[bytes] = []
    for start in range(0, n, BLOCK_ROWS):
        assert offsets is not None
        end = min(start + BLOCK_ROWS, n)
        first, last = int(offsets[start]), int(offsets[end])
        relative = (offsets[start : end + 1] - first).astype("<i4", copy=False)
        packed_offsets = _CODEC.compress(relative.tobytes(), asbytes=True)
        packed_text = _CODEC.compress(data.slice(first, last - first), asbytes=True)
        header = _HEADER.pack(end - start, len(packed_offsets), last - first)
        blobs.append(header + packed_offsets + packed_text)
    positions = np.arange(n)
    block = pa.DictionaryArray.from_arrays(
        pa.array((positions // BLOCK_ROWS).astype(np.int32)), pa.array(blobs, pa.binary())
    )
    row = pa.array((positions % BLOCK_ROWS).astype(np.uint16))
    mask = values.is_null() if values.null_count else None
    return pa.StructArray.from_arrays([block, row], fields=list(PACKED_STATS), mask=mask)


def pack_adds(rows: pa.Table) -> pa.Table:
    """Add rows with their `stats` packed, chunk by chunk."""
    column = rows.column("stats")
    if is_packed(column.type):
        return rows
    packed = pa.chunked_array([pack_stats(c) for c in column.chunks], PACKED_STATS)
    index = rows.schema.get_field_index("stats")
    return rows.set_column(index, pa.field("stats", PACKED_STATS), packed)


def concat_batches(batches: Sequence[pa.RecordBatch]) -> pa.RecordBatch:
    """The rows of `batches` (file actions of one schema) as one batch. Packed statistics
    are packed afresh: concatenating them as they are would unify the batches' block
    dictionaries, keeping every block each of them refers to (also blocks of rows long
    filtered out), so chunks merged again and again by refreshes would grow."""
    merged = pa.concat_batches(batches)
    index = merged.schema.get_field_index("stats")
    if index < 0 or not is_packed(merged.schema.field(index).type):
        return merged
    packed = pack_stats(_unpacked(merged.column(index)))
    return merged.set_column(index, pa.field("stats", PACKED_STATS), packed)


def packed_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` (of file actions) with its `stats` packed."""
    return _with_stats(schema, PACKED_STATS)


def text_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` (of file actions) with its `stats` as JSON strings."""
    return _with_stats(schema, pa.string())


def _with_stats(schema: pa.Schema, data_type: pa.DataType) -> pa.Schema:
    index = schema.get_field_index("stats")
    if index < 0 or schema.field(index).type == data_type:
        return schema
    return schema.set(index, pa.field("stats", data_type))


def text_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` (of file actions) with its `stats` as JSON strings."""
    index = batch.schema.get_field_index("stats")
    if index < 0 or not is_packed(batch.schema.field(index).type):
        return batch
    return batch.set_column(index, pa.field("stats", pa.string()), _unpacked(batch.column(index)))


def text_table(table: pa.Table) -> pa.Table:
    """`table` (of file actions) with its `stats` as JSON strings."""
    index = table.schema.get_field_index("stats")
    if index < 0 or not is_packed(table.schema.field(index).type):
        return table
    return table.set_column(index, pa.field("stats", pa.string()), stats_text(table.column(index)))


def stats_text(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The stats JSON strings of a stats column, packed or not (a string column is
    returned as it is)."""
    if not is_packed(values.type):
        return values
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([_unpacked(c) for c in values.chunks], pa.string())
    return _unpacked(values)


def _unpacked(values: pa.StructArray) -> pa.Array:
    n = len(values)
    if values.null_count == n:
        return pa.nulls(n, pa.string())
    assert _CODEC is not None
    block = values.field(0)
    index = _filled(block.indices).astype(np.int64)
    row = _filled(values.field(1)).astype(np.int64)
    valid = None
    if values.null_count:
        valid = values.is_valid().to_numpy(zero_copy_only=False)
        # Null rows point at any row of a block that is decoded anyway.
        index[~valid] = index[valid][0]
        row[~valid] = 0
    dictionary = block.dictionary
    used = np.zeros(len(dictionary), dtype=bool)
    used[index] = True
    wanted = np.flatnonzero(used)
    texts = [_block_text(dictionary[int(i)].as_buffer()) for i in wanted]
    starts = np.zeros(len(dictionary), dtype=np.int64)
    starts[wanted] = np.cumsum([0] + [len(t) for t in texts[:-1]])
    text = texts[0] if len(texts) == 1 else pa.concat_arrays(texts)
    positions = starts[index] + row
    first = int(positions[0])
    if (
        valid is None
        and int(positions[-1]) - first == n - 1
        and bool((np.diff(positions) == 1).all())
    ):
        return text.slice(first, n)
    mask = None if valid is None else ~valid
    return text.take(pa.array(positions, pa.int64(), mask=mask))


def _filled(values: pa.Array) -> np.ndarray:
    if values.null_count:
        values = values.fill_null(0)
    out: np.ndarray = values.to_numpy(zero_copy_only=False)
    return out


def _block_text(blob: pa.Buffer) -> pa.Array:
    """One block's strings."""
    assert _CODEC is not None
    rows, offsets_length, text_length = _HEADER.unpack_from(blob)
    start = _HEADER.size
    offsets = _CODEC.decompress(
        blob.slice(start, offsets_length), decompressed_size=(rows + 1) * 4, asbytes=False
    )
    text = _CODEC.decompress(
        blob.slice(start + offsets_length), decompressed_size=text_length, asbytes=False
    )
    return pa.Array.from_buffers(pa.string(), rows, [None, offsets, text])
