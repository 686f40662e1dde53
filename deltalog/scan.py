"""Reading a snapshot's rows: the data files, as the table's logical schema says.

Each active file is read on its own (memory is bounded by one file), its columns are
found by logical name, physical name or parquet field id depending on the column mapping
mode, converted to the table's current types (type widening, timestamp units, missing
columns as nulls), completed with the typed partition values, and filtered by the file's
deletion vector.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.deletion_vectors import DeletionVectorDescriptor, keep_mask, read_deleted_rows
from deltalog.errors import DeltaError
from deltalog.partitions import partition_columns_as_arrow
from deltalog.paths import resolve_key
from deltalog.schema import (
    PARQUET_FIELD_ID,
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    column_mapping_mode,
    parse_schema,
    to_arrow_field,
    to_arrow_type,
)
from deltalog.storage.base import Storage

if TYPE_CHECKING:
    from deltalog.snapshot import Snapshot

_VOID = PrimitiveType("void")
_VARIANT = PrimitiveType("variant")


def snapshot_column_mapping_mode(snapshot: Snapshot) -> str:
    """The column mapping mode in effect for a snapshot (protocol permitting)."""
    protocol = snapshot.protocol
    return column_mapping_mode(
        snapshot.metadata.configuration,
        protocol.min_reader_version,
        protocol.reader_features,
    )


def read_snapshot_data(snapshot: Snapshot, columns: Sequence[str] | None = None) -> pa.Table:
    """All rows of a snapshot as one Arrow table with the table's logical schema.

    `columns` selects top-level columns by logical name (in the order given); `void`
    columns are left out, as Spark does.
    """
    output_schema = snapshot_arrow_schema(snapshot, columns)
    tables = list(iter_file_tables(snapshot, columns))
    if not tables:
        return output_schema.empty_table()
    return pa.concat_tables(tables)


def snapshot_arrow_schema(snapshot: Snapshot, columns: Sequence[str] | None = None) -> pa.Schema:
    """The Arrow schema `read_snapshot_data` returns for these columns."""
    return pa.schema([to_arrow_field(f) for f in _selected_fields(snapshot, columns)])


def iter_file_tables(
    snapshot: Snapshot, columns: Sequence[str] | None = None
) -> Iterator[pa.Table]:
    """The rows of each active file in turn (deleted rows removed, partitions added)."""
    schema = parse_schema(snapshot.metadata.schema_string)
    mode = snapshot_column_mapping_mode(snapshot)
    fields = _selected_fields(snapshot, columns, schema)
    partition_names = set(snapshot.metadata.partition_columns)
    data_fields = [f for f in fields if f.name not in partition_names]
    files = snapshot.files
    if files.num_rows == 0:
        return
    partitions = partition_columns_as_arrow(
        files.column("partitionValues"),
        schema,
        [f.name for f in fields if f.name in partition_names],
        column_mapping_mode=mode,
    )
    paths = files.column("path")
    dvs = files.column("deletionVector")
    output_schema = pa.schema([to_arrow_field(f) for f in fields])
    for i in range(files.num_rows):
        key = resolve_key(snapshot.storage, snapshot.table_root, paths[i].as_py())
        data, num_rows = read_data_file(snapshot.storage, key, data_fields, mode)
        descriptor = DeletionVectorDescriptor.from_arrow(dvs[i])
        mask = None
        if descriptor is not None:
            deleted = read_deleted_rows(snapshot.storage, snapshot.table_root, descriptor)
            mask = pa.array(keep_mask(deleted, num_rows))
        arrays = []
        for f in fields:
            if f.name in partition_names:
                value = partitions.column(f.name)[i]
                arrays.append(pa.repeat(value, num_rows))
            else:
                arrays.append(data[f.name])
        table = pa.Table.from_arrays(arrays, schema=output_schema)
        yield table.filter(mask) if mask is not None else table


def read_file_rows(
    storage: Storage,
    key: str,
    schema: StructType,
    fields: Sequence[StructField],
    partition_columns: Collection[str],
    partition_values: Mapping[str, str | None],
    mode: str,
) -> tuple[pa.Table, int]:
    """The rows of one data file before its deletion vector is applied, and their count:
    the data columns of `fields` read from the file, the partition columns among them typed
    from the file's serialized `partition_values` (keyed by physical name under column
    mapping), in `fields` order.

    The one way to read a single file where the work runs (the recipient's PySpark source,
    the provider's pipeline), without a snapshot at hand."""
    partition_names = [f.name for f in fields if f.name in partition_columns]
    data_fields = [f for f in fields if f.name not in partition_columns]
    arrays, num_rows = read_data_file(storage, key, data_fields, mode)
    partitions = None
    if partition_names:
        values = pa.array([list(partition_values.items())], type=pa.map_(pa.string(), pa.string()))
        partitions = partition_columns_as_arrow(
            values, schema, partition_names, column_mapping_mode=mode
        )
    columns = [
        pa.repeat(partitions.column(f.name)[0], num_rows)
        if partitions is not None and f.name in partition_names
        else arrays[f.name]
        for f in fields
    ]
    output = pa.schema([to_arrow_field(f) for f in fields])
    return pa.Table.from_arrays(columns, schema=output), num_rows


def _selected_fields(
    snapshot: Snapshot, columns: Sequence[str] | None, schema: StructType | None = None
) -> list[StructField]:
    schema = schema or parse_schema(snapshot.metadata.schema_string)
    if columns is None:
        return [f for f in schema.fields if f.type != _VOID]
    selected = []
    for name in columns:
        struct_field = schema.get(name)
        if struct_field is None:
            raise DeltaError(f"column {name!r} is not in the table schema")
        selected.append(struct_field)
    return selected


def read_data_file(
    storage: Storage, key: str, fields: Sequence[StructField], mode: str
) -> tuple[dict[str, pa.Array], int]:
    """The given data columns of one parquet file, by logical name, and its row count."""
    try:
        source = storage.open_input_file(key)
    except FileNotFoundError as exc:
        raise DeltaError(f"data file {key.rsplit('/', 1)[-1]} is missing") from exc
    with source:
        parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        num_rows = parquet.metadata.num_rows
        file_schema = parquet.schema_arrow
        located = {f.name: _find_field(file_schema, f, mode) for f in fields}
        wanted = sorted({i for i in located.values() if i is not None})
        names = [file_schema.field(i).name for i in wanted]
        table = parquet.read(columns=names, use_threads=False) if names else None
    arrays: dict[str, pa.Array] = {}
    for struct_field in fields:
        index = located[struct_field.name]
        target = to_arrow_type(struct_field.type)
        if index is None or table is None:
            arrays[struct_field.name] = pa.nulls(num_rows, target)
            continue
        column = table.column(wanted.index(index))
        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        arrays[struct_field.name] = _conform(array, struct_field.type, target, mode)
    return arrays, num_rows


def _field_id(arrow_field: pa.Field) -> int | None:
    metadata = arrow_field.metadata
    if not metadata or PARQUET_FIELD_ID not in metadata:
        return None
    return int(metadata[PARQUET_FIELD_ID])


def _find_field(
    fields: pa.Schema | pa.StructType, struct_field: StructField, mode: str
) -> int | None:
    """Index of the file field holding `struct_field`, or None when the file lacks it."""
    count = len(fields) if isinstance(fields, pa.Schema) else fields.num_fields
    if mode == "id":
        wanted_id = struct_field.field_id
        for i in range(count):
            if wanted_id is not None and _field_id(fields.field(i)) == wanted_id:
                return i
        return None
    name = struct_field.name_for(mode)
    for i in range(count):
        if fields.field(i).name == name:
            return i
    return None


def _conform(array: pa.Array, data_type: DataType, target: pa.DataType, mode: str) -> pa.Array:
    """`array` as read from a file, converted to the Arrow type of `data_type`."""
    if isinstance(data_type, StructType) and pa.types.is_struct(array.type):
        return _conform_struct(array, data_type.fields, target, mode)
    if data_type == _VARIANT and pa.types.is_struct(array.type):
        parts = [
            StructField("value", PrimitiveType("binary")),
            StructField("metadata", PrimitiveType("binary")),
        ]
        return _conform_struct(array, parts, target, "none")
    if isinstance(data_type, ArrayType) and (
        pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
    ):
        if pa.types.is_large_list(array.type):
            array = array.cast(pa.list_(array.type.value_field))
        values = _conform(array.values, data_type.element_type, target.value_type, mode)
        return pa.ListArray.from_arrays(array.offsets, values, type=target, mask=_null_mask(array))
    if isinstance(data_type, MapType) and pa.types.is_map(array.type):
        keys = _conform(array.keys, data_type.key_type, target.key_type, mode)
        items = _conform(array.items, data_type.value_type, target.item_type, mode)
        return pa.MapArray.from_arrays(
            array.offsets, keys, items, type=target, mask=_null_mask(array)
        )
    if array.type == target:
        return array
    if pa.types.is_null(target):
        return pa.nulls(len(array))
    try:
        return array.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DeltaError(f"cannot read a {array.type} column as {target}: {exc}") from exc


def _null_mask(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None


def _conform_struct(
    array: pa.StructArray, fields: Sequence[StructField], target: pa.StructType, mode: str
) -> pa.Array:
    children = []
    for i, struct_field in enumerate(fields):
        child_target = target.field(i).type
        index = _find_field(array.type, struct_field, mode)
        if index is None:
            children.append(pa.nulls(len(array), child_target))
        else:
            children.append(_conform(array.field(index), struct_field.type, child_target, mode))
    target_fields = [target.field(i) for i in range(target.num_fields)]
    return pa.StructArray.from_arrays(children, fields=target_fields, mask=_null_mask(array))
