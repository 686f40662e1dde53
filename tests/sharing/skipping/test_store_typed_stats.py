"""Statistics typed from JSON by the snapshot store (deltalog.json_stats) give data skipping
exactly what parsing the JSON gives: per request, the same min, max, null count and record
count for every file, and the same files kept by predicates."""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from deltalog import DeltaTable, SnapshotStore
from deltalog.actions import STATS_PARSED
from deltalog.file_chunks import FileChunks
from deltalog.json_stats import with_typed_stats
from deltalog.scan import iter_file_tables
from deltalog.schema import DecimalType, StructType, parse_schema
from sharing.skipping import filter_files
from sharing.skipping import stats as stats_module
from sharing.skipping.expr import EQ, GE, GT, LE, LT, Column, Compare, Expr
from sharing.skipping.file_stats import file_stats
from sharing.skipping.stats import StatsRequest
from tests.sharing.skipping.test_corpus import _json_literal, _literal, _value_type
from tests.support.corpus import copy_table, corpus_table
from tests.support.replay_oracle import CountingStorage
from tests.support.skipping_oracle import evaluate

TABLES = {
    "levi/dat/all_primitive_types/delta": [
        ("int64", pa.int64()),
        ("int32", pa.int64()),
        ("int8", pa.int64()),
        ("float64", pa.float64()),
        ("float32", pa.float64()),
        ("utf8", pa.string()),
        ("bool", pa.bool_()),
        ("decimal", pa.float64()),
    ],
    "levi/dat/basic_partitioned/delta": [("number", pa.int64()), ("a_float", pa.float64())],
    "delta-rs/table_with_column_mapping": [],
}


def _typed(relative: str) -> tuple[pa.Table, pa.Table, DeltaTable]:
    table = DeltaTable(str(corpus_table(relative)))
    snapshot = table.snapshot()
    chunks = with_typed_stats(snapshot.file_state.active, snapshot.metadata)
    assert chunks is not None
    return snapshot.files, chunks.table, table


@pytest.mark.parametrize("relative", sorted(TABLES))
def test_file_stats_equal_the_json_ones(relative: str) -> None:
    plain, typed, table = _typed(relative)
    assert STATS_PARSED in typed.column_names and STATS_PARSED not in plain.column_names
    requests: list[StatsRequest] = [((name,), kind, "") for name, kind in TABLES[relative]]
    requests.append((("date32",), pa.string(), "date"))
    requests.append((("timestamp",), pa.string(), "ts"))
    if relative == "delta-rs/table_with_column_mapping":
        schema = json.loads(table.snapshot().metadata.schema_string)
        requests = [
            ((f["metadata"]["delta.columnMapping.physicalName"],), pa.string(), "")
            for f in schema["fields"]
            if f["type"] == "string"
        ]
    from_json = file_stats(plain, requests, None)
    from_typed = file_stats(typed, requests, None)
    assert from_typed.num_records.to_pylist() == from_json.num_records.to_pylist()
    for request in requests:
        a, b = from_typed.columns[request], from_json.columns[request]
        assert a.min.to_pylist() == b.min.to_pylist(), request
        assert a.max.to_pylist() == b.max.to_pylist(), request
        assert a.null_count.to_pylist() == b.null_count.to_pylist(), request


@pytest.mark.parametrize(
    ("column", "value_type", "value"),
    [
        ("int64", "long", "2"),
        ("float64", "double", "3.0"),
        ("utf8", "string", "1"),
        ("int16", "int", "0"),
    ],
)
def test_predicates_keep_the_same_files(column: str, value_type: str, value: str) -> None:
    plain, typed, table = _typed("levi/dat/all_primitive_types/delta")
    metadata = table.snapshot().metadata
    for op in ("equal", "lessThan", "greaterThanOrEqual"):
        hint = json.dumps(
            {
                "op": op,
                "children": [
                    {"op": "column", "name": column, "valueType": value_type},
                    {"op": "literal", "value": value, "valueType": value_type},
                ],
            }
        )

        def kept(files: pa.Table, hint: str = hint) -> list[str]:
            out = filter_files(
                files,
                metadata,
                json_hints=hint,
                sql_hints=None,
                evaluate_json=True,
                evaluate_sql=False,
            )
            return sorted(out.column("path").to_pylist())

        assert kept(typed) == kept(plain), (op, column)


# Tables whose statistics are JSON only, with date, timestamp, timestamp_ntz and decimal
# columns (Spark, delta-rs and Kernel writers; millisecond-truncated timestamps, offsets,
# year 9999, decimals up to 38 digits).
TEMPORAL_TABLES = [
    "levi/dat/all_primitive_types/delta",
    "delta-kernel-rs/data/stats-writing-all-types/delta",
    "delta-kernel-rs/golden_data/data-reader-timestamp_ntz/delta",
    "delta-kernel-rs/golden_data/kernel-timestamp-int96/delta",
    "delta-kernel-rs/golden_data/kernel-timestamp-timestamp_millis/delta",
    "delta-kernel-rs/golden_data/basic-decimal-table/delta",
    "delta-kernel-rs/golden_data/decimal-various-scale-precision/delta",
    "delta-rs/table_with_edge_timestamps",
    # Checkpoints with typed statistics, dropped here and typed again from their JSON
    # (microsecond data, millisecond statistics: the truncated maxima).
    "delta-rs/delta-1.2.1-only-struct-stats",
    "delta-rs/delta-checkpoint-stats-optional",
]


def _near(value: object) -> list[object]:
    """Values at and just around `value`: where truncated or rounded bounds would skip a
    file wrongly."""
    if isinstance(value, dt.datetime):
        steps = (-1000, -1, 1, 999, 1000, 1001)
        return [value, *(value + dt.timedelta(microseconds=s) for s in steps)]
    if isinstance(value, dt.date):
        return [value, value - dt.timedelta(days=1), value + dt.timedelta(days=1)]
    if isinstance(value, Decimal):
        near = float(value)
        return [value, value - 1, value + 1, near, math.nextafter(near, math.inf)]
    return []


def _boundary_predicates(schema: StructType, rows: list[dict]) -> list[tuple[Expr, dict]]:
    """Comparisons of each date, timestamp and decimal column with every value of its data
    and the values right next to them."""
    ops = {EQ: "equal", LT: "lessThan", LE: "lessThanOrEqual", GT: "greaterThan"}
    ops[GE] = "greaterThanOrEqual"
    out: list[tuple[Expr, dict]] = []
    for field in schema.fields:
        value_type = _value_type(field.type)
        if value_type not in ("date", "timestamp") and not isinstance(field.type, DecimalType):
            continue
        assert value_type is not None
        column = Column((field.name,), value_type)
        column_json = {"op": "column", "name": field.name, "valueType": value_type}
        values = {r[field.name] for r in rows if r[field.name] is not None}
        for value in {near for v in values for near in _near(v)}:
            literal = _literal(value)
            if literal is None:
                continue
            for op, name in ops.items():
                text = {"op": name, "children": [column_json, _json_literal(literal, value_type)]}
                out.append((Compare(op, column, literal), text))
    return out


@pytest.mark.parametrize("relative", TEMPORAL_TABLES)
def test_typed_dates_timestamps_decimals_skip_like_json_and_never_wrongly(
    relative: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Typed from the JSON, dates, timestamps and decimals serve predicates without any
    JSON parsed; they keep exactly the files the JSON keeps, and every file holding a
    matching row (read from the parquet data) is kept, at the boundaries too."""
    table = DeltaTable(str(corpus_table(relative)))
    snapshot = table.snapshot()
    active = snapshot.file_state.active
    if STATS_PARSED in active.schema.names:
        index = active.schema.get_field_index(STATS_PARSED)
        active = FileChunks.restore(
            active.schema.remove(index),
            [b.remove_column(index) for b in active.batches],
            active.keys,
        )
    chunks = with_typed_stats(active, snapshot.metadata)
    assert chunks is not None
    typed, plain = chunks.table, active.table
    schema = parse_schema(snapshot.metadata.schema_string)
    per_file = [t.to_pylist() for t in iter_file_tables(snapshot)]
    rows = [r for part in per_file for r in part]
    predicates = _boundary_predicates(schema, rows)
    assert predicates
    parsed: list[int] = []
    real = stats_module.parse_stats
    monkeypatch.setattr(
        stats_module, "parse_stats", lambda a, r: parsed.append(len(a)) or real(a, r)
    )
    skipped = 0
    for tree, text in predicates:
        hint = json.dumps(text)

        def kept(files: pa.Table, hint: str = hint) -> list[str]:
            out = filter_files(
                files,
                snapshot.metadata,
                json_hints=hint,
                sql_hints=None,
                evaluate_json=True,
                evaluate_sql=False,
            )
            return out.column("path").to_pylist()

        parsed.clear()
        from_typed = kept(typed)
        assert parsed == [], (relative, text)  # the typed statistics served it
        assert from_typed == kept(plain), (relative, text)
        skipped += plain.num_rows - len(from_typed)
        for path, file_rows in zip(plain.column("path").to_pylist(), per_file, strict=True):
            matching = [r for r in file_rows if evaluate(tree, r) is True]
            assert not matching or path in from_typed, (relative, text, path, matching[:2])
    assert skipped > 0, f"no predicate skipped a file of {relative}"


def test_store_streams_typed_timestamps_that_skip_without_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the store's streamed build (a checkpoint with JSON statistics only): the
    mapped snapshot's timestamps are typed, and a timestamp predicate on it parses no JSON
    and keeps what the JSON keeps."""
    root = copy_table("delta-kernel-rs/golden_data/kernel-timestamp-int96/delta", tmp_path)
    deltalake.DeltaTable(str(root)).create_checkpoint()
    plain = DeltaTable(str(root)).snapshot()
    assert plain.checkpoint_version is not None and STATS_PARSED not in plain.files.column_names
    store = SnapshotStore(tmp_path / "store", typed_stats=True)
    DeltaTable(str(root), snapshot_store=store).snapshot()
    counting = CountingStorage()
    mapped = DeltaTable(str(root), counting, snapshot_store=store).snapshot()
    assert counting.opened == []  # mapped, not read from the checkpoint
    typed = mapped.files.column(STATS_PARSED)
    assert typed.type.field("maxValues").type.field("time").type == pa.timestamp("us", tz="UTC")
    assert typed.null_count == 0
    parsed: list[int] = []
    real = stats_module.parse_stats
    monkeypatch.setattr(
        stats_module, "parse_stats", lambda a, r: parsed.append(len(a)) or real(a, r)
    )
    hint = json.dumps(
        {
            "op": "greaterThanOrEqual",
            "children": [
                {"op": "column", "name": "time", "valueType": "timestamp"},
                {"op": "literal", "value": "2020-02-01T08:09:10Z", "valueType": "timestamp"},
            ],
        }
    )

    def kept(files: pa.Table) -> list[str]:
        out = filter_files(
            files,
            mapped.metadata,
            json_hints=hint,
            sql_hints=None,
            evaluate_json=True,
            evaluate_sql=False,
        )
        return sorted(out.column("path").to_pylist())

    from_store = kept(mapped.files)
    assert parsed == []
    assert from_store == kept(plain.files)
    assert 0 < len(from_store) < mapped.num_files
