"""A table at one version: protocol, metadata, active files and tombstones.

A Snapshot is immutable. `with_commits` builds the next one by applying newer commits
on top of this one's reconciled state (see replay.py), sharing its Arrow buffers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import CommitActions, Metadata, Protocol
from deltalog.checkpoint import read_checkpoint
from deltalog.commits import in_commit_timestamps_enabled, read_commit
from deltalog.errors import CorruptLogError
from deltalog.features import check_reader_protocol
from deltalog.log_segment import LogSegment
from deltalog.replay import FileState, apply_commits
from deltalog.storage.base import Storage


class Snapshot:
    """The reconciled state of a table at `version`. Construction checks the reader
    protocol, so an unsupported table fails with UnsupportedFeatureError."""

    __slots__ = (
        "_state",
        "checkpoint_version",
        "domain_metadata",
        "metadata",
        "protocol",
        "storage",
        "table_root",
        "timestamp",
        "txns",
        "version",
    )

    def __init__(
        self,
        *,
        storage: Storage,
        table_root: str,
        version: int,
        timestamp: int,
        protocol: Protocol | None,
        metadata: Metadata | None,
        state: FileState,
        txns: dict[str, int],
        domain_metadata: dict[str, dict[str, Any]],
        checkpoint_version: int | None = None,
    ) -> None:
        if protocol is None:
            raise CorruptLogError(f"no protocol action found in the log up to version {version}")
        if metadata is None:
            raise CorruptLogError(f"no metaData action found in the log up to version {version}")
        check_reader_protocol(protocol)
        self.storage = storage
        self.table_root = table_root
        self.version = version
        self.timestamp = timestamp
        self.protocol = protocol
        self.metadata = metadata
        self._state = state
        self.txns = txns
        self.domain_metadata = domain_metadata
        self.checkpoint_version = checkpoint_version

    @property
    def files(self) -> pa.Table:
        """Active files (ADD_SCHEMA)."""
        return self._state.files

    @property
    def tombstones(self) -> pa.Table:
        """Removes not superseded by a later add (REMOVE_SCHEMA)."""
        return self._state.tombstones

    @property
    def file_state(self) -> FileState:
        return self._state

    @property
    def num_files(self) -> int:
        return self._state.files.num_rows

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
        protocol, metadata = self.protocol, self.metadata
        txns = dict(self.txns)
        domains = dict(self.domain_metadata)
        for c in commits:
            protocol = c.protocol or protocol
            metadata = c.metadata or metadata
            txns.update(c.txns)
            _apply_domains(domains, c.domain_metadata)
        return Snapshot(
            storage=self.storage,
            table_root=self.table_root,
            version=commits[-1].version,
            timestamp=commits[-1].timestamp,
            protocol=protocol,
            metadata=metadata,
            state=apply_commits(self._state, commits),
            txns=txns,
            domain_metadata=domains,
            checkpoint_version=self.checkpoint_version,
        )

    def __repr__(self) -> str:
        return (
            f"Snapshot(table_root={self.table_root!r}, version={self.version}, "
            f"files={self.num_files})"
        )


def _apply_domains(domains: dict[str, dict[str, Any]], updates: dict[str, dict[str, Any]]) -> None:
    for name, action in updates.items():
        if action.get("removed"):
            domains.pop(name, None)
        else:
            domains[name] = action


def read_segment_commits(
    storage: Storage, table_root: str, segment: LogSegment, metadata: Metadata | None
) -> list[CommitActions]:
    """The commits of `segment`, with timestamps following the in-commit-timestamp
    setting in effect at each of them (starting from `metadata`, the checkpoint's)."""
    commits = []
    for version, info in segment.commits:
        enabled = in_commit_timestamps_enabled(metadata)
        commit = read_commit(storage, table_root, version, info, ict_enabled=enabled)
        metadata = commit.metadata or metadata
        commits.append(commit)
    return commits


def load_snapshot(storage: Storage, table_root: str, segment: LogSegment) -> Snapshot:
    """Replay `segment` (checkpoint, then commits) into a Snapshot."""
    if segment.checkpoint is not None:
        cp = read_checkpoint(storage, table_root, segment.checkpoint)
        domains = {k: v for k, v in cp.domain_metadata.items() if not v.get("removed")}
        protocol, metadata = cp.protocol, cp.metadata
        state = FileState.from_base(cp.adds, cp.removes)
        txns, version = dict(cp.txns), cp.version
        timestamp = segment.checkpoint.files[0].modification_time
        checkpoint_version: int | None = cp.version
    else:
        protocol = metadata = None
        state = FileState.empty()
        txns, domains, version, timestamp = {}, {}, -1, 0
        checkpoint_version = None
    commits = read_segment_commits(storage, table_root, segment, metadata)
    for c in commits:
        protocol = c.protocol or protocol
        metadata = c.metadata or metadata
        txns.update(c.txns)
        _apply_domains(domains, c.domain_metadata)
    if commits:
        version, timestamp = commits[-1].version, commits[-1].timestamp
    elif segment.checkpoint_commit is not None:
        timestamp = segment.checkpoint_commit.modification_time
        if in_commit_timestamps_enabled(metadata):
            info = segment.checkpoint_commit
            timestamp = read_commit(storage, table_root, version, info, ict_enabled=True).timestamp
    return Snapshot(
        storage=storage,
        table_root=table_root,
        version=version,
        timestamp=timestamp,
        protocol=protocol,
        metadata=metadata,
        state=apply_commits(state, commits),
        txns=txns,
        domain_metadata=domains,
        checkpoint_version=checkpoint_version,
    )
