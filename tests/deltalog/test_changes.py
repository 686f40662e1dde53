"""The change data feed and streaming changes, against deltalake's load_cdf and logs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog.change_data import read_changes_data
from deltalog.changes import (
    ChangeDataNotRecordedError,
    check_cdf_enabled,
    data_changes,
    is_noop_merge,
    table_changes,
)
from deltalog.history import commit_timestamp
from deltalog.table import DeltaTable
from tests.support.corpus import corpus_table
from tests.support.handlog import add, cdc, commit_info, metadata, protocol, remove, write_commit

CDF_ON = {"delta.enableChangeDataFeed": "true"}
CDF_OFF = {"delta.enableChangeDataFeed": "false"}


def _rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    values = [table.column(name).to_pylist() for name in columns]
    return sorted(zip(*values, strict=True), key=repr)


def _data_columns(table: DeltaTable) -> list[str]:
    schema = json.loads(table.snapshot().metadata.schema_string)
    return [f["name"] for f in schema["fields"]]


# --------------------------------------------------------------------------------------
# Rows equal deltalake's load_cdf


@pytest.mark.parametrize(
    ("relative", "start", "end"),
    [
        ("delta-rs/cdf-table", 0, 3),
        ("delta-rs/cdf-table", 1, 2),
        ("delta-rs/cdf-table", 3, 3),
        ("delta-rs/cdf-table-non-partitioned", 0, 4),
        ("delta-rs/cdf-table-non-partitioned", 2, 4),
        ("delta-rs/cdf-table-with-cdc-and-dvs", 0, 25),
        ("delta-rs/cdf-table-with-cdc-and-dvs", 9, 13),
        ("delta-rs/cdf-table-with-cdc-and-dvs", 16, 22),
        ("delta-kernel-rs/data/cdf-table-with-dv", 0, 6),
        ("delta-kernel-rs/data/cdf-table-with-dv", 3, 5),
        ("delta-kernel-rs/data/compacted-log-files-table", 0, 25),
        ("delta-rs/simple_table_with_cdc", 0, 2),
        ("delta-rs/cdc_ict_table", 0, 3),
        ("delta-rs/cdc_ict_table", 2, 3),
        ("delta/golden/commit-info-containing-arbitrary-operationParams-types", 0, 2),
    ],
)
def test_change_rows_match_deltalake(relative: str, start: int, end: int) -> None:
    import deltalake

    root = corpus_table(relative)
    table = DeltaTable(str(root))
    check_cdf_enabled(table, start, end)
    ours = read_changes_data(table, start, end)
    theirs = pa.table(
        deltalake.DeltaTable(str(root))
        .load_cdf(starting_version=start, ending_version=end)
        .read_all()
    )
    columns = [*_data_columns(table), "_change_type", "_commit_version"]
    assert ours.num_rows > 0
    assert _rows(ours, columns) == _rows(theirs, columns)


def test_change_rows_carry_commit_timestamps() -> None:
    table = DeltaTable(str(corpus_table("delta-rs/cdc_ict_table")))
    rows = read_changes_data(table, 0, 3)
    by_version = dict(
        zip(
            rows.column("_commit_version").to_pylist(),
            rows.column("_commit_timestamp").cast(pa.int64()).to_pylist(),
            strict=True,
        )
    )
    assert by_version == {v: commit_timestamp(table, v) for v in (1, 2, 3)}
    assert by_version[2] == 1783874212175  # the commit's in-commit timestamp


# --------------------------------------------------------------------------------------
# Tables deltalake cannot read: counts derived from the log and the files directly


def _expected_counts(root: Path, start: int, end: int) -> Counter[tuple[int, str]]:
    """(version, change type) -> rows, straight from the JSON log and parquet footers:
    cdc files' own _change_type column, else data-changing adds/removes as whole files
    less their DV cardinality (these tables have no DV re-adds)."""
    counts: Counter[tuple[int, str]] = Counter()
    for version in range(start, end + 1):
        lines = (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
        actions = [json.loads(line) for line in lines if line.strip()]
        cdcs = [a["cdc"] for a in actions if "cdc" in a]
        if cdcs:
            for action in cdcs:
                types = pq.read_table(root / unquote(action["path"]), columns=["_change_type"])
                for change, n in Counter(types.column(0).to_pylist()).items():
                    counts[(version, change)] += n
            continue
        for kind, change in (("add", "insert"), ("remove", "delete")):
            for a in actions:
                if kind in a and a[kind]["dataChange"]:
                    rows = pq.ParquetFile(root / unquote(a[kind]["path"])).metadata.num_rows
                    dv = a[kind].get("deletionVector") or {}
                    counts[(version, change)] += rows - dv.get("cardinality", 0)
    return +counts


@pytest.mark.parametrize(
    ("relative", "start", "end"),
    [
        ("delta-kernel-rs/data/cdf-table-update-ops", 0, 2),
        ("delta-kernel-rs/data/cdf-table-delete-conditional-two-rows", 0, 1),
        ("delta-kernel-rs/data/cdf-table-delete-unconditional", 0, 1),
        ("delta-kernel-rs/data/cdf-table-partitioned", 0, 2),
        ("delta-kernel-rs/data/cdf-table-simple", 0, 2),
        ("delta-kernel-rs/data/cdf-table-data-change", 0, 1),
        ("delta-kernel-rs/data/cdf-column-mapping-id-mode", 1, 4),
        ("delta-kernel-rs/data/cdf-column-mapping-name-mode-3-7", 1, 4),
    ],
)
def test_change_counts_on_tables_deltalake_cannot_read(relative: str, start: int, end: int) -> None:
    """deltalake's load_cdf rejects column mapping and does not decode `%` in paths."""
    root = corpus_table(relative)
    table = DeltaTable(str(root))
    check_cdf_enabled(table, start, end)
    ours = read_changes_data(table, start, end)
    got = Counter(
        zip(
            ours.column("_commit_version").to_pylist(),
            ours.column("_change_type").to_pylist(),
            strict=True,
        )
    )
    assert got == _expected_counts(root, start, end)
    for name in _data_columns(table):  # mapped columns were found by physical name / id
        assert ours.num_rows == 0 or ours.column(name).null_count < ours.num_rows, name


def test_optimize_contributes_no_changes() -> None:
    table = DeltaTable(str(corpus_table("delta-kernel-rs/data/cdf-table-data-change")))
    commits = list(table_changes(table, 0, 1))
    assert [c.version for c in commits] == [0, 1]
    assert commits[0].adds.num_rows == 2
    assert commits[1].adds.num_rows == commits[1].removes.num_rows == 0


# --------------------------------------------------------------------------------------
# CDF enabled or not


def test_cdf_must_be_enabled_at_the_start() -> None:
    table = DeltaTable(str(corpus_table("delta-kernel-rs/data/cdf-column-mapping-id-mode")))
    with pytest.raises(ChangeDataNotRecordedError) as info:
        check_cdf_enabled(table, 0, 4)
    assert str(info.value) == (
        "Error getting change data for range [0, 4] as change data was not recorded for version [0]"
    )
    check_cdf_enabled(table, 1, 4)
    flags = [c.cdf_enabled for c in table_changes(table, 0, 4)]
    assert flags == [False, True, True, True, True]


def _toggling_log(root: Path) -> DeltaTable:
    """CDF on at 0, off at 2 (metaData), on again at 4."""
    write_commit(root, 0, [commit_info(), protocol(), metadata(CDF_ON), add("a.parquet")])
    write_commit(root, 1, [commit_info(), add("b.parquet")])
    write_commit(root, 2, [commit_info("SET TBLPROPERTIES"), metadata(CDF_OFF)])
    write_commit(root, 3, [commit_info(), add("c.parquet")])
    write_commit(root, 4, [commit_info("SET TBLPROPERTIES"), metadata(CDF_ON)])
    write_commit(root, 5, [commit_info(), add("d.parquet")])
    return DeltaTable(str(root))


def test_cdf_disabled_inside_the_range(tmp_path: Path) -> None:
    table = _toggling_log(tmp_path)
    check_cdf_enabled(table, 0, 1)
    check_cdf_enabled(table, 4, 5)
    with pytest.raises(ChangeDataNotRecordedError, match=r"range \[0, 5\] .* version \[2\]"):
        check_cdf_enabled(table, 0, 5)
    with pytest.raises(ChangeDataNotRecordedError, match=r"range \[3, 5\] .* version \[3\]"):
        check_cdf_enabled(table, 3, 5)
    flags = {c.version: c.cdf_enabled for c in table_changes(table, 0, 5)}
    assert flags == {0: True, 1: True, 2: False, 3: False, 4: True, 5: True}


# --------------------------------------------------------------------------------------
# Which file actions a commit contributes


def _merge(inserted: str, updated: str, deleted: str) -> dict[str, Any]:
    metrics = {
        "numTargetRowsInserted": inserted,
        "numTargetRowsUpdated": updated,
        "numTargetRowsDeleted": deleted,
        "numTargetRowsCopied": "10",
    }
    return commit_info("MERGE", operationMetrics=metrics)


def test_merge_without_changed_rows_contributes_no_files(tmp_path: Path) -> None:
    write_commit(tmp_path, 0, [commit_info(), protocol(), metadata(CDF_ON), add("a.parquet")])
    noop = [_merge("0", "0", "0"), remove("a.parquet"), add("b.parquet")]
    write_commit(tmp_path, 1, noop)
    real = [_merge("1", "0", "0"), remove("b.parquet"), add("c.parquet")]
    write_commit(tmp_path, 2, real)
    table = DeltaTable(str(tmp_path))
    commits = list(table_changes(table, 0, 2))
    assert [(c.adds.num_rows, c.removes.num_rows) for c in commits] == [(1, 0), (0, 0), (1, 1)]
    assert commits[2].adds.column("path").to_pylist() == ["c.parquet"]
    # The streaming path has no such exception: the rewrite is data-changing there.
    streamed = list(data_changes(table, 1, 1))
    assert streamed[0].adds.num_rows == streamed[0].removes.num_rows == 1


def test_is_noop_merge() -> None:
    assert is_noop_merge(_merge("0", "0", "0")["commitInfo"])
    assert is_noop_merge(
        {
            "operation": "MERGE",
            "operationMetrics": {
                "numTargetRowsInserted": 0,
                "numTargetRowsUpdated": 0,
                "numTargetRowsDeleted": 0,
            },
        }
    )
    assert not is_noop_merge(_merge("0", "1", "0")["commitInfo"])
    assert not is_noop_merge({"operation": "MERGE", "operationMetrics": {}})
    assert not is_noop_merge({"operation": "UPDATE", "operationMetrics": {}})
    assert not is_noop_merge(None)


def test_cdc_files_replace_adds_and_removes(tmp_path: Path) -> None:
    write_commit(tmp_path, 0, [commit_info(), protocol(), metadata(CDF_ON), add("a.parquet")])
    update = [
        commit_info("UPDATE"),
        remove("a.parquet"),
        add("b.parquet"),
        cdc("_change_data/cdc-1.parquet", 42),
    ]
    write_commit(tmp_path, 1, update)
    table = DeltaTable(str(tmp_path))
    (commit,) = table_changes(table, 1, 1)
    assert commit.uses_cdc_files
    assert commit.cdcs.column("path").to_pylist() == ["_change_data/cdc-1.parquet"]
    assert commit.cdcs.column("size").to_pylist() == [42]
    assert commit.adds.num_rows == commit.removes.num_rows == 0
    assert commit.adds.schema == table.read_commit(1).adds.schema


def test_metadata_and_protocol_changes_are_reported(tmp_path: Path) -> None:
    table = _toggling_log(tmp_path)
    write_commit(tmp_path, 6, [commit_info("UPGRADE PROTOCOL"), protocol(1, 7)])
    commits = list(table_changes(table, 0, 6))
    assert [c.version for c in commits if c.metadata is not None] == [0, 2, 4]
    assert [c.version for c in commits if c.protocol is not None] == [0, 6]
    assert commits[6].protocol is not None and commits[6].protocol.min_writer_version == 7


# --------------------------------------------------------------------------------------
# Streaming: data_changes


def _optimize_log(root: Path) -> DeltaTable:
    write_commit(root, 0, [commit_info(), protocol(), metadata()], 1_000)
    write_commit(root, 1, [commit_info(), add("a.parquet")], 2_000)
    write_commit(root, 2, [commit_info(), add("b.parquet")], 3_000)
    optimize = [
        commit_info("OPTIMIZE"),
        remove("a.parquet", data_change=False),
        remove("b.parquet", data_change=False),
        add("ab.parquet", data_change=False),
    ]
    write_commit(root, 3, optimize, 4_000)
    write_commit(root, 4, [commit_info("DELETE"), remove("ab.parquet"), add("ab2.parquet")], 4_000)
    write_commit(root, 5, [commit_info(), add("c.parquet"), cdc("_change_data/x.parquet")], 6_000)
    return DeltaTable(str(root))


def test_data_changes_skip_optimize(tmp_path: Path) -> None:
    table = _optimize_log(tmp_path)
    commits = list(data_changes(table, 0, 5))
    summary = [
        (c.version, c.adds.column("path").to_pylist(), c.removes.column("path").to_pylist())
        for c in commits
    ]
    assert summary == [
        (0, [], []),
        (1, ["a.parquet"], []),
        (2, ["b.parquet"], []),
        (3, [], []),
        (4, ["ab2.parquet"], ["ab.parquet"]),
        (5, ["c.parquet"], []),  # cdc actions are not part of a streaming query
    ]
    assert [c.timestamp for c in commits] == [1_000, 2_000, 3_000, 4_000, 4_001, 6_000]
    assert commits[0].metadata is not None and commits[0].protocol is not None
    assert all(c.metadata is None for c in commits[1:])


def test_data_changes_of_a_sub_range(tmp_path: Path) -> None:
    table = _optimize_log(tmp_path)
    assert [c.version for c in data_changes(table, 2, 4)] == [2, 3, 4]
    assert [c.version for c in data_changes(table, 4, 4)] == [4]
