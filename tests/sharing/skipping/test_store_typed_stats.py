"""Statistics typed from JSON by the snapshot store (deltalog.json_stats) give data skipping
exactly what parsing the JSON gives: per request, the same min, max, null count and record
count for every file, and the same files kept by predicates."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.actions import STATS_PARSED
from deltalog.json_stats import with_typed_stats
from sharing.skipping import filter_files
from sharing.skipping.file_stats import file_stats
from sharing.skipping.stats import StatsRequest
from tests.support.corpus import corpus_table

TABLES = {
    "levi/dat/all_primitive_types/delta": [
        ("int64", pa.int64()),
        ("int32", pa.int64()),
        ("int8", pa.int64()),
        ("float64", pa.float64()),
        ("float32", pa.float64()),
        ("utf8", pa.string()),
        ("bool", pa.bool_()),
        ("decimal", pa.float64()),  # not typed: read from the JSON
        ("date32", pa.string()),  # not typed either
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
