"""Shared tables as Delta tables: cached log readers, version resolution, error mapping.

One `deltalog.DeltaTable` per location is kept in an LRU of `deltaTableCacheSize`; its
snapshots are cached and updated incrementally by deltalog, so a request on an unchanged
table costs at most one listing of new commits, shared with concurrent requests and
skipped within `refreshWindowMs` of the last one (deltalog.table.RefreshPolicy; none at
all with `stalenessAcceptable`). With a snapshot store, latest snapshots are memory-mapped
files shared by the server's worker processes (deltalog.snapshot_store). Version
and timestamp parameters are resolved here with the reference server's messages, and
deltalog errors become protocol errors.

A table with `compatibleCopy: true` has a second Delta table beside it, its copy
(sharing.copies): `copy_of` gives it as a `SharedTable` whose `source` is the original,
and `resolve` / `pinned` on it answer in the source's version numbers (the copy version
that materializes the asked source version is found here; one it does not hold is an
error naming the table, never another version's rows).

This module is the server's one door to the log reader: snapshots, version resolution,
the commits of a version range (streaming and change data feed) and the change data feed
checks all go through `TableService`, and only here are `deltalog.history`,
`deltalog.changes` and `deltalog.errors` imported (tests/test_architecture.py checks it),
so the planners in sharing/query speak only in sharing terms.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import deltalog
from deltalog import events, history
from deltalog.changes import (
    ChangeCommit,
    ChangeDataNotRecordedError,
    DataChangeCommit,
    check_cdf_enabled,
    data_changes,
    table_changes,
)
from deltalog.errors import (
    CorruptLogError,
    DeltaError,
    MissingLogFileError,
    TableNotFoundError,
    TimestampOutOfRangeError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from deltalog.loading import observing
from deltalog.snapshot_store import SnapshotStore
from deltalog.storage import resolve
from sharing.catalog import SharedTable
from sharing.config import ServerConfig
from sharing.copies import (
    CopyLacksVersion,
    CopyNotMaterialized,
    CopyVersion,
    commit_versions,
    copy_app_id,
    copy_location,
    holding,
    newest_before,
)
from sharing.errors import (
    InvalidParameter,
    MalformedRequest,
    ResourceNotFound,
    SharingError,
    TableAccessDenied,
    TableFilesMissing,
    TableUnreadable,
    UnsupportedOperation,
)
from sharing.skipping.warm import StatsWarmer
from sharing.storage_errors import access_denied
from sharing.views.materializations import ViewNotMaterialized

__all__ = [
    "ChangeCommit",
    "DataChangeCommit",
    "ResolvedSnapshot",
    "SnapshotObserver",
    "TableService",
    "parse_timestamp",
    "require_history",
    "snapshot_store_for",
]

log = logging.getLogger(__name__)


class SnapshotObserver(Protocol):
    """Told of every snapshot a shared table's request resolved (the server's metrics):
    the deltalog event (source, version, files) and the seconds the call took."""

    def snapshot_resolved(
        self, shared: SharedTable, event: events.SnapshotResolved, seconds: float
    ) -> None: ...


@dataclass(frozen=True)
class ResolvedSnapshot:
    """A snapshot chosen for a request. On time travel (version or timestamp given),
    `commit_timestamp` is the version's timestamp on the same monotonised timeline that
    timestamp lookups search, so a client can travel back with the value it was given."""

    snapshot: deltalog.Snapshot
    time_travel: bool
    commit_timestamp: int | None = None
    # Served from a compatible copy: the source version the copy's snapshot holds.
    source_version: int | None = None

    @property
    def version(self) -> int:
        """The version the recipient is told: the source's, also when served from a copy."""
        return self.snapshot.version if self.source_version is None else self.source_version


class TableService:
    """Opens shared tables and resolves the snapshot a request asks for."""

    def __init__(
        self,
        config: ServerConfig,
        stats_warmer: StatsWarmer | None = None,
        observer: SnapshotObserver | None = None,
        clock: Callable[[], float] = time.perf_counter,
        *,
        snapshot_store: SnapshotStore | None = None,
    ) -> None:
        """`stats_warmer`, when given, parses a newly loaded latest snapshot's statistics
        for the columns earlier queries on the table used, in the background, so the
        next predicate query usually finds them cached. `observer` hears of every
        snapshot resolved; loads slower than `slowSnapshotLoadMs` (by `clock`, seconds)
        are logged here. `snapshot_store`, when given, holds the tables' latest snapshots
        as files shared with other processes."""
        self._observer = observer
        self._clock = clock
        self._slow_seconds = config.slow_snapshot_load_ms / 1000
        self._capacity = max(1, config.delta_table_cache_size)
        self._warmer = stats_warmer
        self._stale_ok = config.staleness_acceptable
        self._refresh_window = config.refresh_window_ms / 1000
        self.snapshot_store = snapshot_store
        self._tables: OrderedDict[_TableKey, deltalog.DeltaTable] = OrderedDict()
        self._latest: dict[_TableKey, deltalog.Snapshot] = {}
        self._lock = threading.Lock()
        # Cold loads of latest snapshots under way, for requests to stream from.
        self._loadings: dict[_TableKey, deltalog.SnapshotLoading] = {}
        self._loading_began: dict[_TableKey, float] = {}  # time.monotonic() at registration
        self._views_location = config.views.location
        self._retry_after = config.views.refresh_interval_seconds
        # Per copy location: the source version each copy version read so far holds.
        self._copy_versions: dict[tuple[str, str], list[CopyVersion]] = {}

    # -- tables and snapshots ----------------------------------------------------------------

    def delta_table(self, shared: SharedTable) -> deltalog.DeltaTable:
        """The cached log reader of a shared table's location (with its storage options:
        the signer reuses the same storage through the snapshot)."""
        location = _cache_key(shared)
        with self._lock:
            table = self._tables.get(location)
            if table is not None:
                self._tables.move_to_end(location)
                return table
        with self.errors(shared):
            storage, root = resolve(shared.config.location, shared.config.storage_options())
            table = deltalog.DeltaTable(
                root,
                storage,
                snapshot_store=self.snapshot_store,
                refresh_window=self._refresh_window,
            )
        with self._lock:
            table = self._tables.setdefault(location, table)
            self._tables.move_to_end(location)
            while len(self._tables) > self._capacity:
                evicted, _ = self._tables.popitem(last=False)
                self._latest.pop(evicted, None)
        return table

    def forget(self, removed: Iterable[SharedTable], served: Iterable[SharedTable]) -> int:
        """Drop the log readers and snapshots of `removed` tables (no longer in the
        catalog), unless a table still `served` reads the same location with the same
        options; their parsed stats go too, and so do those of their compatible copies. A
        request holding a snapshot keeps it to its end. The number of locations dropped."""
        keep = {_cache_key(shared) for shared in self._with_copies(served)}
        dropped: list[tuple[_TableKey, deltalog.Snapshot | None]] = []
        with self._lock:
            for shared in self._with_copies(removed):
                key = _cache_key(shared)
                if key in keep or key not in self._tables:
                    continue
                del self._tables[key]
                dropped.append((key, self._latest.pop(key, None)))
                for mapped in [k for k in self._copy_versions if k[0] == key[0]]:
                    del self._copy_versions[mapped]
        if self._warmer is not None:
            for key, snapshot in dropped:
                self._warmer.forget(key, snapshot.files if snapshot is not None else None)
        return len(dropped)

    def latest(self, shared: SharedTable) -> deltalog.Snapshot:
        """The latest snapshot; with `stalenessAcceptable`, the one read last time."""
        location = _cache_key(shared)
        if self._stale_ok:
            with self._lock:
                cached = self._latest.get(location)
            if cached is not None:
                if self._observer is not None:
                    self._observer.snapshot_resolved(shared, _cached_event(cached), 0.0)
                return cached
        table = self.delta_table(shared)
        return self._latest_loaded(shared, table, self._begin_loading(location, table))

    def _registered_loading(self, location: _TableKey) -> deltalog.SnapshotLoading | None:
        with self._lock:
            return self._loadings.get(location)

    def _begin_loading(
        self, location: _TableKey, table: deltalog.DeltaTable
    ) -> deltalog.SnapshotLoading | None:
        """A loading to publish a cold load of `table` to, registered so that requests
        arriving meanwhile can stream from it (`resolve_early`); None when the table has a
        snapshot in memory or a load of it is registered already."""
        with self._lock:
            if table.has_latest or location in self._loadings:
                return None
            loading = deltalog.SnapshotLoading()
            self._loadings[location] = loading
            self._loading_began[location] = time.monotonic()
            return loading

    def _latest_loaded(
        self,
        shared: SharedTable,
        table: deltalog.DeltaTable,
        loading: deltalog.SnapshotLoading | None,
    ) -> deltalog.Snapshot:
        """`latest` past its cache check: with `loading` (owned: it is told the outcome,
        then unregistered) or one registered by another caller, the load publishes to it."""
        location = _cache_key(shared)
        # Another caller's load may be registered but not running yet: whichever of the
        # two runs the load (deltalog.table.RefreshPolicy) publishes to it.
        observed = loading or self._registered_loading(location)
        try:
            if observed is None:
                snapshot = self._snapshot(shared, table, None)
            else:
                with observing(observed):
                    snapshot = self._snapshot(shared, table, None)
        except BaseException as exc:
            if loading is not None:
                self._end_loading(location, loading)
                loading.fail(exc)
            raise
        with self._lock:
            previous = self._latest.get(location)
            self._latest[location] = snapshot
        if loading is not None:
            self._end_loading(location, loading)
            loading.finish(snapshot)
        if self._warmer is not None and previous is not snapshot:
            self._warmer.snapshot_loaded(
                location,
                snapshot.version,
                snapshot.files,
                snapshot.metadata,
                previous=previous.files if previous is not None else None,
            )
        return snapshot

    def _end_loading(self, location: _TableKey, loading: deltalog.SnapshotLoading) -> None:
        with self._lock:
            if self._loadings.get(location) is loading:
                del self._loadings[location]
                self._loading_began.pop(location, None)

    def fresh_latest(self, shared: SharedTable) -> deltalog.Snapshot | None:
        """What `latest` would answer when it can be had without I/O or waiting (a table
        already open whose last listing is within the refresh window, or the one read
        last time with `stalenessAcceptable`), else None: then call `latest` in a thread."""
        location = _cache_key(shared)
        with self._lock:
            table = self._tables.get(location)
            cached = self._latest.get(location)
            if table is not None:
                self._tables.move_to_end(location)  # in use: last to be evicted
        if cached is None or table is None:
            return None
        if self._stale_ok:
            return self.latest(shared)  # the cached snapshot: no I/O
        heard: list[events.SnapshotResolved] = []
        with self.errors(shared), events.listening(heard.append):
            snapshot = table.fresh_snapshot()
        # A snapshot `latest` has not seen yet needs its bookkeeping (the stats warmer).
        if snapshot is not cached:
            return None
        if heard:
            self._resolved(shared, heard[-1], 0.0)
        return snapshot

    def at_version(self, shared: SharedTable, version: int) -> deltalog.Snapshot:
        """The snapshot at `version`; beyond the latest is the reference's Kernel error."""
        return self._snapshot(shared, self.delta_table(shared), version)

    def _snapshot(
        self, shared: SharedTable, table: deltalog.DeltaTable, version: int | None
    ) -> deltalog.Snapshot:
        """`table.snapshot(version)`, timed, with what deltalog did told to the observer
        and a slow load logged."""
        heard: list[events.SnapshotResolved] = []
        begin = self._clock()
        with self.errors(shared), events.listening(heard.append):
            snapshot = table.snapshot(version)
        seconds = self._clock() - begin
        if heard:
            # The last event is the call's own (a nested lookup would come first).
            self._resolved(shared, heard[-1], seconds)
        return snapshot

    def _resolved(
        self, shared: SharedTable, event: events.SnapshotResolved, seconds: float
    ) -> None:
        if self._observer is not None:
            self._observer.snapshot_resolved(shared, event, seconds)
        if event.source != events.CACHED and 0 < self._slow_seconds <= seconds:
            log.warning(
                "slow snapshot load: %s version %d (%s, %d files) took %.3f s",
                shared.full_name,
                event.version,
                event.source,
                event.files,
                seconds,
                extra={
                    "table": shared.full_name,
                    "version": event.version,
                    "source": event.source,
                    "files": event.files,
                    "commits": event.commits,
                    "duration_ms": round(seconds * 1000, 2),
                },
            )

    # -- request parameters ------------------------------------------------------------------

    def resolve(
        self, shared: SharedTable, *, version: int | None, timestamp: str | None
    ) -> ResolvedSnapshot:
        """The snapshot for `version` or `timestamp` (at most one), else the latest (of
        the copy holding that source version, for a copy)."""
        if shared.source is not None:
            return self._resolve_copy(shared, shared.source, version, timestamp)
        if version is None and timestamp is None:
            snapshot = self.latest(shared)
            self._check_start_version(shared, snapshot.version)
            return ResolvedSnapshot(snapshot, time_travel=False)
        table, version = self._asked_version(shared, version, timestamp)
        snapshot = self.at_version(shared, version)
        with self.errors(shared):
            committed = history.commit_timestamp(table, version)
        return ResolvedSnapshot(snapshot, time_travel=True, commit_timestamp=committed)

    def _asked_version(
        self, shared: SharedTable, version: int | None, timestamp: str | None
    ) -> tuple[deltalog.DeltaTable, int]:
        """The table's log and the version a time-travel request names (by number or by
        timestamp), checked against the shared history."""
        require_history(shared)
        table = self.delta_table(shared)
        if version is None:
            assert timestamp is not None
            ts = parse_timestamp(timestamp)
            with self.errors(shared):
                version = history.version_at_or_before(table, ts)
        self._check_start_version(shared, version)
        return table, version

    def resolve_early(self, shared: SharedTable) -> ResolvedSnapshot | deltalog.SnapshotLoading:
        """`resolve` of the latest snapshot, except when the table has none in memory yet
        (a cold load): then the load runs on a thread of its own (or the load under way
        is joined: another request's, or the start-up table check's), and once it knows
        the version's head (deltalog.loading) the load itself is returned, so the caller
        can go through the files as they are read. A load that finds the snapshot without
        reading a checkpoint (a store file, a concurrent request's load, a log without
        a checkpoint) announces no head: its snapshot is returned when it is done. Either
        way the load ends in `latest`'s bookkeeping, so the next request finds it. A
        compatible copy is resolved as always (its versions are told as the source's).

        A request joining a load registered longer than the refresh window before it
        arrived is held to what `latest` promises (it sees every commit completed before
        it arrived, `refreshWindowMs`): when one listing shows a version newer than the
        load's (its head's, or its snapshot's when it announces none), it waits for the
        load and is answered by the refresh after it."""
        arrived = time.monotonic()
        if shared.source is not None:
            return self.resolve(shared, version=None, timestamp=None)
        table = self.delta_table(shared)
        location = _cache_key(shared)
        with self._lock:
            cached = self._latest.get(location)
            loading = self._loadings.get(location)
            began = self._loading_began.get(location)
        if table.has_latest or (self._stale_ok and cached is not None):
            return self.resolve(shared, version=None, timestamp=None)
        if loading is None:
            began = None  # our own load lists the log after we arrived
            loading = self._begin_loading(location, table)
            if loading is None:  # loaded, or another request's load began, meanwhile
                return self.resolve_early(shared)
            owned = loading

            def load() -> None:
                # A failure reaches the readers through the loading.
                with contextlib.suppress(Exception):
                    self._latest_loaded(shared, table, owned)

            threading.Thread(target=load, name="snapshot-load", daemon=True).start()
        head = loading.wait_head()
        version = head.version if head is not None else loading.result().version
        if began is not None and not self._stale_ok and began <= arrived - self._refresh_window:
            with self.errors(shared):
                newer = table.has_version_after(version)
            if newer:
                return self.resolve(shared, version=None, timestamp=None)
        if head is None:
            snapshot = loading.result()
            self._check_start_version(shared, snapshot.version)
            return ResolvedSnapshot(snapshot, time_travel=False)
        self._check_start_version(shared, head.version)
        return loading

    def resolve_fresh(self, shared: SharedTable) -> ResolvedSnapshot | None:
        """`resolve` of the latest snapshot when `fresh_latest` has it, else None."""
        snapshot = self.fresh_latest(shared)
        if snapshot is None:
            return None
        if shared.source is not None:
            held = self._held_by(shared, snapshot)
            self._check_start_version(shared.source, held)
            return ResolvedSnapshot(snapshot, time_travel=False, source_version=held)
        self._check_start_version(shared, snapshot.version)
        return ResolvedSnapshot(snapshot, time_travel=False)

    def pinned(self, shared: SharedTable, version: int, time_travel: bool) -> ResolvedSnapshot:
        """The snapshot a page or refresh token pinned (`version` as the recipient was
        told it: the source's, for a copy)."""
        if time_travel:
            return self.resolve(shared, version=version, timestamp=None)
        if shared.source is None:
            return ResolvedSnapshot(self.at_version(shared, version), False)
        copy_version = self._copy_version_holding(shared, shared.source, version)
        snapshot = self.at_version(shared, copy_version)
        return ResolvedSnapshot(snapshot, False, source_version=version)

    # -- compatible copies -------------------------------------------------------------------

    def copy_of(self, shared: SharedTable) -> SharedTable:
        """The compatible copy of a table with `compatibleCopy: true`, as a table of its
        own (its location under `views.location`, opened with the backend's defaults as
        the refresher writes it) that remembers its source."""
        if self._views_location is None:
            raise CopyNotMaterialized(shared.full_name, self._retry_after)
        location = copy_location(self._views_location, shared.full_name)
        config = shared.config.model_copy(update={"location": location, "storage": ()})
        return dataclasses.replace(shared, config=config, source=shared)

    def _with_copies(self, tables: Iterable[SharedTable]) -> list[SharedTable]:
        """`tables` and the compatible copies of those that keep one."""
        found = list(tables)
        if self._views_location is not None:
            found += [self.copy_of(t) for t in found if t.config.compatible_copy]
        return found

    def _resolve_copy(
        self, copy: SharedTable, source: SharedTable, version: int | None, timestamp: str | None
    ) -> ResolvedSnapshot:
        if version is None and timestamp is None:
            snapshot = self.latest(copy)
            held = self._held_by(copy, snapshot)
            self._check_start_version(source, held)
            return ResolvedSnapshot(snapshot, time_travel=False, source_version=held)
        table, version = self._asked_version(source, version, timestamp)
        snapshot = self.at_version(copy, self._copy_version_holding(copy, source, version))
        with self.errors(source):
            committed = history.commit_timestamp(table, version)
        return ResolvedSnapshot(
            snapshot, time_travel=True, commit_timestamp=committed, source_version=version
        )

    @staticmethod
    def _held_by(copy: SharedTable, snapshot: deltalog.Snapshot) -> int:
        """The source version a snapshot of a copy materializes (its app transaction)."""
        held = snapshot.txns.get(copy_app_id(copy.full_name))
        if held is None:  # not written by the refresher: never serve it as the source
            log.error(
                "the compatible copy of %s at %s carries no app transaction %s",
                copy.full_name,
                snapshot.table_root,
                copy_app_id(copy.full_name),
            )
            raise TableUnreadable()
        return held

    def _copy_version_holding(self, copy: SharedTable, source: SharedTable, version: int) -> int:
        """The copy version whose rows are exactly the source's at `version`: the one that
        materializes it, else the one holding the newest older source version when no
        commit in between changed data, metadata or protocol. CopyLacksVersion otherwise;
        a version the source never had is the usual version error."""
        latest = self.latest(copy)
        if self._held_by(copy, latest) == version:
            return latest.version
        versions = self._copy_history(copy, latest)
        exact = holding(versions, version)
        if exact is not None:
            return exact.copy_version
        source_table = self.delta_table(source)
        with self.errors(source):
            source_latest = source_table.latest_version()
        if version > source_latest:
            raise MalformedRequest(
                f"Cannot load table version {version} as it does not exist. "
                f"The latest available version is {source_latest}."
            )
        older = newest_before(versions, version)
        if older is not None and self._unchanged(source, older.source_version, version):
            return older.copy_version
        raise CopyLacksVersion(source.full_name, version, versions)

    def _copy_history(self, copy: SharedTable, latest: deltalog.Snapshot) -> list[CopyVersion]:
        """Which source version each copy version up to `latest` holds; read once per
        copy version (cached per location, extended by the commits since)."""
        # A copy made again from scratch (a new table id) starts a new list.
        location = (copy.config.location, latest.metadata.id)
        with self._lock:
            known = self._copy_versions.get(location, [])
        last = known[-1].copy_version if known else -1
        if last >= latest.version:
            return [v for v in known if v.copy_version <= latest.version]
        table = self.delta_table(copy)
        with self.errors(copy):
            first = max(last + 1, table.earliest_version())
            more = commit_versions(table, copy_app_id(copy.full_name), first, latest.version)
        versions = [v for v in known if v.copy_version < first] + more
        with self._lock:
            self._copy_versions[location] = versions
        return versions

    def _unchanged(self, source: SharedTable, held: int, version: int) -> bool:
        """Whether the source's commits `held+1..version` leave its rows, schema and
        protocol as at `held` (no data-changing file action; only so many are read)."""
        if version - held > _MAX_UNCHANGED_COMMITS:
            return False
        return all(
            commit.adds.num_rows == 0
            and commit.removes.num_rows == 0
            and commit.metadata is None
            and commit.protocol is None
            for commit in self.data_changes(source, held + 1, version)
        )

    def version_for_starting_timestamp(self, shared: SharedTable, text: str) -> int:
        """The earliest version committed at or after `text` (GET /version): the first
        version when the timestamp is before it, an error when after the last commit."""
        require_history(shared)
        ts = parse_timestamp(text)
        table = self.delta_table(shared)
        with self.errors(shared):
            version = history.version_at_or_after(table, ts)
        start = shared.config.start_version
        if version < start:
            raise InvalidParameter(
                f"You can only query table data since version {start}."
                f"The provided timestamp({text}) corresponds to {version}."
            )
        return version

    # -- version ranges (streaming queries and change data feeds) -------------------------------

    def data_changes(self, shared: SharedTable, first: int, last: int) -> list[DataChangeCommit]:
        """The data-changing removes and adds of commits `first..last` (streaming)."""
        with self.errors(shared):
            return list(data_changes(self.delta_table(shared), first, last))

    def table_changes(self, shared: SharedTable, first: int, last: int) -> list[ChangeCommit]:
        """The change data of commits `first..last` (change data feed)."""
        with self.errors(shared), _change_errors():
            return list(table_changes(self.delta_table(shared), first, last))

    def change_start_at(self, shared: SharedTable, ts: int, latest: int) -> int:
        """The first version committed at or after `ts` (before the first commit is the
        reference's error), for the start of a change data feed."""
        table = self.delta_table(shared)
        with self.errors(shared), _change_errors(), _timestamp_range(table, ts, latest):
            return history.version_at_or_after(table, ts, latest=latest, before_first_is_error=True)

    def change_end_at(self, shared: SharedTable, ts: int, latest: int) -> int:
        """The last version committed at or before `ts`, for the end of a change data feed."""
        table = self.delta_table(shared)
        with self.errors(shared), _change_errors(), _timestamp_range(table, ts, latest):
            return history.version_at_or_before(table, ts, latest=latest)

    def check_cdf_enabled(self, shared: SharedTable, start: int, end: int) -> None:
        """The change data feed was on for every version `start..end` (else a 400)."""
        with self.errors(shared), _change_errors():
            check_cdf_enabled(self.delta_table(shared), start, end)

    @staticmethod
    def _check_start_version(shared: SharedTable, version: int) -> None:
        start = shared.config.start_version
        if version < start:
            raise InvalidParameter(f"You can only query table data since version {start}.")

    # -- errors ------------------------------------------------------------------------------

    @contextmanager
    def errors(self, shared: SharedTable) -> Iterator[None]:
        """Translate deltalog errors raised inside the block into protocol errors."""
        try:
            yield
        except SharingError:
            raise
        except TableNotFoundError as exc:
            if shared.is_view:
                raise ViewNotMaterialized(shared.full_name, self._retry_after) from exc
            elif shared.source is not None:
                raise CopyNotMaterialized(shared.full_name, self._retry_after) from exc
            log.warning(
                "shared table %s: no Delta table at %s (%s)",
                shared.full_name,
                shared.config.location,
                exc,
            )
            raise ResourceNotFound(
                f"[Share/Schema/Table] '{shared.share}/{shared.schema}/{shared.name}' does "
                "not exist, please contact your share provider for further information."
            ) from exc
        except UnsupportedFeatureError as exc:
            raise UnsupportedOperation(
                f"Table {shared.full_name} uses Delta features this server cannot read: "
                f"{', '.join(exc.features)}"
            ) from exc
        except VersionNotFoundError as exc:
            raise MalformedRequest(_version_message(exc)) from exc
        except TimestampOutOfRangeError as exc:
            raise MalformedRequest(str(exc)) from exc
        except (CorruptLogError, DeltaError, OSError) as exc:
            if access_denied(exc):
                log.error(
                    "shared table %s: access to %s denied by the storage service; check the "
                    "table's storage credentials (%s)",
                    shared.full_name,
                    shared.config.location,
                    exc,
                )
                raise TableAccessDenied() from exc
            log.exception(
                "shared table %s at %s cannot be read", shared.full_name, shared.config.location
            )
            raise TableUnreadable() from exc


_TableKey = tuple[str, tuple[tuple[str, Any], ...]]

# A source version a copy does not materialize is served from the copy's older version
# only after checking that the commits in between changed nothing; at most this many.
_MAX_UNCHANGED_COMMITS = 1000

SNAPSHOT_CACHE_OFF = "off"


def snapshot_store_for(config: ServerConfig) -> SnapshotStore | None:
    """The snapshot store `snapshotCacheDir` names (None when unset or "off"). Files are
    not checksummed when mapped: they are written by this server, renamed into place
    whole, and still checked for size, structure, table, version and anchor commit."""
    directory = config.snapshot_cache_dir
    if directory is None or directory.lower() == SNAPSHOT_CACHE_OFF:
        return None
    return SnapshotStore(directory, verify=False, typed_stats=True)


def _cached_event(snapshot: deltalog.Snapshot) -> events.SnapshotResolved:
    """A snapshot served from this service's own cache (`stalenessAcceptable`)."""
    return events.SnapshotResolved(
        snapshot.table_root, snapshot.version, events.CACHED, snapshot.num_files
    )


def _cache_key(shared: SharedTable) -> _TableKey:
    """Tables are cached per location and storage options (two tables may read one
    location with different credentials)."""
    return shared.config.location, shared.config.storage


def require_history(shared: SharedTable) -> None:
    """Time travel and timestamp lookups need `historyShared` on the table."""
    if not shared.config.history_shared:
        raise InvalidParameter(
            "Reading table by version or timestamp is not supported because history sharing "
            f"is not enabled on table: {shared.full_name}"
        )


def parse_timestamp(text: str, name: str = "startingTimestamp") -> int:
    """An ISO-8601 timestamp with offset (the parameter `name`) as epoch ms, or the
    reference's 400."""
    try:
        return history.parse_timestamp(text)
    except ValueError as exc:
        raise InvalidParameter(f"Invalid {name}: {exc}") from exc


@contextmanager
def _change_errors() -> Iterator[None]:
    """Inside TableService.errors: the deltalog errors that are the client's doing on a
    changes query (a timestamp outside the history, change data not recorded) become 400s,
    and a missing commit file the reference's 400 RESOURCE_DOES_NOT_EXIST."""
    try:
        yield
    except (TimestampOutOfRangeError, ChangeDataNotRecordedError) as exc:
        raise InvalidParameter(str(exc)) from exc
    except MissingLogFileError as exc:
        raise TableFilesMissing(f"table files missing: {exc}") from exc


@contextmanager
def _timestamp_range(table: history.TableLike, ts: int, latest: int) -> Iterator[None]:
    """A timestamp outside the table's history, told with the reference's advice first:
    clients show the message pretty-printed and cut into lines, and tests look for the
    advice ("Please use a timestamp greater than or equal to") in one piece."""
    try:
        yield
    except TimestampOutOfRangeError as exc:
        timeline = history.timeline(table, through=latest)
        lo, hi = timeline.searchable(latest)
        if exc.before_first:
            version = timeline.version_at(lo)
            bound, relation = "greater", "before the earliest"
        else:
            version = timeline.version_at(hi - 1)
            bound, relation = "less", "after the latest"
        limit = history.format_instant(timeline.timestamp(version))
        raise InvalidParameter(
            f"Please use a timestamp {bound} than or equal to {limit}: the provided "
            f"timestamp {history.format_instant(ts)} is {relation} available version "
            f"({version}) of the table."
        ) from exc


def _version_message(exc: VersionNotFoundError) -> str:
    if exc.latest is not None and exc.version > exc.latest:
        return (
            f"Cannot load table version {exc.version} as it does not exist. "
            f"The latest available version is {exc.latest}."
        )
    if exc.earliest is not None and exc.version < exc.earliest:
        return (
            f"Cannot load table version {exc.version}: the earliest version that can be "
            f"reconstructed is {exc.earliest}."
        )
    return f"Cannot load table version {exc.version}: {exc}"
