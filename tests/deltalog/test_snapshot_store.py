"""The snapshot store: snapshots written once as Arrow IPC files, mapped by every process
that opens the same table version, never served when truncated, corrupt, stale or
written for another table or version."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import deltalake
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable, Snapshot, SnapshotStore
from deltalog.packed_stats import text_schema, text_table
from deltalog.snapshot_store import _TRAILER, FORMAT, SUFFIX, table_identity
from tests.support import REPO_ROOT
from tests.support import handlog as h
from tests.support.corpus import copy_table
from tests.support.replay_oracle import CountingStorage, oracle_keys, snapshot_keys


def _write_table(root: Path) -> None:
    """A deltalake table: three appends, a classic checkpoint, two more appends."""
    for i in range(3):
        data = pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64()), "p": ["a"] * 10})
        deltalake.write_deltalake(str(root), data, mode="append", partition_by=["p"])
    deltalake.DeltaTable(str(root)).create_checkpoint()
    for i in range(3, 5):
        data = pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64()), "p": ["b"] * 10})
        deltalake.write_deltalake(str(root), data, mode="append", partition_by=["p"])


def _append(root: Path, *names: str, remove: tuple[str, ...] = ()) -> int:
    """A hand-written commit after the table's latest; returns its version."""
    version = max(int(p.name[:20]) for p in (root / "_delta_log").glob("*.json")) + 1
    actions = [h.commit_info(), *(h.add(n, stats='{"numRecords":1}') for n in names)]
    actions += [h.remove(n) for n in remove]
    h.write_commit(root, version, actions)
    return version


def _rows(files: pa.Table) -> list[tuple[object, ...]]:
    columns = ["path", "size", "version", "stats"]
    files = text_table(files)
    return sorted(zip(*(files.column(c).to_pylist() for c in columns), strict=True))


def _fresh(root: Path) -> pa.Table:
    return DeltaTable(str(root)).snapshot().files


def _store_file(store: SnapshotStore, root: Path, version: int) -> Path:
    return store.path(table_identity(CountingStorage(), str(root)), version)


@pytest.fixture
def table(tmp_path: Path) -> Path:
    root = tmp_path / "table"
    _write_table(root)
    return root


def test_a_second_table_maps_instead_of_replaying(table: Path, tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store")
    first = CountingStorage()
    snap = DeltaTable(str(table), first, snapshot_store=store).snapshot()
    assert any(k.endswith(".checkpoint.parquet") for k in first.opened)
    path = _store_file(store, table, snap.version)
    assert path.is_file()
    second = CountingStorage()
    mapped = DeltaTable(str(table), second, snapshot_store=store).snapshot()
    # One listing of _delta_log (to know nothing changed), nothing read or opened.
    assert second.opened == [] and second.reads == []
    assert len(second.lists) == 1
    assert mapped.version == snap.version
    assert mapped.protocol == snap.protocol and mapped.metadata == snap.metadata
    assert mapped.metadata.raw == snap.metadata.raw
    assert _rows(mapped.files) == _rows(snap.files) == _rows(_fresh(table))
    assert mapped.files.schema == snap.files.schema
    assert _rows(mapped.tombstones) == _rows(snap.tombstones)
    # The rows are the file's pages, not a copy.
    address = mapped.files.column("path").chunk(0).buffers()[2].address
    assert _mapping_of(address) == str(path)


def _mapping_of(address: int) -> str | None:
    """The file mapped at `address` in this process (from /proc/self/maps)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= address < hi:
            return parts[5].strip() if len(parts) == 6 else None
    return None


_PROCESS = textwrap.dedent(
    """
    import json, sys
    from deltalog import DeltaTable, Snapshot, SnapshotStore
    from tests.support.replay_oracle import CountingStorage
    storage = CountingStorage()
    table = DeltaTable(sys.argv[1], storage, snapshot_store=SnapshotStore(sys.argv[2]))
    snap = table.snapshot()
    print(json.dumps({
        "version": snap.version,
        "paths": sorted(snap.files.column("path").to_pylist()),
        "opened": storage.opened,
        "reads": storage.reads,
        "lists": len(storage.lists),
    }))
    """
)


def _process(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", _PROCESS, *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(process: subprocess.Popen[str]) -> dict[str, object]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return json.loads(out)


def test_a_second_process_maps_instead_of_replaying(table: Path, tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    built = _result(_process(str(table), store))
    assert any(str(k).endswith(".checkpoint.parquet") for k in built["opened"])  # type: ignore[union-attr]
    mapped = _result(_process(str(table), store))
    assert mapped["opened"] == [] and mapped["reads"] == [] and mapped["lists"] == 1
    assert mapped["paths"] == built["paths"]
    assert mapped["version"] == built["version"]


def test_concurrent_processes_build_once(table: Path, tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    results = [_result(p) for p in [_process(str(table), store) for _ in range(3)]]
    builders = [r for r in results if r["opened"]]
    assert len(builders) == 1, [r["opened"] for r in results]
    assert all(r["paths"] == results[0]["paths"] for r in results)


def test_restart_after_new_commits_replays_only_them(table: Path, tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store")
    base = DeltaTable(str(table), snapshot_store=store).snapshot()
    first = _append(table, "x1.parquet", "x2.parquet")
    second = _append(table, "x3.parquet", remove=("x1.parquet",))
    counting = CountingStorage()
    snap = DeltaTable(str(table), counting, snapshot_store=store).snapshot()
    assert snap.version == second == base.version + 2
    assert counting.opened == []
    assert sorted(Path(k).name for k in counting.reads) == [
        f"{first:020d}.json",
        f"{second:020d}.json",
    ]
    assert _rows(snap.files) == _rows(_fresh(table))


def test_incremental_refresh_of_a_mapped_snapshot(table: Path, tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store")
    DeltaTable(str(table), snapshot_store=store).snapshot()
    followed = DeltaTable(str(table), snapshot_store=store)
    mapped = followed.snapshot()
    victim = mapped.files.column("path")[0].as_py()
    for i in range(5):
        _append(table, f"n{i}.parquet", remove=(victim,) if i == 2 else ())
        snap = followed.snapshot()
        assert _rows(snap.files) == _rows(_fresh(table))
    assert victim not in snap.files.column("path").to_pylist()
    assert victim in snap.tombstones.column("path").to_pylist()


def test_followed_snapshot_is_written_again_after_some_commits(table: Path, tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store", rewrite_after=3, keep=2)
    followed = DeltaTable(str(table), snapshot_store=store)
    start = followed.snapshot().version
    identity = table_identity(CountingStorage(), str(table))
    for i in range(7):
        _append(table, f"n{i}.parquet")
        followed.snapshot()
        store.flush()
    assert store.versions(identity) == [start + 6, start + 3]
    counting = CountingStorage()
    restarted = DeltaTable(str(table), counting, snapshot_store=store).snapshot()
    assert restarted.version == start + 7
    assert [Path(k).name for k in counting.reads] == [f"{start + 7:020d}.json"]
    assert _rows(restarted.files) == _rows(_fresh(table))
    store.close()


def _rebuilds(table: Path, store: SnapshotStore) -> CountingStorage:
    counting = CountingStorage()
    snap = DeltaTable(str(table), counting, snapshot_store=store).snapshot()
    assert _rows(snap.files) == _rows(_fresh(table))
    return counting


def _built(counting: CountingStorage) -> bool:
    """Did the reader open a checkpoint file (i.e. load from the log, not the store)?"""
    return any(".checkpoint." in k for k in [*counting.opened, *counting.reads])


@pytest.mark.parametrize(
    "damage",
    ["truncate", "truncate_little", "flip_data", "flip_header", "garbage", "empty"],
)
def test_damaged_files_are_detected_and_rebuilt(
    table: Path, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="deltalog.snapshot_store")
    store = SnapshotStore(tmp_path / "store")
    version = DeltaTable(str(table), snapshot_store=store).snapshot().version
    path = _store_file(store, table, version)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "truncate_little":
        data = data[:-1]
    elif damage == "flip_data":
        data[len(data) // 3] ^= 0x40
    elif damage == "flip_header":
        data[-100] ^= 0x01
    elif damage == "garbage":
        data = bytearray(os.urandom(len(data)))
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert _built(_rebuilds(table, store))
    assert "is not usable" in caplog.text
    # Rebuilt and whole again: the next table maps it.
    assert not _built(_rebuilds(table, store))


def test_stale_file_of_a_recreated_table_is_rebuilt(table: Path, tmp_path: Path) -> None:
    """The table is deleted and written again at the same location, to the same version:
    the stored snapshot no longer matches the log's commit file."""
    store = SnapshotStore(tmp_path / "store")
    old = DeltaTable(str(table), snapshot_store=store).snapshot()
    shutil.rmtree(table)
    root = table
    for i in range(old.version + 1):
        data = pa.table({"id": pa.array([100 + i], pa.int64()), "p": ["z"]})
        deltalake.write_deltalake(str(root), data, mode="append", partition_by=["p"])
    counting = _rebuilds(table, store)
    assert any(k.endswith(".json") for k in counting.reads)
    snap = DeltaTable(str(table), snapshot_store=store).snapshot()
    assert snap.version == old.version
    assert snap.metadata.id != old.metadata.id


def test_file_of_another_version_or_table_is_not_served(
    table: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="deltalog.snapshot_store")
    store = SnapshotStore(tmp_path / "store")
    version = DeltaTable(str(table), snapshot_store=store).snapshot().version
    path = _store_file(store, table, version)
    # Another version's file under this version's name: refused (and removed); the
    # genuine older file is mapped and the newer commit replayed on it.
    _append(table, "x.parquet")
    newer = DeltaTable(str(table), snapshot_store=SnapshotStore(tmp_path / "other")).snapshot()
    shutil.copy(path, _store_file(store, table, newer.version))
    counting = _rebuilds(table, store)
    assert f"holds version {version}, not {newer.version}" in caplog.text
    assert not _store_file(store, table, newer.version).exists()
    assert [Path(k).name for k in counting.reads] == [f"{newer.version:020d}.json"]
    # Another table's file under this table's name.
    other = tmp_path / "other_table"
    _write_table(other)
    _append(other, "y.parquet")
    other_version = DeltaTable(str(other), snapshot_store=store).snapshot().version
    assert other_version == newer.version
    for stored in store.table_dir(table_identity(CountingStorage(), str(table))).glob("*" + SUFFIX):
        stored.unlink()
    shutil.copy(_store_file(store, other, other_version), _store_file(store, table, newer.version))
    assert _built(_rebuilds(table, store))
    assert "written for another table" in caplog.text


def test_store_without_write_access_still_serves(table: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "store"
    blocked.write_text("not a directory")
    snap = DeltaTable(str(table), snapshot_store=SnapshotStore(blocked)).snapshot()
    assert _rows(snap.files) == _rows(_fresh(table))


@pytest.mark.parametrize(
    "relative",
    [
        "delta-kernel-rs/golden_data/log-replay-dv-key-cases/delta",
        "delta/kernel-defaults/basic-dv-with-checkpoint",
        "delta-kernel-rs/data/v1-multi-part-partitioned-struct-stats-only",
        "delta-rs/delta-1.2.1-only-struct-stats",
        "levi/dat/with_checkpoint/delta",
    ],
)
def test_corpus_tables_round_trip(relative: str, tmp_path: Path) -> None:
    """Deletion-vector keys, typed statistics, tombstones and checkpoint versions come
    back from the store as they went in, and replay continues from them."""
    root = copy_table(relative, tmp_path)
    store = SnapshotStore(tmp_path / "store")
    built = DeltaTable(str(root), snapshot_store=store).snapshot()
    counting = CountingStorage()
    mapped = DeltaTable(str(root), counting, snapshot_store=store).snapshot()
    assert not _built(counting) and counting.reads == []
    assert mapped.files.schema == built.files.schema
    assert mapped.files.to_pylist() == built.files.to_pylist()
    assert mapped.tombstones.to_pylist() == built.tombstones.to_pylist()
    assert mapped.checkpoint_version == built.checkpoint_version
    assert mapped.txns == built.txns and mapped.domain_metadata == built.domain_metadata
    assert mapped.file_state.file_keys.equals(built.file_state.file_keys)
    expected = oracle_keys(root)
    if expected is not None:
        assert snapshot_keys(mapped.files) == expected


def _same_snapshot(mapped: Snapshot, loaded: Snapshot) -> None:
    """Row for row and chunk for chunk (statistics packed in memory, strings in the
    store: deltalog.packed_stats)."""
    assert mapped.version == loaded.version
    assert mapped.files.schema == text_schema(loaded.files.schema)
    assert mapped.files.to_pylist() == text_table(loaded.files).to_pylist()
    assert [b.num_rows for b in mapped.file_state.active.batches] == [
        b.num_rows for b in loaded.file_state.active.batches
    ]
    assert mapped.tombstones.to_pylist() == loaded.tombstones.to_pylist()
    assert mapped.file_state.file_keys.equals(loaded.file_state.file_keys)
    assert mapped.file_state.tombstone_keys.equals(loaded.file_state.tombstone_keys)
    assert mapped.protocol == loaded.protocol and mapped.metadata == loaded.metadata
    assert mapped.metadata.raw == loaded.metadata.raw
    assert mapped.txns == loaded.txns and mapped.domain_metadata == loaded.domain_metadata
    assert mapped.checkpoint_version == loaded.checkpoint_version
    assert mapped.in_commit_timestamp == loaded.in_commit_timestamp


@pytest.mark.parametrize(
    "relative",
    [
        "delta-kernel-rs/golden_data/checkpoint/delta",
        "delta-kernel-rs/golden_data/multi-part-checkpoint/delta",
        "delta-kernel-rs/data/v2-checkpoints-parquet-with-sidecars",
        "delta-kernel-rs/data/v2-checkpoints-json-with-sidecars",
        "delta-kernel-rs/data/v2-classic-checkpoint-json",
        "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
        "delta-rs/checkpoint-v2-table",
        "delta-rs/delta-1.2.1-only-struct-stats",
        "delta-kernel-rs/data/app-txn-checkpoint",
        "delta-rs/table-with-domain-metadata",
        "levi/dat/with_checkpoint/delta",
    ],
)
def test_streamed_build_matches_the_in_memory_load(relative: str, tmp_path: Path) -> None:
    """The first process streams the checkpoint into the store file; what it maps is
    what loading the same log in memory gives."""
    root = copy_table(relative, tmp_path)
    counting = CountingStorage()
    mapped = DeltaTable(
        str(root), counting, snapshot_store=SnapshotStore(tmp_path / "s")
    ).snapshot()
    assert _built(counting) or any(k.endswith(".json") for k in counting.reads)
    _same_snapshot(mapped, DeltaTable(str(root)).snapshot())


def test_streamed_build_of_a_large_checkpoint_with_commits(tmp_path: Path) -> None:
    """Many row groups of odd sizes, commits after the checkpoint that remove and re-add
    checkpointed files: the streamed file equals the in-memory replay, chunk for chunk."""
    root = tmp_path / "large"
    _write_large_table(root, 70_000, row_group_size=7_001)
    for v in range(2, 6):
        removed = tuple(f"part-{i}" for i in range(v * 997, 70_000, 9_973))
        _append(root, f"new-{v}", "part-5", remove=removed)
    store = SnapshotStore(tmp_path / "store")
    mapped = DeltaTable(str(root), snapshot_store=store).snapshot()
    _same_snapshot(mapped, DeltaTable(str(root)).snapshot())
    assert mapped.files.column("path").chunk(0).buffers()[2].address != 0


def test_paths_that_are_not_their_keys_are_built_in_memory(tmp_path: Path) -> None:
    """`file:` URIs (whose keys are canonical paths) in the commits after a checkpoint:
    the streamed layout cannot hold them, the snapshot is loaded in memory and saved."""
    root = tmp_path / "t"
    _write_table(root)
    _append(root, f"file:{root}/abs.parquet")
    mapped = DeltaTable(str(root), snapshot_store=SnapshotStore(tmp_path / "s")).snapshot()
    _same_snapshot(mapped, DeltaTable(str(root)).snapshot())
    counting = CountingStorage()
    again = DeltaTable(str(root), counting, snapshot_store=SnapshotStore(tmp_path / "s"))
    _same_snapshot(again.snapshot(), mapped)
    assert counting.reads == [] and not _built(counting)


# Memory shared between processes --------------------------------------------------------

ADD_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", pa.map_(pa.string(), pa.string())),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
    ]
)


def _write_large_table(root: Path, n: int, row_group_size: int = 100_000) -> None:
    """A classic checkpoint of `n` adds written with pyarrow, then one commit."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    h.write_commit(root, 0, [h.protocol(1, 2), h.metadata()])
    ids = np.arange(n)
    paths = pa.array(np.char.add("part-", ids.astype(str)).astype(object), pa.string())
    stats = pa.array(
        np.char.add('{"numRecords":10,"minValues":{"id":', ids.astype(str)).astype(object)
        + '},"maxValues":{"id":9},"nullCount":{"id":0}}',
        pa.string(),
    )
    offsets = pa.array(np.zeros(n + 1, dtype=np.int32))
    pv = pa.MapArray.from_arrays(offsets, pa.array([], pa.string()), pa.array([], pa.string()))
    adds = pa.StructArray.from_arrays(
        [
            paths,
            pv,
            pa.array(np.full(n, 1000, dtype=np.int64)),
            pa.array(np.full(n, 1, dtype=np.int64)),
            pa.array(np.ones(n, dtype=bool)),
            stats,
        ],
        fields=list(ADD_TYPE),
    )
    protocol_type = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    meta = h.metadata()["metaData"]
    meta_type = pa.struct(
        [
            ("id", pa.string()),
            ("schemaString", pa.string()),
            ("partitionColumns", pa.list_(pa.string())),
        ]
    )
    table = pa.table(
        {
            "add": pa.concat_arrays([pa.nulls(2, ADD_TYPE), adds]),
            "protocol": pa.array(
                [{"minReaderVersion": 1, "minWriterVersion": 2}, None, *([None] * n)],
                protocol_type,
            ),
            "metaData": pa.array(
                [
                    None,
                    {
                        "id": meta["id"],
                        "schemaString": meta["schemaString"],
                        "partitionColumns": [],
                    },
                    *([None] * n),
                ],
                meta_type,
            ),
        }
    )
    pq.write_table(table, log / f"{0:020d}.checkpoint.parquet", row_group_size=row_group_size)
    h.write_commit(root, 1, [h.commit_info(), h.add("last.parquet")])


_HOLD = textwrap.dedent(
    """
    import sys
    from deltalog import DeltaTable, Snapshot, SnapshotStore
    def private_kb():
        fields = dict(
            line.split(":", 1) for line in open("/proc/self/smaps_rollup").read().splitlines()[1:]
        )
        return sum(int(fields[k].split()[0]) for k in ("Private_Clean", "Private_Dirty"))
    store = SnapshotStore(sys.argv[2]) if sys.argv[2] != "-" else None
    before = private_kb()
    snap = DeltaTable(sys.argv[1], snapshot_store=store).snapshot()
    assert snap.num_files > 0
    print("ready", flush=True)
    sys.stdin.readline()  # measured once every worker holds the snapshot
    print(private_kb() - before, flush=True)
    sys.stdin.read()
    """
)


@pytest.mark.slow
def test_worker_processes_share_one_copy(tmp_path: Path) -> None:
    """Three processes holding the same 300k-file snapshot at once: with the store each
    one's private memory (pages no other process maps) grows by a small fraction of the
    snapshot file, the rest being shared page cache; without it each holds a copy."""
    root = tmp_path / "large"
    _write_large_table(root, 300_000)
    store_dir = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def workers(store: str, count: int) -> list[int]:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _HOLD, str(root), store],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(count)
        ]
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        grown = []
        for proc in procs:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("\n")
            proc.stdin.flush()
            grown.append(int(proc.stdout.readline()))
        for proc in procs:
            proc.communicate("", timeout=60)
            assert proc.returncode == 0
        return grown

    workers(str(store_dir), 1)  # writes the store file
    size_kb = sum(p.stat().st_size for p in store_dir.rglob("*" + SUFFIX)) // 1024
    shared = workers(str(store_dir), 3)
    private = workers("-", 1)
    assert all(g < size_kb * 0.2 for g in shared), (shared, size_kb)
    assert private[0] > size_kb * 0.5, (private, size_kb)
    print(f"store file {size_kb} KiB; private growth with store {shared} KiB, without {private}")


def test_file_of_an_older_format_is_rebuilt(
    table: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file written by an earlier layout (here: its header says format 1, checksums
    intact) is never served: it is rebuilt in the current format."""
    caplog.set_level(logging.WARNING, logger="deltalog.snapshot_store")
    store = SnapshotStore(tmp_path / "store")
    version = DeltaTable(str(table), snapshot_store=store).snapshot().version
    path = _store_file(store, table, version)
    data = path.read_bytes()
    offset, length, _, magic = _TRAILER.unpack(data[-_TRAILER.size :])
    header = orjson.loads(data[offset : offset + length])
    assert header["format"] == FORMAT
    header["format"] = FORMAT - 1
    raw = orjson.dumps(header)
    path.write_bytes(data[:offset] + raw + _TRAILER.pack(offset, len(raw), zlib.crc32(raw), magic))
    assert _built(_rebuilds(table, store))
    assert "unknown format" in caplog.text
    assert not _built(_rebuilds(table, store))
