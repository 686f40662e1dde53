"""Compatible copies: a plain Delta table (reader version 1: deletion vectors applied,
logical column names) kept beside a table that clients reading only the `parquet`
response format cannot read.

Each output file is derived from one source file and its deletion vector: its name starts
with a key hashed from the source file's path and deletion vector id, so the copy itself
records what it was made from. A refresh compares the source's active files with the
copy's, computes output only for source files that are new or whose deletion vector
changed (a Spark job, `pipeline.copy_job`), and removes output whose source file left. A
changed schema or partitioning, or `full`, recomputes everything as an overwrite.

Each refresh is one commit through delta-rs carrying the app transaction (`app_id`, source
version): delta-rs refuses a concurrent commit of the same app transaction, and a refresh
that finds its source version already committed commits nothing, so a retried or
concurrent refresh never commits twice. Output files carry the refresh's run id; when the
job or the commit fails, every file of the run is deleted. `sweep` removes files no
version of the copy refers to (left by a refresher that died between writing and
committing).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import posixpath
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow.fs as pafs
from deltalake import CommitProperties, Schema, Transaction
from deltalake import DeltaTable as DeltaRsTable
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from deltalog import DeltaTable, Snapshot
from deltalog.file_reads import DataFileRef, ReadLayout, file_refs
from deltalog.schema import parse_schema
from deltalog.storage import resolve
from sharing.copies import CopyVersion, copy_app_id
from sharing.copies import copy_versions as read_copy_versions

log = logging.getLogger("lakeshare.pipeline.copies")

SOURCE_VERSION = "lakeshare.sourceVersion"
"""The commitInfo key holding the source version a copy commit materializes."""
SWEEP_AGE_SECONDS = 3600.0


@dataclass(frozen=True)
class CopySpec:
    """One compatible copy: what it copies and where it lives."""

    name: str  # share.schema.table
    source: str  # the source table's location
    location: str  # the copy's location
    # The source's storage options (deltalog.storage.resolve); the copy's location is
    # opened with its backend's defaults (credentials from the environment).
    source_options: dict[str, Any] = field(default_factory=dict)

    @property
    def app_id(self) -> str:
        return copy_app_id(self.name)


@dataclass
class RefreshResult:
    name: str
    source_version: int
    copy_version: int | None  # None: nothing committed
    mode: str  # "incremental", "full", "unchanged", "lost-race"
    files_written: int = 0
    files_removed: int = 0
    rows_written: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class OutputFile:
    """A file the copy job wrote (an add action's fields)."""

    path: str  # relative, as on storage (delta-rs percent-encodes it in the log)
    size: int
    partition_values: dict[str, str | None]
    stats: str
    modification_time: int
    rows: int

    def add_action(self) -> AddAction:
        return AddAction(
            self.path, self.size, self.partition_values, self.modification_time, True, self.stats
        )


def output_key(ref: DataFileRef) -> str:
    """The key output files derived from `ref` (its path and deletion vector) start with."""
    digest = hashlib.sha256(f"{ref.path}\0{ref.dv_id}".encode()).hexdigest()
    return digest[:32]


def key_of_output(path: str) -> str:
    """The source key an output file's relative path carries."""
    return posixpath.basename(unquote(path)).split("-", 1)[0]


def output_name(key: str, run: str) -> str:
    return f"{key}-{run}.parquet"


@dataclass(frozen=True)
class RefreshPlan:
    source: Snapshot
    todo: list[DataFileRef]  # source files to (re)compute
    removes: list[dict[str, Any]]  # copy files to remove (path, size, partitionValues)
    mode: str  # "incremental", "full", "create" or "unchanged"


def plan_refresh(
    spec: CopySpec, source: Snapshot, copy: Snapshot | None, *, full: bool = False
) -> RefreshPlan:
    """What a refresh of `copy` to `source` must compute and remove."""
    refs = file_refs(source)
    if copy is None:
        return RefreshPlan(source, refs, [], "create")
    copied = copy.txns.get(spec.app_id)
    same_shape = ReadLayout.of(copy).arrow_schema() == ReadLayout.of(source).arrow_schema() and (
        list(copy.metadata.partition_columns) == logical_partition_columns(source)
    )
    if not full and same_shape and copied is not None and copied >= source.version:
        return RefreshPlan(source, [], [], "unchanged")
    current = copy.files.select(["path", "size", "partitionValues"]).to_pylist()
    if full or not same_shape:
        return RefreshPlan(source, refs, current, "full")
    wanted = {output_key(ref): ref for ref in refs}
    have = {key_of_output(f["path"]) for f in current}
    todo = [ref for key, ref in wanted.items() if key not in have]
    removes = [f for f in current if key_of_output(f["path"]) not in wanted]
    return RefreshPlan(source, todo, removes, "incremental")


def logical_partition_columns(snapshot: Snapshot) -> list[str]:
    return list(snapshot.metadata.partition_columns)


def open_copy(spec: CopySpec) -> Snapshot | None:
    """The copy's latest snapshot, or None when it does not exist yet."""
    storage, root = resolve(spec.location)
    table = DeltaTable(root, storage)
    return table.snapshot() if table.exists() else None


def open_source(spec: CopySpec, version: int | None = None) -> Snapshot:
    storage, root = resolve(spec.source, spec.source_options or None)
    return DeltaTable(root, storage).snapshot(version)


def commit_refresh(spec: CopySpec, plan: RefreshPlan, written: Sequence[OutputFile]) -> int | None:
    """Commit the refresh; the copy's new version, or None when the source version is
    already committed (by a concurrent or earlier refresh)."""
    from deltalake.exceptions import CommitFailedError

    layout = ReadLayout.of(plan.source)
    schema = Schema.from_arrow(layout.arrow_schema())
    partition_by = logical_partition_columns(plan.source)
    properties = CommitProperties(
        custom_metadata={SOURCE_VERSION: str(plan.source.version), "lakeshare.copyOf": spec.name},
        app_transactions=[Transaction(spec.app_id, plan.source.version)],
    )
    adds = [f.add_action() for f in written]
    if plan.mode == "create":
        try:
            create_table_with_add_actions(
                spec.location,
                schema,
                adds,
                mode="error",
                partition_by=partition_by or None,
                commit_properties=properties,
            )
        except Exception as exc:  # another refresher created it first
            if "exists" in str(exc).lower():
                return None
            raise
        return 0
    table = DeltaRsTable(spec.location)
    done = table.transaction_version(spec.app_id)
    if plan.mode != "full" and done is not None and done >= plan.source.version:
        return None
    now = int(time.time() * 1000)
    removes = [
        # The log's paths are percent-encoded; delta-rs encodes what it is given.
        RemoveAction(unquote(f["path"]), True, now, f["size"], dict(f["partitionValues"] or []))
        for f in plan.removes
    ]
    mode = "overwrite" if plan.mode == "full" else "append"
    actions: list[AddAction | RemoveAction] = [*adds]
    if mode == "append":
        actions.extend(removes)
    try:
        table.create_write_transaction(
            actions,
            mode,
            schema,
            partition_by=partition_by or None,
            commit_properties=properties,
        )
    except CommitFailedError as exc:
        log.info("copy commit lost a race", extra={"copy": spec.name, "error": str(exc)})
        return None
    return int(DeltaRsTable(spec.location).version())


def copy_filesystem(spec: CopySpec) -> tuple[pafs.FileSystem, str]:
    if "://" in spec.location:
        fs, root = pafs.FileSystem.from_uri(spec.location)
        return fs, root
    return pafs.LocalFileSystem(), posixpath.abspath(spec.location)


def _data_files(fs: pafs.FileSystem, root: str) -> Iterable[pafs.FileInfo]:
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    except FileNotFoundError:
        return []
    return [
        i
        for i in infos
        if i.type == pafs.FileType.File
        and i.path.endswith(".parquet")
        and "/_delta_log/" not in i.path[len(root) :] + "/"
        and not i.path[len(root) :].lstrip("/").startswith("_delta_log")
    ]


def delete_run_files(spec: CopySpec, run: str) -> int:
    """Delete every output file of refresh `run` (a failed job or a refused commit)."""
    fs, root = copy_filesystem(spec)
    suffix = f"-{run}.parquet"
    deleted = 0
    for info in _data_files(fs, root):
        if info.path.endswith(suffix):
            with contextlib.suppress(FileNotFoundError):
                fs.delete_file(info.path)
                deleted += 1
    return deleted


def sweep(spec: CopySpec, *, older_than_seconds: float = SWEEP_AGE_SECONDS) -> list[str]:
    """Delete data files that neither the copy's current files nor its tombstones name
    and that are older than `older_than_seconds` (younger ones may belong to a refresh
    still running). Returns the relative paths deleted."""
    copy = open_copy(spec)
    fs, root = copy_filesystem(spec)
    known: set[str] = set()
    if copy is not None:
        known.update(unquote(p) for p in copy.files.column("path").to_pylist())
        known.update(unquote(p) for p in copy.tombstones.column("path").to_pylist())
    cutoff = time.time() - older_than_seconds
    deleted = []
    for info in _data_files(fs, root):
        relative = info.path[len(root) :].lstrip("/")
        mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
        if relative not in known and mtime < cutoff:
            with contextlib.suppress(FileNotFoundError):
                fs.delete_file(info.path)
                deleted.append(relative)
    return deleted


def copy_versions(spec: CopySpec) -> list[CopyVersion]:
    """Which source version each version of the copy materializes, oldest first
    (sharing.copies, the reader the server shares)."""
    return read_copy_versions(spec.location, spec.app_id)


def partition_values_by_logical_name(layout: ReadLayout, ref: DataFileRef) -> dict[str, str | None]:
    """A source file's serialized partition values under logical names (column mapping
    keys them by physical name)."""
    schema = parse_schema(layout.schema_string)
    values: dict[str, str | None] = {}
    for name in layout.partition_columns:
        struct_field = schema.get(name)
        key = struct_field.name_for(layout.mode) if struct_field is not None else name
        values[name] = ref.partition_values.get(key)
    return values


def describe(result: RefreshResult) -> str:
    return json.dumps(result.__dict__, sort_keys=True)
