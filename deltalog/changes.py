"""The changes between two versions of a table: the change data feed and streaming.

Both walk the commits of a version range in order and hand out each commit's file
actions as the Arrow tables of CommitActions, filtered with pyarrow compute:

* `table_changes` (GET /changes): per the protocol's reader requirements, a commit with
  any `cdc` action contributes only its cdc files; otherwise its `dataChange=true` adds
  and removes (which clients read as inserts and deletes). As in the reference server, a
  MERGE that changed no target rows contributes nothing.
* `data_changes` (POST /query with startingVersion): every commit's `dataChange=true`
  adds and removes; cdc files are ignored, and rewrites such as OPTIMIZE
  (`dataChange=false`) contribute nothing.

Timestamps are the monotonised commit timestamps of `deltalog.history`, not the raw
file times of CommitActions, so that every response reports the same time for a commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import CommitActions, Metadata
from deltalog.actions import Protocol as DeltaProtocol
from deltalog.commits import commit_key, commit_name, metadata_from_action
from deltalog.errors import CorruptLogError, DeltaError, MissingLogFileError
from deltalog.history import CommitTimeline, TableLike, timeline
from deltalog.storage.base import Storage

__all__ = [
    "ChangeCommit",
    "ChangeDataNotRecordedError",
    "DataChangeCommit",
    "TableLike",
    "check_cdf_enabled",
    "data_changes",
    "data_changing",
    "is_noop_merge",
    "table_changes",
]

_MERGE_ROW_METRICS = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")


class ChangeDataNotRecordedError(DeltaError):
    """Change data feed was off at the start of a range or turned off inside it."""

    def __init__(self, start: int, end: int, version: int):
        super().__init__(
            f"Error getting change data for range [{start}, {end}] as change data was not "
            f"recorded for version [{version}]"
        )
        self.start = start
        self.end = end
        self.version = version


@dataclass(frozen=True)
class DataChangeCommit:
    """One commit of a streaming range: its data-changing adds and removes, and the
    metaData / protocol actions it carries (None when it has none)."""

    version: int
    timestamp: int  # ms, monotonised commit timestamp
    adds: pa.Table  # ADD_SCHEMA, dataChange=true only
    removes: pa.Table  # REMOVE_SCHEMA, dataChange=true only
    metadata: Metadata | None
    protocol: DeltaProtocol | None


@dataclass(frozen=True)
class ChangeCommit:
    """One commit of a change data feed range.

    Either `cdcs` is non-empty and `adds`/`removes` are empty (the commit recorded change
    data files), or `cdcs` is empty and `adds`/`removes` hold the data-changing file
    actions (both empty for a MERGE that changed nothing, or a commit without data).
    """

    version: int
    timestamp: int  # ms, monotonised commit timestamp
    cdcs: pa.Table  # CDC_SCHEMA
    adds: pa.Table  # ADD_SCHEMA, dataChange=true only
    removes: pa.Table  # REMOVE_SCHEMA, dataChange=true only
    metadata: Metadata | None
    protocol: DeltaProtocol | None
    cdf_enabled: bool  # delta.enableChangeDataFeed in the metadata in effect at `version`

    @property
    def uses_cdc_files(self) -> bool:
        rows: int = self.cdcs.num_rows
        return rows > 0


def data_changing(files: pa.Table) -> pa.Table:
    """The rows of an add/remove table with `dataChange=true` (null counts as false)."""
    if files.num_rows == 0:
        return files
    return files.filter(pc.equal(files.column("dataChange"), True))


def is_noop_merge(commit_info: dict[str, Any] | None) -> bool:
    """A MERGE whose metrics say no target row was inserted, updated or deleted: its
    rewritten files carry no change (the reference skips them)."""
    if not commit_info or commit_info.get("operation") != "MERGE":
        return False
    metrics = commit_info.get("operationMetrics")
    if not isinstance(metrics, dict):
        return False
    return all(name in metrics and str(metrics[name]) == "0" for name in _MERGE_ROW_METRICS)


def data_changes(table: TableLike, start: int, end: int) -> Iterator[DataChangeCommit]:
    """The commits `start..end` (inclusive) as a stream reader sees them."""
    clock = timeline(table, through=end)
    for commit in table.commits(start, end):
        yield DataChangeCommit(
            version=commit.version,
            timestamp=_timestamp(clock, commit),
            adds=data_changing(commit.adds),
            removes=data_changing(commit.removes),
            metadata=commit.metadata,
            protocol=commit.protocol,
        )


def table_changes(table: TableLike, start: int, end: int) -> Iterator[ChangeCommit]:
    """The change data feed of the commits `start..end` (inclusive), one per commit.

    Does not check that change data was recorded: call `check_cdf_enabled` first (before
    a response starts), or look at `cdf_enabled`.
    """
    clock = timeline(table, through=end)
    in_effect: Metadata | None = None
    for commit in table.commits(start, end):
        if commit.metadata is not None:
            in_effect = commit.metadata
        elif in_effect is None:
            in_effect = table.snapshot(commit.version).metadata
        if commit.cdcs.num_rows or is_noop_merge(commit.commit_info):
            adds, removes = _empty(commit.adds), _empty(commit.removes)
        else:
            adds, removes = data_changing(commit.adds), data_changing(commit.removes)
        yield ChangeCommit(
            version=commit.version,
            timestamp=_timestamp(clock, commit),
            cdcs=commit.cdcs,
            adds=adds,
            removes=removes,
            metadata=commit.metadata,
            protocol=commit.protocol,
            cdf_enabled=in_effect.change_data_feed_enabled,
        )


def check_cdf_enabled(table: TableLike, start: int, end: int) -> None:
    """Raise ChangeDataNotRecordedError unless the change data feed is on at `start` and
    no metaData action in `start+1..end` turns it off.

    Only the metaData lines of the commits are parsed (the file actions are skipped), so
    checking a range before streaming it costs little more than reading the files.
    """
    start_metadata = _commit_metadata(table.storage, table.table_root, start)
    if start_metadata is None:
        start_metadata = table.snapshot(start).metadata
    if not start_metadata.change_data_feed_enabled:
        raise ChangeDataNotRecordedError(start, end, start)
    for version in range(start + 1, end + 1):
        metadata = _commit_metadata(table.storage, table.table_root, version)
        if metadata is not None and not metadata.change_data_feed_enabled:
            raise ChangeDataNotRecordedError(start, end, version)


def _commit_metadata(storage: Storage, root: str, version: int) -> Metadata | None:
    """The last metaData action of commit `version`, parsing no other line."""
    key = commit_key(storage, root, version)
    try:
        data = storage.read(key)
    except FileNotFoundError as exc:
        raise MissingLogFileError(f"commit file {commit_name(version)} is missing") from exc
    found: Metadata | None = None
    for line in data.splitlines():
        head = line.lstrip()[1:].lstrip()
        if not head.startswith(b'"metaData"'):
            continue
        try:
            action = orjson.loads(line)
            found = metadata_from_action(action["metaData"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise CorruptLogError(f"{commit_name(version)}: malformed metaData action") from exc
    return found


def _timestamp(clock: CommitTimeline, commit: CommitActions) -> int:
    return clock.timestamp(commit.version, commit.in_commit_timestamp)


def _empty(files: pa.Table) -> pa.Table:
    return files.slice(0, 0)
