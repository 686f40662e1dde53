"""File ids: bulk hashing, the per-snapshot cache, and ids attached to query plans."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.storage.local import LocalStorage
from sharing.formats import batch_file_ids, file_ids, storage_keys
from sharing.formats.ids import FileIdCache, compute_ids, id_column, with_file_ids
from tests.support.corpus import copy_table

PATHS = ["a.parquet", "date=2024-01-01/b c.parquet", "ü/%20x.parquet", ""]


def _expected(paths: list[str], scheme: str) -> list[str]:
    digest = hashlib.md5 if scheme == "parquet" else hashlib.sha256
    return [digest(p.encode()).hexdigest() for p in paths]


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
    assert first.to_pylist() == _expected(PATHS, "delta") and len(cache) == 2
    again = cache.ids(paths, "delta")
    assert len(cache) == 2
    assert [c.buffers()[2].address for c in again.chunks] == [
        c.buffers()[2].address for c in first.chunks
    ]  # served from the cache, not hashed again
    # The same paths in other memory (another table, another snapshot) are their own
    # entry, and another scheme never reuses ids of the first.
    copy = pa.chunked_array([pa.array(PATHS[:2]), pa.array(PATHS[2:])])
    assert cache.ids(copy, "delta").to_pylist() == _expected(PATHS, "delta")
    assert cache.ids(paths, "parquet").to_pylist() == _expected(PATHS, "parquet")
    assert len(cache) == 6
    # A slice of a cached chunk shares its buffers but is its own key (offset, length).
    whole = pa.array(PATHS)
    cache.ids(whole, "delta")
    assert cache.ids(whole.slice(1, 2), "delta").to_pylist() == _expected(PATHS[1:3], "delta")


def test_cache_never_confuses_different_paths_in_reused_memory() -> None:
    """An entry keeps its chunk alive, so freed buffers cannot come back under the same
    address holding other paths while the entry exists."""
    cache = FileIdCache()
    for i in range(200):
        paths = pa.array([f"part-{i}-{j}.parquet" for j in range(5)])
        expected = _expected(paths.to_pylist(), "parquet")
        assert cache.ids(paths, "parquet").to_pylist() == expected
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
            assert ids.to_pylist() == _expected(files.column("path").to_pylist(), "parquet")


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
