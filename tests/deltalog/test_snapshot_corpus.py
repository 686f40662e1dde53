"""Every corpus table: the snapshot loads with the same active files as deltalake (or the
documented error), at the latest version and, by time travel, at every version."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltalog import DeltaTable, history
from deltalog.errors import (
    CorruptLogError,
    DeltaError,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from tests.support.corpus import CORPUS, corpus_table, manifest
from tests.support.replay_oracle import deltalake_paths, oracle_keys, our_paths, snapshot_keys

TABLES = manifest()

# Tables that must not load, and why.
GOLDEN = "delta-kernel-rs/golden_data"
FROM_CKPT = f"{GOLDEN}/deltalog-state-reconstruction-from-checkpoint"
EXPECTED_ERRORS: dict[str, type[DeltaError]] = {
    # minReaderVersion 99
    f"{GOLDEN}/deltalog-invalid-protocol-version/delta": UnsupportedFeatureError,
    f"{GOLDEN}/deltalog-state-reconstruction-without-metadata/delta": CorruptLogError,
    f"{GOLDEN}/deltalog-state-reconstruction-without-protocol/delta": CorruptLogError,
    f"{FROM_CKPT}-missing-metadata/delta": CorruptLogError,
    f"{FROM_CKPT}-missing-protocol/delta": CorruptLogError,
    "delta-kernel-rs/golden_data/versions-not-contiguous/delta": CorruptLogError,
    "delta-kernel-rs/golden_data/no-delta-log-folder/delta": TableNotFoundError,
    # only a 0.crc: no commit, no checkpoint
    "delta-kernel-rs/data/crc-malformed": TableNotFoundError,
    # geospatial, catalogManaged and catalogOwned are refused on purpose (see features.py)
    "delta-kernel-rs/data/table-with-geo": UnsupportedFeatureError,
    "delta-kernel-rs/data/catalog_managed_0": UnsupportedFeatureError,
    "delta-rs/data_err_logs/table_d": UnsupportedFeatureError,
    "delta-rs/data_err_logs/table_f": UnsupportedFeatureError,
    "delta-rs/data_err_logs/table_h": UnsupportedFeatureError,
    # reader version 5 with an unknown `blahabl` reader feature
    "delta-rs/simple_table_features": UnsupportedFeatureError,
    # commit 12 missing after the checkpoint at 10
    "delta-rs/data_err_logs/table_c": CorruptLogError,
}

# Where we deliberately differ from deltalake 1.6.6: expected active file counts.
EXPECTED_COUNTS: dict[str, int] = {
    # A `file:/abs` remove cancels the `/abs` add (Delta's golden test expects an empty
    # table); deltalake compares raw strings and keeps the add.
    "delta-kernel-rs/golden_data/canonicalized-paths-special-a/delta": 0,
    "delta-kernel-rs/golden_data/canonicalized-paths-normal-a/delta": 0,
    # The checkpoint's metaData has a null schemaString (read as an empty schema);
    # deltalake refuses the table.
    "delta-kernel-rs/golden_data/update-deleted-directory/delta": 10,
}

MAX_TIME_TRAVEL_VERSIONS = 60

# Versions deltalake refuses but we read: Delta Live Tables' first commit has a metaData
# without schemaString, which we take as an empty schema. Expected file counts.
LENIENT_VERSIONS = {("delta-rs/delta-live-table", 0): 0}


def _ids(entry: dict) -> str:
    return entry["table_root"]


def _has_log(root: Path) -> bool:
    return (root / "_delta_log").exists()


@pytest.mark.parametrize("entry", TABLES, ids=_ids)
def test_latest_snapshot(entry: dict) -> None:
    relative = entry["table_root"]
    root = CORPUS / relative
    assert root.exists() or relative in EXPECTED_ERRORS, f"{relative} missing from the corpus"
    table = DeltaTable(str(root))
    if relative in EXPECTED_ERRORS:
        with pytest.raises(EXPECTED_ERRORS[relative]):
            table.snapshot()
        return
    snap = table.snapshot()
    assert snap.files.schema.names == [f.name for f in snap.files.schema]
    assert snap.files.column("path").null_count == 0
    assert snap.num_files == snap.files.num_rows
    if relative in EXPECTED_COUNTS:
        assert snap.num_files == EXPECTED_COUNTS[relative]
        return
    try:
        dl_version, dl_paths = deltalake_paths(root)
    except Exception:  # deltalake cannot read it: fall back to the manifest's analysis
        assert snap.num_files == entry["analysis"]["active_files"]
        return
    assert snap.version == dl_version
    assert our_paths(snap.files) == dl_paths
    expected_keys = oracle_keys(root)
    if expected_keys is not None:
        assert snapshot_keys(snap.files) == expected_keys
    protocol = entry.get("deltalake", {}).get("protocol")
    if protocol:
        assert [snap.protocol.min_reader_version, snap.protocol.min_writer_version] == protocol[:2]


def _versions(entry: dict) -> list[int]:
    analysis = entry.get("analysis") or {}
    rng = analysis.get("commit_range")
    if not rng:
        return []
    return list(range(rng[0], rng[1] + 1))


TIME_TRAVEL = [
    e
    for e in TABLES
    if e["table_root"] not in EXPECTED_ERRORS
    and e["table_root"] not in EXPECTED_COUNTS
    and 1 < len(_versions(e)) <= MAX_TIME_TRAVEL_VERSIONS
]


@pytest.mark.parametrize("entry", TIME_TRAVEL, ids=_ids)
def test_time_travel_matches_deltalake(entry: dict) -> None:
    root = corpus_table(entry["table_root"])
    table = DeltaTable(str(root))
    earliest = table.earliest_version()
    checked = 0
    for v in _versions(entry):
        try:
            dl_version, dl_paths = deltalake_paths(root, v)
        except Exception:
            lenient = LENIENT_VERSIONS.get((entry["table_root"], v))
            if lenient is not None:
                assert table.snapshot(v).num_files == lenient
                continue
            with pytest.raises(DeltaError):
                table.snapshot(v)
            continue
        if v < earliest:
            continue
        snap = table.snapshot(v)
        assert snap.version == dl_version == v
        assert our_paths(snap.files) == dl_paths, f"version {v}"
        checked += 1
    assert checked > 0


def test_time_travel_fresh_handles_match_cached_ones() -> None:
    root = corpus_table("delta/kernel-defaults/basic-dv-with-checkpoint")
    cached = DeltaTable(str(root))
    for v in range(0, 47, 3):
        fresh = DeltaTable(str(root)).snapshot(v)
        assert snapshot_keys(cached.snapshot(v).files) == snapshot_keys(fresh.files)


def test_stray_far_version_table() -> None:
    root = corpus_table("delta-rs/data_err_logs/table_g")
    table = DeltaTable(str(root))
    assert table.snapshot().version == 9999
    for v in (0, 5, 13):
        assert our_paths(table.snapshot(v).files) == deltalake_paths(root, v)[1]
    for v in (14, 5000):
        with pytest.raises(VersionNotFoundError):
            table.snapshot(v)


def test_snapshot_properties() -> None:
    root = corpus_table("delta-rs/simple_table")
    table = DeltaTable(str(root))
    snap = table.snapshot()
    import deltalake

    actions = pa.table(deltalake.DeltaTable(str(root)).get_add_actions(flatten=True))
    assert snap.size_in_bytes == pc.sum(actions.column("size_bytes")).as_py()
    assert snap.tombstones.num_rows > 0
    latest_commit = root / "_delta_log" / f"{snap.version:020d}.json"
    # The history timeline's value: the file time, pushed past earlier commits' times.
    assert snap.timestamp == history.commit_timestamp(table, snap.version)
    assert snap.timestamp >= latest_commit.stat().st_mtime_ns // 1_000_000
    assert snap.table_root == str(root)
    assert snap.metadata.id and snap.protocol.min_reader_version == 1


def test_in_commit_timestamp_is_the_snapshot_timestamp() -> None:
    root = corpus_table("delta-rs/cdc_ict_table")
    snap = DeltaTable(str(root)).snapshot()
    last = (root / "_delta_log" / f"{snap.version:020d}.json").read_text().splitlines()
    ict = next(
        json.loads(line)["commitInfo"]["inCommitTimestamp"] for line in last if "commitInfo" in line
    )
    assert snap.timestamp == ict


def test_txns_and_domain_metadata() -> None:
    snap = DeltaTable(str(corpus_table("delta-kernel-rs/data/app-txn-checkpoint"))).snapshot()
    assert snap.txns
    snap = DeltaTable(str(corpus_table("delta-rs/table_with_liquid_clustering"))).snapshot()
    assert {"delta.liquid", "delta.rowTracking"} <= set(snap.domain_metadata)
    assert all(not d.get("removed") for d in snap.domain_metadata.values())
    snap = DeltaTable(str(corpus_table("delta-rs/table-with-domain-metadata"))).snapshot()
    assert snap.domain_metadata and snap.version == 108


def test_checkpoint_snapshot_timestamp_uses_the_commit_file() -> None:
    root = corpus_table("delta-rs/simple_table_with_checkpoint")
    table = DeltaTable(str(root))
    snap = table.snapshot()
    assert snap.checkpoint_version == 10 and snap.version == 10
    assert snap.timestamp == history.commit_timestamp(table, 10)
    assert (
        snap.timestamp >= (root / "_delta_log" / f"{10:020d}.json").stat().st_mtime_ns // 1_000_000
    )


def test_partition_values_and_paths_are_raw() -> None:
    root = corpus_table("levi/dat/multi_partitioned/delta")
    snap = DeltaTable(str(root)).snapshot()
    paths = snap.files.column("path").to_pylist()
    assert any("%" in p for p in paths)  # still percent-encoded
    assert all((root / unquote(p)).exists() for p in paths)


@pytest.mark.parametrize(
    ("reader", "features", "error"),
    [
        (1, None, None),
        (2, None, None),
        (1, [], None),
        (3, ["deletionVectors", "columnMapping", "v2Checkpoint", "timestampNtz"], None),
        (3, ["typeWidening-preview", "vacuumProtocolCheck", "variantType-preview"], None),
        (3, ["appendOnly", "domainMetadata", "rowTracking", "inCommitTimestamp"], None),
        (3, [], None),
        (3, None, CorruptLogError),  # reader version 3 must list its features
        (2, ["columnMapping"], CorruptLogError),  # features only exist at version 3
        (3, ["blahabl"], UnsupportedFeatureError),
        (3, ["geospatial"], UnsupportedFeatureError),
        (3, ["catalogManaged"], UnsupportedFeatureError),
        (3, ["catalogOwned-preview"], UnsupportedFeatureError),
        (3, ["variantShredding-preview"], UnsupportedFeatureError),
        (4, [], UnsupportedFeatureError),
    ],
)
def test_reader_protocol_check(reader: int, features: list[str] | None, error) -> None:
    from deltalog.actions import Protocol
    from deltalog.features import check_reader_protocol, reader_features

    action = {"minReaderVersion": reader, "minWriterVersion": 7}
    if features is not None:
        action["readerFeatures"] = features
    protocol = Protocol.from_action(action)
    if error is None:
        check_reader_protocol(protocol)
    else:
        with pytest.raises(error) as info:
            check_reader_protocol(protocol)
        if error is UnsupportedFeatureError:
            assert info.value.features
    if reader == 2:
        assert "columnMapping" in reader_features(protocol)
