"""Finding the files that make up a table version: a checkpoint plus the commits after it.

`_last_checkpoint` is only a hint: when it is missing, empty, corrupt, stale or points at
a checkpoint that is not there, the listing decides. The listing starts right before the
hinted checkpoint's version (`start_after`), so a table with 100k commits is not listed
from its first commit when the hint is good.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import orjson

from deltalog.commits import LOG_DIR
from deltalog.errors import (
    CorruptLogError,
    StorageError,
    TableNotFoundError,
    VersionNotFoundError,
)
from deltalog.storage.base import FileInfo, Storage

LAST_CHECKPOINT = "_last_checkpoint"

_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CLASSIC_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART_RE = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2_RE = re.compile(
    r"^(\d{20})\.checkpoint\.([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
    r"[0-9a-fA-F]{12})\.(json|parquet)$"
)

# When two complete checkpoints share a version, any of them gives the same state; prefer
# the one needing the fewest reads.
_KIND_PREFERENCE = {"classic": 0, "v2": 1, "multipart": 2}


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A complete checkpoint: its version, layout and files (multi-part: parts in order)."""

    version: int
    kind: str  # "classic" | "multipart" | "v2"
    files: tuple[FileInfo, ...]

    @property
    def format(self) -> str:
        """'json' for a V2 JSON manifest, else 'parquet'."""
        return "json" if self.files[0].key.endswith(".json") else "parquet"


@dataclass(frozen=True, slots=True)
class LastCheckpointHint:
    """The parts of `_last_checkpoint` the reader relies on."""

    version: int
    parts: int | None
    raw: dict[str, Any]


@dataclass(slots=True)
class LogListing:
    """What one listing of `_delta_log/` found (only files with a version > `after`)."""

    commits: dict[int, FileInfo]
    checkpoints: list[Checkpoint]  # complete only, ascending by version
    after: int | None  # listing started after this version (None: from the start)

    @property
    def latest_version(self) -> int | None:
        versions = list(self.commits)
        if self.checkpoints:
            versions.append(self.checkpoints[-1].version)
        return max(versions) if versions else None

    def earliest_version(self) -> int | None:
        """The earliest version this listing can reconstruct (meaningful for a full
        listing): 0 when commit 0 is there, else the oldest complete checkpoint."""
        if self.after is None and 0 in self.commits:
            return 0
        if self.checkpoints:
            return self.checkpoints[0].version
        return None


@dataclass(frozen=True, slots=True)
class LogSegment:
    """The files to replay for `version`: `checkpoint` (maybe None) then `commits`
    (contiguous, ascending, each `(version, FileInfo)`)."""

    table_root: str
    version: int
    checkpoint: Checkpoint | None
    commits: tuple[tuple[int, FileInfo], ...]
    latest_version: int  # the newest version the listing saw
    # The commit file of the checkpoint's own version, when it is still there (listing
    # information only: commit timestamps are deltalog.history's, see snapshot.py).
    checkpoint_commit: FileInfo | None = None


def log_dir_key(storage: Storage, table_root: str) -> str:
    return storage.join(table_root, LOG_DIR)


def _version_key(log_dir: str, version: int) -> str:
    """A listing cursor that sorts right before every file of `version`."""
    return f"{log_dir}/{version:020d}"


def read_last_checkpoint(storage: Storage, table_root: str) -> LastCheckpointHint | None:
    """The `_last_checkpoint` hint, or None when absent, empty or not valid."""
    key = storage.join(table_root, f"{LOG_DIR}/{LAST_CHECKPOINT}")
    try:
        data = storage.read(key)
    except FileNotFoundError:
        return None
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(raw, dict):
        return None
    version, parts = raw.get("version"), raw.get("parts")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        return None
    if parts is not None and (not isinstance(parts, int) or parts < 1):
        return None
    return LastCheckpointHint(version=version, parts=parts, raw=raw)


def list_log(storage: Storage, table_root: str, after: int | None = None) -> LogListing:
    """List `_delta_log/` for commits and complete checkpoints with version > `after`.

    Raises TableNotFoundError when `_delta_log` does not exist.
    """
    log_dir = log_dir_key(storage, table_root)
    if after is not None and after < 0:
        after = None
    start_after = _version_key(log_dir, after + 1) if after is not None else None
    commits: dict[int, FileInfo] = {}
    singles: list[Checkpoint] = []
    parts: dict[tuple[int, int], dict[int, FileInfo]] = defaultdict(dict)
    prefix = log_dir + "/"
    try:
        for info in storage.list_from(prefix, start_after=start_after):
            name = info.key[len(prefix) :]
            if "/" in name:
                continue  # _sidecars/, _commits/, _staged_commits/ ... on object stores
            if name[:1].isdigit():
                _classify(name, info, commits, singles, parts)
    except FileNotFoundError as exc:
        raise TableNotFoundError(f"no Delta table: {LOG_DIR} not found") from exc
    except OSError as exc:
        raise StorageError(f"cannot list {LOG_DIR}: {exc}") from exc
    checkpoints = singles + [
        Checkpoint(version, "multipart", tuple(found[i] for i in range(1, total + 1)))
        for (version, total), found in parts.items()
        if len(found) == total and all(i in found for i in range(1, total + 1))
    ]
    if after is not None:
        checkpoints = [c for c in checkpoints if c.version > after]
    checkpoints.sort(key=lambda c: (c.version, -_KIND_PREFERENCE[c.kind]))
    # Keep one checkpoint per version: the last after sorting is the preferred one.
    unique = {c.version: c for c in checkpoints}
    return LogListing(commits=commits, checkpoints=list(unique.values()), after=after)


def _classify(
    name: str,
    info: FileInfo,
    commits: dict[int, FileInfo],
    singles: list[Checkpoint],
    parts: dict[tuple[int, int], dict[int, FileInfo]],
) -> None:
    if m := _COMMIT_RE.match(name):
        commits[int(m.group(1))] = info
    elif (m := _CLASSIC_RE.match(name)) and info.size > 0:
        singles.append(Checkpoint(int(m.group(1)), "classic", (info,)))
    elif m := _MULTIPART_RE.match(name):
        part, total = int(m.group(2)), int(m.group(3))
        if 1 <= part <= total and info.size > 0:
            parts[(int(m.group(1)), total)][part] = info
    elif (m := _V2_RE.match(name)) and info.size > 0:
        singles.append(Checkpoint(int(m.group(1)), "v2", (info,)))
    # Everything else (.crc, compacted logs, temporary files) takes no part in replay.
    # Compacted logs are an optional optimisation; ignoring them cannot change a result.


def build_segment(
    storage: Storage,
    table_root: str,
    version: int | None = None,
    *,
    hint: LastCheckpointHint | bool | None = True,
) -> LogSegment:
    """The log segment for `version` (None: the latest).

    `hint=True` reads `_last_checkpoint`; pass False to ignore it, or an already-read hint.
    """
    if version is not None and version < 0:
        raise VersionNotFoundError(
            f"version {version} does not exist", version=version, earliest=None, latest=None
        )
    if hint is True:
        hint = read_last_checkpoint(storage, table_root)
    elif hint is False:
        hint = None
    if hint is not None and (version is None or hint.version <= version):
        listing = list_log(storage, table_root, after=hint.version - 1)
        usable = [c for c in listing.checkpoints if version is None or c.version <= version]
        if usable and (version is None or version <= (listing.latest_version or -1)):
            return _segment_from(listing, table_root, version, storage)
    listing = list_log(storage, table_root)
    return _segment_from(listing, table_root, version, storage)


def _segment_from(
    listing: LogListing, table_root: str, version: int | None, storage: Storage
) -> LogSegment:
    latest = listing.latest_version
    if latest is None:
        raise TableNotFoundError(f"no Delta table: {LOG_DIR} holds no commits or checkpoints")
    target = latest if version is None else version
    if target > latest:
        raise VersionNotFoundError(
            f"version {target} does not exist; the latest version is {latest}",
            version=target,
            earliest=_earliest(listing, storage, table_root),
            latest=latest,
        )
    checkpoint = None
    for c in reversed(listing.checkpoints):
        if c.version <= target:
            checkpoint = c
            break
    start = checkpoint.version + 1 if checkpoint is not None else 0
    if checkpoint is None and (listing.after is not None or 0 not in listing.commits):
        _raise_not_reconstructible(listing, storage, table_root, target, latest)
    if target not in listing.commits and (checkpoint is None or checkpoint.version != target):
        raise VersionNotFoundError(
            f"version {target} does not exist (no commit file for it)",
            version=target,
            earliest=_earliest(listing, storage, table_root),
            latest=latest,
        )
    commits = []
    for v in range(start, target + 1):
        info = listing.commits.get(v)
        if info is None:
            raise CorruptLogError(
                f"commit {v:020d}.json is missing: the log is not contiguous up to {target}"
            )
        commits.append((v, info))
    return LogSegment(
        table_root=table_root,
        version=target,
        checkpoint=checkpoint,
        commits=tuple(commits),
        latest_version=latest,
        checkpoint_commit=listing.commits.get(checkpoint.version) if checkpoint else None,
    )


def _earliest(listing: LogListing, storage: Storage, table_root: str) -> int | None:
    if listing.after is not None:
        listing = list_log(storage, table_root)
    return listing.earliest_version()


def _raise_not_reconstructible(
    listing: LogListing, storage: Storage, table_root: str, target: int, latest: int
) -> None:
    earliest = _earliest(listing, storage, table_root)
    raise VersionNotFoundError(
        f"version {target} cannot be reconstructed: its commits were cleaned up and no "
        f"checkpoint at or before it remains"
        + (f" (the earliest available version is {earliest})" if earliest is not None else ""),
        version=target,
        earliest=earliest,
        latest=latest,
    )


def earliest_version(storage: Storage, table_root: str) -> int:
    """The earliest version that can be reconstructed from the files in the log."""
    listing = list_log(storage, table_root)
    earliest = listing.earliest_version()
    if earliest is None:
        if listing.latest_version is None:
            raise TableNotFoundError(f"no Delta table: {LOG_DIR} holds no commits or checkpoints")
        raise CorruptLogError("no version of the table can be reconstructed")
    return earliest
