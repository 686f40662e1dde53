"""A Delta table handle: version discovery, cached snapshots, commit access.

The latest snapshot is cached and refreshed incrementally: when the table has gained
commits since, only those commits are read and applied on top of the cached state. A
small LRU keeps a few time-travel snapshots. One lock guards the caches, so the handle can
be shared by the server's threads.

How often the latest snapshot is checked against storage is the table's `RefreshPolicy`:
concurrent requests share one listing of `_delta_log`, and with a window, a request that
arrives shortly after a listing started is served by that listing.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from deltalog import events, history
from deltalog.actions import CommitActions
from deltalog.commits import commit_key
from deltalog.commits import read_commit as _read_commit
from deltalog.errors import TableNotFoundError, VersionNotFoundError
from deltalog.log_segment import (
    build_segment,
    earliest_version,
    list_log,
    read_last_checkpoint,
)
from deltalog.snapshot import Snapshot, load_snapshot, read_commits
from deltalog.snapshot_store import SnapshotStore, StoredTable
from deltalog.storage import resolve
from deltalog.storage.base import FileInfo, Storage

# Going forward from a cached snapshot by replaying at most this many commits is
# preferred over loading the target version's own checkpoint.
MAX_INCREMENTAL_COMMITS = 100
HISTORICAL_CACHE_SIZE = 4


class RefreshPolicy:
    """When the latest snapshot is checked against storage, and by whom.

    A request for the latest snapshot needs a listing of the log that started no earlier
    than `window_seconds` before the request arrived. If the last listing qualifies, its
    snapshot is served without a new one. If a listing is under way, the request waits for
    it and is served by it when it qualifies, else by the next one, which a single waiting
    request runs for all the requests that arrived meanwhile. So a burst of N concurrent
    requests costs at most two listings, not N, and with a window of 0 every request still
    sees every commit that completed before it arrived (today's strictness). A failed
    listing fails the requests it would have served; the next request tries again.
    """

    def __init__(
        self, window_seconds: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_seconds = max(0.0, window_seconds)
        self._clock = clock
        self._cond = threading.Condition()
        self._running = False
        self._started: float | None = None  # when the last finished listing started
        self._snapshot: Snapshot | None = None
        self._error: BaseException | None = None
        self.listings = 0  # listings run (for tests and metrics)
        self.waiting = 0  # requests waiting for a listing under way

    def latest(self, refresh: Callable[[], Snapshot]) -> Snapshot:
        """The latest snapshot, from a listing fresh enough for a request arriving now;
        `refresh` lists the log and returns the snapshot."""
        oldest_usable = self._clock() - self.window_seconds
        with self._cond:
            while True:
                started = self._started
                # Strictly after: a listing begun at the same clock reading as the
                # request may have begun before it.
                if started is not None and started > oldest_usable:
                    if self._error is not None:
                        raise self._error
                    assert self._snapshot is not None
                    return self._snapshot
                if not self._running:
                    break
                self.waiting += 1
                try:
                    self._cond.wait()
                finally:
                    self.waiting -= 1
            self._running = True
            self.listings += 1
        begun = self._clock()
        snapshot: Snapshot | None = None
        error: BaseException | None = None
        try:
            snapshot = refresh()
            return snapshot
        except BaseException as exc:
            error = exc
            raise
        finally:
            with self._cond:
                self._running = False
                self._started = begun
                self._snapshot = snapshot
                self._error = error
                self._cond.notify_all()

    def fresh(self) -> Snapshot | None:
        """The last listing's snapshot when it is fresh enough for a request arriving now,
        else None; never lists and never waits for a listing under way (for callers that
        must not block, such as an event loop deciding whether to hand off to a thread)."""
        oldest_usable = self._clock() - self.window_seconds
        with self._cond:
            started = self._started
            if started is not None and started > oldest_usable and self._error is None:
                return self._snapshot
        return None

    def forget(self) -> None:
        """The next request lists the log whatever the window (e.g. after a write)."""
        with self._cond:
            self._started = None
            self._snapshot = None
            self._error = None


class DeltaTable:
    """A Delta table at `uri` (a local path or `file:` URI).

    With an explicit `storage`, `uri` is the table root's key in that storage. With a
    `snapshot_store`, the latest snapshot is mapped from (and written to) that store,
    shared with every process using it (see deltalog.snapshot_store). `refresh_window`
    is the RefreshPolicy's window in seconds (0: every request for the latest snapshot
    lists the log, concurrent ones sharing a listing).
    """

    def __init__(
        self,
        uri: str,
        storage: Storage | None = None,
        *,
        snapshot_store: SnapshotStore | None = None,
        refresh_window: float = 0.0,
    ) -> None:
        if storage is None:
            storage, root = resolve(uri)
        else:
            root = uri.rstrip("/") or "/"
        self.uri = uri
        self.storage: Storage = storage
        self.table_root = root
        self._lock = threading.RLock()
        self._latest: Snapshot | None = None
        self._history: OrderedDict[int, Snapshot] = OrderedDict()
        self._stored = (
            StoredTable(snapshot_store, storage, root) if snapshot_store is not None else None
        )
        # Commit timestamps from one listing, extended as the log grows (deltalog.history).
        self.commit_timeline = history.CommitTimeline(storage, root)
        self.refresh_policy = RefreshPolicy(refresh_window)

    @classmethod
    def open(
        cls,
        uri: str,
        storage: Storage | None = None,
        *,
        snapshot_store: SnapshotStore | None = None,
        refresh_window: float = 0.0,
    ) -> DeltaTable:
        return cls(uri, storage, snapshot_store=snapshot_store, refresh_window=refresh_window)

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r})"

    # -- versions -------------------------------------------------------------------

    def latest_version(self) -> int:
        """The newest version in the log: one listing, started after the newest version
        already known (the cached snapshot) or after the `_last_checkpoint` hint."""
        with self._lock:
            known = self._latest.version if self._latest is not None else None
        if known is not None:
            listing = list_log(self.storage, self.table_root, after=known)
            newest = listing.latest_version
            return known if newest is None else newest
        hint = read_last_checkpoint(self.storage, self.table_root)
        if hint is not None:
            newest = list_log(self.storage, self.table_root, after=hint.version - 1).latest_version
            if newest is not None:
                return newest
        return build_segment(self.storage, self.table_root, hint=False).latest_version

    def has_version_after(self, version: int) -> bool:
        """Whether the log holds a version newer than `version`: one listing, without
        waiting for a load of the table under way (it holds the table's lock)."""
        return list_log(self.storage, self.table_root, after=version).latest_version is not None

    def exists(self) -> bool:
        """Whether a Delta table is at this location (its log has a version)."""
        try:
            self.latest_version()
        except TableNotFoundError:
            return False
        return True

    def version_at_or_before(self, timestamp_ms: int) -> int:
        """The version in effect at `timestamp_ms` (time travel by timestamp; outside the
        table's history a TimestampOutOfRangeError)."""
        return history.version_at_or_before(self, timestamp_ms)

    def earliest_version(self) -> int:
        """The earliest version that can be reconstructed (0 when commit 0 is still there,
        else the oldest complete checkpoint)."""
        return earliest_version(self.storage, self.table_root)

    # -- snapshots ------------------------------------------------------------------

    def snapshot(self, version: int | None = None) -> Snapshot:
        """The table at `version` (None: the latest, as the refresh policy allows), from
        the caches where possible."""
        if version is None:
            refreshed = False

            def refresh() -> Snapshot:
                nonlocal refreshed
                refreshed = True
                return self._locked_refresh()

            newest = self.refresh_policy.latest(refresh)
            # Served by another request's listing: cached as far as this one is concerned.
            return newest if refreshed else _told(newest, events.CACHED)
        with self._lock:
            cached = self._history.get(version)
            if cached is not None:
                self._history.move_to_end(version)
                return _told(cached, events.CACHED)
            latest = self._latest
            if latest is not None and latest.version == version:
                return _told(latest, events.CACHED)
            snap = self._forward_from_cache(version)
            source = events.INCREMENTAL
            if snap is None:
                source = events.COLD
                snap = load_snapshot(
                    self.storage,
                    self.table_root,
                    build_segment(self.storage, self.table_root, version),
                    clock=self._commit_timestamp,
                )
            self._remember(snap)
            return _told(snap, source)

    @property
    def has_latest(self) -> bool:
        """Whether a latest snapshot is in memory (the next one is then at most an
        incremental refresh of it, not a load of the whole log)."""
        return self._latest is not None

    def fresh_snapshot(self) -> Snapshot | None:
        """The latest snapshot when the refresh policy serves it without a listing (no
        I/O, no waiting), else None."""
        newest = self.refresh_policy.fresh()
        return None if newest is None else _told(newest, events.CACHED)

    def _locked_refresh(self) -> Snapshot:
        with self._lock:
            return self._refresh_latest()

    def _refresh_latest(self) -> Snapshot:
        latest = self._latest
        if latest is not None:
            listing = list_log(self.storage, self.table_root, after=latest.version)
            newest = listing.latest_version
            if newest is None:
                return _told(latest, events.CACHED)
            versions = range(latest.version + 1, newest + 1)
            if len(versions) <= MAX_INCREMENTAL_COMMITS and all(
                v in listing.commits for v in versions
            ):
                latest = latest.with_commits(self._read_listed(listing.commits, versions, latest))
                self._latest = latest
                if self._stored is not None:
                    self._stored.followed(latest, listing.commits[latest.version])
                return _told(latest, events.INCREMENTAL, len(versions))
        if self._stored is not None:
            self._latest = self._stored.load_latest(self._commit_timestamp, MAX_INCREMENTAL_COMMITS)
            return _told(self._latest, events.COLD)
        segment = build_segment(self.storage, self.table_root)
        self._latest = load_snapshot(
            self.storage, self.table_root, segment, clock=self._commit_timestamp
        )
        return _told(self._latest, events.COLD)

    def _forward_from_cache(self, version: int) -> Snapshot | None:
        """`version` built by replaying a few commits on the nearest older cached snapshot."""
        candidates = [s for s in (self._latest, *self._history.values()) if s is not None]
        older = [s for s in candidates if s.version < version]
        if not older:
            return None
        base = max(older, key=lambda s: s.version)
        if version - base.version > MAX_INCREMENTAL_COMMITS:
            return None
        listing = list_log(self.storage, self.table_root, after=base.version)
        versions = range(base.version + 1, version + 1)
        if not all(v in listing.commits for v in versions):
            return None  # let the full path raise the right error
        return base.with_commits(self._read_listed(listing.commits, versions, base))

    def _commit_timestamp(self, version: int, in_commit_timestamp: int | None) -> int:
        """The clock of this table's snapshots: the history timeline, so a snapshot's
        timestamp is the one timestamp lookups search. Called lazily, never under the
        table's lock (the timeline may ask this table for its latest snapshot)."""
        return history.timeline(self, through=version).timestamp(version, in_commit_timestamp)

    def _read_listed(
        self, listed: dict[int, FileInfo], versions: range, before: Snapshot
    ) -> list[CommitActions]:
        """The commits `versions` (all in `listed`) that follow the snapshot `before`."""
        return read_commits(
            self.storage, self.table_root, ((v, listed[v]) for v in versions), before.metadata
        )

    def _remember(self, snap: Snapshot) -> None:
        latest = self._latest
        if latest is None or snap.version > latest.version:
            if latest is not None:
                self._history[latest.version] = latest
            self._latest = snap
        else:
            self._history[snap.version] = snap
        while len(self._history) > HISTORICAL_CACHE_SIZE:
            self._history.popitem(last=False)

    # -- commits --------------------------------------------------------------------

    def commit_file_info(self, version: int) -> FileInfo:
        """Listing information (size, modification time) of commit `version`."""
        key = commit_key(self.storage, self.table_root, version)
        try:
            return self.storage.info(key)
        except FileNotFoundError:
            raise self._version_not_found(version) from None

    def read_commit(self, version: int) -> CommitActions:
        """The actions of commit `version` (VersionNotFoundError when its file is gone)."""
        return _read_commit(self.storage, self.table_root, version, self.commit_file_info(version))

    def commits(self, start: int, end: int | None = None) -> Iterator[CommitActions]:
        """Commits `start`..`end` inclusive (None: up to the latest), in order, read lazily.

        Timestamps are in-commit timestamps where a commit carries one (writers only
        write them while the feature is enabled), else file modification times.
        """
        if end is None:
            end = self.latest_version()
        if start < 0 or start > end:
            raise VersionNotFoundError(
                f"invalid commit range {start}..{end}", version=start, earliest=None, latest=end
            )
        listing = list_log(self.storage, self.table_root, after=start - 1)
        for v in range(start, end + 1):
            info = listing.commits.get(v)
            if info is None:
                raise self._version_not_found(v)
            yield _read_commit(self.storage, self.table_root, v, info)

    def _version_not_found(self, version: int) -> VersionNotFoundError:
        try:
            latest: int | None = self.latest_version()
            earliest: int | None = self.earliest_version()
        except Exception:  # the table itself may be gone; the version error still stands
            latest = earliest = None
        return VersionNotFoundError(
            f"commit {version} is not available"
            + (f" (available: {earliest}..{latest})" if latest is not None else ""),
            version=version,
            earliest=earliest,
            latest=latest,
        )


def _told(snapshot: Snapshot, source: str, commits: int = 0) -> Snapshot:
    """`snapshot`, after telling the listener (deltalog.events) where it came from."""
    events.emit(
        events.SnapshotResolved(
            snapshot.table_root, snapshot.version, source, snapshot.num_files, commits
        )
    )
    return snapshot
