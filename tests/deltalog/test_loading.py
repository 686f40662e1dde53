"""The hand-over of a loading snapshot's rows (deltalog.loading): a reader gets every file
of the finished snapshot once, in order, whether the load handed it all the rows, some
of them (its backlog full) or none; and rows that do not continue into the finished
snapshot are an error, never a silent mix. Real snapshots of a corpus table, loaded in a
thread as the server does."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from deltalog import DeltaTable, SnapshotLoading
from deltalog.loading import LoadMismatchError, observing
from tests.support.corpus import corpus_table

# 3-part checkpoint at 0, then commits adding files: 20 files at version 2.
TABLE = "delta/kernel-defaults/kernel-pagination-multi-part-checkpoints"


def _load(loading: SnapshotLoading) -> threading.Thread:
    def run() -> None:
        try:
            with observing(loading):
                snapshot = DeltaTable(str(corpus_table(TABLE))).snapshot()
        except BaseException as exc:
            loading.fail(exc)
        else:
            loading.finish(snapshot)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("backlog", [None, 1])
def test_a_reader_gets_the_finished_snapshots_files_in_order(backlog: int | None) -> None:
    loading = SnapshotLoading(max_rows=backlog)
    thread = _load(loading)
    head = loading.wait_head()
    assert head is not None
    paths = [p for b in loading.files(4) for p in b.column("path").to_pylist()]
    thread.join()
    snapshot = loading.result()
    assert (head.version, head.num_files, head.size_in_bytes) == (
        snapshot.version,
        snapshot.num_files,
        snapshot.size_in_bytes,
    )
    assert head.protocol == snapshot.protocol and head.metadata == snapshot.metadata
    assert paths == snapshot.files.column("path").to_pylist()
    assert loading.handed_out >= 1  # rows came from the load (the rest, maybe, from the snapshot)


def test_rows_that_do_not_continue_into_the_snapshot_are_an_error() -> None:
    loading = SnapshotLoading()
    thread = _load(loading)
    head = loading.wait_head()
    thread.join()
    assert head is not None
    stray = SnapshotLoading()
    assert stray.begin(head)
    stray.publish(pa.RecordBatch.from_pydict({"path": ["not-a-file-of-the-table"]}))
    stray.finish(loading.result())
    with pytest.raises(LoadMismatchError):
        list(stray.files(10))


def test_a_second_load_in_the_same_context_publishes_nothing() -> None:
    loading = SnapshotLoading()
    thread = _load(loading)
    head = loading.wait_head()
    thread.join()
    assert head is not None
    assert not loading.begin(head)  # the load's own head was taken already


def test_a_load_without_a_head_hands_over_its_snapshot_or_error() -> None:
    loading = SnapshotLoading()
    loading.fail(ValueError("no such table"))
    with pytest.raises(ValueError, match="no such table"):
        loading.wait_head()


def test_a_load_finishing_with_another_version_is_continued_from_the_announced_one() -> None:
    """The head came from one load (version 2), the loading was finished with another
    snapshot (version 1: a later call's, as when a sibling's load announced): the reader
    continues from the announcing load's own snapshot, all of version 2, in order."""
    table = DeltaTable(str(corpus_table(TABLE)))
    loading = SnapshotLoading(max_rows=1)
    with observing(loading):
        announced = table.snapshot()
    loading.finish(DeltaTable(str(corpus_table(TABLE))).snapshot(1))
    paths = [p for b in loading.files(4) for p in b.column("path").to_pylist()]
    assert paths == announced.files.column("path").to_pylist()
    assert loading.rebuilt == 0


def test_a_preview_finishing_with_another_version_is_rebuilt_from_its_segment() -> None:
    """A preview (another process builds the snapshot) announced version 2 and handed
    out its first rows but built nothing; the load finished with version 1: the reader
    gets version 2 rebuilt from the very log segment the preview read."""
    from deltalog.log_segment import build_segment
    from deltalog.snapshot import preview

    table = DeltaTable(str(corpus_table(TABLE)))
    loading = SnapshotLoading(max_rows=1)
    with observing(loading):
        preview(
            table.storage,
            build_segment(table.storage, table.table_root),
            clock=table._commit_timestamp,
        )
    loading.finish(DeltaTable(str(corpus_table(TABLE))).snapshot(1))
    paths = [p for b in loading.files(4) for p in b.column("path").to_pylist()]
    assert paths == table.snapshot().files.column("path").to_pylist()
    assert loading.rebuilt == 1
