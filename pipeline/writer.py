"""Writing Delta tables from Spark: tasks write parquet, the driver commits once.

Each task writes its rows with pyarrow (one file per partition value it sees) and returns
the add actions with their statistics; the driver commits all of them in one Delta commit
through delta-rs (`create_table_with_add_actions` for a new table, a write transaction
otherwise). A task that fails deletes what it wrote; a job that fails or whose commit is
refused deletes every file its tasks wrote (every file name carries the job's run id, so
files of tasks still running when Spark aborted the job are found too). With
`txnAppId`/`txnVersion`, the commit carries that app transaction and is skipped (its
files deleted) when the table already holds that version for the app: a retried job
never commits twice.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import posixpath
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from pipeline.options import DeltaOptions
from pipeline.partition_paths import partition_folders
from pipeline.schema import arrow_target
from pipeline.stats import file_stats


@dataclass(frozen=True)
class WrittenFile:
    """A data file a task wrote: its add action's fields."""

    path: str  # relative to the table root, as on storage (delta-rs encodes it in the log)
    size: int
    partition_values: dict[str, str | None]
    stats: str
    modification_time: int

    def add_action(self) -> AddAction:
        return AddAction(
            self.path, self.size, self.partition_values, self.modification_time, True, self.stats
        )


@dataclass
class WrittenFiles(WriterCommitMessage):
    files: list[WrittenFile] = field(default_factory=list)


class TableFiles:
    """Where a table's data files are written and deleted (pyarrow's filesystems: local
    paths and the cloud URIs pyarrow understands, credentials from the environment)."""

    def __init__(self, location: str) -> None:
        if "://" in location:
            self.fs, self.root = pafs.FileSystem.from_uri(location)
        else:
            self.fs, self.root = pafs.LocalFileSystem(), posixpath.abspath(location)

    def new_path(self, partition_values: Sequence[tuple[str, str | None]], stem: str) -> str:
        """A fresh relative path as on storage (Hive-style, escaped partition folders)."""
        return posixpath.join(
            partition_folders(partition_values), f"{stem}-{uuid.uuid4().hex}.parquet"
        )

    def write(
        self, relative: str, table: pa.Table, partition_values: dict[str, str | None]
    ) -> WrittenFile:
        full = posixpath.join(self.root, relative)
        self.fs.create_dir(posixpath.dirname(full), recursive=True)
        pq.write_table(table, full, filesystem=self.fs, compression="snappy")
        size = self.fs.get_file_info(full).size
        return WrittenFile(
            path=relative,
            size=int(size),
            partition_values=partition_values,
            stats=file_stats(table),
            modification_time=int(time.time() * 1000),
        )

    def delete_run(self, run: str, quiet_seconds: float = 2.0) -> None:
        """Delete every file of job `run` (their names start with `part-<run>-`) until
        none appears for `quiet_seconds`: when a job fails, Spark aborts it while other
        tasks may still be finishing a file."""
        prefix = f"part-{run}-"
        inner = f"-{run}-"  # files named after a source key (write_by_key)
        deadline = time.monotonic() + 60.0
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            try:
                infos = self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True))
            except FileNotFoundError:
                return
            found = [
                i.path
                for i in infos
                if i.type == pafs.FileType.File
                and (
                    posixpath.basename(i.path).startswith(prefix)
                    or inner in posixpath.basename(i.path)
                )
            ]
            for path in found:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(path)
            if found:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= quiet_seconds:
                return
            time.sleep(0.2)

    def delete(self, files: Iterable[WrittenFile]) -> None:
        for written in files:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(posixpath.join(self.root, written.path))


def partition_text(value: object) -> str | None:
    """A partition value as Delta serializes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def write_table(
    files: TableFiles, table: pa.Table, partition_by: Sequence[str], stem: str = "part"
) -> list[WrittenFile]:
    """`table`'s rows as data files: one per distinct partition tuple (partition columns
    are left out of the files, as Delta writes them)."""
    if not partition_by:
        return [files.write(files.new_path([], stem), table, {})]
    keys = table.select(list(partition_by))
    data = table.drop_columns(list(partition_by))
    written = []
    for key in keys.group_by(list(partition_by)).aggregate([]).to_pylist():
        mask = None
        for name in partition_by:
            column = table.column(name)
            test = pc.is_null(column) if key[name] is None else pc.equal(column, key[name])
            mask = test if mask is None else pc.and_(mask, test)
        values = [(name, partition_text(key[name])) for name in partition_by]
        rows = data.filter(mask)
        written.append(files.write(files.new_path(values, stem), rows, dict(values)))
    return written


def write_by_key(
    files: TableFiles, table: pa.Table, key_column: str, run: str
) -> list[WrittenFile]:
    """One file per source key in `table` (named `<key>-<run>-<uuid>.parquet`), without
    the key column: each file is derived from one source file (pipeline.views)."""
    written = []
    data = table.drop_columns([key_column])
    for key, rows in key_runs(table.column(key_column), data):
        written.append(files.write(files.new_path([], f"{key}-{run}"), rows, {}))
    return written


def key_runs(keys: pa.ChunkedArray, data: pa.Table) -> list[tuple[str, pa.Table]]:
    """`data`'s rows grouped by `keys`, in order of first appearance, each group's rows in
    their order. A per-row query keeps each source file's rows together, so the groups are
    runs of equal keys sliced without copying (one pass, not one filter per key); a key
    seen in several runs gets them concatenated."""
    flat = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if len(flat) == 0:
        return []
    changes = pc.indices_nonzero(pc.not_equal(flat[1:], flat[:-1])).to_pylist()
    starts = [0, *(i + 1 for i in changes)]
    ends = [*starts[1:], len(flat)]
    groups: dict[str, list[pa.Table]] = {}
    for start, end in zip(starts, ends, strict=True):
        groups.setdefault(flat[start].as_py(), []).append(data.slice(start, end - start))
    return [
        (key, parts[0] if len(parts) == 1 else pa.concat_tables(parts))
        for key, parts in groups.items()
    ]


class DeltaWriter(DataSourceArrowWriter):
    def __init__(self, options: DeltaOptions, schema: StructType, *, overwrite: bool) -> None:
        self.options = options
        self.target = arrow_target(schema)
        self.key_column = options.file_key_column
        if self.key_column is not None and self.key_column not in self.target.names:
            raise ValueError(f"fileKeyColumn names a column the data lacks: {self.key_column}")
        # The table's schema: without the source-key column (it only names the files).
        self.table_schema = (
            self.target
            if self.key_column is None
            else self.target.remove(self.target.get_field_index(self.key_column))
        )
        self.overwrite = overwrite
        self.run = uuid.uuid4().hex[:12]  # in every file name of this job
        missing = [c for c in options.partition_by if c not in self.target.names]
        if missing:
            raise ValueError(f"partitionBy names columns the data lacks: {missing}")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        files = TableFiles(self.options.path)
        written: list[WrittenFile] = []
        try:
            batches = list(iterator)
            if batches and self.key_column is not None:
                table = pa.Table.from_batches(batches).cast(self.target)
                written = write_by_key(files, table, self.key_column, self.run)
            elif batches:
                table = pa.Table.from_batches(batches).cast(self.target)
                written = write_table(
                    files, table, self.options.partition_by, stem=f"part-{self.run}"
                )
        except BaseException:
            files.delete(written)
            raise
        return WrittenFiles(written)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        written = [f for m in messages if isinstance(m, WrittenFiles) for f in m.files]
        try:
            now = int(time.time() * 1000)
            committed = commit_files(
                self.options,
                self.table_schema,
                [f.add_action() for f in written],
                mode="overwrite" if self.overwrite else "append",
                removes=[
                    # The log's paths are percent-encoded; delta-rs encodes what it is given.
                    RemoveAction(
                        unquote(f["path"]),
                        True,
                        now,
                        f["size"],
                        dict(f.get("partitionValues") or {}),
                    )
                    for f in self.options.remove_files
                ],
                metadata=self.options.commit_info or None,
            )
        except BaseException:
            TableFiles(self.options.path).delete(written)
            raise
        if not committed:
            TableFiles(self.options.path).delete(written)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        written = [f for m in messages if isinstance(m, WrittenFiles) for f in m.files]
        files = TableFiles(self.options.path)
        files.delete(written)
        files.delete_run(self.run)  # and what tasks still running when the job failed wrote


def commit_files(
    options: DeltaOptions,
    schema: pa.Schema,
    adds: list[AddAction],
    *,
    mode: str,
    removes: Sequence[RemoveAction] = (),
    metadata: dict[str, str] | None = None,
) -> bool:
    """One Delta commit of `adds` (and `removes`) through delta-rs. False when the app
    transaction of `options` is already in the table (nothing committed)."""
    properties = CommitProperties(
        custom_metadata=metadata,
        app_transactions=(
            [Transaction(options.app_id, options.app_version)]
            if options.app_id is not None and options.app_version is not None
            else None
        ),
    )
    storage_options = options.storage_options or None
    try:
        table = DeltaTable(options.path, storage_options=storage_options)
    except TableNotFoundError:
        create_table_with_add_actions(
            options.path,
            _delta_schema(schema),
            adds,
            mode="error",
            partition_by=list(options.partition_by) or None,
            storage_options=storage_options,
            commit_properties=properties,
        )
        return True
    if options.app_id is not None:
        done = table.transaction_version(options.app_id)
        if done is not None and options.app_version is not None and done >= options.app_version:
            return False
    table.create_write_transaction(
        [*adds, *removes],
        mode,
        _delta_schema(schema),
        partition_by=list(options.partition_by) or table.metadata().partition_columns or None,
        commit_properties=properties,
    )
    return True


def _delta_schema(schema: pa.Schema) -> Schema:
    return Schema.from_arrow(schema)
