"""Log segment discovery: file-name recognition, `_last_checkpoint` handling, listing
cursors, gaps and version errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deltalog.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from deltalog.log_segment import (
    build_segment,
    earliest_version,
    list_log,
    read_last_checkpoint,
)
from deltalog.storage.base import FileInfo
from deltalog.storage.local import LocalStorage
from deltalog.table import DeltaTable
from tests.support.corpus import copy_table, corpus_table
from tests.support.replay_oracle import CountingStorage

LOCAL = LocalStorage()


def _touch(log: Path, name: str, content: str = "{}\n") -> None:
    (log / name).write_text(content)


def _segment(root: Path, version: int | None = None, storage=LOCAL):
    return build_segment(storage, str(root), version)


def test_file_name_recognition(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    for v in range(6):
        _touch(log, f"{v:020d}.json")
    _touch(log, f"{2:020d}.checkpoint.parquet", "x")
    _touch(log, f"{3:020d}.checkpoint.0000000001.0000000002.parquet", "x")
    _touch(log, f"{3:020d}.checkpoint.0000000002.0000000002.parquet", "x")
    _touch(log, f"{4:020d}.checkpoint.0000000001.0000000003.parquet", "x")  # incomplete set
    _touch(log, f"{4:020d}.checkpoint.80a3bd3e-8d9f-4a29-9f5f-2b4ac7bdcc6a.json", "x")
    _touch(log, f"{0:020d}.{5:020d}.compacted.json")
    _touch(log, f"{1:020d}.crc")
    _touch(log, ".00000000000000000001.json.crc")
    _touch(log, ".s3-optimization-0")
    _touch(log, "00000000000000000007.json.tmp")
    _touch(log, "_last_checkpoint_backup")
    for sub in ("_commits", "_sidecars", "_staged_commits"):
        (log / sub).mkdir()
        _touch(log / sub, f"{9:020d}.json")
    listing = list_log(LOCAL, str(tmp_path))
    assert sorted(listing.commits) == list(range(6))
    kinds = [(c.version, c.kind, len(c.files)) for c in listing.checkpoints]
    assert kinds == [(2, "classic", 1), (3, "multipart", 2), (4, "v2", 1)]
    assert listing.latest_version == 5
    assert listing.earliest_version() == 0


def test_empty_checkpoint_files_are_not_complete(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    _touch(log, f"{0:020d}.json")
    (log / f"{0:020d}.checkpoint.parquet").write_bytes(b"")
    assert list_log(LOCAL, str(tmp_path)).checkpoints == []


def test_no_delta_log_is_table_not_found(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError):
        _segment(tmp_path)
    with pytest.raises(TableNotFoundError):
        _segment(corpus_table("delta-kernel-rs/golden_data/no-delta-log-folder/delta"))


def test_empty_log_is_table_not_found(tmp_path: Path) -> None:
    (tmp_path / "_delta_log").mkdir()
    with pytest.raises(TableNotFoundError):
        _segment(tmp_path)
    # Only a version checksum, no commit: still no table.
    with pytest.raises(TableNotFoundError):
        _segment(corpus_table("delta-kernel-rs/data/crc-malformed"))


def test_classic_checkpoint_with_last_checkpoint_lists_from_hint() -> None:
    root = corpus_table("delta-kernel-rs/golden_data/basic-with-inserts-deletes-checkpoint/delta")
    storage = CountingStorage()
    seg = _segment(root, storage=storage)
    assert seg.version == 13
    assert seg.checkpoint is not None and seg.checkpoint.version == 10
    assert [v for v, _ in seg.commits] == [11, 12, 13]
    # One listing, started right before the hinted checkpoint's files.
    assert len(storage.lists) == 1
    _, start_after = storage.lists[0]
    assert start_after is not None and start_after.endswith(f"_delta_log/{10:020d}")


def test_time_travel_before_hint_lists_from_start() -> None:
    root = corpus_table("delta-kernel-rs/golden_data/basic-with-inserts-deletes-checkpoint/delta")
    seg = _segment(root, 5)
    assert seg.checkpoint is None
    assert [v for v, _ in seg.commits] == list(range(6))
    seg = _segment(root, 10)
    assert seg.checkpoint is not None and seg.checkpoint.version == 10 and seg.commits == ()


def test_empty_last_checkpoint_falls_back_to_listing() -> None:
    root = corpus_table("delta-kernel-rs/golden_data/corrupted-last-checkpoint-kernel/delta")
    assert read_last_checkpoint(LOCAL, str(root)) is None
    seg = _segment(root)
    assert seg.version == 11 and seg.checkpoint is not None and seg.checkpoint.version == 10


def test_stale_last_checkpoint_uses_newer_checkpoint() -> None:
    root = corpus_table("delta-rs/table_failed_last_checkpoint_update")
    hint = read_last_checkpoint(LOCAL, str(root))
    assert hint is not None and hint.version == 1
    seg = _segment(root)
    assert seg.checkpoint is not None and seg.checkpoint.version == 3
    assert seg.commits == ()


@pytest.mark.parametrize(
    "content",
    ["", "not json", "[1, 2]", '{"version": "ten"}', '{"version": -1}', '{"size": 3}'],
)
def test_invalid_last_checkpoint_is_ignored(tmp_path: Path, content: str) -> None:
    root = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path)
    (root / "_delta_log" / "_last_checkpoint").write_text(content)
    seg = _segment(root)
    assert seg.version == 10 and seg.checkpoint is not None and seg.checkpoint.version == 10


def test_dangling_last_checkpoint_falls_back_to_commits(tmp_path: Path) -> None:
    root = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path)
    (root / "_delta_log" / f"{10:020d}.checkpoint.parquet").unlink()
    seg = _segment(root)
    assert seg.checkpoint is None
    assert [v for v, _ in seg.commits] == list(range(11))
    assert DeltaTable(str(root)).snapshot().num_files == 11


def test_last_checkpoint_pointing_beyond_the_log(tmp_path: Path) -> None:
    root = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 50, "size": 1}))
    seg = _segment(root)
    assert seg.version == 10 and seg.checkpoint is not None and seg.checkpoint.version == 10


def test_v2_hint_naming_a_missing_file_is_harmless() -> None:
    for name in ("v2-classic-checkpoint-json", "v2-classic-checkpoint-parquet"):
        root = corpus_table(f"delta-kernel-rs/data/{name}")
        seg = _segment(root)
        assert seg.version == 1 and seg.checkpoint is not None and seg.checkpoint.kind == "classic"


def test_incomplete_multipart_checkpoint_is_ignored(tmp_path: Path) -> None:
    root = copy_table("delta-kernel-rs/data/parquet_row_group_skipping", tmp_path)
    log = root / "_delta_log"
    part = next(log.glob("*.checkpoint.0000000003.0000000005.parquet"))
    part.unlink()
    seg = _segment(root)
    assert seg.checkpoint is None
    assert [v for v, _ in seg.commits] == [0, 1]


def test_multipart_and_v2_checkpoints_are_picked() -> None:
    seg = _segment(corpus_table("delta-kernel-rs/data/parquet_row_group_skipping"))
    assert seg.checkpoint is not None and seg.checkpoint.kind == "multipart"
    assert len(seg.checkpoint.files) == 5
    assert [f.key.rsplit(".", 3)[-3] for f in seg.checkpoint.files] == [
        f"{i:010d}" for i in range(1, 6)
    ]
    seg = _segment(corpus_table("delta-kernel-rs/data/v2-checkpoints-json-with-sidecars"))
    assert seg.checkpoint is not None and (seg.checkpoint.kind, seg.checkpoint.format) == (
        "v2",
        "json",
    )
    seg = _segment(corpus_table("delta-kernel-rs/data/v2-checkpoints-parquet-without-sidecars"))
    assert seg.checkpoint is not None and (seg.checkpoint.kind, seg.checkpoint.format) == (
        "v2",
        "parquet",
    )


def test_gap_after_checkpoint_is_corrupt() -> None:
    with pytest.raises(CorruptLogError, match="12"):
        _segment(corpus_table("delta-rs/data_err_logs/table_c"))
    with pytest.raises(CorruptLogError):
        _segment(corpus_table("delta-kernel-rs/golden_data/versions-not-contiguous/delta"))


def test_gap_before_checkpoint_is_fine_for_later_versions() -> None:
    root = corpus_table("delta-rs/data_err_logs/table_b")
    seg = _segment(root)
    assert seg.version == 13 and seg.checkpoint is not None and seg.checkpoint.version == 10
    with pytest.raises(CorruptLogError):
        _segment(root, 8)  # needs commit 7, which is missing
    with pytest.raises(VersionNotFoundError):
        _segment(root, 7)  # has no commit file at all


def test_stray_far_checkpoint_is_the_latest_version() -> None:
    seg = _segment(corpus_table("delta-rs/data_err_logs/table_g"))
    assert seg.version == 9999 and seg.checkpoint is not None and seg.checkpoint.version == 9999
    with pytest.raises(VersionNotFoundError):
        _segment(corpus_table("delta-rs/data_err_logs/table_g"), 500)


def test_version_beyond_latest() -> None:
    root = corpus_table("delta-rs/simple_table")
    with pytest.raises(VersionNotFoundError) as info:
        _segment(root, 99)
    assert (info.value.version, info.value.earliest, info.value.latest) == (99, 0, 4)
    with pytest.raises(VersionNotFoundError):
        _segment(root, -1)


def test_cleaned_up_versions_are_not_found() -> None:
    root = corpus_table("delta-rs/checkpoints_vacuumed")
    assert earliest_version(LOCAL, str(root)) == 5
    with pytest.raises(VersionNotFoundError) as info:
        _segment(root, 3)
    assert (info.value.earliest, info.value.latest) == (5, 12)
    seg = _segment(root, 7)
    assert seg.checkpoint is not None and seg.checkpoint.version == 5
    assert [v for v, _ in seg.commits] == [6, 7]


def test_checkpoint_only_table() -> None:
    root = corpus_table("delta-rs/table-with-domain-metadata")
    seg = _segment(root)
    assert seg.version == 108 and seg.commits == () and seg.checkpoint_commit is None
    assert earliest_version(LOCAL, str(root)) == 108


def test_compacted_logs_never_change_results(tmp_path: Path) -> None:
    root = copy_table("delta-kernel-rs/data/compacted-log-files-table", tmp_path)
    before = DeltaTable(str(root)).snapshot()
    # A bogus compaction claiming the whole range must still be ignored.
    _touch(root / "_delta_log", f"{0:020d}.{25:020d}.compacted.json", '{"add":{"path":"bogus"}}\n')
    after = DeltaTable(str(root)).snapshot()
    assert before.version == after.version == 25
    assert sorted(before.files.column("path").to_pylist()) == sorted(
        after.files.column("path").to_pylist()
    )


def test_listing_start_after_skips_old_commits(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    for v in range(30):
        _touch(log, f"{v:020d}.json")
    listing = list_log(LOCAL, str(tmp_path), after=24)
    assert sorted(listing.commits) == [25, 26, 27, 28, 29]
    assert listing.earliest_version() is None or listing.earliest_version() >= 25


def test_local_storage_list_from_is_sorted_and_exclusive(tmp_path: Path) -> None:
    for name in ("b", "a", "c", "ab"):
        (tmp_path / name).write_text(name)
    (tmp_path / "dir").mkdir()
    keys = [i.key for i in LOCAL.list_from(str(tmp_path) + "/")]
    assert keys == [f"{tmp_path}/{n}" for n in ("a", "ab", "b", "c")]
    keys = [i.key for i in LOCAL.list_from(str(tmp_path) + "/", start_after=f"{tmp_path}/ab")]
    assert keys == [f"{tmp_path}/b", f"{tmp_path}/c"]
    keys = [i.key for i in LOCAL.list_from(f"{tmp_path}/a")]
    assert keys == [f"{tmp_path}/a", f"{tmp_path}/ab"]
    info = LOCAL.info(f"{tmp_path}/ab")
    assert isinstance(info, FileInfo) and info.size == 2 and info.modification_time > 0
    assert LOCAL.read_range(f"{tmp_path}/ab", 1, 5) == b"b"
    with pytest.raises(FileNotFoundError):
        list(LOCAL.list_from(f"{tmp_path}/missing/"))
    with pytest.raises(FileNotFoundError):
        LOCAL.read(f"{tmp_path}/missing")
    with pytest.raises(FileNotFoundError):
        LOCAL.info(f"{tmp_path}/dir")


def test_resolve_uris(tmp_path: Path) -> None:
    from deltalog.errors import DeltaError
    from deltalog.storage import resolve

    assert resolve(str(tmp_path))[1] == str(tmp_path)
    assert resolve(f"file://{tmp_path}")[1] == str(tmp_path)
    assert resolve(f"file:{tmp_path}/")[1] == str(tmp_path)
    assert resolve("file:///a%20b/c")[1] == "/a b/c"
    assert resolve("file://localhost/x/y")[1] == "/x/y"
    for uri in ("az://c/t", "adl://a/t", "azure://c/t"):
        with pytest.raises(DeltaError, match="not supported yet"):
            resolve(uri)
    assert type(resolve("s3://bucket/t")[0]).__name__ == "S3Storage"
    assert resolve("s3a://bucket/t/")[1] == "bucket/t"
    with pytest.raises(DeltaError):
        resolve("ftp://host/x")
