"""Selected rows taken chunk by chunk (sharing.query.rows), and a streamed response over a
selection: the same rows, in the same order, and the same bytes as over a copied table."""

from __future__ import annotations

import json
import random
import time

import pyarrow as pa
import pytest

from deltalog.actions import ADD_SCHEMA, Metadata
from deltalog.storage.gcs import GcsStorage
from sharing.formats import FileContext
from sharing.formats.writers import writer_for
from sharing.presign.gcs import GcsSigner, HmacKey
from sharing.query.plan import FileSection, QueryPlan
from sharing.query.rows import row_batches, take_rows
from sharing.skipping import StatsCache, filter_files, select_files

METADATA = Metadata.from_action(
    {
        "id": "rows",
        "schemaString": json.dumps(
            {
                "type": "struct",
                "fields": [
                    {"name": "part", "type": "string", "nullable": True, "metadata": {}},
                    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                ],
            }
        ),
        "partitionColumns": ["part"],
        "configuration": {},
    }
)


def _files(count: int, chunk: int) -> pa.Table:
    """`count` files in chunks of `chunk` rows; file i holds ids 10i..10i+9."""
    rows = [
        {
            "path": f"part={i % 3}/f-{(i * 7919) % count:05d}.parquet",
            "partitionValues": [("part", str(i % 3))],
            "size": 100 + i,
            "stats": json.dumps(
                {"numRecords": 10, "minValues": {"id": 10 * i}, "maxValues": {"id": 10 * i + 9}}
            ),
        }
        for i in range(count)
    ]
    table = pa.Table.from_pylist(rows, schema=ADD_SCHEMA)
    return pa.Table.from_batches(table.to_batches(max_chunksize=chunk), ADD_SCHEMA)


def _indices(values: list[int]) -> pa.Array:
    return pa.array(values, pa.int64())


@pytest.mark.parametrize("chunk", [7, 50, 1000])
def test_take_rows_equals_take_in_any_order(chunk: int) -> None:
    files = _files(120, chunk)
    single = files.combine_chunks()
    rng = random.Random(chunk)
    shuffled = list(range(120))
    rng.shuffle(shuffled)
    for rows in (
        [3, 4, 5, 60, 61, 119],
        [119, 0, 7, 6, 50, 49],
        shuffled[:40],
        [5, 5, 8, 5],
        [],
        list(range(120)),
    ):
        taken = take_rows(files, _indices(rows))
        assert taken.schema == files.schema
        assert taken.to_pylist() == single.take(_indices(rows)).to_pylist(), rows


def test_take_rows_refuses_rows_out_of_range() -> None:
    files = _files(30, 7)
    for rows in ([0, 30], [-1, 2]):
        with pytest.raises(IndexError):
            take_rows(files, _indices(rows))


@pytest.mark.parametrize("chunk", [7, 1000])
def test_row_batches_take_windows_of_the_selection(chunk: int) -> None:
    files = _files(120, chunk)
    single = files.combine_chunks()
    rows = [i for i in range(120) if i % 4 != 1]
    batches = list(row_batches(files, _indices(rows), 10))
    assert all(0 < b.num_rows <= 10 for b in batches)
    got = [r for b in batches for r in b.to_pylist()]
    assert got == single.take(_indices(rows)).to_pylist()
    every = list(row_batches(files, None, 10))
    assert [r for b in every for r in b.to_pylist()] == single.to_pylist()
    assert list(row_batches(files, _indices([]), 10)) == []


def test_a_streamed_selection_writes_what_the_copied_table_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_795_364_124.0)
    files = _files(500, 37)
    hint = json.dumps(
        {
            "op": "and",
            "children": [
                {
                    "op": "greaterThanOrEqual",
                    "children": [
                        {"op": "column", "name": "id", "valueType": "long"},
                        {"op": "literal", "value": "1234", "valueType": "long"},
                    ],
                },
                {
                    "op": "equal",
                    "children": [
                        {"op": "column", "name": "part", "valueType": "string"},
                        {"op": "literal", "value": "1", "valueType": "string"},
                    ],
                },
            ],
        }
    )
    options = {
        "json_hints": hint,
        "sql_hints": None,
        "evaluate_json": True,
        "evaluate_sql": False,
        "stats_cache": StatsCache(),
    }
    rows = select_files(files, METADATA, **options)  # type: ignore[arg-type]
    copied = filter_files(files, METADATA, **options)  # type: ignore[arg-type]
    assert rows is not None and 0 < len(rows) == copied.num_rows < 200
    signer = GcsSigner(HmacKey("id", "secret"), table_root="gs://lake/t", ttl_seconds=3600)
    ctx = FileContext(GcsStorage({"anonymous": True}), "gs://lake/t", signer, "parquet")

    def body(section: FileSection) -> bytes:
        plan = QueryPlan(1, "parquet", b"HEAD\n", [section], writer_for("parquet"), batch_rows=16)
        return b"".join(plan.body())

    lazy = body(FileSection(files, ctx, rows=rows))
    assert lazy == body(FileSection(copied, ctx))
    assert lazy.count(b'"file"') == copied.num_rows
