"""A persistent, shared store of snapshots: Arrow IPC files mapped into memory.

Loading a million-file snapshot means reading a checkpoint of hundreds of MB and holding
its Arrow form in memory, once per process. With a store, a snapshot is written once, as
a file keyed by the table's identity and version, and every process that opens the same
table version maps that file instead: the pages are the operating system's page cache,
shared by all processes (N workers do not hold N copies), and a restarted process finds
an unchanged table ready after one listing of `_delta_log` (to learn that nothing
changed) and one mapping, without replaying the log. Newer commits are replayed on top of
the mapped snapshot as on any other (deltalog.replay): the mapped chunks are never
copied, only the few rows the commits touch are.

The first process to need a table builds its file by streaming the checkpoint into it
row group by row group (the commits after it are read first, to know which files they
touch), so not even that process holds the whole snapshot in memory. A snapshot followed
by incremental refreshes is written again, in the background, once it is `rewrite_after`
commits ahead of the stored version.

One file per (table, version) under `<directory>/<table digest>/`, written under a
temporary name and renamed into place, so a reader sees a whole file or none. Layout:

    [files: Arrow IPC file][pad][tombstones: Arrow IPC file][pad]
    [header: JSON][header offset: u64][header length: u64][header crc32: u32][MAGIC]

The header holds the table identity and version, the commit (or checkpoint) file the
snapshot was built from as the listing showed it (size and modification time: a table
deleted and recreated at the same location no longer matches), protocol, metadata,
transactions and domain metadata, where each section lies, and a checksum of the
sections (the sum of their 64-bit words, checked when a file is mapped unless `verify`
is off). All-null columns are not written (see deltalog.null_columns). A file that is
truncated, fails its checksum or structural validation, or names another table, version
or commit file is never served: it is deleted and the snapshot rebuilt from the log.

Processes building the same table take a lock file in turn, so a second process waits
for the first one's file and maps it rather than replaying the log as well.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import logging
import mmap
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from deltalog.actions import REMOVE_SCHEMA, STATS_PARSED, Metadata, Protocol
from deltalog.checkpoint import CheckpointReader
from deltalog.commits import metadata_from_action
from deltalog.errors import DeltaError
from deltalog.file_chunks import CHUNK_ROWS, ChunkSink, FileChunks, flat, split_batches
from deltalog.json_stats import stats_type, typed_stats, with_typed_stats
from deltalog.loading import SnapshotLoading, current_loading
from deltalog.log_segment import LogListing, LogSegment, build_segment, list_log
from deltalog.null_columns import null_array
from deltalog.packed_stats import text_batch, text_schema
from deltalog.replay import FileState, commit_winners, conform_adds, file_keys, files_schema
from deltalog.snapshot import (
    CheckpointRows,
    CommitClock,
    Snapshot,
    announce,
    fold_actions,
    load_snapshot,
    preview,
    read_commits,
    require_readable,
)
from deltalog.storage.base import FileInfo, Storage

try:  # POSIX advisory locks; elsewhere builders simply do not wait for each other
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

MAGIC = b"LKSNAP01"
# The layout and contents of a file; files of another format are rebuilt, never served.
# 2: typed statistics include dates, timestamps and decimals (deltalog.json_stats).
FORMAT = 2
SUFFIX = ".snapshot"
_TRAILER = struct.Struct("<QQI8s")
_ALIGN = 64
_KEY_COLUMN = "__lakeshare_key"
_STALE_TMP_SECONDS = 3600


def table_identity(storage: Storage, table_root: str) -> str:
    """What names a table across processes: the kind of storage, its own `identity` when
    it offers one (e.g. an endpoint), and the root key. Two stores reachable under one
    name (the same bucket path behind two endpoints) are still told apart by the anchor:
    their commit files differ."""
    extra = getattr(storage, "identity", None)
    return f"{storage.kind.value}|{extra if isinstance(extra, str) else ''}|{table_root}"


@dataclass(frozen=True)
class Anchor:
    """The log file a stored snapshot was built from, as a listing shows it: the commit
    file of its version, or (when that commit was cleaned up) its checkpoint files."""

    commit: FileInfo | None
    checkpoint: tuple[FileInfo, ...] = ()

    def to_json(self) -> dict[str, Any]:
        def info(i: FileInfo) -> list[Any]:
            return [i.key.rsplit("/", 1)[-1], i.size, i.modification_time]

        return {
            "commit": info(self.commit) if self.commit is not None else None,
            "checkpoint": [info(i) for i in self.checkpoint],
        }

    @staticmethod
    def matches(stored: dict[str, Any], listing: LogListing, version: int) -> bool:
        """Does the listing show the same file(s) the snapshot was built from?"""

        def same(info: FileInfo, recorded: list[Any]) -> bool:
            name = info.key.rsplit("/", 1)[-1]
            return [name, info.size, info.modification_time] == recorded

        commit = listing.commits.get(version)
        if stored.get("commit") is not None and commit is not None:
            return same(commit, stored["commit"])
        recorded = stored.get("checkpoint") or []
        for cp in listing.checkpoints:
            if cp.version == version and len(cp.files) == len(recorded) and recorded:
                return all(same(i, r) for i, r in zip(cp.files, recorded, strict=True))
        return False


class StoreCorrupt(Exception):
    """A stored snapshot that must not be served (the message says why)."""


class SnapshotStore:
    """Snapshots as memory-mapped Arrow IPC files in `directory` (local disk, or
    `/dev/shm` for memory shared by the processes of one host).

    `verify` checks every file's checksum when it is mapped (a pass over its pages);
    `rewrite_after` is how many commits a followed snapshot may get ahead of its stored
    version before it is written again (in the background); `keep` is how many versions
    of a table stay in the store. With `typed_stats`, files whose statistics are JSON
    only are written with typed ones too (a `stats_parsed` column built in bulk, see
    deltalog.json_stats), so data skipping in every process that maps the file reads
    typed values instead of parsing JSON.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        verify: bool = True,
        rewrite_after: int = 32,
        keep: int = 2,
        typed_stats: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.typed_stats = typed_stats
        self.verify = verify
        self.rewrite_after = max(1, rewrite_after)
        self.keep = max(1, keep)
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SnapshotStore({str(self.directory)!r})"

    # -- names ----------------------------------------------------------------------

    def table_dir(self, identity: str) -> Path:
        digest = hashlib.sha256(identity.encode()).hexdigest()[:32]
        return self.directory / digest

    def path(self, identity: str, version: int) -> Path:
        return self.table_dir(identity) / f"{version:020d}{SUFFIX}"

    def versions(self, identity: str) -> list[int]:
        """Stored versions of a table, newest first."""
        try:
            names = os.listdir(self.table_dir(identity))
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = [
            int(n[: -len(SUFFIX)])
            for n in names
            if n.endswith(SUFFIX) and n[: -len(SUFFIX)].isdigit()
        ]
        return sorted(found, reverse=True)

    @contextlib.contextmanager
    def building(
        self, identity: str, *, while_busy: Callable[[], None] | None = None
    ) -> Iterator[None]:
        """Held while a process builds a table's snapshot from the log: others wait,
        then find the file written. `while_busy` is run first when another holds it."""
        folder = self.table_dir(identity)
        folder.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            yield
            return
        with open(folder / "lock", "a+b") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if while_busy is not None:
                    while_busy()
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    # -- writing --------------------------------------------------------------------

    def save(self, identity: str, snapshot: Snapshot, anchor: Anchor) -> Path:
        """Write `snapshot` (atomically: a temporary file renamed into place)."""
        if self.typed_stats:
            typed = with_typed_stats(snapshot.file_state.active, snapshot.metadata)
            if typed is not None:
                snapshot = snapshot.with_files(typed)
        return self._written(
            identity, snapshot.version, lambda tmp: _write(tmp, identity, snapshot, anchor)
        )

    def _written(self, identity: str, version: int, write: Callable[[Path], None]) -> Path:
        """Run `write` on a temporary file, then rename it into place."""
        target = self.path(identity, version)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            write(tmp)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        self._prune(identity, version)
        return target

    def save_later(self, identity: str, snapshot: Snapshot, anchor: Anchor) -> Future[None]:
        """`save` on the store's background thread; failures are logged."""

        def run() -> None:
            try:
                self.save(identity, snapshot, anchor)
            except Exception:  # a failed write only means the next start replays more
                log.exception("snapshot store: cannot write version %d", snapshot.version)

        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="snapshot-store")
            future = self._executor.submit(run)
            self._pending = [f for f in self._pending if not f.done()] + [future]
        return future

    def flush(self) -> None:
        """Wait for background writes."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.result()

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def _prune(self, identity: str, newest: int) -> None:
        """Keep the newest `keep` versions; remove leftovers of crashed writers."""
        folder = self.table_dir(identity)
        for version in self.versions(identity)[self.keep :]:
            if version < newest:
                _remove_with_sidecars(self.path(identity, version))
        now = time.time()
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(folder):
                if entry.name.endswith(".tmp") and now - entry.stat().st_mtime > _STALE_TMP_SECONDS:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)

    # -- reading --------------------------------------------------------------------

    def open(
        self,
        identity: str,
        version: int,
        listing: LogListing,
        *,
        storage: Storage,
        table_root: str,
        clock: CommitClock,
        verify: bool | None = None,
    ) -> Snapshot | None:
        """The stored snapshot of `version`, mapped, when its file is whole and was built
        from the log files `listing` shows; otherwise the file is deleted and None.
        `verify` overrides the store's setting (a process mapping the file it has just
        written and checksummed need not read it all again)."""
        path = self.path(identity, version)
        check = self.verify if verify is None else verify
        try:
            return _read(path, identity, version, listing, check, storage, table_root, clock)
        except FileNotFoundError:
            return None
        except (StoreCorrupt, DeltaError, pa.ArrowException, OSError, ValueError) as exc:
            log.warning("snapshot store: %s is not usable (%s); rebuilding it", path.name, exc)
            _remove_with_sidecars(path)
            return None


class StoredTable:
    """One DeltaTable's use of a SnapshotStore: where its latest snapshot comes from and
    when it is written again."""

    def __init__(self, store: SnapshotStore, storage: Storage, table_root: str) -> None:
        self.store = store
        self.storage = storage
        self.table_root = table_root
        self.identity = table_identity(storage, table_root)
        self.stored_version: int | None = None  # the version the store holds for us

    def load_latest(self, clock: CommitClock, max_commits: int) -> Snapshot:
        """The latest snapshot: the newest stored one (plus up to `max_commits` newer
        commits), else built from the log, written, and mapped. A store that cannot be
        used (not writable, not a directory) only costs the sharing: the snapshot is
        loaded from the log as without a store."""
        try:
            return self._load_latest(clock, max_commits)
        except OSError as exc:
            log.warning("snapshot store %s not usable (%s)", self.store.directory, exc)
        segment = build_segment(self.storage, self.table_root)
        return load_snapshot(self.storage, self.table_root, segment, clock=clock)

    def _load_latest(self, clock: CommitClock, max_commits: int) -> Snapshot:
        snapshot = self._from_store(clock, max_commits)
        if snapshot is not None:
            return snapshot
        busy = functools.partial(self._preview, clock) if current_loading() is not None else None
        with self.store.building(self.identity, while_busy=busy):
            snapshot = self._from_store(clock, max_commits)  # written while we waited?
            if snapshot is not None:
                return snapshot
            segment = build_segment(self.storage, self.table_root)
            version, announced = self._build(segment, clock)
            # The build's row groups are freed: hand their pages back to the system (the
            # allocator keeps them otherwise; tens of MB per million files in the process
            # that built, while every process serves from the mapped file).
            pa.default_memory_pool().release_unused()
            self.stored_version = version
            # Served from the file, like in every other process: the rows were streamed
            # into it, never all held in this process's memory.
            listing = list_log(self.storage, self.table_root, after=version - 1)
            mapped = self.store.open(
                self.identity,
                version,
                listing,
                storage=self.storage,
                table_root=self.table_root,
                clock=clock,
                verify=False,
            )
            if mapped is not None:
                if announced is not None:
                    announced.loaded(mapped)
                return mapped
            return load_snapshot(self.storage, self.table_root, segment, clock=clock)

    def _preview(self, clock: CommitClock) -> None:
        """Another process is building the snapshot: while this one waits for its file,
        the loading current here (deltalog.loading) is handed the first rows from this
        process's own read of the log, as far as it takes them (deltalog.snapshot
        .preview). Should the file (or the commits replayed on it) not continue those
        rows, the loading maps the stored file of the previewed version, if any, else
        loads it from the log. A failure only means the reader waits for the file."""
        try:
            preview(
                self.storage,
                build_segment(self.storage, self.table_root),
                clock=clock,
                stored=lambda version: self._stored_at(version, clock),
            )
        except DeltaError as exc:
            log.info("snapshot store: no rows ahead of the file (%s)", exc)

    def _stored_at(self, version: int, clock: CommitClock) -> Snapshot | None:
        """The stored snapshot of exactly `version`, mapped, if the store holds it."""
        listing = list_log(self.storage, self.table_root, after=version - 1)
        return self.store.open(
            self.identity,
            version,
            listing,
            storage=self.storage,
            table_root=self.table_root,
            clock=clock,
        )

    def _build(self, segment: LogSegment, clock: CommitClock) -> tuple[int, SnapshotLoading | None]:
        """Write the snapshot of `segment` to the store; returns its version and the
        loading it announced its head to (deltalog.loading), if any. A checkpoint is
        streamed into the file row group by row group; a log without one (or whose keys
        are not its paths: `file:` URIs) is loaded in memory and saved."""
        version = segment.version
        if segment.commits and segment.commits[-1][0] == version:
            commit: FileInfo | None = segment.commits[-1][1]
        else:
            commit = segment.checkpoint_commit
        checkpoint = segment.checkpoint
        files = checkpoint.files if checkpoint and checkpoint.version == version else ()
        anchor = Anchor(commit, files)
        if checkpoint is not None:
            announced: list[SnapshotLoading | None] = [None]

            def write(tmp: Path) -> None:
                announced[0] = _stream(
                    tmp,
                    self.identity,
                    self.storage,
                    segment,
                    anchor,
                    clock=clock,
                    typed_stats=self.store.typed_stats,
                )

            try:
                self.store._written(self.identity, version, write)
                return version, announced[0]
            except _KeysNeeded:
                pass
        # load_snapshot tells a loading it announced to its snapshot itself.
        built = load_snapshot(self.storage, self.table_root, segment, clock=clock)
        self.store.save(self.identity, built, anchor)
        return version, None

    def _from_store(self, clock: CommitClock, max_commits: int) -> Snapshot | None:
        versions = self.store.versions(self.identity)
        if not versions:
            return None
        version = versions[0]  # older ones are older versions of the same table
        listing = list_log(self.storage, self.table_root, after=version - 1)
        base = self.store.open(
            self.identity,
            version,
            listing,
            storage=self.storage,
            table_root=self.table_root,
            clock=clock,
        )
        if base is None:
            return None
        self.stored_version = version
        newest = listing.latest_version
        if newest is None or newest == version:
            return base
        wanted = range(version + 1, newest + 1)
        if len(wanted) > max_commits or any(v not in listing.commits for v in wanted):
            return None  # far behind: loading from the newest checkpoint is cheaper
        listed = ((v, listing.commits[v]) for v in wanted)
        snapshot = base.with_commits(
            read_commits(self.storage, self.table_root, listed, base.metadata)
        )
        self.followed(snapshot, listing.commits[snapshot.version])
        return snapshot

    def followed(self, snapshot: Snapshot, commit: FileInfo) -> None:
        """A snapshot reached by replaying commits: written again in the background once
        it is `rewrite_after` commits ahead of the stored version, so the next process
        (or restart) replays few commits. This process keeps using its own snapshot."""
        stored = self.stored_version
        if stored is not None and snapshot.version - stored < self.store.rewrite_after:
            return
        self.stored_version = snapshot.version
        self.store.save_later(self.identity, snapshot, Anchor(commit))


# -- the file format -------------------------------------------------------------------


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _checksum(words: memoryview | bytes | pa.Buffer, length: int) -> int:
    """Sum of the little-endian 64-bit words of the first `length` bytes (a multiple of
    8), modulo 2**64: any truncation, zeroed page or flipped bit changes it."""
    array = np.frombuffer(words, dtype="<u8", count=length // 8)
    return int(np.add.reduce(array, dtype=np.uint64)) if length else 0


def _file_checksum(handle: Any, length: int, block: int = 8 << 20) -> int:
    """`_checksum` of a file's first `length` bytes, read through one small buffer (the
    file is not mapped: its pages would add to the writer's memory next to the snapshot
    it is writing)."""
    buffer = bytearray(block)
    view = memoryview(buffer)
    handle.seek(0)
    total = 0
    done = 0
    while done < length:
        want = min(block, length - done)
        filled = 0
        while filled < want:
            n = handle.readinto(view[filled:want])
            if not n:
                raise OSError("file shorter than written")
            filled += n
        total = (total + _checksum(view, want)) % (1 << 64)
        done += want
    return total


@dataclass(frozen=True)
class _Layout:
    """How a section's rows are written: their schema, the all-null columns left out
    (recreated on reading), and whether keys are written (when they are not the paths)."""

    schema: pa.Schema
    null_columns: tuple[str, ...]
    with_keys: bool

    @classmethod
    def of(cls, chunks: FileChunks) -> _Layout:
        """The layout of a snapshot's chunks; packed statistics are written as their JSON
        strings (a mapped file is shared memory already)."""
        batches = chunks.batches
        null_columns = tuple(
            f.name
            for i, f in enumerate(chunks.schema)
            if f.name != "path" and all(b.column(i).null_count == b.num_rows for b in batches)
        )
        with_keys = any(
            not k.equals(b.column("path")) for b, k in zip(batches, chunks.keys, strict=True)
        )
        return cls(text_schema(chunks.schema), null_columns, with_keys)

    @property
    def written(self) -> pa.Schema:
        fields = [f for f in self.schema if f.name not in self.null_columns]
        if self.with_keys:
            fields.append(pa.field(_KEY_COLUMN, pa.string()))
        return pa.schema(fields)

    def row(self, batch: pa.RecordBatch, keys: pa.Array) -> pa.RecordBatch:
        batch = text_batch(batch)
        out = batch.select([f.name for f in self.schema if f.name not in self.null_columns])
        return out.append_column(_KEY_COLUMN, keys) if self.with_keys else out


class _Writer:
    """One store file being written: sections of Arrow IPC, then the header."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.sections: dict[str, Any] = {}

    @contextlib.contextmanager
    def section(
        self, name: str, layout: _Layout
    ) -> Iterator[Callable[[pa.RecordBatch, pa.Array], None]]:
        """Yields `write(batch, keys)` for the section's chunks, in order."""
        handle = self.handle
        start = handle.tell()
        rows = 0
        with pa.ipc.new_file(pa.PythonFile(handle, mode="w"), layout.written) as writer:

            def write(batch: pa.RecordBatch, keys: pa.Array) -> None:
                nonlocal rows
                if not layout.with_keys and not keys.equals(batch.column("path")):
                    raise _KeysNeeded
                writer.write_batch(layout.row(batch, keys))
                rows += batch.num_rows

            yield write
        end = handle.tell()
        handle.write(b"\0" * (_aligned(end) - end))
        self.sections[name] = {
            "offset": start,
            "length": end - start,
            "rows": rows,
            "schema": base64.b64encode(layout.schema.serialize().to_pybytes()).decode(),
            "null_columns": list(layout.null_columns),
            "keys": layout.with_keys,
        }

    def chunks(self, name: str, chunks: FileChunks) -> None:
        with self.section(name, _Layout.of(chunks)) as write:
            for batch, keys in zip(chunks.batches, chunks.keys, strict=True):
                write(batch, keys)

    def finish(self, identity: str, version: int, anchor: Anchor, **state: Any) -> None:
        """The header (the table's state as of `version` in `state`) and the trailer."""
        handle = self.handle
        handle.flush()
        data_end = handle.tell()
        with open(handle.name, "rb") as reread:
            checksum = _file_checksum(reread, data_end)
        header = orjson.dumps(
            {
                "format": FORMAT,
                "table": identity,
                "version": version,
                "anchor": anchor.to_json(),
                **state,
                "chunk_rows": CHUNK_ROWS,
                "sections": self.sections,
                "data_length": data_end,
                "checksum": checksum,
            }
        )
        handle.write(header)
        handle.write(_TRAILER.pack(data_end, len(header), zlib.crc32(header), MAGIC))


class _KeysNeeded(Exception):
    """A streamed section met rows whose keys are not their paths (file: URIs)."""


def _state_fields(
    protocol: Protocol,
    metadata: Metadata,
    txns: dict[str, int],
    domains: dict[str, dict[str, Any]],
    checkpoint_version: int | None,
    in_commit_timestamp: int | None,
) -> dict[str, Any]:
    return {
        "protocol": protocol.raw,
        "metadata": metadata.raw,
        "txns": txns,
        "domain_metadata": domains,
        "checkpoint_version": checkpoint_version,
        "in_commit_timestamp": in_commit_timestamp,
    }


def _write(path: Path, identity: str, snapshot: Snapshot, anchor: Anchor) -> None:
    """A snapshot held in memory, to `path`."""
    state = snapshot.file_state
    with open(path, "wb") as handle:
        writer = _Writer(handle)
        writer.chunks("files", state.active)
        writer.chunks("tombstones", state.removed)
        writer.finish(
            identity,
            snapshot.version,
            anchor,
            **_state_fields(
                snapshot.protocol,
                snapshot.metadata,
                snapshot.txns,
                snapshot.domain_metadata,
                snapshot.checkpoint_version,
                snapshot.in_commit_timestamp,
            ),
        )


def _stream(
    path: Path,
    identity: str,
    storage: Storage,
    segment: LogSegment,
    anchor: Anchor,
    *,
    clock: CommitClock,
    typed_stats: bool = False,
) -> SnapshotLoading | None:
    """The snapshot of `segment` (which has a checkpoint), to `path`, streaming the
    checkpoint: the commits are read first (they are small) to know which keys they
    touch, then each checkpoint row group is filtered, compacted (ChunkSink) and written
    as it is read, and the commits' winning adds follow. What deltalog.snapshot's
    load_snapshot would hold in memory, row for row and chunk for chunk (with
    `typed_stats`, plus typed statistics where the checkpoint has JSON ones only).
    Returns the loading current in this context if it took this load's head and rows
    (deltalog.loading), to be told the snapshot mapped from the file."""
    checkpoint = segment.checkpoint
    assert checkpoint is not None
    reader = CheckpointReader(storage, segment.table_root, checkpoint)
    before = reader.metadata() if segment.commits else None
    commits = read_commits(storage, segment.table_root, segment.commits, before)
    won = commit_winners(commits)
    publish = announce(reader, segment, commits, won, clock=clock)
    schema = reader.adds_schema
    typed: pa.StructType | None = None
    if typed_stats and STATS_PARSED not in schema.names:
        metadata = next((c.metadata for c in reversed(commits) if c.metadata), None)
        metadata = metadata or before or reader.metadata()
        typed = stats_type(metadata) if metadata is not None else None
        if typed is not None:
            schema = schema.append(pa.field(STATS_PARSED, typed))
    new_adds = conform_adds(won.adds, schema) if won is not None and won.adds is not None else None
    null_columns = tuple(
        name
        for name in reader.absent
        if new_adds is None or new_adds.column(name).null_count == new_adds.num_rows
    )
    layout = _Layout(schema, null_columns, with_keys="deletionVector" not in null_columns)
    rows = CheckpointRows(reader, won, pack=False, first_alone=publish is not None)
    with open(path, "wb") as handle:
        writer = _Writer(handle)
        with writer.section("files", layout) as write:
            sink = ChunkSink(write)
            for batch, keys in rows.adds():
                if publish is not None:
                    publish.publish(batch)
                if typed is not None:
                    batch = _typed(batch, typed)
                sink.push(batch, keys)
            if new_adds is not None:
                for batch in split_batches(new_adds.to_batches()):
                    if publish is not None:
                        publish.publish(batch)
                    if typed is not None:
                        batch = _typed(batch, typed)
                    sink.push(batch, flat(file_keys(batch)))
            sink.finish()
        tombstones = rows.tombstones()
        writer.chunks("tombstones", tombstones)
        state = rows.state()
        txns, domains = (
            dict(state.txns),
            {k: v for k, v in state.domain_metadata.items() if not v.get("removed")},
        )
        protocol, metadata = fold_actions(commits, state.protocol, state.metadata, txns, domains)
        protocol, metadata = require_readable(segment.version, protocol, metadata)
        writer.finish(
            identity,
            segment.version,
            anchor,
            **_state_fields(
                protocol,
                metadata,
                txns,
                domains,
                checkpoint.version,
                commits[-1].in_commit_timestamp if commits else None,
            ),
        )
    return publish


def _typed(batch: pa.RecordBatch, struct: pa.StructType) -> pa.RecordBatch:
    """`batch` with its `stats_parsed` column (added, or replacing a null one) built from
    its JSON statistics."""
    field = pa.field(STATS_PARSED, struct)
    values = typed_stats(batch.column("stats"), struct)
    index = batch.schema.get_field_index(STATS_PARSED)
    if index >= 0:
        return batch.set_column(index, field, values)
    return batch.append_column(field, values)


def _header(
    handle: Any, size: int, magic: bytes = MAGIC, version: int = FORMAT
) -> tuple[dict[str, Any], int]:
    """The header of a store (or sidecar) file and its crc32."""
    if size < _TRAILER.size:
        raise StoreCorrupt(f"truncated ({size} bytes)")
    handle.seek(size - _TRAILER.size)
    offset, length, crc, found = _TRAILER.unpack(handle.read(_TRAILER.size))
    if found != magic:
        raise StoreCorrupt("no trailer (truncated or not a file of this store)")
    if offset + length + _TRAILER.size != size:
        raise StoreCorrupt("trailer does not match the file size")
    handle.seek(offset)
    raw = handle.read(length)
    if zlib.crc32(raw) != crc:
        raise StoreCorrupt("header checksum mismatch")
    header = orjson.loads(raw)
    if not isinstance(header, dict) or header.get("format") != version:
        raise StoreCorrupt("unknown format")
    if header.get("data_length") != offset:
        raise StoreCorrupt("header does not match the file layout")
    return header, crc


def _read(
    path: Path,
    identity: str,
    version: int,
    listing: LogListing,
    verify: bool,
    storage: Storage,
    table_root: str,
    clock: CommitClock,
) -> Snapshot:
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        header, header_crc = _header(handle, size)
        if header.get("table") != identity:
            raise StoreCorrupt("written for another table")
        if header.get("version") != version:
            raise StoreCorrupt(f"holds version {header.get('version')}, not {version}")
        if not Anchor.matches(header.get("anchor") or {}, listing, version):
            raise StoreCorrupt(
                f"stale: commit {version} in the log is not the one it was built from"
            )
        data_length = int(header["data_length"])
        # Verifying reads every page: fault them in with one call rather than one by one.
        populate = getattr(mmap, "MAP_POPULATE", 0) if verify else 0
        flags = mmap.MAP_SHARED | populate
        mapped = mmap.mmap(handle.fileno(), data_length, flags=flags, prot=mmap.PROT_READ)
    buffer = pa.py_buffer(mapped)
    if verify and _checksum(buffer, data_length) != header["checksum"]:
        raise StoreCorrupt("data checksum mismatch")
    sections = header["sections"]
    files = _chunks(buffer, sections["files"], data_length)
    tombstones = _chunks(buffer, sections["tombstones"], data_length)
    if files.schema != files_schema(files.schema) or tombstones.schema != REMOVE_SCHEMA:
        raise StoreCorrupt("unexpected schema")
    paths = tuple(batch.column("path") for batch in files.batches)
    return Snapshot(
        storage=storage,
        table_root=table_root,
        version=version,
        clock=clock,
        # Sidecars are always checksummed: a pass over 48 bytes per file, once per process.
        stored_paths=StoredPaths(path, header_crc, paths, verify=True),
        protocol=Protocol.from_action(header["protocol"]),
        metadata=metadata_from_action(header["metadata"]),
        state=FileState(files, tombstones),
        txns={str(k): int(v) for k, v in header["txns"].items()},
        domain_metadata=header["domain_metadata"],
        checkpoint_version=header["checkpoint_version"],
        in_commit_timestamp=header["in_commit_timestamp"],
    )


def _chunks(buffer: pa.Buffer, section: dict[str, Any], data_length: int) -> FileChunks:
    offset, length = int(section["offset"]), int(section["length"])
    if offset < 0 or offset + length > data_length:
        raise StoreCorrupt("section outside the file")
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(section["schema"])))
    reader = pa.ipc.open_file(buffer.slice(offset, length))
    rows = int(section["rows"])
    # One zero-page array per left-out column, sliced per batch.
    nulls = {name: null_array(schema.field(name).type, rows) for name in section["null_columns"]}
    batches: list[pa.RecordBatch] = []
    keys: list[pa.Array] = []
    start = 0
    for i in range(reader.num_record_batches):
        stored = reader.get_batch(i)
        stored.validate()
        n = stored.num_rows
        if not 0 < n <= CHUNK_ROWS or start + n > rows:
            raise StoreCorrupt("a chunk of unexpected size")
        columns = [
            nulls[f.name].slice(start, n) if f.name in nulls else stored.column(f.name)
            for f in schema
        ]
        batch = pa.RecordBatch.from_arrays(columns, schema=schema)
        batches.append(batch)
        keys.append(stored.column(_KEY_COLUMN) if section["keys"] else batch.column("path"))
        start += n
    if start != rows:
        raise StoreCorrupt("row count mismatch")
    return FileChunks.restore(schema, batches, keys)


# -- columns derived from a stored snapshot's paths ------------------------------------

SIDECAR_MAGIC = b"LKSIDE01"
SIDECAR_FORMAT = 1


class StoredPaths:
    """The path chunks of a snapshot mapped from a store file, and columns computed from
    them kept in sidecar files next to that file (`<snapshot file>.<name>`).

    A column that is a pure function of a file's path (the file ids of sharing.formats)
    is then computed once per table version by whichever process first needs it, written
    atomically and checksummed like the snapshot, and mapped by every process: one copy in
    the page cache instead of one per worker, and none to compute after a restart. A
    sidecar is bound to its snapshot file's header (table, version, the log file it was
    built from, the data checksum): a snapshot file rebuilt with other contents makes it
    stale, and a stale, truncated or corrupt sidecar is computed and written again, never
    served. Chunks are matched by their memory (the mapped buffers), so a snapshot that
    followed commits still finds the chunks it shares with its stored base; others are
    not this object's to answer for (`index` is None)."""

    def __init__(
        self, snapshot_file: Path, tag: int, chunks: tuple[pa.Array, ...], verify: bool
    ) -> None:
        self.file = snapshot_file
        self._tag = tag  # crc32 of the snapshot file's header
        self._chunks = chunks
        self._verify = verify
        self._index = {_chunk_key(c): i for i, c in enumerate(chunks)}
        self._columns: dict[str, list[pa.Array] | None] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"StoredPaths({self.file.name!r}, {len(self._chunks)} chunks)"

    def index(self, chunk: pa.Array) -> int | None:
        """Which stored chunk `chunk` is (the same memory), or None."""
        return self._index.get(_chunk_key(chunk))

    def sidecar(self, name: str) -> Path:
        return self.file.with_name(f"{self.file.name}.{name}")

    def column(self, name: str, compute: Callable[[pa.Array], pa.Array]) -> list[pa.Array] | None:
        """`compute(chunk)` of every stored chunk, in order, from the sidecar `name`
        (mapped; computed and written first when it is missing, stale or corrupt). None
        when the sidecar cannot be written (the caller computes what it needs itself).
        `compute` must be a pure function of the paths: every process trusts the file."""
        with self._lock:
            if name not in self._columns:
                self._columns[name] = self._load(name, compute)
            return self._columns[name]

    def _load(self, name: str, compute: Callable[[pa.Array], pa.Array]) -> list[pa.Array] | None:
        path = self.sidecar(name)
        found = self._open(path, name)
        if found is not None:
            return found
        try:
            with _locked(self.file.with_name(f"lock.{name}")):
                found = self._open(path, name)  # written while we waited?
                if found is not None:
                    return found
                _write_sidecar(path, name, self.file.name, self._tag, self._chunks, compute)
        except OSError as exc:
            log.warning("snapshot store: cannot write %s (%s)", path.name, exc)
            return None
        return self._open(path, name, verify=False)  # we have just written and summed it

    def _open(self, path: Path, name: str, verify: bool | None = None) -> list[pa.Array] | None:
        check = self._verify if verify is None else verify
        try:
            return _read_sidecar(path, name, self.file.name, self._tag, self._chunks, check)
        except FileNotFoundError:
            return None
        except (StoreCorrupt, pa.ArrowException, OSError, ValueError) as exc:
            log.warning("snapshot store: %s is not usable (%s); computing it", path.name, exc)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return None


def _chunk_key(chunk: pa.Array) -> tuple[int, ...]:
    """A chunk's identity in this process: where its buffers are, its offset and length."""
    buffers = tuple(b.address if b is not None else 0 for b in chunk.buffers()[:3])
    return (chunk.offset, len(chunk), *buffers)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (created), held for the block."""
    if fcntl is None:
        yield
        return
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _sidecars(snapshot_file: Path) -> list[Path]:
    """The sidecar files of a snapshot file (see StoredPaths)."""
    try:
        names = os.listdir(snapshot_file.parent)
    except (FileNotFoundError, NotADirectoryError):
        return []
    prefix = snapshot_file.name + "."
    return [snapshot_file.with_name(n) for n in names if n.startswith(prefix)]


def _remove_with_sidecars(snapshot_file: Path) -> None:
    for path in [snapshot_file, *_sidecars(snapshot_file)]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _write_sidecar(
    path: Path,
    name: str,
    snapshot_name: str,
    tag: int,
    chunks: tuple[pa.Array, ...],
    compute: Callable[[pa.Array], pa.Array],
) -> None:
    """`compute` of each chunk as one Arrow IPC batch, then the header; atomically (a
    temporary file renamed into place). One chunk's column is held at a time."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            writer: pa.ipc.RecordBatchFileWriter | None = None
            sink = pa.PythonFile(handle, mode="w")
            for chunk in chunks:
                values = compute(chunk)
                if len(values) != len(chunk):
                    raise ValueError(f"{name}: {len(values)} values for {len(chunk)} paths")
                batch = pa.record_batch([values], names=[name])
                if writer is None:
                    writer = pa.ipc.new_file(sink, batch.schema)
                writer.write_batch(batch)
            if writer is None:  # a snapshot without files: an empty column
                writer = pa.ipc.new_file(sink, pa.schema([(name, pa.null())]))
            writer.close()
            end = handle.tell()
            handle.write(b"\0" * (_aligned(end) - end))
            handle.flush()
            data_end = handle.tell()
            with open(tmp, "rb") as reread:
                checksum = _file_checksum(reread, data_end)
            header = orjson.dumps(
                {
                    "format": SIDECAR_FORMAT,
                    "snapshot": snapshot_name,
                    "tag": tag,
                    "column": name,
                    "rows": [len(c) for c in chunks],
                    "length": end,
                    "data_length": data_end,
                    "checksum": checksum,
                }
            )
            handle.write(header)
            handle.write(_TRAILER.pack(data_end, len(header), zlib.crc32(header), SIDECAR_MAGIC))
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _read_sidecar(
    path: Path,
    name: str,
    snapshot_name: str,
    tag: int,
    chunks: tuple[pa.Array, ...],
    verify: bool,
) -> list[pa.Array]:
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        header, _ = _header(handle, size, SIDECAR_MAGIC, SIDECAR_FORMAT)
        if header.get("snapshot") != snapshot_name or header.get("column") != name:
            raise StoreCorrupt("written for another file")
        if header.get("tag") != tag:
            raise StoreCorrupt("stale: its snapshot file has been written again")
        if header.get("rows") != [len(c) for c in chunks]:
            raise StoreCorrupt("chunks do not match the snapshot's")
        data_length = int(header["data_length"])
        populate = getattr(mmap, "MAP_POPULATE", 0) if verify else 0
        mapped = mmap.mmap(
            handle.fileno(), data_length, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ
        )
    buffer = pa.py_buffer(mapped)
    if verify and _checksum(buffer, data_length) != header["checksum"]:
        raise StoreCorrupt("data checksum mismatch")
    length = int(header["length"])
    if not 0 < length <= data_length:
        raise StoreCorrupt("column outside the file")
    reader = pa.ipc.open_file(buffer.slice(0, length))
    if reader.num_record_batches != len(chunks):
        raise StoreCorrupt("chunk count mismatch")
    columns: list[pa.Array] = []
    for i, chunk in enumerate(chunks):
        batch = reader.get_batch(i)
        batch.validate()
        if batch.num_columns != 1 or batch.num_rows != len(chunk):
            raise StoreCorrupt("a chunk of unexpected size")
        columns.append(batch.column(0))
    return columns
