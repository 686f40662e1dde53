"""The `deltalog` PySpark data source: Delta tables read and written without Delta's jars.

    spark.read.format("deltalog").load("/lake/orders")                 # latest version
    spark.read.format("deltalog").option("versionAsOf", 3).load(path)  # time travel
    df.write.format("deltalog").mode("overwrite").save(path)           # one Delta commit

Reads go through `deltalog/` (deletion vectors applied, column mapping, typed partition
values): the driver loads the snapshot once and packs its files into tasks as Spark packs
a parquet scan; each task opens the storage and reads its files. Writes are in
pipeline.writer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter, InputPartition
from pyspark.sql.types import StringType, StructType

from deltalog import DeltaTable, Snapshot
from deltalog.file_groups import coalesced_batches, pack_by_size
from deltalog.file_reads import DataFileRef, ReadLayout, file_refs, read_file_ref
from deltalog.storage import resolve
from pipeline.copies import output_key
from pipeline.options import DeltaOptions
from pipeline.schema import arrow_target, spark_schema

NAME = "deltalog"


class DeltaDataSource(DataSource):
    """`format("deltalog")`: a Delta table at a path or URI, read and written."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.delta_options = DeltaOptions.parse(options)
        self.version: int | None = None  # fixed when the schema is read (picklable)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        """The schema of the version the DataFrame reads: the one resolved now (a later
        commit does not change what an action on this DataFrame reads)."""
        snapshot = load_snapshot(self.delta_options)
        self.version = snapshot.version
        schema = spark_schema(snapshot.metadata.schema_string)
        if self.delta_options.file_key_column is not None:
            schema = schema.add(self.delta_options.file_key_column, StringType(), False)
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        return DeltaReader(self.delta_options, self.version, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pipeline.writer import DeltaWriter

        return DeltaWriter(self.delta_options, schema, overwrite=overwrite)


def open_table(options: DeltaOptions) -> DeltaTable:
    storage, root = resolve(options.path, options.storage_options)
    return DeltaTable(root, storage)


def load_snapshot(options: DeltaOptions, version: int | None = None) -> Snapshot:
    """The snapshot at `version`, else at the options' time travel, else the latest."""
    table = open_table(options)
    if version is not None:
        return table.snapshot(version)
    version = options.version_as_of
    if options.timestamp_as_of is not None:
        version = table.version_at_or_before(options.timestamp_as_of)
    return table.snapshot(version)


class FileGroup(InputPartition):
    """The files one task reads, and how to read them."""

    def __init__(
        self,
        options: DeltaOptions,
        layout: ReadLayout,
        files: Sequence[DataFileRef],
        target: pa.Schema,
    ) -> None:
        super().__init__(len(files))
        self.options = options
        self.layout = layout
        self.files = list(files)
        self.target = target

    def __repr__(self) -> str:
        return f"FileGroup({len(self.files)} files, {sum(f.size for f in self.files)} bytes)"


def file_groups(
    options: DeltaOptions, snapshot: Snapshot, files: Sequence[DataFileRef], target: pa.Schema
) -> list[FileGroup]:
    """`files` packed into tasks (deltalog.file_groups)."""
    layout = ReadLayout.of(snapshot)
    groups = pack_by_size(
        [f.size for f in files],
        max_group_bytes=options.max_partition_bytes,
        open_cost=options.open_cost_bytes,
        min_groups=options.min_partitions,
    )
    return [FileGroup(options, layout, [files[i] for i in g], target) for g in groups]


def read_group(group: FileGroup) -> Iterator[pa.Table]:
    """The live rows of each file of a group, in turn (runs in the task)."""
    storage, root = resolve(group.options.path, group.options.storage_options)
    key_column = group.options.file_key_column
    for ref in group.files:
        rows = read_file_ref(storage, root, group.layout, ref)
        if key_column is not None:
            key = pa.array([output_key(ref)] * rows.num_rows, pa.string())
            rows = rows.append_column(pa.field(key_column, pa.string(), False), key)
        yield rows


class DeltaReader(DataSourceReader):
    def __init__(self, options: DeltaOptions, version: int | None, schema: StructType) -> None:
        self.options = options
        self.version = version
        self.target = arrow_target(schema)

    def partitions(self) -> list[InputPartition]:
        snapshot = load_snapshot(self.options, self.version)
        refs = file_refs(snapshot)
        if self.options.files is not None:
            wanted = set(self.options.files)
            refs = [ref for ref in refs if ref.path in wanted]
        groups = file_groups(self.options, snapshot, refs, self.target)
        return list(groups)  # a list of the InputPartition base type, as Spark checks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FileGroup):
            return iter(())  # the placeholder Spark plans for a table with no files
        return coalesced_batches(read_group(partition), partition.target)
