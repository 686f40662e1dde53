"""Iceberg v3 metadata generated from corpus tables, read by real Iceberg readers.

PyIceberg 0.12 (`StaticTable.from_metadata`, local FileIO) and DuckDB 1.5.5's iceberg
extension (loaded from its PyPI package, no download) read the generated metadata
directly; their rows must equal deltalog's own reader's (which applies column mapping and
deletion vectors) at the same version.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltalog.deletion_vectors import DeletionVectorDescriptor, absolute_path
from deltalog.scan import read_snapshot_data
from sharing.catalog import SharedTable
from sharing.config import TableConfig
from sharing.errors import InvalidParameter
from sharing.iceberg.avro_files import AvroContent
from sharing.iceberg.generator import GeneratedVersion, IcebergMetadata, snapshot_id
from sharing.iceberg.schema import UnsupportedColumn
from sharing.tables import TableService
from tests.support import REPO_ROOT
from tests.support.corpus import copy_table, corpus_table
from tests.support.duckdb_iceberg import duckdb_with_iceberg
from tests.support.requirements import require
from tests.support.rows import comparable_cell
from tests.support.server import make_config

try:
    from pyiceberg.table import StaticTable
except ImportError:  # checked by the fixture below: a skip here, a failure in CI
    StaticTable = None


def _shared(location: Path, *, history: bool = True, start: int = 0) -> SharedTable:
    config = TableConfig(
        name="t", location=str(location), id="id-t", history_shared=history, start_version=start
    )
    return SharedTable("s", "d", "t", config)


@pytest.fixture
def service() -> TableService:
    return TableService(make_config())


@pytest.fixture
def generator(tmp_path: Path, service: TableService) -> IcebergMetadata:
    return IcebergMetadata(tmp_path / "iceberg-cache", service)


@pytest.fixture(autouse=True)
def _pyiceberg(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyIceberg is installed (the dev extra). Spark's INT96 timestamps read as
    nanoseconds; PyIceberg reads them only with its documented downcast option (a reader
    setting, not something the metadata can say)."""
    require(StaticTable is not None, "pyiceberg==0.12.0 (the dev extra)")
    monkeypatch.setenv("PYICEBERG_DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE", "true")


def _rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    rows = [tuple(comparable_cell(r[c]) for c in columns) for r in table.to_pylist()]
    return sorted(rows, key=repr)


def _expected(service: TableService, shared: SharedTable, version: int) -> pa.Table:
    return read_snapshot_data(service.at_version(shared, version))


def _assert_same(actual: pa.Table, expected: pa.Table, skip: tuple[str, ...] = ()) -> None:
    names = sorted(c for c in actual.column_names if c not in skip)
    assert names == sorted(c for c in expected.column_names if c not in skip)
    columns = sorted(c for c in expected.column_names if c not in skip)
    assert actual.num_rows == expected.num_rows
    assert _rows(actual, columns) == _rows(expected, columns)


# Partitioned, deletion vectors (on disk, partitioned, with checkpoints, with column
# mapping), column mapping by name and by id, checkpointed, row tracking, all primitive
# types, nested types, schema change, a void column.
CORPUS_TABLES = [
    ("levi/dat/basic_partitioned/delta", ()),
    ("delta-rs/delta-2.2.0-partitioned-types", ()),
    ("delta-kernel-rs/data/table-with-dv-small", ()),
    ("delta-kernel-rs/data/with-short-dv", ()),
    ("delta-rs/table_with_deletion_logs", ()),
    ("delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta", ()),
    ("delta-kernel-rs/golden_data/dv-with-columnmapping/delta", ()),
    ("delta/kernel-defaults/basic-dv-with-checkpoint", ()),
    ("delta/kernel-defaults/column-mapping-id", ()),
    ("delta/kernel-defaults/data-reader-partition-values-column-mapping-name", ()),
    ("delta-rs/table_with_column_mapping", ()),
    # PyIceberg 0.12 reads a null list or map of structs as empty: not what is compared.
    (
        "delta-kernel-rs/golden_data/table-with-columnmapping-mode-id/delta",
        ("array_of_structs", "map_of_rows"),
    ),
    (
        "delta-kernel-rs/golden_data/table-with-columnmapping-mode-name/delta",
        ("array_of_structs", "map_of_rows"),
    ),
    ("delta-rs/simple_table_with_checkpoint", ()),
    ("delta-rs/table_with_liquid_clustering", ()),
    ("levi/dat/all_primitive_types/delta", ()),
    ("levi/dat/nested_types/delta", ()),
    ("levi/dat/with_schema_change/delta", ()),
    # Type widening Iceberg can promote (int → long and the like).
    ("delta/golden/type-widening-nested", ()),
    # Change data feed tables; delta-rs left `_change_type` in some data files.
    ("delta-rs/cdf-table", ()),
    ("delta-kernel-rs/data/cdf-column-mapping-id-mode", ()),
    # A void column is left out, as Delta readers drop it.
    ("delta-kernel-rs/data/void-column", ()),
]


@pytest.mark.parametrize(("table", "skip"), CORPUS_TABLES, ids=[t for t, _ in CORPUS_TABLES])
def test_pyiceberg_reads_the_latest_version(
    table: str, skip: tuple[str, ...], service: TableService, generator: IcebergMetadata
) -> None:
    shared = _shared(corpus_table(table))
    generated = generator.generate(shared)
    iceberg = StaticTable.from_metadata(str(generated.metadata_path))
    assert iceberg.metadata.format_version == 3
    assert iceberg.current_snapshot().snapshot_id == snapshot_id(generated.version)
    _assert_same(iceberg.scan().to_arrow(), _expected(service, shared, generated.version), skip)


def test_time_travel_by_snapshot_id_and_timestamp(
    service: TableService, generator: IcebergMetadata
) -> None:
    """One snapshot per Delta version: every version of a 47-version table with deletion
    vectors and checkpoints reads as Delta reads it."""
    shared = _shared(corpus_table("delta/kernel-defaults/basic-dv-with-checkpoint"))
    latest = generator.generate(shared)
    iceberg = StaticTable.from_metadata(str(latest.metadata_path))
    assert [s.snapshot_id for s in iceberg.snapshots()] == [
        snapshot_id(v) for v in range(latest.version + 1)
    ]
    for version in (0, 1, 2, 9, 10, 11, 25, latest.version - 1):
        scanned = iceberg.scan(snapshot_id=snapshot_id(version)).to_arrow()
        _assert_same(scanned, _expected(service, shared, version))
        timestamp = service.at_version(shared, version).timestamp
        assert iceberg.snapshot_as_of_timestamp(timestamp).snapshot_id == snapshot_id(version)


def test_history_starts_at_start_version(service: TableService, generator: IcebergMetadata) -> None:
    shared = _shared(corpus_table("delta-rs/table_with_deletion_logs"), start=15)
    latest = generator.generate(shared)
    iceberg = StaticTable.from_metadata(str(latest.metadata_path))
    assert [s.snapshot_id for s in iceberg.snapshots()] == [
        snapshot_id(v) for v in range(15, latest.version + 1)
    ]
    _assert_same(
        iceberg.scan(snapshot_id=snapshot_id(15)).to_arrow(), _expected(service, shared, 15)
    )
    with pytest.raises(InvalidParameter):
        generator.generate(shared, 14)
    unshared = _shared(corpus_table("delta-rs/table_with_deletion_logs"), history=False)
    only = StaticTable.from_metadata(str(generator.generate(unshared).metadata_path))
    assert [s.snapshot_id for s in only.snapshots()] == [snapshot_id(latest.version)]
    assert generator.generate(unshared, latest.version).metadata_path == Path(
        only.metadata_location
    )
    with pytest.raises(InvalidParameter, match="history sharing is not enabled"):
        generator.generate(unshared, 3)


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def test_generated_files_are_deterministic(tmp_path: Path) -> None:
    """Generating twice into the same cache directory gives byte-identical files, whether
    the versions are generated at once or in two runs (a restart resuming from the files
    of the first). (Files name each other by absolute path, so the directory is kept.)"""
    location = corpus_table("delta-rs/table_with_deletion_logs")
    cache = tmp_path / "cache"
    IcebergMetadata(cache, TableService(make_config())).generate(_shared(location))
    first = _tree(cache)
    shutil.rmtree(cache)
    IcebergMetadata(cache, TableService(make_config())).generate(_shared(location), 7)
    IcebergMetadata(cache, TableService(make_config())).generate(_shared(location))
    second = _tree(cache)
    assert len(first) > 20  # 21 manifest lists, manifests, Puffin files, metadata
    # The second run also wrote version 7's metadata JSON; every other file is the same.
    extra = set(second) - set(first)
    assert len(extra) == 1 and extra.pop().endswith("v00000000000000000007.metadata.json")
    for name in first:
        assert first[name] == second[name], name


def test_files_named_on_a_bucket_are_deterministic_and_name_only_the_bucket(
    tmp_path: Path,
) -> None:
    """With a bucket (the S3 endpoint's naming of a local table) no location names the
    cache or the table folder, so two caches in different directories hold the same bytes,
    incremental (version 7, then the latest: manifests carried over through the bucket's
    names) or not; and every location in them is on the bucket."""
    location = corpus_table("delta-rs/table_with_deletion_logs")
    first_cache, second_cache = tmp_path / "a", tmp_path / "b"
    IcebergMetadata(first_cache, TableService(make_config())).generate(
        _shared(location), bucket="bkt"
    )
    IcebergMetadata(second_cache, TableService(make_config())).generate(
        _shared(location), 7, bucket="bkt"
    )
    latest = IcebergMetadata(second_cache, TableService(make_config())).generate(
        _shared(location), bucket="bkt"
    )
    first, second = _tree(first_cache), _tree(second_cache)
    assert len(first) > 20
    assert set(second) - set(first) == {
        n for n in second if n.endswith("v00000000000000000007.metadata.json")
    }
    for name in first:
        assert first[name] == second[name], name
    for data in first.values():
        assert str(tmp_path).encode() not in data and str(location).encode() not in data
    metadata = json.loads(latest.metadata_path.read_bytes())
    assert metadata["location"] == "s3://bkt"
    for snapshot in metadata["snapshots"]:
        assert snapshot["manifest-list"].startswith("s3://bkt/_lakeshare_iceberg/from-")
    # Without a bucket the same table has its own files (the bucket is in the identity).
    plain = IcebergMetadata(first_cache, TableService(make_config())).generate(_shared(location))
    assert plain.metadata_path.parent.parent.parent != latest.metadata_path.parent.parent.parent


def test_later_versions_reuse_earlier_manifests(generator: IcebergMetadata) -> None:
    """A version that only adds files keeps its predecessor's manifests as they are."""
    shared = _shared(corpus_table("delta-rs/simple_table_with_checkpoint"))
    latest = generator.generate(shared)
    iceberg = StaticTable.from_metadata(str(latest.metadata_path))
    io = iceberg.io
    previous = {
        m.manifest_path for m in iceberg.snapshot_by_id(latest.snapshot_id - 1).manifests(io)
    }
    current = {m.manifest_path for m in iceberg.current_snapshot().manifests(io)}
    assert previous and previous <= current


def _entries(generated: GeneratedVersion) -> Iterator[dict[str, Any]]:
    """The live manifest entries of the current snapshot, decoded by fastavro (PyIceberg
    0.12's DataFile does not expose the v3 fields `first_row_id`, `referenced_data_file`,
    `content_offset` and `content_size_in_bytes`)."""
    iceberg = StaticTable.from_metadata(str(generated.metadata_path))
    for manifest in iceberg.current_snapshot().manifests(iceberg.io):
        for entry in AvroContent(Path(manifest.manifest_path).read_bytes()).records:
            if entry["status"] != 2:
                yield entry


def test_deletion_vector_blobs_are_the_stored_delta_bytes(
    service: TableService, generator: IcebergMetadata
) -> None:
    """The Puffin `deletion-vector-v1` blob is the Delta DV file's bytes at the
    descriptor's offset (size, magic + bitmap, CRC), copied, and the delete entry points
    at it with `referenced_data_file`, `content_offset` and `content_size_in_bytes`."""
    location = corpus_table("delta-rs/table_with_deletion_logs")
    shared = _shared(location)
    generated = generator.generate(shared)
    snapshot = service.at_version(shared, generated.version)
    descriptors = {}
    for row in snapshot.files.select(["path", "deletionVector"]).to_pylist():
        if row["deletionVector"] is not None:
            descriptors[str(location / row["path"])] = DeletionVectorDescriptor.from_dict(
                row["deletionVector"]
            )
    entries = [e["data_file"] for e in _entries(generated) if e["data_file"]["content"] == 1]
    assert len(entries) == len(descriptors) > 0
    for data_file in entries:
        descriptor = descriptors[data_file["referenced_data_file"]]
        assert descriptor.storage_type == "u"
        assert data_file["file_format"] == "PUFFIN"
        assert data_file["record_count"] == descriptor.cardinality
        puffin = Path(data_file["file_path"]).read_bytes()
        start = data_file["content_offset"]
        blob = puffin[start : start + data_file["content_size_in_bytes"]]
        stored = Path(absolute_path(snapshot.table_root, descriptor, snapshot.storage))
        offset = descriptor.offset or 1
        assert blob == stored.read_bytes()[offset : offset + descriptor.size_in_bytes + 8]
        assert struct.unpack(">I", blob[:4])[0] == descriptor.size_in_bytes
        assert blob[4:8] == bytes([0xD1, 0xD3, 0x39, 0x64])


def test_row_tracking_gives_first_row_id_and_sequence_numbers(
    service: TableService, generator: IcebergMetadata
) -> None:
    location = corpus_table("delta-rs/table_with_liquid_clustering")
    shared = _shared(location)
    generated = generator.generate(shared)
    adds = service.at_version(shared, generated.version).files.to_pylist()
    expected = {
        str(location / a["path"]): (a["baseRowId"], a["defaultRowCommitVersion"] + 1) for a in adds
    }
    iceberg = StaticTable.from_metadata(str(generated.metadata_path))
    seen = {
        e["data_file"]["file_path"]: (e["data_file"]["first_row_id"], e["sequence_number"])
        for e in _entries(generated)
    }
    assert seen == expected
    highest = max(base + 1 for base, _ in expected.values())
    assert iceberg.metadata.next_row_id >= highest


def test_field_ids_come_from_column_mapping(generator: IcebergMetadata) -> None:
    location = corpus_table("delta/kernel-defaults/column-mapping-id")
    generated = generator.generate(_shared(location))
    iceberg = StaticTable.from_metadata(str(generated.metadata_path))
    from deltalog.schema import parse_schema

    snapshot = generator.tables.at_version(_shared(location), generated.version)
    delta = parse_schema(snapshot.metadata.schema_string)
    for field in delta.fields:
        assert iceberg.schema().find_field(field.name).field_id == field.field_id
    mapping = iceberg.name_mapping()
    assert mapping is not None
    mapped = {name: m.field_id for m in mapping for name in m.names}
    for field in delta.fields:
        assert mapped[field.physical_name] == field.field_id


def test_assigned_field_ids_stay_across_versions(generator: IcebergMetadata) -> None:
    """Without column mapping, a column keeps the id it was first given; a new column
    gets a new one."""
    generated = generator.generate(_shared(corpus_table("levi/dat/with_schema_change/delta")))
    iceberg = StaticTable.from_metadata(str(generated.metadata_path))
    schemas = iceberg.schemas()
    assert len(schemas) == 2
    first, second = schemas[0], schemas[1]
    for field in first.fields:
        match = (
            second.find_field(field.name, case_sensitive=True)
            if field.name in {f.name for f in second.fields}
            else None
        )
        if match is not None:
            assert match.field_id == field.field_id
    new = [f for f in second.fields if f.name not in {g.name for g in first.fields}]
    assert all(f.field_id > max(g.field_id for g in first.fields) for f in new)


def test_a_type_without_iceberg_equivalent_is_refused_by_name(
    generator: IcebergMetadata,
) -> None:
    location = corpus_table("delta/golden/spark-variant-checkpoint")
    with pytest.raises(UnsupportedColumn, match="Column 'v' has type variant"):
        generator.generate(_shared(location))
    widened = corpus_table("delta/golden/type-widening")
    with pytest.raises(UnsupportedColumn, match="Column 'byte_double' was widened from byte"):
        generator.generate(_shared(widened))


def test_snapshots_from_the_snapshot_store(tmp_path: Path) -> None:
    """With the server's snapshot store (memory-mapped snapshots, typed statistics), as
    `lakeshare serve` runs it, the metadata is the same."""
    from deltalog import SnapshotStore

    location = corpus_table("delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta")
    plain = IcebergMetadata(tmp_path / "cache", TableService(make_config()))
    first = _tree(plain.generate(_shared(location)).metadata_path.parent.parent)
    shutil.rmtree(tmp_path / "cache")
    store = SnapshotStore(tmp_path / "snapshots", verify=False, typed_stats=True)
    for _ in range(2):  # the second service maps the stored snapshot
        service = TableService(make_config(), snapshot_store=store)
        stored = IcebergMetadata(tmp_path / "cache", service)
        generated = stored.generate(_shared(location))
    assert _tree(generated.metadata_path.parent.parent) == first


def test_the_table_folder_is_never_written(tmp_path: Path, generator: IcebergMetadata) -> None:
    root = copy_table("delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta", tmp_path)
    before = _tree(root)
    generator.generate(_shared(root))
    assert _tree(root) == before


@pytest.fixture(scope="module")
def duckdb_connection() -> Any:
    """DuckDB with its iceberg extension loaded from the installed PyPI packages."""
    return duckdb_with_iceberg()


@pytest.mark.parametrize(
    "table",
    [
        "delta-kernel-rs/data/table-with-dv-small",
        "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
        "delta/kernel-defaults/column-mapping-id",
        "delta-rs/table_with_column_mapping",
        "levi/dat/basic_partitioned/delta",
        "delta-rs/cdf-table",
        "delta-kernel-rs/data/void-column",
    ],
)
def test_duckdb_reads_the_generated_metadata(
    table: str, duckdb_connection: Any, service: TableService, generator: IcebergMetadata
) -> None:
    shared = _shared(corpus_table(table))
    generated = generator.generate(shared)
    actual = duckdb_connection.execute(
        f"SELECT * FROM iceberg_scan('{generated.metadata_path}')"
    ).arrow()
    if isinstance(actual, pa.RecordBatchReader):
        actual = actual.read_all()
    _assert_same(actual, _expected(service, shared, generated.version))


def test_duckdb_time_travel_by_snapshot_id(
    duckdb_connection: Any, service: TableService, generator: IcebergMetadata
) -> None:
    shared = _shared(corpus_table("delta-rs/table_with_deletion_logs"))
    generated = generator.generate(shared)
    for version in (0, 5, 12, generated.version):
        actual = duckdb_connection.execute(
            f"SELECT * FROM iceberg_scan('{generated.metadata_path}', "
            f"snapshot_from_id={snapshot_id(version)})"
        ).arrow()
        if isinstance(actual, pa.RecordBatchReader):
            actual = actual.read_all()
        _assert_same(actual, _expected(service, shared, version))


def test_duckdb_row_id_is_base_row_id_plus_position(
    duckdb_connection: Any, service: TableService, generator: IcebergMetadata
) -> None:
    location = corpus_table("delta-rs/table_with_liquid_clustering")
    shared = _shared(location)
    generated = generator.generate(shared)
    rows = duckdb_connection.execute(
        "SELECT filename, file_row_number, _row_id, _last_updated_sequence_number "
        f"FROM iceberg_scan('{generated.metadata_path}', filename=true, file_row_number=true)"
    ).fetchall()
    adds = {
        str(location / a["path"]): a
        for a in service.at_version(shared, generated.version).files.to_pylist()
    }
    assert len(rows) == 10
    for filename, position, row_id, sequence in rows:
        add = adds[filename]
        assert row_id == add["baseRowId"] + position
        assert sequence == add["defaultRowCommitVersion"] + 1


def _table_with_cut_statistics(root: Path) -> str:
    """A delta-rs table whose string maximum is rewritten as a writer that cuts string
    statistics to 32 characters records it, and whose timestamp maximum delta-rs itself
    truncates to milliseconds. Returns the longest string."""
    import deltalake

    longest = "b" * 40 + "z"
    rows = pa.table(
        {
            "s": ["a", longest],
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, 0, 0, 0, 1), dt.datetime(2024, 1, 1, 0, 0, 0, 123456)],
                pa.timestamp("us", tz="UTC"),
            ),
            "d": pa.array([Decimal("1.25"), Decimal("7.50")], pa.decimal128(5, 2)),
        }
    )
    deltalake.write_deltalake(str(root), rows)
    (commit,) = (root / "_delta_log").glob("*.json")
    text = commit.read_text()
    assert longest in text and "00:00:00.123Z" in text
    commit.write_text(text.replace(longest, "b" * 32))
    return longest


def test_bounds_never_exclude_rows_delta_statistics_cut(
    tmp_path: Path, generator: IcebergMetadata
) -> None:
    """A predicate on the true maximum still finds its row: a cut string maximum is no
    upper bound and a millisecond timestamp maximum is widened (without that, PyIceberg
    prunes the file and returns nothing)."""
    from pyiceberg.expressions import EqualTo, GreaterThanOrEqual

    root = tmp_path / "cut"
    longest = _table_with_cut_statistics(root)
    iceberg = StaticTable.from_metadata(str(generator.generate(_shared(root)).metadata_path))
    assert iceberg.scan(row_filter=EqualTo("s", longest)).to_arrow().num_rows == 1
    exact = "2024-01-01T00:00:00.123456+00:00"
    assert iceberg.scan(row_filter=EqualTo("ts", exact)).to_arrow().num_rows == 1
    assert (
        iceberg.scan(row_filter=GreaterThanOrEqual("d", Decimal("7.50"))).to_arrow().num_rows == 1
    )
    # The bounds that are safe are still there, so files are still pruned on them.
    assert iceberg.scan(row_filter=EqualTo("s", "0")).to_arrow().num_rows == 0
    assert iceberg.scan(row_filter=GreaterThanOrEqual("d", Decimal("7.51"))).plan_files() == []


def test_file_bounds_rules() -> None:
    from deltalog.schema import DecimalType, PrimitiveType
    from sharing.iceberg.schema import Leaf
    from sharing.iceberg.values import file_bounds

    leaves = [
        Leaf(("s",), 1, PrimitiveType("string"), "string", "s"),
        Leaf(("t",), 2, PrimitiveType("timestamp_ntz"), "timestamp", "t"),
        Leaf(("x", "d"), 3, DecimalType(10, 2), "decimal(10, 2)", "x"),
        Leaf(("f",), 4, PrimitiveType("double"), "double", "f"),
    ]
    stats = {
        "numRecords": 3,
        "minValues": {"s": "a" * 40, "t": "2024-01-01T00:00:00.000", "x": {"d": Decimal("-1.5")}},
        "maxValues": {"s": "short", "t": "2024-01-01T00:00:01.999", "f": "NaN"},
        "nullCount": {"s": 0, "t": 1, "x": {"d": 2}},
    }
    bounds = file_bounds(stats, leaves, 32)
    assert bounds.lower[1] == b"a" * 40  # a cut minimum is still a lower bound
    assert bounds.upper[1] == b"short"
    micros = (dt.datetime(2024, 1, 1, 0, 0, 1) - dt.datetime(1970, 1, 1)) // dt.timedelta(
        microseconds=1
    )
    assert struct.unpack("<q", bounds.upper[2])[0] == micros + 999_999
    assert bounds.lower[3] == (-150).to_bytes(2, "big", signed=True)
    assert 4 not in bounds.upper  # NaN is no bound
    assert bounds.null_counts == {1: 0, 2: 1, 3: 2}
    loose = file_bounds({**stats, "tightBounds": False}, leaves, 32)
    assert loose.null_counts == {} and loose.lower == bounds.lower
    assert (
        1 not in file_bounds({"maxValues": {"s": "z" * 32}}, leaves, 32).upper
    )  # possibly cut: no upper bound


_WORKER = """
import sys
from pathlib import Path
from sharing.catalog import SharedTable
from sharing.config import TableConfig
from sharing.iceberg.generator import IcebergMetadata
from sharing.tables import TableService
from tests.support.server import make_config

config = TableConfig(name="t", location=sys.argv[1], id="id-t", history_shared=True)
shared = SharedTable("s", "d", "t", config)
generator = IcebergMetadata(Path(sys.argv[2]), TableService(make_config()))
print(generator.generate(shared).metadata_path)
"""


def test_worker_processes_share_the_generated_files(tmp_path: Path) -> None:
    """Two processes asking for the same table at once (as `lakeshare serve`'s workers do)
    both get the metadata; the files are the ones one process alone writes."""
    location = corpus_table("delta-rs/table_with_deletion_logs")
    cache = tmp_path / "shared-cache"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(location), str(cache)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=120)[0].strip() for w in workers]
    assert all(w.returncode == 0 for w in workers)
    assert outputs[0] == outputs[1] and Path(outputs[0]).is_file()
    together = _tree(cache)
    shutil.rmtree(cache)
    IcebergMetadata(cache, TableService(make_config())).generate(_shared(location))
    assert _tree(cache) == together
    assert not [p for p in cache.rglob("*.tmp")]


def test_a_recipients_partition_filter_selects_the_files(
    service: TableService, generator: IcebergMetadata
) -> None:
    """The bound filter of a recipient (here `letter = current_recipient('letter')`) picks
    the files of every version, and each bound filter has its own generated files."""
    from dataclasses import replace

    from sharing.slices import bind, parse_partition_filter

    location = corpus_table("levi/dat/basic_partitioned/delta")
    whole = _shared(location)
    parsed = parse_partition_filter("letter = current_recipient('letter')")
    sees_a = replace(whole, partition_filter=bind(parsed, (("letter", "a"),)))
    sees_e = replace(whole, partition_filter=bind(parsed, (("letter", "e"),)))
    paths = set()
    for shared, letter in ((sees_a, "a"), (sees_e, "e")):
        generated = generator.generate(shared)
        paths.add(generated.metadata_path)
        iceberg = StaticTable.from_metadata(str(generated.metadata_path))
        expected = _expected(service, whole, generated.version)
        mask = pc.equal(expected.column("letter"), letter)
        _assert_same(iceberg.scan().to_arrow(), expected.filter(mask))
        first = iceberg.scan(snapshot_id=snapshot_id(0)).to_arrow()
        before = _expected(service, whole, 0)
        _assert_same(first, before.filter(pc.equal(before.column("letter"), letter)))
    paths.add(generator.generate(whole).metadata_path)
    assert len(paths) == 3
