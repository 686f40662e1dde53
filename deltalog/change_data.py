"""The rows of a change data feed range, for tests and expected results.

The server itself only hands out files; this reads them the way a CDF client does:
cdc files with their own `_change_type` column, adds as inserts and removes as deletes.
When a commit without cdc files removes and re-adds the same data file with another
deletion vector (a DV-based DELETE on a table that writes no change data), the pair is
resolved row by row, as Delta Kernel does: rows the new DV deletes are deletes, rows it
restores are inserts, and rows it leaves alone are no change.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap64

from deltalog.actions import Metadata, Protocol
from deltalog.changes import ChangeCommit, table_changes
from deltalog.deletion_vectors import (
    DeletionVectorDescriptor,
    read_bitmap,
    rewritten_dv_changes,
    rows_without,
)
from deltalog.errors import DeltaError
from deltalog.partitions import partition_columns_as_arrow
from deltalog.paths import decode_path, resolve_key
from deltalog.scan import read_data_file
from deltalog.schema import PrimitiveType, column_mapping_mode, parse_schema, to_arrow_field
from deltalog.storage.base import Storage

if TYPE_CHECKING:
    from deltalog.changes import TableLike

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
CHANGE_FIELDS = (
    pa.field(CHANGE_TYPE, pa.string()),
    pa.field(COMMIT_VERSION, pa.int64()),
    pa.field(COMMIT_TIMESTAMP, pa.timestamp("ms", tz="UTC")),
)
_VOID = PrimitiveType("void")


def read_changes_data(table: TableLike, start: int, end: int) -> pa.Table:
    """The change rows of versions `start..end`: the table's columns (as of each commit)
    plus `_change_type`, `_commit_version` and `_commit_timestamp`."""
    snapshot = table.snapshot(start)
    metadata, protocol = snapshot.metadata, snapshot.protocol
    layout = _Layout(table.storage, table.table_root, metadata, protocol)
    parts: list[pa.Table] = []
    for commit in table_changes(table, start, end):
        if commit.metadata is not None or commit.protocol is not None:
            metadata = commit.metadata or metadata
            protocol = commit.protocol or protocol
            layout = _Layout(table.storage, table.table_root, metadata, protocol)
        parts.extend(_commit_rows(layout, commit))
    if not parts:
        return layout.output_schema.empty_table()
    return pa.concat_tables(parts, promote_options="permissive")


def _commit_rows(layout: _Layout, commit: ChangeCommit) -> Iterator[pa.Table]:
    cdcs = commit.cdcs
    for i in range(cdcs.num_rows):
        rows, key = layout.read(cdcs, i)
        yield layout.labelled(rows, _change_types(layout.storage, key), commit)
    adds, removes = commit.adds, commit.removes
    removed = {decode_path(p): j for j, p in enumerate(removes.column("path").to_pylist())}
    paired: set[int] = set()
    for i, path in enumerate(adds.column("path").to_pylist()):
        rows, _ = layout.read(adds, i)
        now_deleted = layout.deleted(adds, i)
        j = removed.get(decode_path(path))
        if j is None:
            yield layout.labelled(rows_without(rows, now_deleted), "insert", commit)
            continue
        paired.add(j)
        deleted, inserted = rewritten_dv_changes(rows, now_deleted, layout.deleted(removes, j))
        yield layout.labelled(deleted, "delete", commit)
        yield layout.labelled(inserted, "insert", commit)
    for j in range(removes.num_rows):
        if j not in paired:
            rows, _ = layout.read(removes, j)
            yield layout.labelled(rows_without(rows, layout.deleted(removes, j)), "delete", commit)


def _change_types(storage: Storage, key: str) -> pa.Array:
    """The `_change_type` column of a change data file (never column-mapped)."""
    with storage.open_input_file(key) as source:
        parquet = pq.ParquetFile(source)
        if CHANGE_TYPE not in parquet.schema_arrow.names:
            raise DeltaError(f"change data file {key.rsplit('/', 1)[-1]} has no {CHANGE_TYPE}")
        column = parquet.read(columns=[CHANGE_TYPE]).column(0)
    return column.combine_chunks().cast(pa.string())


class _Layout:
    """How to read the data files of a commit: schema, partitions, column mapping."""

    def __init__(self, storage: Storage, root: str, metadata: Metadata, protocol: Protocol):
        self.storage = storage
        self.root = root
        self.schema = parse_schema(metadata.schema_string)
        self.mode = column_mapping_mode(
            metadata.configuration, protocol.min_reader_version, protocol.reader_features
        )
        self.partitions = set(metadata.partition_columns)
        self.fields = [f for f in self.schema.fields if f.type != _VOID]
        self.data_fields = [f for f in self.fields if f.name not in self.partitions]
        self.data_schema = pa.schema([to_arrow_field(f) for f in self.fields])
        self.output_schema = pa.schema([*self.data_schema, *CHANGE_FIELDS])

    def read(self, files: pa.Table, i: int) -> tuple[pa.Table, str]:
        """All rows of file `i` of a file table (partition values added), and its key."""
        key = resolve_key(self.storage, self.root, files.column("path")[i].as_py())
        arrays, num_rows = read_data_file(self.storage, key, self.data_fields, self.mode)
        partition_values = partition_columns_as_arrow(
            files.column("partitionValues").slice(i, 1),
            self.schema,
            [f.name for f in self.fields if f.name in self.partitions],
            column_mapping_mode=self.mode,
        )
        columns = [
            pa.repeat(partition_values.column(f.name)[0], num_rows)
            if f.name in self.partitions
            else arrays[f.name]
            for f in self.fields
        ]
        return pa.Table.from_arrays(columns, schema=self.data_schema), key

    def deleted(self, files: pa.Table, i: int) -> BitMap64:
        """The rows file `i`'s deletion vector deletes (empty without one)."""
        descriptor = DeletionVectorDescriptor.from_arrow(files.column("deletionVector")[i])
        if descriptor is None:
            return BitMap64()
        return read_bitmap(self.storage, self.root, descriptor)

    def labelled(self, rows: pa.Table, change: str | pa.Array, commit: ChangeCommit) -> pa.Table:
        n = rows.num_rows
        if isinstance(change, str):
            change = pa.repeat(pa.scalar(change, pa.string()), n)
        version = pa.repeat(pa.scalar(commit.version, pa.int64()), n)
        timestamp = pa.repeat(pa.scalar(commit.timestamp, CHANGE_FIELDS[2].type), n)
        return pa.Table.from_arrays(
            [*rows.columns, change, version, timestamp], schema=self.output_schema
        )
