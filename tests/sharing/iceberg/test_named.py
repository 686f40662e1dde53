"""The objects a slice's generated metadata names (sharing.iceberg.named), on corpus tables:
a recipient's partition filter, a table without shared history, a start version; the set
grows with new versions without re-reading carried-over manifests, and is bounded."""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from sharing.catalog import SharedTable
from sharing.config import TableConfig
from sharing.iceberg import named as named_module
from sharing.iceberg.generator import GENERATED_PREFIX, IcebergMetadata
from sharing.iceberg.named import NamedFiles
from sharing.s3 import keys
from sharing.s3.scope import iceberg_scope, slice_scope
from sharing.slices import bind, parse_partition_filter
from sharing.tables import TableService
from tests.support.corpus import corpus_table
from tests.support.server import make_config

BUCKET = "lst-" + "0" * 40
REMOVED_IN_1 = (
    "birthday=2023-12-23/part-00002-7c6f102f-6ad1-4e3b-bee3-df831f4abf3c.c000.snappy.parquet"
)
LIVE_AT_3 = (
    "birthday=2023-12-22/part-00000-cd6a8496-3a3c-4ac9-8fba-035e60e71ab2.c000.snappy.parquet"
)


def _shared(location: Path, *, history: bool = True, start: int = 0) -> SharedTable:
    config = TableConfig(
        name="t", location=str(location), id="id-t", history_shared=history, start_version=start
    )
    return SharedTable("s", "d", "t", config)


@pytest.fixture
def metadata(tmp_path: Path) -> IcebergMetadata:
    return IcebergMetadata(tmp_path / "cache", TableService(make_config()))


def _parquet(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*.parquet")}


def _letter_slice(location: Path, letter: str = "a", recipient: str = "r") -> SharedTable:
    """The table as `recipient` sees it under `letter = current_recipient('letter')` with
    its property `letter` set to `letter`."""
    parsed = parse_partition_filter("letter = current_recipient('letter')")
    return replace(
        _shared(location),
        partition_filter=bind(parsed, (("letter", letter),)),
        recipient=recipient,
    )


def test_a_partition_filter_names_its_slices_files_and_generated_files(
    metadata: IcebergMetadata,
) -> None:
    location = corpus_table("levi/dat/basic_partitioned/delta")
    shared = _letter_slice(location)
    named = NamedFiles(metadata)
    files = _parquet(location)
    inside = {f for f in files if f.startswith("letter=a/")}
    assert inside and inside != files
    assert all(named.names(shared, BUCKET, f) for f in inside)
    assert not any(named.names(shared, BUCKET, f) for f in files - inside)
    assert not named.names(shared, BUCKET, "_delta_log/00000000000000000000.json")
    generated = metadata.generate(shared, bucket=BUCKET)
    root = metadata.generated_root(shared, BUCKET)
    json_key = GENERATED_PREFIX + generated.metadata_path.relative_to(root).as_posix()
    assert named.names(shared, BUCKET, json_key)
    for path in generated.metadata_path.parent.glob("*.avro"):
        assert named.names(shared, BUCKET, GENERATED_PREFIX + path.relative_to(root).as_posix())
    # The whole table's generated files sit elsewhere (another cache folder).
    assert not named.names(shared, BUCKET, GENERATED_PREFIX + "../x")


def test_history_and_start_version_bound_the_named_versions(metadata: IcebergMetadata) -> None:
    location = corpus_table("delta-rs/cdf-table")
    named = NamedFiles(metadata)
    whole = _shared(location)
    assert named.names(whole, BUCKET, REMOVED_IN_1)  # version 0's file, history shared
    latest = _shared(location, history=False)
    assert named.names(latest, BUCKET, LIVE_AT_3)
    assert not named.names(latest, BUCKET, REMOVED_IN_1)
    from2 = _shared(location, start=2)
    assert named.names(from2, BUCKET, LIVE_AT_3)
    assert not named.names(from2, BUCKET, REMOVED_IN_1)


def test_new_versions_grow_the_set_and_memory_is_bounded(
    metadata: IcebergMetadata, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "cdf"
    shutil.copytree(corpus_table("delta-rs/cdf-table"), table)
    later = sorted((table / "_delta_log").glob("0000000000000000000[23].json"))
    for path in later:  # the table at version 1
        path.rename(path.with_suffix(".later"))
    shared = _shared(table)
    named = NamedFiles(metadata, max_keys=10_000)
    new_file = next(k for k in _parquet(table) if k.startswith("birthday=2023-12-29/"))
    assert named.names(shared, BUCKET, REMOVED_IN_1)
    assert not named.names(shared, BUCKET, new_file)  # added by version 2
    (kept,) = named._kept.values()
    before = set(kept.manifests)
    for path in later:  # versions 2 and 3 are committed
        path.with_suffix(".later").rename(path)
    read: list[Path] = []
    records = named_module._records
    monkeypatch.setattr(named_module, "_records", lambda path: read.append(path) or records(path))
    assert named.names(shared, BUCKET, new_file)
    assert named.names(shared, BUCKET, REMOVED_IN_1)  # still in the shared history
    (grown,) = named._kept.values()
    assert grown.version == 3 and before < grown.manifests
    # Only the two new manifest lists and the manifests not read before were decoded.
    assert len(read) == 2 + len(grown.manifests - before)
    # A bound of one name keeps only the set in use.
    small = NamedFiles(metadata, max_keys=1)
    other = _shared(corpus_table("levi/dat/basic_partitioned/delta"))
    assert small.names(shared, BUCKET, new_file)
    assert small.names(other, BUCKET, next(iter(_parquet(Path(other.config.location)))))
    assert len(small._kept) == 1


def test_a_keys_scope_is_signed_and_follows_the_slice() -> None:
    location = corpus_table("levi/dat/basic_partitioned/delta")
    whole = _shared(location)
    assert iceberg_scope(whole) is None  # the folder: nothing in it is not the recipient's
    assert iceberg_scope(_shared(location, start=1)) == slice_scope(_shared(location, start=1))
    parsed = parse_partition_filter("letter = current_recipient('letter')")
    sees_a = replace(whole, partition_filter=bind(parsed, (("letter", "a"),)))
    sees_b = replace(whole, partition_filter=bind(parsed, (("letter", "b"),)))
    assert slice_scope(sees_a) != slice_scope(sees_b)
    assert slice_scope(_shared(location, history=False)) != slice_scope(whole)
    key = keys.mint(
        "secret",
        share="s",
        schema="d",
        table="t",
        recipient="r",
        credential_id=None,
        validity_seconds=60,
        scope=slice_scope(sees_a),
    )
    assert keys.read_token(key.session_token).scope == slice_scope(sees_a)
    # Re-aiming the token at another slice changes the secret the server expects.
    body = key.session_token.removeprefix("LS3.")
    document = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    document["k"] = slice_scope(sees_b)
    edited = "LS3." + base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")
    assert keys.read_token(edited).scope == slice_scope(sees_b)
    assert keys.secret_for("secret", edited) != key.secret_access_key


def test_names_from_memory_answers_as_names_once_kept_and_declines_before(
    tmp_path: Path,
) -> None:
    """The S3 endpoint's event-loop path: `names_from_memory` says None (go to the thread
    pool) while the slice's set is not kept or the table's latest snapshot is not in memory
    (listed within `refreshWindowMs`), and otherwise answers exactly as `names`, generated
    files included."""
    metadata = IcebergMetadata(
        tmp_path / "cache", TableService(make_config({"refreshWindowMs": 600_000}))
    )
    location = corpus_table("levi/dat/basic_partitioned/delta")
    shared = _letter_slice(location)
    named = NamedFiles(metadata)
    files = _parquet(location)
    inside = sorted(f for f in files if f.startswith("letter=a/"))
    assert named.names_from_memory(shared, BUCKET, inside[0]) is None  # nothing loaded yet
    assert named.names(shared, BUCKET, inside[0])
    generated = metadata.generate(shared, bucket=BUCKET)
    root = metadata.generated_root(shared, BUCKET)
    json_key = GENERATED_PREFIX + generated.metadata_path.relative_to(root).as_posix()
    keys_ = [*files, json_key, "_delta_log/00000000000000000000.json", GENERATED_PREFIX + "../x"]
    assert [named.names_from_memory(shared, BUCKET, k) for k in keys_] == [
        named.names(shared, BUCKET, k) for k in keys_
    ]
    # Another slice of the same table: its set is not kept yet.
    other = _letter_slice(location, "b", "q")
    assert named.names_from_memory(other, BUCKET, inside[0]) is None
    # Past the refresh window the latest snapshot needs a listing: not from memory.
    short = IcebergMetadata(tmp_path / "cache2", TableService(make_config({"refreshWindowMs": 0})))
    fresh_only = NamedFiles(short)
    assert fresh_only.names(shared, BUCKET, inside[0])
    assert fresh_only.names_from_memory(shared, BUCKET, inside[0]) is None
