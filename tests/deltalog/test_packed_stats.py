"""Statistics held packed in a snapshot loaded in memory (deltalog.packed_stats): every
operation on rows keeps the exact strings, and the packed column is a fraction of them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltalog import DeltaTable
from deltalog.actions import CDC_SCHEMA, REMOVE_SCHEMA, CommitActions
from deltalog.checkpoint import read_checkpoint
from deltalog.commits import file_actions_table
from deltalog.file_chunks import CHUNK_ROWS
from deltalog.log_segment import build_segment
from deltalog.packed_stats import BLOCK_ROWS, is_packed, pack_adds, pack_stats, stats_text
from deltalog.replay import FileState, apply_commits
from deltalog.storage.local import LocalStorage
from tests.support import handlog as h
from tests.support.corpus import corpus_table


def _texts(n: int, seed: int) -> pa.Array:
    """Stats-like strings with nulls, empty strings, quotes, backslashes and non-ASCII."""
    rng = random.Random(seed)
    values: list[str | None] = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.05:
            values.append(None)
        elif kind < 0.07:
            values.append("")
        else:
            name = rng.choice(["a", 'q"uote', "back\\slash", "é€𝄞", "\x01ctl"])
            values.append(json.dumps({"numRecords": rng.randint(0, 10**9), "minValues": {name: i}}))
    return pa.array(values, pa.string())


@pytest.mark.parametrize("n", [0, 1, BLOCK_ROWS - 1, BLOCK_ROWS, 3 * BLOCK_ROWS + 17])
def test_packed_rows_read_back_as_the_same_strings(n: int) -> None:
    text = _texts(n, seed=n)
    packed = pack_stats(text)
    assert is_packed(packed.type) and len(packed) == n
    assert stats_text(packed).equals(text)
    rng = np.random.default_rng(n)
    for _ in range(20):
        start = int(rng.integers(0, n + 1))
        length = int(rng.integers(0, n - start + 1))
        assert stats_text(packed.slice(start, length)).equals(text.slice(start, length))
    if n:
        picks = pa.array([*rng.integers(0, n, 50).tolist(), None], pa.int64())
        assert stats_text(packed.take(picks)).equals(text.take(picks))
        keep = pa.array(rng.random(n) < 0.3)
        assert stats_text(packed.filter(keep)).equals(text.filter(keep))


def test_packed_columns_combine_like_strings() -> None:
    first, second = _texts(2500, seed=1), _texts(700, seed=2)
    both = pa.chunked_array([pack_stats(first), pack_stats(second)])
    expected = pa.chunked_array([first, second])
    assert stats_text(both).to_pylist() == expected.to_pylist()
    assert stats_text(both.combine_chunks()).equals(expected.combine_chunks())
    picks = pa.array([2600, 3, 2499, 2500, 10])
    assert stats_text(both.take(picks)).to_pylist() == expected.take(picks).to_pylist()
    table = pa.table({"stats": both, "i": pa.array(np.arange(3200))})
    backwards = table.take(pc.sort_indices(table, sort_keys=[("i", "descending")]))
    assert stats_text(backwards.column("stats")).to_pylist() == expected.to_pylist()[::-1]
    # A string column is its own text.
    assert stats_text(first) is first


def test_all_null_and_all_empty_columns() -> None:
    assert stats_text(pack_stats(pa.nulls(5, pa.string()))).equals(pa.nulls(5, pa.string()))
    empty = pa.array([""] * 3, pa.string())
    assert stats_text(pack_stats(empty)).equals(empty)


def _checkpoint_stats(root: Path) -> dict[str, str | None]:
    storage = LocalStorage()
    segment = build_segment(storage, str(root))
    assert segment.checkpoint is not None
    adds = read_checkpoint(storage, str(root), segment.checkpoint).adds
    paths = adds.column("path").to_pylist()
    return dict(zip(paths, adds.column("stats").to_pylist(), strict=True))


def test_a_snapshot_in_memory_holds_the_logs_statistics_packed() -> None:
    root = corpus_table("delta-kernel-rs/golden_data/basic-with-inserts-deletes-checkpoint/delta")
    snapshot = DeltaTable(str(root)).snapshot()
    column = snapshot.files.column("stats")
    assert is_packed(column.type)
    paths = snapshot.files.column("path").to_pylist()
    got = dict(zip(paths, stats_text(column).to_pylist(), strict=True))
    from_checkpoint = _checkpoint_stats(root)
    common = set(got) & set(from_checkpoint)
    assert len(common) == 6 and all(got[p] == from_checkpoint[p] for p in common)


def test_commits_after_the_load_are_packed_too(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "_delta_log").mkdir(parents=True)
    h.write_commit(root, 0, [h.protocol(1, 2), h.metadata()])
    stats = {f"f{i}": json.dumps({"numRecords": i, "minValues": {"id": i}}) for i in range(40)}
    h.write_commit(root, 1, [h.commit_info(), *(h.add(p, stats=s) for p, s in stats.items())])
    table = DeltaTable(str(root))
    first = table.snapshot()
    assert is_packed(first.files.column("stats").type)
    h.write_commit(root, 2, [h.commit_info(), h.add("late", stats='{"numRecords":7}')])
    after = table.snapshot()
    assert after.version == 2 and is_packed(after.files.column("stats").type)
    got = dict(
        zip(
            after.files.column("path").to_pylist(),
            stats_text(after.files.column("stats")).to_pylist(),
            strict=True,
        )
    )
    assert got == {**stats, "late": '{"numRecords":7}'}


def test_packed_statistics_are_a_fraction_of_the_strings() -> None:
    n = 20_000
    ids = np.arange(n)
    text = pa.array(
        np.char.add('{"numRecords":10,"minValues":{"id":', ids.astype(str)).astype(object)
        + ',"name":"alpha"},"maxValues":{"id":9,"name":"omega"},"nullCount":{"id":0,"name":0}}',
        pa.string(),
    )
    packed = pack_stats(text)
    assert packed.nbytes * 5 < text.nbytes


def _commit(version: int, adds: list[str], removes: list[str]) -> CommitActions:
    return CommitActions(
        version=version,
        timestamp=version,
        adds=file_actions_table(
            "add", [{"path": p, "size": 1, "stats": f'{{"n":"{p}"}}'} for p in adds], version, "t"
        ),
        removes=file_actions_table("remove", [{"path": p} for p in removes], version, "t"),
        cdcs=CDC_SCHEMA.empty_table(),
    )


def test_refreshes_keep_each_chunks_blocks_bounded() -> None:
    """Chunks merged again and again by refreshes are packed afresh: a chunk refers to
    about as many blocks as its rows fill, not to every block it ever shared."""
    n = 3 * CHUNK_ROWS
    base = FileState.from_base(
        pack_adds(
            file_actions_table(
                "add",
                [{"path": f"f{i}", "size": 1, "stats": f'{{"i":{i}}}'} for i in range(n)],
                0,
                "t",
            )
        ),
        REMOVE_SCHEMA.empty_table(),
    )
    state = base
    rng = random.Random(3)
    expected = {f"f{i}": f'{{"i":{i}}}' for i in range(n)}
    for version in range(1, 200):
        gone = rng.sample(sorted(expected), 40)
        new = [f"v{version}-{j}" for j in range(30)]
        state = apply_commits(state, [_commit(version, new, gone)])
        for p in gone:
            del expected[p]
        expected.update({p: f'{{"n":"{p}"}}' for p in new})
    files = state.files
    assert is_packed(files.schema.field("stats").type)
    got = dict(
        zip(
            files.column("path").to_pylist(),
            stats_text(files.column("stats")).to_pylist(),
            strict=True,
        )
    )
    assert got == expected
    dictionaries = {
        b.column("stats").field(0).dictionary.buffers()[1].address: len(
            b.column("stats").field(0).dictionary
        )
        for b in state.active.batches
    }
    # Without packing merged chunks afresh: 247 blocks here, and growing with refreshes.
    assert sum(dictionaries.values()) <= -(-n // BLOCK_ROWS) + 4 * len(dictionaries)
