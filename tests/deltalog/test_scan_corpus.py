"""Scanning corpus tables gives exactly the rows their writers' test suites expect.

Sources of expected data (see corpus/README.md):
- kernel-rs golden tables: `<t>/expected/`, Spark-written parquet of the latest snapshot;
- DAT cases: `expected/latest/table_content.parquet/` and `expected/v<N>/...` per version;
- kernel-rs FFI text dumps (`ffi_expected/*.expected`);
- dask-deltatable's row counts per version.

Rows are compared as sorted lists after normalising representation differences only:
Spark writes timestamps as naive INT96/ns values, the reader returns microseconds in UTC.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltalog.errors import UnsupportedFeatureError
from deltalog.packed_stats import stats_text
from deltalog.scan import read_snapshot_data
from deltalog.table import DeltaTable
from tests.support.corpus import CORPUS

MANIFEST: list[dict[str, Any]] = (
    json.loads((CORPUS / "manifest.json").read_text())
    if (CORPUS / "manifest.json").exists()
    else []
)

# Tables with expected data that cannot be compared row by row, and why.
KNOWN_MISMATCHES: dict[str, str] = {
    "delta-kernel-rs/golden_data/data-reader-partition-values": (
        "expected/ was written by Spark in a UTC-7 session time zone: for the partition "
        "string '2021-09-08 11:11:11' its as_timestamp column holds 18:11:11Z, while the "
        "protocol (and kernel-rs, which skips this table for the same reason) reads "
        "partition timestamps as UTC, 11:11:11Z; all other columns are compared below"
    ),
}


def _expected_cases() -> list[Any]:
    cases = []
    for entry in MANIFEST:
        info = entry.get("deltalake")
        expected = info.get("expected") if isinstance(info, dict) else None
        if not expected:
            continue
        path, root = entry["path"], entry["table_root"]
        if expected["kind"].startswith("golden"):
            cases.append(pytest.param(root, None, f"{path}/expected", None, id=path))
        elif expected["kind"].startswith("DAT"):
            latest = json.loads(
                (CORPUS / path / "expected/latest/table_version_metadata.json").read_text()
            )
            content = f"{path}/expected/latest/table_content.parquet"
            cases.append(pytest.param(root, None, content, latest["version"], id=f"{path}@latest"))
            for v in expected.get("versions", []):
                version = int(v[1:])
                content = f"{path}/expected/{v}/table_content.parquet"
                cases.append(pytest.param(root, version, content, version, id=f"{path}@{v}"))
    return cases


def _normalise(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return tuple(sorted((k, _normalise(v)) for k, v in value.items()))
    if isinstance(value, list):
        items = [_normalise(v) for v in value]
        if items and all(isinstance(i, tuple) and len(i) == 2 for i in value):
            return tuple(sorted(items, key=repr))  # a map
        return tuple(items)
    if isinstance(value, Decimal):
        return value
    return value


def _rows(table: pa.Table, names: list[str]) -> list[tuple[Any, ...]]:
    columns = []
    for name in names:
        column = table.column(name)
        if pa.types.is_timestamp(column.type) and column.type.unit != "us":
            column = pc.cast(column, pa.timestamp("us", column.type.tz), safe=False)
        columns.append(column.to_pylist())
    rows = [tuple(_normalise(c[i]) for c in columns) for i in range(table.num_rows)]
    return sorted(rows, key=repr)


def _read_expected(relative: str) -> pa.Table:
    directory = CORPUS / relative
    files = sorted(p for p in directory.glob("*.parquet") if not p.name.startswith((".", "_")))
    tables = [pq.read_table(p) for p in files]
    return pa.concat_tables(tables, promote_options="permissive")


def assert_same_rows(actual: pa.Table, expected: pa.Table) -> None:
    assert sorted(actual.column_names) == sorted(expected.column_names)
    assert actual.num_rows == expected.num_rows
    names = expected.column_names
    assert _rows(actual, names) == _rows(expected, names)


@pytest.mark.parametrize(("root", "version", "expected", "expected_version"), _expected_cases())
def test_snapshot_equals_expected(root: str, version: int | None, expected: str, expected_version):
    table_path = root.removesuffix("/delta")
    reason = KNOWN_MISMATCHES.get(table_path)
    if reason:
        pytest.skip(reason)
    snapshot = DeltaTable(str(CORPUS / root)).snapshot(version)
    if expected_version is not None:
        assert snapshot.version == expected_version
    assert_same_rows(read_snapshot_data(snapshot), _read_expected(expected))


def test_known_mismatch_really_differs() -> None:
    """The skipped partition-values table differs only in the time-zone-shifted column."""
    root = CORPUS / "delta-kernel-rs/golden_data/data-reader-partition-values"
    actual = read_snapshot_data(DeltaTable(str(root / "delta")).snapshot())
    expected = _read_expected("delta-kernel-rs/golden_data/data-reader-partition-values/expected")
    others = [n for n in expected.column_names if n != "as_timestamp"]
    assert _rows(actual, others) == _rows(expected, others)
    stamps = {v for v in actual.column("as_timestamp").to_pylist() if v is not None}
    assert stamps == {dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=dt.UTC)}


# FFI text dumps -------------------------------------------------------------------------


def _parse_ffi_dump(path: Path) -> tuple[int, dict[str, list[str]]]:
    text = path.read_text()
    version = int(re.search(r"^version: (\d+)$", text, re.M).group(1))
    columns = {}
    for name, body in re.findall(r"^(\w+):  \[\n(.*?)\n\]", text, re.M | re.S):
        columns[name] = [line.strip().rstrip(",") for line in body.splitlines()]
    return version, columns


def _ffi_format(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%fZ")
    return repr(value)


@pytest.mark.parametrize("name", ["table-with-dv-small", "with-short-dv"])
def test_ffi_expected_dumps(name: str) -> None:
    dump = CORPUS / "delta-kernel-rs/ffi_expected" / f"{name}.expected"
    version, columns = _parse_ffi_dump(dump)
    snapshot = DeltaTable(str(CORPUS / "delta-kernel-rs/data" / name)).snapshot()
    assert snapshot.version == version
    actual = read_snapshot_data(snapshot)
    assert actual.column_names == list(columns)
    for column, expected in columns.items():
        assert [_ffi_format(v) for v in actual.column(column).to_pylist()] == expected


def test_ffi_table_with_geo_is_refused() -> None:
    """table-with-geo.expected holds only a geometry/geography schema and no rows; this
    reader refuses the `geospatial` reader feature on purpose (see deltalog/features.py),
    so there is nothing to compare: the refusal itself is what is checked."""
    with pytest.raises(UnsupportedFeatureError, match="geospatial"):
        DeltaTable(str(CORPUS / "delta-kernel-rs/data/table-with-geo")).snapshot()


# dask-deltatable counts ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "version", "rows", "columns"),
    [
        ("empty2", None, 0, 4),
        ("empty1", 4, 0, 2),
        ("empty1", 0, 5, 2),
        ("checkpoint", 4, 25, None),
        ("checkpoint", 12, 65, None),
        ("checkpoint", 22, 115, None),
    ],
)
def test_dask_deltatable_counts(table: str, version: int | None, rows: int, columns: int | None):
    snapshot = DeltaTable(str(CORPUS / "dask-deltatable" / table)).snapshot(version)
    data = read_snapshot_data(snapshot)
    assert data.num_rows == rows
    if columns is not None:
        assert data.num_columns == columns


def test_dask_deltatable_partition_filter() -> None:
    snapshot = DeltaTable(str(CORPUS / "dask-deltatable/partition")).snapshot(0)
    data = read_snapshot_data(snapshot)
    assert pc.sum(pc.equal(data.column("col1"), 1)).as_py() == 21


# Every other table with data: rows agree with the log's own statistics ----------------


def _consistency_cases() -> list[Any]:
    cases = []
    for entry in MANIFEST:
        analysis = entry.get("analysis") or {}
        info = entry.get("deltalake")
        if not isinstance(info, dict) or info.get("rows") is None:
            continue  # deltalake could not read it either: negative or unsupported table
        if analysis.get("active_files_missing"):
            continue  # log-only table: its data files are not in the corpus
        cases.append(pytest.param(entry["table_root"], info["rows"], id=entry["path"]))
    return cases


@pytest.mark.parametrize(("root", "deltalake_rows"), _consistency_cases())
def test_scan_agrees_with_stats_and_deltalake(root: str, deltalake_rows: int) -> None:
    """Row count == sum(numRecords) - sum(DV cardinality) when every file has stats, and
    == the count deltalake 1.6.6 read (which applies DVs through its QueryBuilder)."""
    snapshot = DeltaTable(str(CORPUS / root)).snapshot()
    data = read_snapshot_data(snapshot)
    assert data.num_rows == deltalake_rows
    stats = stats_text(snapshot.files.column("stats")).to_pylist()
    records = [json.loads(s).get("numRecords") if s else None for s in stats]
    if records and None not in records:
        dvs = snapshot.files.column("deletionVector").to_pylist()
        deleted = sum((dv or {}).get("cardinality") or 0 for dv in dvs)
        assert data.num_rows == sum(records) - deleted


# Tables whose expected values live in their writers' test code -------------------------


def test_type_widening_reads_old_files_as_new_types() -> None:
    """delta/golden/type-widening: one file written before the widening (int8, int32,
    float, date, decimal(10,2) ... on disk) and one after; both read as the current types."""
    snapshot = DeltaTable(str(CORPUS / "delta/golden/type-widening")).snapshot()
    data = read_snapshot_data(snapshot)
    schema = dict(zip(data.column_names, data.schema.types, strict=True))
    assert schema["byte_long"] == pa.int64()
    assert schema["float_double"] == pa.float64()
    assert schema["int_decimal"] == pa.decimal128(11, 1)
    assert schema["date_timestamp_ntz"] == pa.timestamp("us")
    old = min(data.to_pylist(), key=lambda row: row["byte_long"])
    assert old == {
        "byte_long": 1,
        "int_long": 2,
        "float_double": float(pa.scalar(3.4, pa.float32()).as_py()),
        "byte_double": 5.0,
        "short_double": 6.0,
        "int_double": 7.0,
        "decimal_decimal_same_scale": Decimal("123.45"),
        "decimal_decimal_greater_scale": Decimal("67.89000"),
        "byte_decimal": Decimal("1.0"),
        "short_decimal": Decimal("2.0"),
        "int_decimal": Decimal("3.0"),
        "long_decimal": Decimal("4.0"),
        "date_timestamp_ntz": dt.datetime(2024, 9, 9),
    }


def test_type_widening_nested() -> None:
    snapshot = DeltaTable(str(CORPUS / "delta/golden/type-widening-nested")).snapshot()
    rows = sorted(read_snapshot_data(snapshot).to_pylist(), key=lambda r: r["struct"]["a"])
    assert rows[0] == {"struct": {"a": 1}, "map": [(2, 3)], "array": [4, 5]}
    big = 2**63 - 1
    assert rows[1] == {"struct": {"a": big}, "map": [(big, big)], "array": [big, -big - 1]}


def test_iso8601_timestamp_partition_values() -> None:
    """Partition values written as `2024-01-01T10:00:00.000000Z` (kernel-defaults)."""
    root = CORPUS / "delta/golden/kernel-timestamp-partition-col-ISO8601"
    data = read_snapshot_data(DeltaTable(str(root)).snapshot())
    rows = sorted(data.to_pylist(), key=lambda r: r["str"])
    assert rows == [
        {"str": "2024-01-01 10:00:00", "ts": dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC)},
        {"str": "2024-01-02 12:30:00", "ts": dt.datetime(2024, 1, 2, 12, 30, tzinfo=dt.UTC)},
    ]


def test_void_column_dropped_and_column_selection() -> None:
    data = read_snapshot_data(
        DeltaTable(str(CORPUS / "delta-kernel-rs/data/void-column")).snapshot()
    )
    assert data.column_names == ["id"]
    snapshot = DeltaTable(str(CORPUS / "delta-rs/table_with_column_mapping")).snapshot()
    subset = read_snapshot_data(snapshot, columns=["Company Very Short"])
    assert subset.column_names == ["Company Very Short"]
    assert subset.num_rows == read_snapshot_data(snapshot).num_rows
