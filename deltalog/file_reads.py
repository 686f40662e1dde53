"""Reading a table's data files one at a time, away from the snapshot that listed them.

A Spark task (or any worker) gets picklable descriptions: the table's `ReadLayout` and the
`DataFileRef`s of its files. It opens the storage itself and reads each file with its
deletion vector applied, its columns by logical name and its partition values typed,
through the same code as `deltalog.scan`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltalog.deletion_vectors import (
    DeletionVectorDescriptor,
    keep_mask,
    read_deleted_rows,
)
from deltalog.paths import resolve_key
from deltalog.scan import read_file_rows, snapshot_column_mapping_mode
from deltalog.schema import PrimitiveType, StructField, parse_schema, to_arrow_field
from deltalog.snapshot import Snapshot
from deltalog.storage.base import Storage

_VOID = PrimitiveType("void")


@dataclass(frozen=True)
class ReadLayout:
    """How a table's files are read: schema, partition columns, column mapping mode."""

    schema_string: str
    partition_columns: tuple[str, ...]
    mode: str

    @classmethod
    def of(cls, snapshot: Snapshot) -> ReadLayout:
        return cls(
            schema_string=snapshot.metadata.schema_string,
            partition_columns=tuple(snapshot.metadata.partition_columns),
            mode=snapshot_column_mapping_mode(snapshot),
        )

    def fields(self) -> list[StructField]:
        """The columns readers return (`void` columns left out, as Spark does)."""
        return [f for f in parse_schema(self.schema_string).fields if f.type != _VOID]

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([to_arrow_field(f) for f in self.fields()])


@dataclass(frozen=True)
class DataFileRef:
    """One active data file: where it is, and what is deleted from it."""

    path: str
    size: int
    partition_values: Mapping[str, str | None]
    deletion_vector: Mapping[str, Any] | None = None

    @property
    def descriptor(self) -> DeletionVectorDescriptor | None:
        if self.deletion_vector is None:
            return None
        return DeletionVectorDescriptor.from_dict(self.deletion_vector)

    @property
    def dv_id(self) -> str:
        """The deletion vector's unique id ('' without one): with the path, what makes
        the file's rows what they are."""
        descriptor = self.descriptor
        return "" if descriptor is None else descriptor.unique_id


def file_refs(snapshot: Snapshot) -> list[DataFileRef]:
    """The snapshot's active files, in log order."""
    files = snapshot.files
    refs = []
    columns = files.select(["path", "size", "partitionValues", "deletionVector"]).to_pylist()
    for row in columns:
        refs.append(
            DataFileRef(
                path=row["path"],
                size=int(row["size"]),
                partition_values=dict(row["partitionValues"] or []),
                deletion_vector=row["deletionVector"],
            )
        )
    return refs


def read_file_ref(
    storage: Storage, table_root: str, layout: ReadLayout, ref: DataFileRef
) -> pa.Table:
    """The live rows of one data file, in `layout.arrow_schema()`."""
    key = resolve_key(storage, table_root, ref.path)
    rows, num_rows = read_file_rows(
        storage,
        key,
        parse_schema(layout.schema_string),
        layout.fields(),
        layout.partition_columns,
        ref.partition_values,
        layout.mode,
    )
    descriptor = ref.descriptor
    if descriptor is None:
        return rows
    deleted = read_deleted_rows(storage, table_root, descriptor)
    return rows.filter(pa.array(keep_mask(deleted, num_rows)))
