"""A table at one version: protocol, metadata, active files and tombstones.

A Snapshot is immutable. `with_commits` builds the next one by applying newer commits
on top of this one's reconciled state (see replay.py), sharing its Arrow buffers.

Its `timestamp` is not decided here: a commit's timestamp is defined once, by the
monotonised timeline of `deltalog.history`, which needs the whole log listed. The table
that builds a snapshot hands it a `CommitClock` onto that timeline, and the timestamp is
looked up on first use, so loading a snapshot never lists more than its log segment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import ADD_SCHEMA, CommitActions, Metadata, Protocol
from deltalog.checkpoint import CheckpointPart, CheckpointReader, CheckpointState
from deltalog.commits import in_commit_timestamps_enabled, read_commit
from deltalog.errors import CorruptLogError
from deltalog.features import check_reader_protocol
from deltalog.file_chunks import FileChunks
from deltalog.log_segment import LogSegment
from deltalog.packed_stats import can_pack, pack_adds, packed_schema
from deltalog.replay import FileState, apply_commits
from deltalog.storage.base import FileInfo, Storage

CommitClock = Callable[[int, int | None], int]
"""clock(version, in-commit timestamp already read from that commit or None) -> the
version's commit timestamp in ms (deltalog.history's definition)."""


class Snapshot:
    """The reconciled state of a table at `version`. Construction checks the reader
    protocol, so an unsupported table fails with UnsupportedFeatureError."""

    __slots__ = (
        "_clock",
        "_in_commit_timestamp",
        "_state",
        "_timestamp",
        "checkpoint_version",
        "domain_metadata",
        "metadata",
        "protocol",
        "storage",
        "table_root",
        "txns",
        "version",
    )

    def __init__(
        self,
        *,
        storage: Storage,
        table_root: str,
        version: int,
        clock: CommitClock,
        protocol: Protocol | None,
        metadata: Metadata | None,
        state: FileState,
        txns: dict[str, int],
        domain_metadata: dict[str, dict[str, Any]],
        checkpoint_version: int | None = None,
        in_commit_timestamp: int | None = None,
    ) -> None:
        protocol, metadata = require_readable(version, protocol, metadata)
        self.storage = storage
        self.table_root = table_root
        self.version = version
        self._clock = clock
        self._in_commit_timestamp = in_commit_timestamp
        self._timestamp: int | None = None
        self.protocol = protocol
        self.metadata = metadata
        self._state = state
        self.txns = txns
        self.domain_metadata = domain_metadata
        self.checkpoint_version = checkpoint_version

    @property
    def timestamp(self) -> int:
        """The commit timestamp (ms) of this version, the same value timestamp lookups,
        time-travel responses and change feeds use (monotonised, or in-commit)."""
        if self._timestamp is None:
            # Benign race: concurrent first readers compute the same value.
            self._timestamp = self._clock(self.version, self._in_commit_timestamp)
        return self._timestamp

    @property
    def file_state(self) -> FileState:
        """The files and tombstones in their chunks, with their keys (deltalog.replay)."""
        return self._state

    @property
    def in_commit_timestamp(self) -> int | None:
        """The in-commit timestamp the last commit of this version carried, if any."""
        return self._in_commit_timestamp

    @property
    def files(self) -> pa.Table:
        """Active files (ADD_SCHEMA, plus the typed `stats_parsed` column when the
        checkpoint the snapshot was loaded from had one; see deltalog.actions)."""
        return self._state.files

    @property
    def tombstones(self) -> pa.Table:
        """Removes not superseded by a later add (REMOVE_SCHEMA)."""
        return self._state.tombstones

    @property
    def num_files(self) -> int:
        return int(self._state.files.num_rows)

    @property
    def size_in_bytes(self) -> int:
        total = pc.sum(self._state.files.column("size")).as_py()
        return int(total or 0)

    @property
    def in_commit_timestamps_enabled(self) -> bool:
        return in_commit_timestamps_enabled(self.metadata)

    def with_commits(self, commits: Sequence[CommitActions]) -> Snapshot:
        """The snapshot after `commits`, which must continue this version contiguously."""
        if not commits:
            return self
        expected = self.version + 1
        for c in commits:
            if c.version != expected:
                raise CorruptLogError(
                    f"commit {c.version} does not follow version {expected - 1} contiguously"
                )
            expected += 1
        txns = dict(self.txns)
        domains = dict(self.domain_metadata)
        protocol, metadata = fold_actions(commits, self.protocol, self.metadata, txns, domains)
        return Snapshot(
            storage=self.storage,
            table_root=self.table_root,
            version=commits[-1].version,
            clock=self._clock,
            protocol=protocol,
            metadata=metadata,
            state=apply_commits(self._state, commits),
            txns=txns,
            domain_metadata=domains,
            checkpoint_version=self.checkpoint_version,
            in_commit_timestamp=commits[-1].in_commit_timestamp,
        )

    def with_files(self, active: FileChunks) -> Snapshot:
        """The same version with `active` as its files (the same rows with more columns,
        e.g. typed statistics added; deltalog.json_stats)."""
        return Snapshot(
            storage=self.storage,
            table_root=self.table_root,
            version=self.version,
            clock=self._clock,
            protocol=self.protocol,
            metadata=self.metadata,
            state=FileState(active, self._state.removed),
            txns=dict(self.txns),
            domain_metadata=dict(self.domain_metadata),
            checkpoint_version=self.checkpoint_version,
            in_commit_timestamp=self._in_commit_timestamp,
        )

    def __repr__(self) -> str:
        return (
            f"Snapshot(table_root={self.table_root!r}, version={self.version}, "
            f"files={self.num_files})"
        )


def require_readable(
    version: int, protocol: Protocol | None, metadata: Metadata | None
) -> tuple[Protocol, Metadata]:
    """The protocol and metadata of a version, when there are both and this reader
    supports the protocol (else CorruptLogError / UnsupportedFeatureError)."""
    if protocol is None:
        raise CorruptLogError(f"no protocol action found in the log up to version {version}")
    if metadata is None:
        raise CorruptLogError(f"no metaData action found in the log up to version {version}")
    check_reader_protocol(protocol)
    return protocol, metadata


def fold_actions(
    commits: Sequence[CommitActions],
    protocol: Protocol | None,
    metadata: Metadata | None,
    txns: dict[str, int],
    domains: dict[str, dict[str, Any]],
) -> tuple[Protocol | None, Metadata | None]:
    """The protocol and metadata in effect after `commits`; `txns` and `domains` are
    updated in place."""
    for c in commits:
        protocol = c.protocol or protocol
        metadata = c.metadata or metadata
        txns.update(c.txns)
        for name, action in c.domain_metadata.items():
            if action.get("removed"):
                domains.pop(name, None)
            else:
                domains[name] = action
    return protocol, metadata


def read_commits(
    storage: Storage,
    table_root: str,
    listed: Iterable[tuple[int, FileInfo]],
    metadata: Metadata | None,
) -> list[CommitActions]:
    """The listed commits (version, file info), in order, with timestamps following the
    in-commit-timestamp setting in effect at each of them (starting from `metadata`, the
    one in effect before the first)."""
    commits = []
    for version, info in listed:
        enabled = in_commit_timestamps_enabled(metadata)
        commit = read_commit(storage, table_root, version, info, ict_enabled=enabled)
        metadata = commit.metadata or metadata
        commits.append(commit)
    return commits


def load_snapshot(
    storage: Storage, table_root: str, segment: LogSegment, *, clock: CommitClock
) -> Snapshot:
    """Replay `segment` (checkpoint, then commits) into a Snapshot whose timestamp comes
    from `clock`. Its files hold their statistics packed (deltalog.packed_stats)."""
    packed = can_pack()
    if segment.checkpoint is not None:
        cp = _read_checkpoint(storage, table_root, segment, packed=packed)
        domains = {k: v for k, v in cp.domain_metadata.items() if not v.get("removed")}
        protocol, metadata = cp.protocol, cp.metadata
        state = FileState.from_base(pack_adds(cp.adds) if packed else cp.adds, cp.removes)
        txns, version = dict(cp.txns), cp.version
        checkpoint_version: int | None = cp.version
    else:
        protocol = metadata = None
        state = FileState.empty(packed_schema(ADD_SCHEMA) if packed else ADD_SCHEMA)
        txns, domains, version = {}, {}, -1
        checkpoint_version = None
    commits = read_commits(storage, table_root, segment.commits, metadata)
    protocol, metadata = fold_actions(commits, protocol, metadata, txns, domains)
    in_commit_timestamp = None
    if commits:
        version, in_commit_timestamp = commits[-1].version, commits[-1].in_commit_timestamp
    return Snapshot(
        storage=storage,
        table_root=table_root,
        version=version,
        clock=clock,
        protocol=protocol,
        metadata=metadata,
        state=apply_commits(state, commits),
        txns=txns,
        domain_metadata=domains,
        checkpoint_version=checkpoint_version,
        in_commit_timestamp=in_commit_timestamp,
    )


def _read_checkpoint(
    storage: Storage, table_root: str, segment: LogSegment, *, packed: bool
) -> CheckpointState:
    """The segment's checkpoint, each row group's statistics packed as soon as it is read,
    so the strings of the whole checkpoint never exist at once."""
    assert segment.checkpoint is not None
    reader = CheckpointReader(storage, table_root, segment.checkpoint)

    def part_packed(part: CheckpointPart) -> CheckpointPart:
        part.adds = [pack_adds(t) for t in part.adds]
        return part

    return reader.combine([part_packed(p) if packed else p for p in reader.parts()])
