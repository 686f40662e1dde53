"""A table at one version: protocol, metadata, active files and tombstones.

A Snapshot is immutable. `with_commits` builds the next one by applying newer commits
on top of this one's reconciled state (see replay.py), sharing its Arrow buffers.

Its `timestamp` is not decided here: a commit's timestamp is defined once, by the
monotonised timeline of `deltalog.history`, which needs the whole log listed. The table
that builds a snapshot hands it a `CommitClock` onto that timeline, and the timestamp is
looked up on first use, so loading a snapshot never lists more than its log segment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import ADD_SCHEMA, REMOVE_SCHEMA, CommitActions, Metadata, Protocol
from deltalog.checkpoint import CheckpointPart, CheckpointReader, CheckpointState
from deltalog.commits import in_commit_timestamps_enabled, read_commit
from deltalog.errors import CorruptLogError
from deltalog.features import check_reader_protocol
from deltalog.file_chunks import ChunkSink, FileChunks, flat, split_batches
from deltalog.loading import SnapshotHead, SnapshotLoading, current_loading
from deltalog.log_segment import LogSegment
from deltalog.packed_stats import can_pack, pack_adds, packed_schema
from deltalog.replay import (
    CommitWinners,
    FileState,
    apply_commits,
    commit_winners,
    conform_adds,
    file_keys,
    files_schema,
)
from deltalog.storage.base import FileInfo, Storage

if TYPE_CHECKING:  # the store imports this module
    from deltalog.snapshot_store import StoredPaths

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
        "stored_paths",
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
        stored_paths: StoredPaths | None = None,
    ) -> None:
        protocol, metadata = require_readable(version, protocol, metadata)
        # The store file this snapshot (or the base it followed commits from) was mapped
        # from: columns derived from its paths are shared between processes through it.
        self.stored_paths = stored_paths
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
            stored_paths=self.stored_paths,
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
            stored_paths=self.stored_paths,
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
    from `clock`. Its files hold their statistics packed (deltalog.packed_stats).

    With a checkpoint, the commits are read first, then the checkpoint's rows, row group
    by row group, each filtered by the keys the commits touch (CheckpointRows): the
    rows come out in their final order, so a `SnapshotLoading` current in this context
    (deltalog.loading) is told the head and handed each batch as it is read."""
    packed = can_pack()
    if segment.checkpoint is None:
        commits = read_commits(storage, table_root, segment.commits, None)
        txns: dict[str, int] = {}
        domains: dict[str, dict[str, Any]] = {}
        protocol, metadata = fold_actions(commits, None, None, txns, domains)
        empty = FileState.empty(packed_schema(ADD_SCHEMA) if packed else ADD_SCHEMA)
        return Snapshot(
            storage=storage,
            table_root=table_root,
            version=commits[-1].version if commits else -1,
            clock=clock,
            protocol=protocol,
            metadata=metadata,
            state=apply_commits(empty, commits),
            txns=txns,
            domain_metadata=domains,
            in_commit_timestamp=commits[-1].in_commit_timestamp if commits else None,
        )
    reader = CheckpointReader(storage, table_root, segment.checkpoint)
    before = reader.metadata() if segment.commits else None
    commits = read_commits(storage, table_root, segment.commits, before)
    won = commit_winners(commits)
    publish = announce(reader, segment, commits, won, clock=clock)
    schema = files_schema(packed_schema(reader.adds_schema) if packed else reader.adds_schema)
    rows = CheckpointRows(reader, won, pack=packed, first_alone=publish is not None)
    batches: list[pa.RecordBatch] = []
    keys: list[pa.Array] = []

    def keep(batch: pa.RecordBatch, key: pa.Array) -> None:
        batches.append(batch)
        keys.append(key)

    sink = ChunkSink(keep)
    for batch, key in rows.adds():
        batch = batch if batch.schema.equals(schema) else batch.cast(schema)
        sink.push(batch, key)
        if publish is not None:
            publish.publish(batch)
    sink.finish()
    active = FileChunks.restore(schema, batches, keys)
    if won is not None and won.adds is not None:
        new_adds = conform_adds(won.adds, schema)
        active = active.appended(new_adds, file_keys)
        if publish is not None:
            for batch in new_adds.to_batches():
                publish.publish(batch)
    cp = rows.state()
    domains = {k: v for k, v in cp.domain_metadata.items() if not v.get("removed")}
    txns = dict(cp.txns)
    protocol, metadata = fold_actions(commits, cp.protocol, cp.metadata, txns, domains)
    snapshot = Snapshot(
        storage=storage,
        table_root=table_root,
        version=commits[-1].version if commits else cp.version,
        clock=clock,
        protocol=protocol,
        metadata=metadata,
        state=FileState(active, rows.tombstones()),
        txns=txns,
        domain_metadata=domains,
        checkpoint_version=cp.version,
        in_commit_timestamp=commits[-1].in_commit_timestamp if commits else None,
    )
    if publish is not None:
        publish.loaded(snapshot)
    return snapshot


def preview(
    storage: Storage,
    segment: LogSegment,
    *,
    clock: CommitClock,
    stored: Callable[[int], Snapshot | None] | None = None,
) -> None:
    """Hand the loading current in this context the head and first rows of `segment`'s
    snapshot, read as `load_snapshot` reads them, until it takes no more; nothing is
    kept (another process is building the snapshot: deltalog.snapshot_store). Should
    the load finish with a snapshot that does not continue these rows, the loading
    rebuilds the segment's: `stored(version)` first (the other process's file, mapped,
    when it has that version), else loaded from the log."""
    if segment.checkpoint is None:
        return
    reader = CheckpointReader(storage, segment.table_root, segment.checkpoint)
    before = reader.metadata() if segment.commits else None
    commits = read_commits(storage, segment.table_root, segment.commits, before)
    won = commit_winners(commits)
    publish = announce(reader, segment, commits, won, clock=clock, stored=stored)
    if publish is None:
        return
    for batch, _ in CheckpointRows(reader, won, pack=False, first_alone=True).adds():
        if not publish.takes_rows:
            return
        publish.publish(batch)
    if won is not None and won.adds is not None:
        for batch in conform_adds(won.adds, reader.adds_schema).to_batches():
            publish.publish(batch)


class CheckpointRows:
    """A checkpoint's rows as a snapshot keeps them after `won` (the winners of the
    commits that follow it): its adds batch by batch (`adds`, with their keys), minus
    the rows whose key a commit touches, in checkpoint order; its tombstones and other
    actions gathered on the side, for after the adds were read (`tombstones`, `state`).
    With `pack`, each row group's statistics are packed as soon as it is read, so the
    strings of the whole checkpoint never exist at once; with `first_alone`, the first
    row group is read before the others start (its rows are awaited: deltalog.loading)."""

    def __init__(
        self,
        reader: CheckpointReader,
        won: CommitWinners | None,
        *,
        pack: bool,
        first_alone: bool = False,
    ):
        self.reader = reader
        self.first_alone = first_alone
        self.won = won
        self.touched = won.touched if won is not None else pa.array([], pa.string())
        self.pack = pack
        self._non_file: list[CheckpointPart] = []
        self._removes: list[pa.Table] = []

    def adds(self) -> Iterator[tuple[pa.RecordBatch, pa.Array]]:
        touched = self.touched
        for part in self.reader.parts(first_alone=self.first_alone):
            self._non_file.append(CheckpointPart(non_file=part.non_file))
            self._removes += part.removes
            for adds in part.adds:
                if self.pack:
                    adds = pack_adds(adds)
                for batch in split_batches(adds.to_batches()):
                    keys = flat(file_keys(batch))
                    if len(touched):
                        hit = pc.is_in(keys, value_set=touched)
                        if hit.true_count:
                            kept = pc.invert(hit)
                            batch, keys = batch.filter(kept), keys.filter(kept)
                    if batch.num_rows:
                        yield batch, keys

    def tombstones(self) -> FileChunks:
        """The tombstones after the commits (once `adds` went through every row group)."""
        removes = pa.concat_tables(self._removes) if self._removes else None
        table = removes.cast(REMOVE_SCHEMA) if removes is not None else REMOVE_SCHEMA.empty_table()
        chunks = FileChunks.build(table, file_keys).without(self.touched)
        if self.won is not None and self.won.removes is not None:
            chunks = chunks.appended(self.won.removes, file_keys)
        return chunks

    def state(self) -> CheckpointState:
        """The checkpoint's protocol, metadata, transactions and domain metadata (its
        file actions left out: they went through `adds`)."""
        return self.reader.combine(self._non_file)


def announce(
    reader: CheckpointReader,
    segment: LogSegment,
    commits: Sequence[CommitActions],
    won: CommitWinners | None,
    *,
    clock: CommitClock,
    stored: Callable[[int], Snapshot | None] | None = None,
) -> SnapshotLoading | None:
    """Tell the `SnapshotLoading` current in this context (if any) the head of the
    snapshot being loaded; returns it when it takes this load's rows. The protocol and
    metadata are the last commit's that has them, else the checkpoint's (read ahead);
    the figures come from the checkpoint's path, size and deletion vector columns. The
    loading is also told how to rebuild this segment's snapshot (`stored(version)`, a
    store's file of the version, first), for when its load finishes with another."""
    loading = current_loading()
    if loading is None:
        return None
    protocol = next((c.protocol for c in reversed(commits) if c.protocol), None)
    metadata = next((c.metadata for c in reversed(commits) if c.metadata), None)
    protocol, metadata = require_readable(
        segment.version, protocol or reader.protocol(), metadata or reader.metadata()
    )
    touched = won.touched if won is not None else pa.array([], pa.string())
    figures = reader.add_figures(touched)
    if won is not None and won.adds is not None:
        figures.add(won.adds.select(["path", "size", "deletionVector"]), pa.array([], pa.string()))
    head = SnapshotHead(
        storage=reader.storage,
        table_root=segment.table_root,
        version=segment.version,
        protocol=protocol,
        metadata=metadata,
        num_files=figures.files,
        size_in_bytes=figures.size,
        deletion_vectors=figures.deletion_vectors,
    )
    storage, table_root = reader.storage, segment.table_root

    def rebuild() -> Iterator[Snapshot]:
        if stored is not None:
            mapped = stored(segment.version)
            if mapped is not None:
                yield mapped
        yield load_snapshot(storage, table_root, segment, clock=clock)

    return loading if loading.begin(head, rebuild) else None
