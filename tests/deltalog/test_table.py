"""DeltaTable: cached snapshots, incremental refresh reading only new commits, version
queries, commit access, thread safety."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable, history
from deltalog.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from tests.support.corpus import copy_table, corpus_table
from tests.support.handlog import write_commit
from tests.support.replay_oracle import CountingStorage, snapshot_keys


def _append_commit(
    root: Path, version: int, adds: list[str] = (), removes: list[str] = (), extra: list[dict] = ()
) -> None:  # type: ignore[assignment]
    lines = [{"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE"}}]
    lines += [
        {
            "add": {
                "path": p,
                "partitionValues": {},
                "size": 5,
                "modificationTime": 1,
                "dataChange": True,
            }
        }
        for p in adds
    ]
    lines += [{"remove": {"path": p, "deletionTimestamp": 2, "dataChange": True}} for p in removes]
    lines += list(extra)
    write_commit(root, version, lines)


def test_snapshot_is_cached() -> None:
    storage = CountingStorage()
    root = corpus_table("delta-rs/simple_table_with_checkpoint")
    table = DeltaTable(str(root), storage=storage)
    first = table.snapshot()
    storage.reset()
    assert table.snapshot() is first
    assert storage.reads == [] and storage.opened == []
    assert len(storage.lists) == 1 and storage.lists[0][1] is not None  # listed after v10


def test_incremental_refresh_reads_only_the_new_commit(tmp_path: Path) -> None:
    root = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path)
    storage = CountingStorage()
    table = DeltaTable(str(root), storage=storage)
    before = table.snapshot()
    victim = before.files.column("path")[0].as_py()
    _append_commit(root, 11, adds=["new-1.parquet", "new-2.parquet"], removes=[victim])
    storage.reset()
    after = table.snapshot()
    assert after.version == 11
    assert storage.reads == [str(root / "_delta_log" / f"{11:020d}.json")]
    assert storage.opened == []  # no checkpoint re-read
    assert [s for _, s in storage.lists] == [str(root / "_delta_log" / f"{11:020d}")]
    cold = DeltaTable(str(root)).snapshot()
    assert snapshot_keys(after.files) == snapshot_keys(cold.files)
    assert snapshot_keys(after.files) == (snapshot_keys(before.files) - {(victim, None)}) | {
        ("new-1.parquet", None),
        ("new-2.parquet", None),
    }
    assert victim in after.tombstones.column("path").to_pylist()
    assert after.timestamp == cold.timestamp
    # The old snapshot is untouched (snapshots are immutable).
    assert before.version == 10 and before.num_files == 11


def test_refresh_picks_up_protocol_metadata_txn_and_domain_changes(tmp_path: Path) -> None:
    root = copy_table("delta-rs/simple_table", tmp_path)
    table = DeltaTable(str(root))
    snap = table.snapshot()
    meta = dict(snap.metadata.raw)
    meta["configuration"] = {"delta.enableInCommitTimestamps": "true"}
    extra = [
        {"metaData": meta},
        {"txn": {"appId": "app", "version": 3}},
        {"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": False}},
    ]
    _append_commit(root, 5, extra=extra)
    lines = (root / "_delta_log" / f"{5:020d}.json").read_text().splitlines()
    info = json.loads(lines[0])
    info["commitInfo"]["inCommitTimestamp"] = 1_234
    lines[0] = json.dumps(info)
    (root / "_delta_log" / f"{5:020d}.json").write_text("\n".join(lines) + "\n")
    snap = table.snapshot()
    assert snap.metadata.configuration == {"delta.enableInCommitTimestamps": "true"}
    assert snap.txns == {"app": 3} and set(snap.domain_metadata) == {"d1"}
    assert snap.timestamp == 1_234
    _append_commit(
        root, 6, extra=[{"domainMetadata": {"domain": "d1", "configuration": "", "removed": True}}]
    )
    snap = table.snapshot()
    assert snap.domain_metadata == {}
    # The latest commit has no inCommitTimestamp, so the table does not use ICT (history's
    # rule): commit 6 is timed by its file, on the monotonised timeline.
    assert snap.timestamp == history.commit_timestamp(table, 6)
    assert (
        snap.timestamp >= (root / "_delta_log" / f"{6:020d}.json").stat().st_mtime_ns // 1_000_000
    )


def test_refresh_after_a_new_checkpoint_and_cleanup(tmp_path: Path) -> None:
    """When the commits since the cached version are gone, a full load takes over."""
    root = copy_table("delta-rs/simple_table", tmp_path)
    table = DeltaTable(str(root))
    table.snapshot(2)
    first = table.snapshot()
    assert first.version == 4
    src = corpus_table("delta-rs/simple_table_with_checkpoint")
    # Replace the log by another table's (newer versions, checkpoint at 10).
    for f in (root / "_delta_log").iterdir():
        if f.is_file():
            f.unlink()
    for f in (src / "_delta_log").iterdir():
        if f.is_file():
            (root / "_delta_log" / f.name).write_bytes(f.read_bytes())
    for v in range(0, 10):
        (root / "_delta_log" / f"{v:020d}.json").unlink()
    snap = table.snapshot()
    assert snap.version == 10 and snap.num_files == 11


def test_refresh_with_a_gap_is_corrupt(tmp_path: Path) -> None:
    root = copy_table("delta-rs/simple_table", tmp_path)
    table = DeltaTable(str(root))
    table.snapshot()
    _append_commit(root, 6, adds=["x.parquet"])
    with pytest.raises(CorruptLogError):
        table.snapshot()


def test_latest_version_is_cheap(tmp_path: Path) -> None:
    root = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path)
    storage = CountingStorage()
    table = DeltaTable(str(root), storage=storage)
    assert table.latest_version() == 10
    assert storage.opened == [] and all(s is not None for _, s in storage.lists)
    table.snapshot()
    _append_commit(root, 11, adds=["y.parquet"])
    storage.reset()
    assert table.latest_version() == 11
    assert storage.reads == [] and storage.lists == [
        (str(root / "_delta_log") + "/", str(root / "_delta_log" / f"{11:020d}"))
    ]


def test_earliest_version() -> None:
    assert DeltaTable(str(corpus_table("delta-rs/simple_table"))).earliest_version() == 0
    assert DeltaTable(str(corpus_table("delta-rs/checkpoints_vacuumed"))).earliest_version() == 5
    with pytest.raises(TableNotFoundError):
        DeltaTable(
            str(corpus_table("delta-kernel-rs/golden_data/no-delta-log-folder/delta"))
        ).earliest_version()


def test_commits_and_commit_file_info() -> None:
    root = corpus_table("delta-rs/cdf-table")
    table = DeltaTable(str(root))
    commits = list(table.commits(1, 3))
    assert [c.version for c in commits] == [1, 2, 3]
    assert all(c.commit_info is not None for c in commits)
    assert [c.version for c in table.commits(2)] == [2, 3]
    info = table.commit_file_info(2)
    assert info.key.endswith(f"{2:020d}.json") and info.size > 0
    c = table.read_commit(2)
    assert c.timestamp == info.modification_time == c.file_modification_time
    assert c.cdcs.num_rows > 0 or c.adds.num_rows > 0
    with pytest.raises(VersionNotFoundError) as err:
        table.commit_file_info(99)
    assert err.value.latest == 3
    with pytest.raises(VersionNotFoundError):
        list(table.commits(2, 9))


def test_read_commit_uses_in_commit_timestamps() -> None:
    table = DeltaTable(str(corpus_table("delta-rs/cdc_ict_table")))
    c = table.read_commit(1)
    assert c.in_commit_timestamp is not None and c.timestamp == c.in_commit_timestamp
    assert c.file_modification_time == table.commit_file_info(1).modification_time


def test_bad_json_names_the_file(tmp_path: Path) -> None:
    root = copy_table("delta-rs/simple_table", tmp_path)
    (root / "_delta_log" / f"{5:020d}.json").write_text('{"add": {"path": "a"}}\n{not json\n')
    with pytest.raises(CorruptLogError, match=f"{5:020d}.json"):
        DeltaTable(str(root)).snapshot()


def test_time_travel_cache_and_forward_replay() -> None:
    storage = CountingStorage()
    root = corpus_table("delta/kernel-defaults/basic-dv-with-checkpoint")
    table = DeltaTable(str(root), storage=storage)
    s20 = table.snapshot(20)
    storage.reset()
    assert table.snapshot(20) is s20 and storage.reads == []
    s22 = table.snapshot(22)
    # Built forward from the cached version 20: two commits, no checkpoint.
    assert [k.rsplit("/", 1)[1] for k in storage.reads] == [f"{21:020d}.json", f"{22:020d}.json"]
    assert storage.opened == []
    assert snapshot_keys(s22.files) == snapshot_keys(DeltaTable(str(root)).snapshot(22).files)


def test_concurrent_snapshot_calls(tmp_path: Path) -> None:
    root = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path)
    table = DeltaTable(str(root))
    results: list[int] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for v in (None, 3, 7, None):
                snap = table.snapshot(v)
                results.append(snap.num_files)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for i, t in enumerate(threads):
        t.start()
        if i == 3:
            _append_commit(root, 11, adds=["z.parquet"])
    for t in threads:
        t.join()
    assert not errors
    assert table.snapshot().version == 11 and table.snapshot().num_files == 12


def _write_big_table(root: Path, n: int) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True)
    paths = np.char.add("part-", np.arange(n).astype(str)).astype(object)
    add = pa.StructArray.from_arrays(
        [
            pa.array(paths, pa.string()),
            pa.array([[]] * n, pa.map_(pa.string(), pa.string())),
            pa.array(np.full(n, 1000, dtype=np.int64)),
            pa.array(np.full(n, 1, dtype=np.int64)),
            pa.array(np.ones(n, dtype=bool)),
            pa.array(np.full(n, '{"numRecords":10}', dtype=object), pa.string()),
        ],
        names=["path", "partitionValues", "size", "modificationTime", "dataChange", "stats"],
    )
    protocol = pa.array(
        [{"minReaderVersion": 1, "minWriterVersion": 2}] + [None] * n,
        pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())]),
    )
    meta_type = pa.struct(
        [
            ("id", pa.string()),
            ("schemaString", pa.string()),
            ("partitionColumns", pa.list_(pa.string())),
        ]
    )
    schema = '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]}'
    metadata = pa.array(
        [None, {"id": "t", "schemaString": schema, "partitionColumns": []}] + [None] * (n - 1),
        meta_type,
    )
    nulls = pa.nulls(1, add.type)
    table = pa.table(
        {"add": pa.concat_arrays([nulls, add]), "protocol": protocol, "metaData": metadata}
    )
    pq.write_table(table, log / f"{0:020d}.checkpoint.parquet")
    (log / "_last_checkpoint").write_text(json.dumps({"version": 0, "size": n + 2}))


def test_incremental_refresh_on_a_large_snapshot_reads_only_the_new_commit(
    tmp_path: Path,
) -> None:
    """A refresh of a 300k-file snapshot reads the new commit and nothing else, and keeps
    the large chunk as it is (the time is measured by bench/refresh_steady.py)."""
    n = 300_000
    _write_big_table(tmp_path, n)
    storage = CountingStorage()
    table = DeltaTable(str(tmp_path), storage)
    first = table.snapshot()
    assert first.num_files == n
    storage.reset()
    _append_commit(tmp_path, 1, adds=["fresh.parquet"])
    snap = table.snapshot()
    assert snap.version == 1 and snap.num_files == n + 1
    assert storage.reads == [str(tmp_path / "_delta_log" / f"{1:020d}.json")]
    assert storage.opened == []  # the checkpoint is not read again
    storage.reset()
    _append_commit(tmp_path, 2, removes=["part-7"])
    snap = table.snapshot()
    assert snap.num_files == n
    assert storage.reads == [str(tmp_path / "_delta_log" / f"{2:020d}.json")]
    assert storage.opened == []
    assert "part-7" not in set(snap.files.column("path").to_pylist())
