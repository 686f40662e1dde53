"""Action reconciliation: keys, precedence, tombstones, and the cost of applying a
commit to a large state."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from deltalog.actions import ADD_SCHEMA, CDC_SCHEMA, REMOVE_SCHEMA, CommitActions
from deltalog.commits import file_actions_table
from deltalog.file_chunks import CHUNK_ROWS
from deltalog.replay import FileState, apply_commits, dv_unique_id, file_keys, replay
from deltalog.table import DeltaTable
from tests.support.corpus import corpus_table
from tests.support.replay_oracle import oracle_keys, snapshot_keys


def _dv(path: str, offset: int | None = None, storage_type: str = "u") -> dict[str, Any]:
    return {
        "storageType": storage_type,
        "pathOrInlineDv": path,
        "offset": offset,
        "sizeInBytes": 10,
        "cardinality": 1,
    }


def _commit(version: int, adds: list[dict] = (), removes: list[dict] = ()) -> CommitActions:  # type: ignore[assignment]
    return CommitActions(
        version=version,
        timestamp=version,
        adds=file_actions_table("add", [{"size": 1, **a} for a in adds], version, "t"),
        removes=file_actions_table("remove", list(removes), version, "t"),
        cdcs=CDC_SCHEMA.empty_table(),
    )


def _keys(table: pa.Table) -> list[tuple[str, str | None]]:
    ids = dv_unique_id(table.column("deletionVector")).to_pylist()
    return sorted(
        zip(table.column("path").to_pylist(), ids, strict=True), key=lambda k: (k[0], k[1] or "")
    )


def _run(*commits: CommitActions) -> tuple[pa.Table, pa.Table]:
    return replay(ADD_SCHEMA.empty_table(), REMOVE_SCHEMA.empty_table(), list(commits))


def test_add_then_remove_then_readd() -> None:
    files, tombs = _run(
        _commit(0, adds=[{"path": "a"}, {"path": "b"}]), _commit(1, removes=[{"path": "a"}])
    )
    assert _keys(files) == [("b", None)]
    assert _keys(tombs) == [("a", None)]
    files, tombs = _run(
        _commit(0, adds=[{"path": "a"}]),
        _commit(1, removes=[{"path": "a"}]),
        _commit(2, adds=[{"path": "a", "size": 9}]),
    )
    assert _keys(files) == [("a", None)] and tombs.num_rows == 0
    assert files.column("size").to_pylist() == [9]
    assert files.column("version").to_pylist() == [2]


def test_later_add_of_same_key_replaces_earlier() -> None:
    files, _ = _run(
        _commit(0, adds=[{"path": "a", "stats": "old"}]),
        _commit(1, adds=[{"path": "a", "stats": "new"}]),
    )
    assert files.column("stats").to_pylist() == ["new"]
    # Within one commit the last line wins too.
    files, _ = _run(_commit(0, adds=[{"path": "a", "stats": "1"}, {"path": "a", "stats": "2"}]))
    assert files.column("stats").to_pylist() == ["2"]


def test_deletion_vector_ids_are_part_of_the_key() -> None:
    files, tombs = _run(
        _commit(0, adds=[{"path": "a"}]),
        _commit(1, removes=[{"path": "a"}], adds=[{"path": "a", "deletionVector": _dv("dv1")}]),
        _commit(
            2,
            removes=[{"path": "a", "deletionVector": _dv("dv1")}],
            adds=[{"path": "a", "deletionVector": _dv("dv2", 4)}],
        ),
    )
    assert _keys(files) == [("a", "udv2@4")]
    assert _keys(tombs) == [("a", None), ("a", "udv1")]


def test_remove_with_other_dv_does_not_cancel() -> None:
    files, tombs = _run(
        _commit(0, adds=[{"path": "a", "deletionVector": _dv("x", 1)}]),
        _commit(1, removes=[{"path": "a", "deletionVector": _dv("x", 2)}, {"path": "a"}]),
    )
    assert _keys(files) == [("a", "ux@1")]
    assert len(_keys(tombs)) == 2


def test_inline_dv_id_has_no_offset() -> None:
    dv = pa.array(
        [_dv("abc", None, "i"), None, _dv("p", 3, "p")], ADD_SCHEMA.field("deletionVector").type
    )
    assert dv_unique_id(dv).to_pylist() == ["iabc", None, "pp@3"]


def test_add_and_remove_of_one_key_in_one_commit_keeps_the_add() -> None:
    files, tombs = _run(_commit(0, adds=[{"path": "a"}], removes=[{"path": "a"}]))
    assert _keys(files) == [("a", None)] and tombs.num_rows == 0


def test_file_uri_and_absolute_path_are_the_same_file() -> None:
    files, tombs = _run(
        _commit(0, adds=[{"path": "/x/y"}]), _commit(1, removes=[{"path": "file:///x/y"}])
    )
    assert files.num_rows == 0 and tombs.num_rows == 1
    files, _ = _run(
        _commit(0, adds=[{"path": "/x/y"}]), _commit(1, removes=[{"path": "file:/x/y"}])
    )
    assert files.num_rows == 0


def test_base_is_only_copied_when_touched() -> None:
    n = CHUNK_ROWS + 5  # one full chunk (never merged) and a small one
    base = FileState.from_base(
        file_actions_table("add", [{"path": f"f{i}"} for i in range(n)], 0, "t"),
        REMOVE_SCHEMA.empty_table(),
    )
    full = base.files.column("path").chunk(0)
    after = apply_commits(base, [_commit(1, adds=[{"path": "new"}])])
    assert after.files.num_rows == n + 1
    # The untouched full chunk is reused as is (no filter copy, no merge).
    assert after.files.column("path").chunk(0).buffers()[2].address == full.buffers()[2].address
    after = apply_commits(after, [_commit(2, removes=[{"path": f"f{n - 2}"}])])
    assert after.files.column("path").chunk(0).buffers()[2].address == full.buffers()[2].address
    assert after.files.num_rows == n
    assert f"f{n - 2}" not in after.files.column("path").to_pylist()[CHUNK_ROWS:]
    after = apply_commits(after, [_commit(3, removes=[{"path": "f3"}])])
    assert "f3" not in after.files.column("path").to_pylist()
    assert after.files.num_rows == n - 1
    assert after.file_keys.to_pylist() == after.files.column("path").to_pylist()
    assert apply_commits(after, []) is after


def test_tombstone_is_cleared_by_readd_and_replaced_by_newer_remove() -> None:
    base = FileState.from_base(
        ADD_SCHEMA.empty_table(),
        file_actions_table("remove", [{"path": "a", "deletionTimestamp": 1}], 0, "t"),
    )
    state = apply_commits(base, [_commit(1, adds=[{"path": "a"}])])
    assert state.tombstones.num_rows == 0 and state.files.num_rows == 1
    state = apply_commits(state, [_commit(2, removes=[{"path": "a", "deletionTimestamp": 5}])])
    assert state.files.num_rows == 0
    assert state.tombstones.column("deletionTimestamp").to_pylist() == [5]


@pytest.mark.parametrize(
    "relative",
    [
        "delta-kernel-rs/golden_data/log-replay-dv-key-cases/delta",
        "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
        "delta-kernel-rs/golden_data/dv-with-columnmapping/delta",
        "delta-kernel-rs/data/cdf-table-with-dv",
        "delta/kernel-defaults/basic-dv-with-checkpoint",
        "delta-rs/table_with_deletion_logs",
        "delta-rs/cdf-table-with-cdc-and-dvs",
        "delta-kernel-rs/golden_data/delete-re-add-same-file-different-transactions/delta",
        "delta-kernel-rs/golden_data/log-replay-special-characters/delta",
    ],
)
def test_dv_keys_match_an_independent_replay(relative: str) -> None:
    root = corpus_table(relative)
    expected = oracle_keys(root)
    assert expected is not None
    assert snapshot_keys(DeltaTable(str(root)).snapshot().files) == expected


def _big_base(n: int) -> FileState:
    paths = pa.array(
        np.char.add("part=1/file-", np.arange(n).astype(str)).astype(object), pa.string()
    )
    cols = {f.name: pa.nulls(n, f.type) for f in ADD_SCHEMA}
    cols["path"] = paths
    cols["size"] = pa.array(np.full(n, 100, dtype=np.int64))
    adds = pa.Table.from_pydict(cols, schema=ADD_SCHEMA)
    return FileState.from_base(adds, REMOVE_SCHEMA.empty_table())


def test_one_commit_on_a_million_files_leaves_the_full_chunks_in_place() -> None:
    """A commit costs in proportion to the commit, not the table: the base's full chunks
    are carried over as the same buffers (bench/refresh_steady.py measures the time)."""
    base = _big_base(1_000_000)
    append = _commit(1, adds=[{"path": f"new-{i}"} for i in range(10)])
    delete = _commit(2, removes=[{"path": "part=1/file-17"}], adds=[{"path": "new-x"}])
    after = apply_commits(apply_commits(base, [append]), [delete])
    assert after.files.num_rows == 1_000_000 + 10
    paths = set(after.files.column("path").to_pylist())
    assert "part=1/file-17" not in paths and {"new-0", "new-9", "new-x"} <= paths

    def addresses(files: pa.Table) -> set[int]:
        return {
            buffer.address
            for chunk in files.column("path").chunks
            for buffer in chunk.buffers()
            if buffer is not None
        }

    shared = addresses(base.files) & addresses(after.files)
    assert len(shared) >= len(addresses(base.files)) - 3 * 3  # at most a few chunks rebuilt


def test_file_keys_without_dvs_are_the_paths() -> None:
    adds = file_actions_table("add", [{"path": "a"}, {"path": "b"}], 0, "t")
    assert file_keys(adds).to_pylist() == ["a", "b"]
