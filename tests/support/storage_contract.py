"""Checks every object-store backend must pass against the same table on local disk."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from deltalog.storage.base import Storage
from deltalog.storage.local import LocalStorage

CORPUS_TABLES = {
    "simple": "delta-rs/simple_table_with_checkpoint",
    "dv": "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
}


def table_files(local_root: Path) -> list[tuple[str, Path]]:
    """(relative name, path) of every file of a local table."""
    return [
        (p.relative_to(local_root).as_posix(), p)
        for p in sorted(local_root.rglob("*"))
        if p.is_file()
    ]


def upload_corpus_tables(
    corpus: Path, bucket: str, upload: Callable[[str, Path], None]
) -> dict[str, tuple[str, Path]]:
    """Uploads every CORPUS_TABLES table under `tables/<name>/` with `upload(key, path)` (keys
    relative to the bucket); maps a name to (root key, local root)."""
    roots = {}
    for name, relative in CORPUS_TABLES.items():
        local_root = corpus / relative
        for rel, path in table_files(local_root):
            upload(f"tables/{name}/{rel}", path)
        roots[name] = (f"{bucket}/tables/{name}", local_root)
    return roots


def _names(infos, root: str) -> list[tuple[str, int]]:
    return [(info.key[len(root) :], info.size) for info in infos]


def check_listing(storage: Storage, root: str, local_root: Path) -> None:
    local = LocalStorage()
    assert isinstance(storage, Storage)
    for sub in ("_delta_log/", "_delta_log/0000000000000000000", ""):
        remote = list(storage.list_from(f"{root}/{sub}"))
        expected = list(local.list_from(f"{local_root}/{sub}"))
        assert _names(remote, f"{root}/") == _names(expected, f"{local_root}/")
        assert [i.key for i in remote] == sorted(i.key for i in remote)
        assert all(i.modification_time > 1_600_000_000_000 for i in remote)
    log = f"{root}/_delta_log/"
    everything = [i.key for i in storage.list_from(log)]
    for after in (everything[0], everything[len(everything) // 2], everything[-1], log, f"{log}~"):
        assert [i.key for i in storage.list_from(log, after)] == [
            k for k in everything if k > after
        ]


def check_reads(storage: Storage, root: str, local_root: Path) -> None:
    for relative, path in table_files(local_root):
        key = storage.join(root, relative)
        data = path.read_bytes()
        assert storage.read(key) == data
        assert storage.info(key).size == len(data)
        assert storage.read_range(key, 1, 7) == data[1:8]
        assert storage.read_range(key, len(data) - 3, 10) == data[-3:]
        assert storage.read_range(key, len(data) + 5, 10) == b""
        assert storage.read_range(key, 0, 0) == b""
        if relative.endswith(".parquet"):
            with storage.open_input_file(key) as remote:
                assert remote.size() == len(data)
                assert pq.read_table(remote).equals(pq.ParquetFile(path).read())


def check_missing(storage: Storage, missing_key: str) -> None:
    for call in (storage.read, storage.info, storage.open_input_file):
        try:
            call(missing_key)
        except FileNotFoundError:
            continue
        raise AssertionError(f"{call.__name__} did not raise FileNotFoundError")
    try:
        storage.read_range(missing_key, 0, 10)
    except FileNotFoundError:
        return
    raise AssertionError("read_range did not raise FileNotFoundError")


def check_snapshot(storage: Storage, root: str, local_root: Path) -> None:
    from deltalog.table import DeltaTable

    remote = DeltaTable(root, storage).snapshot()
    local = DeltaTable(os.fspath(local_root)).snapshot()
    assert remote.version == local.version
    assert remote.checkpoint_version == local.checkpoint_version
    assert remote.metadata == local.metadata and remote.protocol == local.protocol
    assert remote.files.sort_by("path").equals(local.files.sort_by("path"))
