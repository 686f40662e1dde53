"""Commit timestamps and the version in effect at a point in time.

A commit's timestamp is its in-commit timestamp (ICT, `commitInfo.inCommitTimestamp`) when
`delta.enableInCommitTimestamps` is on, from `delta.inCommitTimestampEnablementVersion`
onward (from the first version when the property is absent: the feature was on from the
table's creation). Before that, and on tables without ICT, it is the modification time of
`_delta_log/<v>.json`.

File modification times are not ordered (clock skew, copies, object-store rewrites), so
they are *monotonised* the way the reference server does for CDF: walking the commits in
version order, each time is forced to be at least the previous commit's time + 1 ms. The
walk starts at the oldest commit file in the log (the reference starts 100 versions
before the queried range), so a commit's timestamp does not depend on the range asked
for. ICT values are taken as written: the protocol requires writers to make them
strictly increasing, and reading them lazily keeps a timestamp lookup at O(log n) commit
reads instead of one read per commit. Only a clamp keeps them above the monotonised file
time of the last commit before enablement, so the timeline as a whole stays ordered for
binary search.

The file times come from ONE listing of `_delta_log/` per table, kept on the table
(`DeltaTable.commit_timeline`, so it lives and is evicted with the table) and extended
incrementally with listings that start after the last known commit.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, overload

import orjson

from deltalog.actions import CommitActions, Metadata
from deltalog.commits import commit_name, in_commit_timestamps_enabled
from deltalog.errors import (
    CorruptLogError,
    TableNotFoundError,
    TimestampOutOfRangeError,
    VersionNotFoundError,
)
from deltalog.log_segment import list_log
from deltalog.storage.base import FileInfo, Storage
from deltalog.timestamps import format_instant, parse_timestamp

if TYPE_CHECKING:
    from deltalog.snapshot import Snapshot

__all__ = [
    "CommitTimeline",
    "TableLike",
    "commit_timestamp",
    "commit_timestamps",
    "format_instant",
    "ict_enablement_version",
    "parse_timestamp",
    "timeline",
    "version_at_or_after",
    "version_at_or_before",
]

ICT_ENABLEMENT_VERSION_KEY = "delta.inCommitTimestampEnablementVersion"

_FIRST_LINE_BYTES = 16 * 1024  # commitInfo is the first line of an ICT commit


class TableLike(Protocol):
    """What history and change feeds need of a table (deltalog.table.DeltaTable, which
    imports this module: hence a protocol rather than the class)."""

    storage: Storage
    table_root: str
    commit_timeline: CommitTimeline  # the table's own, refreshed by `timeline()`

    def snapshot(self, version: int | None = None) -> Snapshot: ...

    def commits(self, start: int, end: int | None = None) -> Iterator[CommitActions]: ...


# --------------------------------------------------------------------------------------
# The commit timeline of one table


def ict_enablement_version(metadata: Metadata | None) -> int | None:
    """The first version whose timestamp is its ICT, or None when ICT is off."""
    if metadata is None or not in_commit_timestamps_enabled(metadata):
        return None
    raw = metadata.configuration.get(ICT_ENABLEMENT_VERSION_KEY)
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError as exc:
        raise CorruptLogError(f"{ICT_ENABLEMENT_VERSION_KEY} is not a number: {raw!r}") from exc


class CommitTimeline:
    """Monotonised commit timestamps of one table, from one listing of its log.

    Thread-safe: the version/time arrays change only under the lock, and lookups read
    them under it; commit files are read for in-commit timestamps outside it.
    """

    def __init__(self, storage: Storage, root: str) -> None:
        self._storage = storage
        self._root = root
        self._lock = threading.Lock()
        self._versions = array("q")  # versions with a commit file, ascending
        self._file_times = array("q")  # their monotonised modification times
        self._keys: list[str] = []  # their commit file keys
        self._last_info: FileInfo | None = None
        self._earliest = 0
        self._ict_from: int | None = None
        self._ict_floor: int | None = None  # see _update_ict
        self._icts: dict[int, int] = {}

    # -- building ----------------------------------------------------------------------

    @property
    def built(self) -> bool:
        return self._last_info is not None

    def refresh(self, table: TableLike) -> None:
        """Add the commits written since the last refresh (a full rebuild when the log
        was replaced: the last known commit file is gone or was rewritten)."""
        with self._lock:
            if self._last_info is None:
                self._rebuild(table)
                return
            last = self._versions[-1]
            listing = list_log(self._storage, self._root, after=last - 1)
            seen = listing.commits.get(last)
            if seen is None or seen.modification_time != self._last_info.modification_time:
                self._rebuild(table)
                return
            new = sorted((v, info) for v, info in listing.commits.items() if v > last)
            if new:
                self._append(new)
                self._update_ict(table)

    def _rebuild(self, table: TableLike) -> None:
        listing = list_log(self._storage, self._root)
        commits = sorted(listing.commits.items())
        earliest = listing.earliest_version()
        if earliest is not None and earliest not in listing.commits:
            # The oldest checkpoint's commit file was cleaned up: the checkpoint's own
            # file time stands in for it.
            checkpoint = next(c for c in listing.checkpoints if c.version == earliest)
            commits = sorted([(earliest, checkpoint.files[0]), *commits], key=lambda c: c[0])
        if not commits:
            raise TableNotFoundError("no Delta table: _delta_log holds no commits")
        self._versions, self._file_times, self._keys = array("q"), array("q"), []
        self._icts.clear()
        self._earliest = earliest if earliest is not None else commits[0][0]
        self._append(commits)
        self._update_ict(table)

    def _append(self, commits: list[tuple[int, FileInfo]]) -> None:
        """Add listed commits (ascending), each at least 1 ms after the previous one."""
        previous = self._file_times[-1] if self._file_times else None
        for version, info in commits:
            t = info.modification_time
            if previous is not None and t <= previous:
                t = previous + 1
            self._versions.append(version)
            self._file_times.append(t)
            self._keys.append(info.key)
            previous = t
        self._last_info = commits[-1][1]

    def _update_ict(self, table: TableLike) -> None:
        """Find where in-commit timestamps start. Writers put one in every commit while
        the feature is on, so a latest commit without one means it is off, and the
        latest snapshot (for the enablement version) is only needed when it is on.

        `_ict_floor + v` is the lowest timestamp version v >= enablement may have: one ms
        per version after the monotonised file time of the last commit before it."""
        version, key = self._versions[-1], self._keys[-1]
        if key.endswith(f"/{commit_name(version)}") and self._find_ict(version, key) is None:
            ict_from = None
        else:
            ict_from = ict_enablement_version(table.snapshot().metadata)
        if ict_from != self._ict_from:
            self._icts.clear()
        self._ict_from = ict_from
        self._ict_floor = None
        if ict_from is not None:
            i = bisect.bisect_left(self._versions, ict_from)
            if i > 0:
                self._ict_floor = self._file_times[i - 1] - self._versions[i - 1]

    # -- lookups ---------------------------------------------------------------------------

    @property
    def earliest(self) -> int:
        """The earliest version the table can be read at."""
        return self._earliest

    @property
    def latest(self) -> int:
        with self._lock:
            return self._versions[-1]

    def __len__(self) -> int:
        with self._lock:
            return len(self._versions)

    def version_at(self, index: int) -> int:
        with self._lock:
            return self._versions[index]

    def timestamp(self, version: int, in_commit_timestamp: int | None = None) -> int:
        """The commit timestamp of `version`; `in_commit_timestamp` (from a commit the
        caller already read) saves reading the commit when ICT applies."""
        with self._lock:
            i = self._index(version)
            file_time, key = self._file_times[i], self._keys[i]
            ict_from, floor = self._ict_from, self._ict_floor
        if ict_from is None or version < ict_from:
            return file_time
        ict = in_commit_timestamp if in_commit_timestamp is not None else self._icts.get(version)
        if ict is None:
            ict = self._read_ict(version, key)
        self._icts[version] = ict
        return ict if floor is None else max(ict, floor + version)

    def searchable(self, latest: int | None) -> tuple[int, int]:
        """Index bounds [lo, hi) of the versions from `earliest` to `latest`."""
        with self._lock:
            lo = bisect.bisect_left(self._versions, self._earliest)
            hi = len(self._versions)
            if latest is not None:
                hi = bisect.bisect_right(self._versions, latest)
            if hi <= lo:
                raise VersionNotFoundError(
                    f"no version at or before {latest} is available",
                    version=latest if latest is not None else self._versions[-1],
                    earliest=self._earliest,
                    latest=self._versions[-1],
                )
            return lo, hi

    def _index(self, version: int) -> int:
        i = bisect.bisect_left(self._versions, version)
        if i == len(self._versions) or self._versions[i] != version:
            raise VersionNotFoundError(
                f"version {version} does not exist; available versions are "
                f"{self._earliest} to {self._versions[-1]}",
                version=version,
                earliest=self._earliest,
                latest=self._versions[-1],
            )
        return i

    def _read_ict(self, version: int, key: str) -> int:
        ict = self._find_ict(version, key)
        if ict is None:
            raise CorruptLogError(
                f"{commit_name(version)}: in-commit timestamps are enabled but the commit has "
                "no commitInfo.inCommitTimestamp"
            )
        return ict

    def _find_ict(self, version: int, key: str) -> int | None:
        """The commit's in-commit timestamp, read from its first line (where the protocol
        puts commitInfo when ICT is on), or from the whole file if commitInfo is not first."""
        try:
            head = self._storage.read_range(key, 0, _FIRST_LINE_BYTES)
            if b"\n" not in head and len(head) == _FIRST_LINE_BYTES:
                head = self._storage.read(key)
            found, ict = _commit_info_ict(head.split(b"\n", 1)[:1])
            if not found:
                found, ict = _commit_info_ict(self._storage.read(key).splitlines())
        except FileNotFoundError as exc:
            raise VersionNotFoundError(
                f"commit {commit_name(version)} is no longer in the log",
                version=version,
                earliest=self._earliest,
                latest=None,
            ) from exc
        return ict


def _commit_info_ict(lines: list[bytes]) -> tuple[bool, int | None]:
    """(whether a commitInfo line is among `lines`, its inCommitTimestamp or None)."""
    for line in lines:
        if b'"commitInfo"' not in line:
            continue
        try:
            action: Any = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        info = action.get("commitInfo") if isinstance(action, dict) else None
        if not isinstance(info, dict):
            continue
        value = info.get("inCommitTimestamp")
        if isinstance(value, int) and not isinstance(value, bool):
            return True, value
        return True, None
    return False, None


class _TimesView(Sequence[int]):
    """The timeline's timestamps as a sequence for `bisect` (each read on demand)."""

    def __init__(self, timeline: CommitTimeline) -> None:
        self._timeline = timeline

    def __len__(self) -> int:
        return len(self._timeline)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...
    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._timeline.timestamp(self._timeline.version_at(index))


def timeline(table: TableLike, *, through: int | None = None) -> CommitTimeline:
    """The timeline of `table` (its own, kept with it).

    It is refreshed with the commits written since (one listing) unless it already
    reaches version `through`: a caller that knows the latest version it works with
    passes it and saves the listing. A log replaced in place (table deleted and created
    again at the same location) is noticed at the next refresh.
    """
    found = table.commit_timeline
    if through is None or not found.built or through > found.latest:
        found.refresh(table)
    return found


# --------------------------------------------------------------------------------------
# Public lookups


def commit_timestamp(table: TableLike, version: int) -> int:
    """The commit timestamp (ms) of `version`, as CDF and streaming responses report it."""
    return timeline(table, through=version).timestamp(version)


def commit_timestamps(table: TableLike, start: int, end: int) -> list[int]:
    """The commit timestamps (ms) of versions `start..end` inclusive, from one listing
    (plus one read of each commit's first line where in-commit timestamps apply)."""
    tl = timeline(table, through=end)
    return [tl.timestamp(v) for v in range(start, end + 1)]


def version_at_or_before(table: TableLike, ts_ms: int, *, latest: int | None = None) -> int:
    """The latest version whose commit timestamp is <= `ts_ms` (time travel by timestamp,
    and `endingTimestamp` of CDF). Before the first or after the last commit is a
    TimestampOutOfRangeError.

    `latest` is the newest version to consider (the caller's latest snapshot version);
    without it the log is listed for new commits first.
    """
    tl = timeline(table, through=latest)
    lo, hi = tl.searchable(latest)
    times = _TimesView(tl)
    _check_range(tl, times, lo, hi, ts_ms)
    return tl.version_at(bisect.bisect_right(times, ts_ms, lo, hi) - 1)


def version_at_or_after(
    table: TableLike,
    ts_ms: int,
    *,
    latest: int | None = None,
    before_first_is_error: bool = False,
) -> int:
    """The earliest version whose commit timestamp is >= `ts_ms` (`startingTimestamp`).

    Before the first commit gives the earliest version (GET /version), or an error when
    `before_first_is_error` (CDF's startingTimestamp); after the last commit is an error.
    An exact match gives that very version (the reference is off by one there).
    `latest` as for `version_at_or_before`.
    """
    tl = timeline(table, through=latest)
    lo, hi = tl.searchable(latest)
    times = _TimesView(tl)
    _check_range(tl, times, lo, hi, ts_ms, before_first=before_first_is_error)
    return tl.version_at(bisect.bisect_left(times, ts_ms, lo, hi))


def _check_range(
    tl: CommitTimeline,
    times: _TimesView,
    lo: int,
    hi: int,
    ts_ms: int,
    *,
    before_first: bool = True,
) -> None:
    first_version, last_version = tl.version_at(lo), tl.version_at(hi - 1)
    first, last = times[lo], times[hi - 1]
    if before_first and ts_ms < first:
        raise TimestampOutOfRangeError(
            f"The provided timestamp {ts_ms} ms ({format_instant(ts_ms)}) is before the "
            f"earliest available version {first_version}. Please use a timestamp greater "
            f"than or equal to {first} ms ({format_instant(first)}).",
            before_first=True,
        )
    if ts_ms > last:
        raise TimestampOutOfRangeError(
            f"The provided timestamp {ts_ms} ms ({format_instant(ts_ms)}) is after the "
            f"latest available version {last_version}. Please use a timestamp less than "
            f"or equal to {last} ms ({format_instant(last)}).",
            before_first=False,
        )
