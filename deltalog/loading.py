"""A snapshot's files, readable in snapshot order while the snapshot is still loading.

Loading a large table reads its checkpoint row group by row group. A reader that only
wants to go through the files in order (a server streaming them out) need not wait for
the last row group: the commits after the checkpoint are read first (they are few and
small), which gives the version's protocol and metadata and the keys those commits touch;
then every checkpoint row whose key no commit touches is final, in its final place, and
the commits' winning adds follow the checkpoint's rows. So a load can announce a
`SnapshotHead` (everything about the version that does not need the rows: protocol,
metadata, file count and size, read ahead from three narrow checkpoint columns) and then
hand out each batch of rows as it is read, while it builds the snapshot as usual.

`SnapshotLoading` is that hand-over between the thread that loads (deltalog.snapshot and
deltalog.snapshot_store publish to the loading current in their context: `observing`)
and any number of readers, who may join while the load runs. What it holds is bounded:
the first `max_rows` rows; past them the load stops handing out batches (it never waits
for a reader), and a reader that has gone through them continues from the finished
snapshot at the row it had reached, which holds the same rows in the same order. (A load
reads a checkpoint far faster than a response is written, so a reader rarely catches up
with it.) The rows handed out and the finished snapshot's are checked to line up, so a
reader never sends a mix of two versions.

The snapshot a load finishes with need not be the one its head announced: the head may
come from another caller's load of the same table (whose listing ran before a commit the
finishing call saw), or from a preview read while another process built the store file
(which may hold another version, or the same version built from another checkpoint, its
files in another order). So the reader continues from the first snapshot that lines up
with what it streamed (same version, same file count, the rows it sent as its first
rows): the load's result, else the announcing load's own snapshot (`loaded`), else one
rebuilt from the very log segment the head was read from (`begin`'s `rebuild`), which
holds the same rows in the same order by construction.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from deltalog.actions import Metadata, Protocol
from deltalog.errors import DeltaError
from deltalog.storage.base import Storage

if TYPE_CHECKING:
    from deltalog.snapshot import Snapshot

__all__ = ["SnapshotHead", "SnapshotLoading", "current_loading", "observing"]

# How far (in rows) the reader may fall behind before the load stops handing it batches.
MAX_BACKLOG_ROWS = 65_536

# Snapshots of the announced version read from the announced log segment, cheapest first
# (a store file, then a load of the log), each made only when the one before does not do.
Rebuild = Callable[[], Iterable["Snapshot"]]


@dataclass(frozen=True)
class SnapshotHead:
    """What a snapshot being loaded is, before its files are read: the same values its
    finished `Snapshot` will have (`num_files`, `size_in_bytes`), and whether any of its
    files has a deletion vector."""

    storage: Storage
    table_root: str
    version: int
    protocol: Protocol
    metadata: Metadata
    num_files: int
    size_in_bytes: int
    deletion_vectors: bool


class LoadMismatchError(DeltaError):
    """The rows handed out during a load are not the finished snapshot's first rows."""


class SnapshotLoading:
    """One load's head and first rows, for its readers (see the module docstring)."""

    def __init__(self, max_rows: int | None = None) -> None:
        self.max_rows = MAX_BACKLOG_ROWS if max_rows is None else max_rows
        self._cond = threading.Condition()
        self._head: SnapshotHead | None = None
        self._batches: list[pa.RecordBatch] = []
        self._rows = 0
        self._cut = False  # a batch was not kept: the rest comes from the snapshot
        self._done = False
        self._snapshot: Snapshot | None = None
        self._error: BaseException | None = None
        self._own: Snapshot | None = None  # the announcing load's snapshot
        self._rebuild: Rebuild | None = None
        self._continued: Snapshot | None = None  # what readers continue from, once found
        self._continue_lock = threading.Lock()
        self.handed_out = 0  # batches readers took from the load (for tests)
        self.rebuilt = 0  # snapshots rebuilt for readers (for tests)

    # -- the loading side -----------------------------------------------------------

    def begin(self, head: SnapshotHead, rebuild: Rebuild | None = None) -> bool:
        """Announce the head; False when a head was announced already (a second load in
        the same context, e.g. a fallback after a failed write, publishes nothing).
        `rebuild` gives the snapshot of the log segment the head was read from, should
        the load finish with another (module docstring)."""
        with self._cond:
            if self._head is not None or self._done:
                return False
            self._head = head
            self._rebuild = rebuild
            self._cond.notify_all()
            return True

    def publish(self, batch: pa.RecordBatch) -> None:
        """The next rows of the snapshot, in order (after an accepted `begin`)."""
        if batch.num_rows == 0:
            return
        with self._cond:
            if self._cut or self._done:
                return
            if self._rows + batch.num_rows > self.max_rows and self._batches:
                self._cut = True
            else:
                self._batches.append(batch)
                self._rows += batch.num_rows
            self._cond.notify_all()

    @property
    def takes_rows(self) -> bool:
        """Whether more rows would be kept (not past `max_rows`, not finished)."""
        with self._cond:
            return not (self._cut or self._done)

    def loaded(self, snapshot: Snapshot) -> None:
        """The snapshot the load that announced the head built (after its last batch)."""
        with self._cond:
            self._own = snapshot

    def finish(self, snapshot: Snapshot) -> None:
        with self._cond:
            self._done, self._snapshot = True, snapshot
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        with self._cond:
            self._done, self._error = True, error
            self._cond.notify_all()

    # -- the reading side -----------------------------------------------------------

    @property
    def head(self) -> SnapshotHead:
        """The head (once `wait_head` returned it)."""
        assert self._head is not None, "no head announced yet"
        return self._head

    def wait_head(self) -> SnapshotHead | None:
        """The head once announced; None when the load finished without one (the
        snapshot came from a cache, a store file, or a log without a checkpoint: take
        `result()`); the load's error when it failed before."""
        with self._cond:
            while self._head is None and not self._done:
                self._cond.wait()
            if self._head is None and self._error is not None:
                raise self._error
            return self._head

    def result(self) -> Snapshot:
        """The finished snapshot (waits for it; the load's error when it failed)."""
        with self._cond:
            while not self._done:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            assert self._snapshot is not None
            return self._snapshot

    def files(self, max_rows: int) -> Iterator[pa.RecordBatch]:
        """Every file of the announced version in order, in batches of at most `max_rows`
        rows: those handed out while loading, then the rest from the first snapshot that
        continues them (module docstring); a reader of its own each call, from the first
        row."""
        sent: list[pa.Array] = []
        taken = 0
        while True:
            with self._cond:
                while taken == len(self._batches) and not self._cut and not self._done:
                    self._cond.wait()
                batch = self._batches[taken] if taken < len(self._batches) else None
                if batch is not None:
                    taken += 1
                    self.handed_out += 1
            if batch is None:
                break
            for start in range(0, batch.num_rows, max_rows):
                yield batch.slice(start, max_rows)
            sent.append(batch.column("path"))
        files = self._continuing(sent).files
        yield from files.slice(sum(len(p) for p in sent)).to_batches(max_chunksize=max_rows)

    def _continuing(self, sent: list[pa.Array]) -> Snapshot:
        """The snapshot whose files continue the paths `sent` (their first rows): found
        once, for every reader (they all went through the same handed-out rows)."""
        try:
            finished: Snapshot | None = self.result()
        except Exception:
            if self._own is None:
                raise
            finished = None
        head = self._head
        if head is None:  # nothing was streamed ahead: the result is the answer
            assert finished is not None
            return finished
        with self._continue_lock:
            if self._continued is None:
                self._continued = self._lining_up(head, finished, sent)
            continued = self._continued
        if not _continues(continued, head, sent):
            raise LoadMismatchError(
                f"the snapshot's files do not continue the {len(sent)} batches streamed"
                " while it loaded"
            )
        return continued

    def _lining_up(
        self, head: SnapshotHead, finished: Snapshot | None, sent: list[pa.Array]
    ) -> Snapshot:
        """The load's result, its announcing load's snapshot, or a rebuild of the
        announced segment: the first that continues `sent`."""
        for candidate in (finished, self._own):
            if candidate is not None and _continues(candidate, head, sent):
                return candidate
        if self._rebuild is None:
            raise LoadMismatchError(
                f"the load finished with version {finished.version if finished else None},"
                f" not the announced {head.version}, and cannot rebuild it"
            )
        last: Snapshot | None = None
        for candidate in self._rebuild():
            self.rebuilt += 1
            last = candidate
            if _continues(candidate, head, sent):
                return candidate
        raise LoadMismatchError(
            f"no snapshot of version {head.version} continues the rows streamed"
            f" (last tried: {last!r})"
        )


def _continues(snapshot: Snapshot, head: SnapshotHead, sent: list[pa.Array]) -> bool:
    """Whether `snapshot` is the announced version with the paths `sent` as its first
    files, in that order."""
    files = snapshot.files
    count = sum(len(p) for p in sent)
    if snapshot.version != head.version or files.num_rows != head.num_files:
        return False
    if count > files.num_rows:
        return False
    if not count:
        return True
    paths = files.column("path").slice(0, count)
    streamed = pa.chunked_array(sent, type=sent[0].type)
    if streamed.type != paths.type:
        streamed = streamed.cast(paths.type)
    return bool(paths.equals(streamed))


_current: contextvars.ContextVar[SnapshotLoading | None] = contextvars.ContextVar(
    "deltalog_snapshot_loading", default=None
)


@contextmanager
def observing(loading: SnapshotLoading) -> Iterator[None]:
    """Loads of a snapshot from a checkpoint in this context publish to `loading`."""
    token = _current.set(loading)
    try:
        yield
    finally:
        _current.reset(token)


def current_loading() -> SnapshotLoading | None:
    """The loading this context's snapshot loads publish to, if any."""
    return _current.get()
