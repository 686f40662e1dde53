"""Snapshot compaction: a snapshot that followed many commits keeps its files in as few
chunks as a freshly loaded one, copies little per refresh, and holds the same rows."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from deltalog import file_chunks
from deltalog.actions import CDC_SCHEMA, REMOVE_SCHEMA, CommitActions
from deltalog.commits import file_actions_table
from deltalog.file_chunks import CHUNK_ROWS, FileChunks
from deltalog.replay import FileState, apply_commits, file_keys
from deltalog.table import DeltaTable
from tests.support import handlog as h


def _commit(version: int, adds: list[str] = (), removes: list[str] = ()) -> CommitActions:  # type: ignore[assignment]
    return CommitActions(
        version=version,
        timestamp=version,
        adds=file_actions_table(
            "add", [{"path": p, "size": version} for p in adds], version, f"{version}"
        ),
        removes=file_actions_table("remove", [{"path": p} for p in removes], version, "r"),
        cdcs=CDC_SCHEMA.empty_table(),
    )


def _buffers(chunks: FileChunks) -> set[int]:
    return {b.column(0).buffers()[2].address for b in chunks.batches}


def _check_aligned(state: FileState) -> None:
    for chunks in (state.active, state.removed):
        assert all(0 < b.num_rows <= CHUNK_ROWS for b in chunks.batches)
        assert [b.num_rows for b in chunks.batches] == [len(k) for k in chunks.keys]
        for batch, keys in zip(chunks.batches, chunks.keys, strict=True):
            assert keys.equals(file_keys(batch))


def test_a_thousand_refreshes_keep_the_chunks_of_a_fresh_load(tmp_path: Path) -> None:
    """The issue's case: a 614-file table, then 1,000 commits of 10 files each, every one
    followed by a refresh. The followed snapshot never has more than a few chunks more
    than a fresh load of the same version, and holds the same files in the same layout
    a consumer batches (the per-batch work of a query is what grew 47x before)."""
    root = tmp_path / "t"
    stats = '{"numRecords":1}'
    h.write_commit(
        root,
        0,
        [h.protocol(1, 2), h.metadata(), *(h.add(f"f{i}", stats=stats) for i in range(614))],
    )
    table = DeltaTable(str(root))
    table.snapshot()
    most = 0
    for v in range(1, 1001):
        adds = [h.add(f"g{v}-{i}", stats=stats) for i in range(10)]
        # Every 7th commit removes a file of the first commit and one of the previous.
        removes = [h.remove(f"f{v % 614}"), h.remove(f"g{v - 1}-3")] if v % 7 == 0 else []
        h.write_commit(root, v, [h.commit_info(), *adds, *removes])
        followed = table.snapshot()
        assert followed.version == v
        most = max(most, followed.files.column("path").num_chunks)
    fresh = DeltaTable(str(root)).snapshot()
    fresh_chunks = fresh.files.column("path").num_chunks
    assert fresh_chunks == 1
    assert most <= 4
    assert followed.files.num_rows == fresh.files.num_rows == 614 + 10_000 - 2 * (1000 // 7)
    assert sorted(followed.files.column("path").to_pylist()) == sorted(
        fresh.files.column("path").to_pylist()
    )
    # The representative per-query work: batches of a streamed response.
    followed_batches = followed.files.to_batches(max_chunksize=10_000)
    fresh_batches = fresh.files.to_batches(max_chunksize=10_000)
    assert len(followed_batches) <= len(fresh_batches) + 3
    _check_aligned(followed.file_state)


def test_appends_copy_each_row_a_bounded_number_of_times() -> None:
    """Merges are amortised: over 1,000 appends of 10 rows to a full base chunk, rows
    are copied at most ~20 times each on average (a counter in base MERGE_RATIO), and
    the full chunk of the base is never copied."""
    base = FileState.from_base(
        file_actions_table("add", [{"path": f"b{i}"} for i in range(CHUNK_ROWS)], 0, "b"),
        REMOVE_SCHEMA.empty_table(),
    )
    full = base.files.column("path").chunk(0).buffers()[2].address
    state = base
    copied = 0
    for v in range(1, 1001):
        before = _buffers(state.active)
        state = apply_commits(state, [_commit(v, adds=[f"n{v}-{i}" for i in range(10)])])
        copied += sum(
            b.num_rows
            for b in state.active.batches
            if b.column(0).buffers()[2].address not in before
        )
        assert state.active.num_chunks <= 1 + 4
        assert state.files.column("path").chunk(0).buffers()[2].address == full
    appended = 1000 * 10
    assert copied / appended <= 25, copied / appended


def test_removals_spread_over_a_large_state_keep_the_count_bounded() -> None:
    n = 4 * CHUNK_ROWS
    state = FileState.from_base(
        file_actions_table("add", [{"path": f"b{i}"} for i in range(n)], 0, "b"),
        REMOVE_SCHEMA.empty_table(),
    )
    assert state.active.num_chunks == 4
    rng = random.Random(5)
    order = list(range(n))
    rng.shuffle(order)
    alive = set(range(n))
    for v in range(1, 101):
        victims = order[(v - 1) * 50 : v * 50]
        alive -= set(victims)
        state = apply_commits(state, [_commit(v, removes=[f"b{i}" for i in victims])])
        assert state.active.num_chunks <= 4
    assert state.files.num_rows == len(alive)
    assert set(state.files.column("path").to_pylist()) == {f"b{i}" for i in alive}
    # Tombstones are chunked the same way.
    assert state.removed.num_chunks <= 4
    _check_aligned(state)


def test_chunks_emptied_by_removals_merge_with_their_neighbours() -> None:
    n = 8 * CHUNK_ROWS
    state = FileState.from_base(
        file_actions_table("add", [{"path": f"b{i}"} for i in range(n)], 0, "b"),
        REMOVE_SCHEMA.empty_table(),
    )
    keep = set(range(0, n, 100))
    state = apply_commits(state, [_commit(1, removes=[f"b{i}" for i in range(n) if i not in keep])])
    assert state.files.num_rows == len(keep)
    assert state.active.num_chunks == 1
    assert state.files.column("path").to_pylist() == [f"b{i}" for i in sorted(keep)]


@pytest.mark.parametrize("seed", range(4))
def test_random_histories_match_a_model(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random adds, re-adds and removes with tiny chunks (so merges, splits and filters all
    happen often): the state equals a dictionary replay at every version, chunks stay
    within bounds and aligned with their keys."""
    monkeypatch.setattr(file_chunks, "CHUNK_ROWS", 32)
    rng = random.Random(seed)
    model: dict[str, int] = {}
    tombs: set[str] = set()
    state = FileState.empty()
    names = [f"p{i}" for i in range(400)]
    for v in range(150):
        adds = rng.sample(names, rng.choice([0, 1, 3, 20, 70]))
        removes = rng.sample(names, rng.choice([0, 1, 5, 40]))
        removes = [p for p in removes if p not in adds]
        state = apply_commits(state, [_commit(v, adds=adds, removes=removes)])
        for p in removes:
            model.pop(p, None)
            tombs.add(p)
        for p in adds:
            model[p] = v
            tombs.discard(p)
        paths = state.files.column("path").to_pylist()
        assert len(paths) == len(set(paths))
        assert dict(zip(paths, state.files.column("size").to_pylist(), strict=True)) == model
        assert set(state.tombstones.column("path").to_pylist()) == tombs
        for chunks in (state.active, state.removed):
            assert all(0 < b.num_rows <= 32 for b in chunks.batches)
            assert chunks.num_chunks <= 2 * (chunks.num_rows // 16 + 1) + 4
            assert pa.concat_arrays(list(chunks.keys) or [pa.array([], pa.string())]).equals(
                pa.concat_arrays(
                    [file_keys(b) for b in chunks.batches] or [pa.array([], pa.string())]
                )
            )
