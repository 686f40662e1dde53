"""File ids: bulk hashing, the per-snapshot cache, and ids attached to query plans."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from deltalog import DeltaError, DeltaTable, Snapshot
from deltalog.snapshot_store import SnapshotStore
from deltalog.storage.local import LocalStorage
from sharing.formats import batch_file_ids, file_ids, storage_keys
from sharing.formats.ids import FileIdCache, compute_ids, id_column, with_file_ids
from tests.support.corpus import copy_table, corpus_table

PATHS = ["a.parquet", "date=2024-01-01/b c.parquet", "ü/%20x.parquet", ""]


def _expected(paths: list[str], scheme: str) -> list[str]:
    digest = hashlib.md5 if scheme == "parquet" else hashlib.sha256
    return [digest(p.encode()).hexdigest() for p in paths]


def _hex(digests: pa.ChunkedArray | pa.Array) -> list[str]:
    """Kept ids are raw digests; their text is what a response carries."""
    return [d.hex() for d in digests.to_pylist()]


@pytest.mark.parametrize("scheme", ["parquet", "delta"])
def test_compute_ids_are_hex_digests_of_the_raw_path(scheme: str) -> None:
    ids = compute_ids(pa.array(PATHS), scheme)
    assert ids.type == pa.string() and ids.to_pylist() == _expected(PATHS, scheme)
    sliced = pa.array(PATHS).slice(1, 2)
    assert compute_ids(sliced, scheme).to_pylist() == _expected(PATHS[1:3], scheme)
    assert compute_ids(pa.array([], pa.string()), scheme).to_pylist() == []
    chunked = pa.chunked_array([PATHS[:1], PATHS[1:]])
    assert compute_ids(chunked, scheme).to_pylist() == _expected(PATHS, scheme)
    assert file_ids(pa.array(PATHS), scheme).to_pylist() == _expected(PATHS, scheme)


def test_cache_hashes_a_chunk_once_and_keys_on_its_memory() -> None:
    cache = FileIdCache()
    paths = pa.chunked_array([pa.array(PATHS[:2]), pa.array(PATHS[2:])])
    first = cache.ids(paths, "delta")
    assert _hex(first) == _expected(PATHS, "delta") and len(cache) == 2
    again = cache.ids(paths, "delta")
    assert len(cache) == 2
    assert [c.buffers()[1].address for c in again.chunks] == [
        c.buffers()[1].address for c in first.chunks
    ]  # served from the cache, not hashed again
    # The same paths in other memory (another table, another snapshot) are their own
    # entry, and another scheme never reuses ids of the first.
    copy = pa.chunked_array([pa.array(PATHS[:2]), pa.array(PATHS[2:])])
    assert _hex(cache.ids(copy, "delta")) == _expected(PATHS, "delta")
    assert _hex(cache.ids(paths, "parquet")) == _expected(PATHS, "parquet")
    assert len(cache) == 6
    # A slice of a cached chunk shares its buffers but is its own key (offset, length).
    whole = pa.array(PATHS)
    cache.ids(whole, "delta")
    assert _hex(cache.ids(whole.slice(1, 2), "delta")) == _expected(PATHS[1:3], "delta")


def test_cache_never_confuses_different_paths_in_reused_memory() -> None:
    """An entry keeps its chunk alive, so freed buffers cannot come back under the same
    address holding other paths while the entry exists."""
    cache = FileIdCache()
    for i in range(200):
        paths = pa.array([f"part-{i}-{j}.parquet" for j in range(5)])
        expected = _expected(paths.to_pylist(), "parquet")
        assert _hex(cache.ids(paths, "parquet")) == expected
        del paths


def test_cache_is_bounded_by_bytes() -> None:
    cache = FileIdCache(max_bytes=20_000)
    for i in range(50):
        cache.ids(pa.array([f"{i}-{j}.parquet" for j in range(100)]), "delta")
    assert 1 <= len(cache) < 50
    cache.clear()
    assert len(cache) == 0


def test_batches_use_the_attached_column_of_their_scheme() -> None:
    files = pa.table({"path": pa.array(PATHS)})
    with_ids = with_file_ids(files, "delta", FileIdCache())
    batch = with_ids.to_batches()[0]
    assert id_column("delta") in batch.schema.names
    assert batch_file_ids(batch, "delta").to_pylist() == _expected(PATHS, "delta")
    # A column of the other scheme is not used for this one.
    assert batch_file_ids(batch, "parquet").to_pylist() == _expected(PATHS, "parquet")
    filtered = with_ids.filter(pa.array([False, True, False, True])).to_batches()[0]
    assert batch_file_ids(filtered, "delta").to_pylist() == _expected([PATHS[1], PATHS[3]], "delta")


def test_snapshots_and_tables_never_share_ids_wrongly(tmp_path: Path) -> None:
    """Two copies of a table, and two versions of one table: every snapshot's cached ids
    are the digests of its own paths, also after an incremental refresh that keeps most
    chunks of the previous snapshot."""
    cache = FileIdCache()
    first = copy_table("delta-rs/simple_table", tmp_path / "one")
    second = copy_table("levi/dat/basic_append/delta", tmp_path / "two")
    for root in (first, second):
        table = DeltaTable(str(root))
        for version in range(table.latest_version() + 1):
            files = table.snapshot(version).files
            ids = with_file_ids(files, "parquet", cache).column(id_column("parquet"))
            assert _hex(ids) == _expected(files.column("path").to_pylist(), "parquet")


def test_storage_keys_fast_path_matches_the_resolving_path() -> None:
    storage = LocalStorage()
    plain = pa.array(["a.parquet", "date=2024-01-01/b.parquet"])
    assert storage_keys(plain, storage, "/t") == ["/t/a.parquet", "/t/date=2024-01-01/b.parquet"]
    special = pa.array(["x%20y.parquet", "/abs/c.parquet", "file:/abs/d.parquet", "e.parquet"])
    assert storage_keys(special, storage, "/t") == [
        "/t/x y.parquet",
        "/abs/c.parquet",
        "/abs/d.parquet",
        "/t/e.parquet",
    ]
    assert storage_keys(special.slice(3, 1), storage, "/t") == ["/t/e.parquet"]


def _log_up_to(source: Path, target: Path, version: int) -> None:
    """Copies into `target`'s log the log files of `source` up to `version` (a commit
    landing on the table)."""
    (target / "_delta_log").mkdir(parents=True, exist_ok=True)
    for path in sorted((source / "_delta_log").iterdir()):
        head = path.name.split(".", 1)[0]
        if (
            head.isdigit()
            and int(head) <= version
            and not (target / "_delta_log" / path.name).exists()
        ):
            shutil.copy2(path, target / "_delta_log" / path.name)


def _ids_of(snapshot: Snapshot, scheme: str, cache: FileIdCache) -> list[str]:
    files = with_file_ids(snapshot.files, scheme, cache, stored=snapshot.stored_paths)
    return _hex(files.column(id_column(scheme)))


@pytest.mark.parametrize(
    "relative",
    [
        "delta-rs/simple_table_with_checkpoint",
        "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
        "levi/dat/basic_partitioned/delta",
    ],
)
def test_ids_shared_through_the_store_equal_the_ones_hashed_per_process(
    tmp_path: Path, relative: str
) -> None:
    """Across the versions of real tables: a process that maps each version from a store
    file of that version and a process that follows the commits from its first stored
    version (its later files' chunks hashed in the process) both get, per scheme, the
    digests of their own paths; each stored version gets one sidecar per scheme."""
    source = copy_table(relative, tmp_path / "source")
    root = tmp_path / "table"
    latest = DeltaTable(str(source)).latest_version()
    first = min(v for v in range(latest + 1) if _try_version(source, v))
    _log_up_to(source, root, first)
    following = DeltaTable(str(root), snapshot_store=SnapshotStore(tmp_path / "store"))
    for version in range(first, latest + 1):
        _log_up_to(source, root, version)
        store = SnapshotStore(tmp_path / f"store-{version}")
        mapped = DeltaTable(str(root), snapshot_store=store).snapshot()
        followed = following.snapshot()
        assert mapped.version == followed.version == version
        assert mapped.stored_paths is not None and followed.stored_paths is not None
        for scheme in ("parquet", "delta"):
            expected = _expected(mapped.files.column("path").to_pylist(), scheme)
            assert _ids_of(mapped, scheme, FileIdCache()) == expected
            assert _ids_of(followed, scheme, FileIdCache()) == _expected(
                followed.files.column("path").to_pylist(), scheme
            )
        assert mapped.stored_paths.file.name == f"{version:020d}.snapshot"
        for name in ("file-ids-md5", "file-ids-sha256"):
            assert mapped.stored_paths.sidecar(name).exists()
            assert followed.stored_paths.sidecar(name).exists()


def _try_version(root: Path, version: int) -> bool:
    """Whether the log up to `version` alone is a readable table (its first commits may
    have been cleaned up)."""
    try:
        DeltaTable(str(root)).snapshot(version)
    except DeltaError:
        return False
    return True


def _stored(root: Path, store: Path) -> Snapshot:
    snapshot = DeltaTable(str(root), snapshot_store=SnapshotStore(store)).snapshot()
    assert snapshot.stored_paths is not None
    return snapshot


def test_a_restart_maps_the_sidecar_instead_of_hashing(tmp_path: Path) -> None:
    root = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path / "tables")
    first = _stored(root, tmp_path / "store")
    expected = _ids_of(first, "delta", FileIdCache())
    assert first.stored_paths is not None
    sidecar = first.stored_paths.sidecar("file-ids-sha256")
    written = sidecar.stat().st_mtime_ns
    # A new process (a new store object, a new table): the file is read, nothing hashed.
    again = _stored(root, tmp_path / "store")
    assert again.stored_paths is not None

    def never(chunk: pa.Array) -> pa.Array:
        raise AssertionError("hashed again")

    shared = again.stored_paths.column("file-ids-sha256", never)
    assert shared is not None and _hex(pa.chunked_array(shared)) == expected
    assert _ids_of(again, "delta", FileIdCache()) == expected
    assert sidecar.stat().st_mtime_ns == written


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage"])
def test_a_corrupt_sidecar_is_computed_again(tmp_path: Path, damage: str) -> None:
    root = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path / "tables")
    snapshot = _stored(root, tmp_path / "store")
    expected = _ids_of(snapshot, "parquet", FileIdCache())
    assert snapshot.stored_paths is not None
    sidecar = snapshot.stored_paths.sidecar("file-ids-md5")
    data = bytearray(sidecar.read_bytes())
    if damage == "truncated":
        sidecar.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":  # a bit of a digest: only the checksum tells
        digests = data.index(
            hashlib.md5(snapshot.files.column("path")[0].as_py().encode()).digest()
        )
        data[digests] ^= 0x01
        sidecar.write_bytes(data)
    else:
        sidecar.write_bytes(b"\0" * len(data))
    fresh = _stored(root, tmp_path / "store")
    assert _ids_of(fresh, "parquet", FileIdCache()) == expected
    assert sidecar.read_bytes() == bytes(data if damage != "flipped" else _unflip(data, digests))


def _unflip(data: bytearray, at: int) -> bytes:
    data[at] ^= 0x01
    return bytes(data)


def test_a_sidecar_of_a_rebuilt_snapshot_file_is_stale(tmp_path: Path) -> None:
    """The table deleted and written again at the same location, with other files at the
    same version: its snapshot file is rebuilt, and the old sidecar (put back next to
    it) belongs to the old file: it is computed again, never served."""
    root = tmp_path / "table"
    _log_up_to(corpus_table("delta-rs/simple_table"), root, 4)
    old = _stored(root, tmp_path / "store")
    _ids_of(old, "delta", FileIdCache())
    assert old.stored_paths is not None
    sidecar = old.stored_paths.sidecar("file-ids-sha256")
    stale = sidecar.read_bytes()
    shutil.rmtree(root)
    _log_up_to(corpus_table("delta-rs/simple_table_with_checkpoint"), root, 4)
    new = _stored(root, tmp_path / "store")
    assert new.version == old.version and new.stored_paths is not None
    assert new.stored_paths.file == old.stored_paths.file
    assert not sidecar.exists()  # removed with the stale snapshot file
    sidecar.write_bytes(stale)
    expected = _expected(new.files.column("path").to_pylist(), "delta")
    assert expected != _expected(old.files.column("path").to_pylist(), "delta")
    assert _ids_of(new, "delta", FileIdCache()) == expected
    assert sidecar.read_bytes() != stale
