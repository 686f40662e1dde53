"""Structured Streaming from a shared table: offsets are table versions.

An offset `{tableVersion, index, isStartingVersion}` says that every unit of versions
before `tableVersion`, and units `0..index` of `tableVersion`, have been read; `index` -1
means none of that version yet. Without `startingVersion`/`startingTimestamp` a stream
starts with the snapshot of the latest version (`isStartingVersion`), then follows the
commits after it. Units within a version are ordered by file id, so a huge commit can be
split over micro-batches and a restart from a checkpoint replays exactly the same units.

The latest version is polled (`GET /version`) at most every
`queryTableVersionIntervalSeconds` (30 s by default, as the Scala connector);
`Trigger.AvailableNow` freezes it once at the start.

Without the change feed a stream emits the rows of added files. A commit that removes
files fails the stream unless `ignoreDeletes` (removes only), `ignoreChanges` (re-emits
the rewritten files' rows) or `skipChangeCommits` (skips such commits) says otherwise,
with the Scala connector's messages. With `readChangeFeed` it emits the change rows;
the cdc files of one commit always go into one micro-batch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from client.actions import FileAction, TableMetadata
from client.errors import DeltaSharingError
from client.files import ReadUnit, TableLayout, change_units, snapshot_units
from client.rest import FileListing, TableInfo
from client.spark.errors import surfaced, surfaced_iterator
from client.spark.options import DEFAULT_MAX_FILES_PER_TRIGGER, ReadOptions
from client.spark.planning import ReadPlan, make_client, pack, read_partition
from client.spark.schema import arrow_target, spark_schema

try:  # PySpark 4.2+: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxFiles,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older PySpark: options-only limits

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

    ReadLimit = ReadAllAvailable = ReadMaxBytes = ReadMaxFiles = None  # type: ignore[misc,assignment]

OFFSET_FORMAT = 1
_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class Offset:
    version: int
    index: int
    snapshot: bool

    def to_json(self, table_id: str) -> dict[str, Any]:
        return {
            "sourceVersion": OFFSET_FORMAT,
            "tableId": table_id,
            "tableVersion": self.version,
            "index": self.index,
            "isStartingVersion": self.snapshot,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any], table_id: str) -> Offset:
        if int(value.get("sourceVersion", 0)) > OFFSET_FORMAT:
            raise DeltaSharingError(
                f"the checkpoint's offset format {value.get('sourceVersion')} is newer than "
                "this client reads"
            )
        if value.get("tableId") not in (None, table_id):
            raise DeltaSharingError(
                f"the checkpoint belongs to table id {value.get('tableId')}, but the shared "
                f"table now has id {table_id}: start the stream with a new checkpoint"
            )
        return cls(
            int(value["tableVersion"]), int(value["index"]), bool(value["isStartingVersion"])
        )


@dataclass(frozen=True)
class Entry:
    """A step of the stream: a unit, or an empty version's marker (`unit` None)."""

    version: int
    index: int
    unit: ReadUnit | None
    last_in_version: bool
    snapshot: bool
    group: tuple[int, int]  # entries of one group are admitted together
    plan: ReadPlan


@dataclass
class Segment:
    """The units of one listing: a snapshot, or the commits of a version range."""

    plan: ReadPlan
    by_version: dict[int, list[ReadUnit]]


class DeltaSharingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    @surfaced
    def __init__(
        self, options: ReadOptions, schema: StructType, info: TableInfo | None = None
    ) -> None:
        self.options = options
        self.schema = schema
        self.target = arrow_target(schema)
        client = make_client(options, streaming=True)
        self.info = info or client.metadata(options.table)
        self.table_id = self.info.metadata.id
        self.layout = TableLayout.of(
            self.info.metadata, self.info.protocol, change_feed=options.read_change_feed
        )
        self._latest = -1
        self._polled_at: float | None = None
        self._frozen: int | None = None
        self._segments: dict[tuple[int, bool], Segment] = {}
        self._previous: Offset | None = None

    # Spark's calls ------------------------------------------------------------------------

    @surfaced
    def initialOffset(self) -> dict[str, Any]:
        o = self.options
        client = make_client(o, streaming=True)
        if o.starting_version is not None:
            offset = Offset(o.starting_version, -1, False)
        elif o.starting_version_latest:
            offset = Offset(self._latest_version() + 1, -1, False)
        elif o.starting_timestamp is not None:
            version = client.table_version(o.table, starting_timestamp=o.starting_timestamp)
            offset = Offset(version, -1, False)
        else:
            offset = Offset(self._latest_version(), -1, True)
        return offset.to_json(self.table_id)

    @surfaced
    def prepareForTriggerAvailableNow(self) -> None:
        self._frozen = None
        self._frozen = self._latest_version(force=True)

    def getDefaultReadLimit(self) -> Any:
        o = self.options
        if o.max_files_per_trigger is None and o.max_bytes_per_trigger is not None:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        return ReadMaxFiles(o.max_files_per_trigger or DEFAULT_MAX_FILES_PER_TRIGGER)

    @surfaced
    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        begin = (
            Offset.from_json(start, self.table_id)
            if start is not None
            else self._previous or Offset.from_json(self.initialOffset(), self.table_id)
        )
        max_files, max_bytes = self._limits(limit)
        latest = self._latest_version()
        end = begin
        admitted_group: tuple[int, int] | None = None
        for entry in self._entries(begin, latest):
            if entry.unit is not None and entry.group != admitted_group:
                if max_files <= 0 or max_bytes <= 0:
                    break
                admitted_group = entry.group
            if entry.unit is not None:
                max_files -= 1
                max_bytes -= entry.unit.size
            end = (
                Offset(entry.version + 1, -1, False)
                if entry.last_in_version
                else Offset(entry.version, entry.index, entry.snapshot)
            )
        self._previous = end
        return end.to_json(self.table_id)

    @surfaced
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = Offset.from_json(start, self.table_id)
        stop = Offset.from_json(end, self.table_id)
        if begin == stop:
            return []
        last_version = stop.version if stop.index >= 0 else stop.version - 1
        by_plan: dict[int, tuple[ReadPlan, list[ReadUnit]]] = {}
        for entry in self._entries(begin, last_version):
            if (entry.version, entry.index) > (stop.version, stop.index) or (
                entry.version == stop.version and stop.index < 0
            ):
                break
            if entry.unit is None:
                continue
            by_plan.setdefault(id(entry.plan), (entry.plan, []))[1].append(entry.unit)
        o = self.options
        partitions: list[InputPartition] = []
        for plan, units in by_plan.values():
            partitions.extend(
                pack(
                    plan,
                    units,
                    max_partition_bytes=o.max_partition_bytes,
                    open_cost=o.open_cost_bytes,
                    min_partitions=o.min_partitions,
                )
            )
        return partitions

    @surfaced_iterator
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(make_client(self.options, streaming=True), self.options, partition)

    @surfaced
    def commit(self, end: dict[str, Any]) -> None:
        done = Offset.from_json(end, self.table_id)
        for key in [k for k in self._segments if k[0] < done.version and not k[1]]:
            segment = self._segments[key]
            if max(segment.by_version, default=-1) < done.version:
                del self._segments[key]
        for key in [k for k in self._segments if k[1] and k[0] < done.version]:
            del self._segments[key]

    def stop(self) -> None:
        self._segments.clear()

    # versions -------------------------------------------------------------------------------

    def _latest_version(self, *, force: bool = False) -> int:
        if self._frozen is not None:
            return self._frozen
        now = time.monotonic()
        interval = self.options.version_interval_seconds
        if force or self._polled_at is None or now - self._polled_at >= interval:
            version = make_client(self.options, streaming=True).table_version(self.options.table)
            if version < self._latest:
                version = self._latest  # a lagging replica: never go back
            self._latest = version
            self._polled_at = now
        return self._latest

    def _limits(self, limit: Any) -> tuple[int, int]:
        o = self.options
        files = o.max_files_per_trigger
        size = o.max_bytes_per_trigger
        if limit is None:  # PySpark before 4.2: the options alone
            if files is None and size is None:
                files = DEFAULT_MAX_FILES_PER_TRIGGER
            return files or _UNLIMITED, size or _UNLIMITED
        if ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            return _UNLIMITED, _UNLIMITED
        if ReadMaxFiles is not None and isinstance(limit, ReadMaxFiles):
            return limit.max_files, size or _UNLIMITED
        if ReadMaxBytes is not None and isinstance(limit, ReadMaxBytes):
            return files or _UNLIMITED, limit.max_bytes
        return _UNLIMITED, _UNLIMITED

    # entries ----------------------------------------------------------------------------------

    def _entries(self, begin: Offset, last_version: int) -> Iterator[Entry]:
        """Every step after `begin` up to version `last_version`, loading lazily."""
        version, after = begin.version, begin.index
        if begin.snapshot:
            if version > last_version:
                return
            segment = self._segment(version, version, snapshot=True)
            yield from self._version_entries(version, segment, after, snapshot=True)
            version, after = version + 1, -1
        while version <= last_version:
            stop = min(last_version, version + self.options.max_versions_per_rpc - 1)
            segment = self._segment(version, stop, snapshot=False)
            for v in range(version, stop + 1):
                yield from self._version_entries(v, segment, after if v == version else -1)
            version, after = stop + 1, -1

    def _version_entries(
        self, version: int, segment: Segment, after: int, *, snapshot: bool = False
    ) -> Iterator[Entry]:
        units = segment.by_version.get(version, [])
        if not units:
            if after < 0:
                yield Entry(version, -1, None, True, snapshot, (version, -1), segment.plan)
            return
        cdc_group = (version, -2)
        for index in range(after + 1, len(units)):
            unit = units[index]
            together = self.options.read_change_feed and unit.actions[0].kind == "cdf"
            yield Entry(
                version,
                index,
                unit,
                index == len(units) - 1,
                snapshot,
                cdc_group if together else (version, index),
                segment.plan,
            )

    def _segment(self, first: int, last: int, *, snapshot: bool) -> Segment:
        """The units of a snapshot, or of versions first..last (cached: versions are
        immutable, so a cached range that covers the request answers it)."""
        for (start, is_snapshot), segment in self._segments.items():
            if is_snapshot != snapshot:
                continue
            if snapshot and start == first:
                return segment
            if not snapshot and start <= first and last <= max(segment.by_version, default=-1):
                return segment
        client = make_client(self.options, streaming=True)
        o = self.options
        if snapshot:
            listing = client.query(o.table, version=first)
            # Snapshot files read as inserts of that version in a change feed stream.
            stamped = [replace(f, version=first) for f in listing.files]
            by_version = _group(snapshot_units(stamped), first, first)
        elif o.read_change_feed:
            listing = client.changes(
                o.table,
                starting_version=first,
                ending_version=last,
                include_historical_metadata=True,
            )
            by_version = _group(change_units(listing.files), first, last)
        else:
            listing = client.query(o.table, starting_version=first, ending_version=last)
            by_version = self._admitted_adds(listing, first, last)
        self._check_schemas(listing)
        plan = ReadPlan(self.layout, listing.again, self.target)
        segment = Segment(plan, by_version)
        self._segments[(first, snapshot)] = segment
        return segment

    def _admitted_adds(
        self, listing: FileListing, first: int, last: int
    ) -> dict[int, list[ReadUnit]]:
        o = self.options
        adds: dict[int, list[FileAction]] = {}
        removes: set[int] = set()
        for f in listing.files:
            if f.kind == "remove":
                removes.add(_version(f))
            elif f.kind in ("add", "file"):
                adds.setdefault(_version(f), []).append(f)
        allow_changes = o.ignore_changes or o.skip_change_commits
        allow_deletes = allow_changes or o.ignore_deletes
        for version in sorted(removes):
            if o.skip_change_commits:
                adds.pop(version, None)
            elif version in adds and not allow_changes:
                raise DeltaSharingError(
                    f"Detected a data update in the source table at version {version}. This "
                    "is currently not supported. If you'd like to ignore updates, set the "
                    "option 'skipChangeCommits' to 'true'. If you would like the data update "
                    "to be reflected, please restart the query from latest snapshot with a "
                    "fresh checkpoint directory."
                )
            elif version not in adds and not allow_deletes:
                raise DeltaSharingError(
                    f"Detected deleted data from streaming source at version {version}. This "
                    "is currently not supported. If you'd like to ignore deletes, set the "
                    "option 'ignoreDeletes' to 'true'."
                )
        units = [ReadUnit((f,)) for files in adds.values() for f in files]
        return _group(units, first, last)

    def _check_schemas(self, listing: FileListing) -> None:
        """A schema change the stream's schema cannot read fails the stream (added
        columns, or nullability loosened, are fine)."""
        for metadata in [listing.metadata, *listing.later_metadata]:
            if metadata.schema_string == self.info.metadata.schema_string:
                continue
            _check_readable(metadata, self.schema, self.options.read_change_feed)


def _version(action: FileAction) -> int:
    if action.version is None:
        raise DeltaSharingError(f"the server sent a {action.kind} without its version")
    return action.version


def _group(units: list[ReadUnit], first: int, last: int) -> dict[int, list[ReadUnit]]:
    """Units per version, every version of first..last present, each sorted by file id."""
    by_version: dict[int, list[ReadUnit]] = {v: [] for v in range(first, last + 1)}
    for unit in units:
        by_version.setdefault(_version(unit.actions[0]), []).append(unit)
    for version_units in by_version.values():
        version_units.sort(key=lambda u: (u.actions[0].id, u.actions[0].kind))
    return by_version


def _check_readable(metadata: TableMetadata, schema: StructType, change_feed: bool) -> None:
    seen = {f.name: f for f in spark_schema(metadata.schema_string, change_feed=change_feed)}
    for field in schema.fields:
        other = seen.get(field.name)
        if (
            other is None
            or other.dataType != field.dataType
            or (other.nullable and not field.nullable)
        ):
            raise DeltaSharingError(
                "Detected incompatible schema change:\n"
                f"schema used to read data: {schema.simpleString()}\n"
                f"schema seen in the table: "
                f"{spark_schema(metadata.schema_string, change_feed=change_feed).simpleString()}"
                "\nPlease try restarting the query with a new checkpoint."
            )
