"""Typed statistics built from JSON ones (deltalog.json_stats): every typed value is the
value the JSON holds, rows the reader cannot type are null (read as JSON by consumers),
and a store with `typed_stats` writes them into the file every process maps."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from deltalog import DeltaTable, SnapshotStore
from deltalog.actions import STATS_PARSED, Metadata
from deltalog.json_stats import stats_type, typed_stats
from deltalog.packed_stats import stats_text
from tests.deltalog.test_snapshot_store import _write_large_table
from tests.support import handlog as h
from tests.support.corpus import corpus_table
from tests.support.replay_oracle import CountingStorage

TABLES = [
    "levi/dat/all_primitive_types/delta",
    "levi/dat/basic_partitioned/delta",
    "levi/dat/nested_types/delta",
    "levi/dat/multi_partitioned/delta",
    "delta-rs/table_with_column_mapping",
    "delta-kernel-rs/golden_data/table-with-columnmapping-mode-name/delta",
    "delta-kernel-rs/golden_data/table-with-columnmapping-mode-id/delta",
    "delta-rs/simple_table_with_checkpoint",
]


def _leaves(value: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    if isinstance(value, dict):
        out: dict[tuple[str, ...], Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, (*prefix, k)))
        return out
    return {prefix: value}


def _as_json_value(typed: Any, text: Any) -> Any:
    """The JSON value `text` read independently (Python's ISO parser) as the typed value's
    kind: dates and timestamps are strings in the JSON."""
    if not isinstance(text, str) or isinstance(typed, str) or typed is None:
        return text
    if isinstance(typed, dt.datetime):
        parsed = dt.datetime.fromisoformat(text)
        if typed.tzinfo is None:
            assert parsed.tzinfo is None  # a wall-clock value with an offset is not typed
            return parsed
        zone = parsed.tzinfo or dt.UTC  # no offset: UTC
        return parsed.replace(tzinfo=zone).astimezone(dt.UTC)
    if isinstance(typed, dt.date):
        return dt.date.fromisoformat(text)
    return text


def _check_against_json(stats: list[str | None], typed: list[dict[str, Any] | None]) -> int:
    """Every typed leaf equals the JSON's value at its path (None where the JSON has none);
    returns how many rows were typed."""
    count = 0
    for text, row in zip(stats, typed, strict=True):
        if row is None:
            continue
        count += 1
        doc = orjson.loads(text) if text else {}
        for path, value in _leaves(row).items():
            expected: Any = doc
            for part in path:
                expected = expected.get(part) if isinstance(expected, dict) else None
            if isinstance(expected, (dict, list)):
                expected = None
            assert value == _as_json_value(value, expected), (path, value, expected, text)
    return count


@pytest.mark.parametrize("relative", TABLES)
def test_typed_values_are_the_json_values(relative: str) -> None:
    snapshot = DeltaTable(str(corpus_table(relative))).snapshot()
    struct = stats_type(snapshot.metadata)
    stats = stats_text(snapshot.files.column("stats")).combine_chunks()
    if struct is None:
        pytest.skip("no column of a typed kind")
    typed = typed_stats(stats, struct)
    assert typed.type == struct and len(typed) == len(stats)
    assert _check_against_json(stats.to_pylist(), typed.to_pylist()) == stats.is_valid().true_count


def _metadata(schema: list[tuple[str, str]], partitions: tuple[str, ...] = ()) -> Metadata:
    fields = [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in schema]
    action = h.metadata(schemaString=json.dumps({"type": "struct", "fields": fields}))["metaData"]
    action["partitionColumns"] = list(partitions)
    return Metadata.from_action(action)


def test_columns_are_typed_in_the_skipping_domain() -> None:
    metadata = _metadata(
        [
            ("i", "integer"),
            ("d", "double"),
            ("s", "string"),
            ("b", "boolean"),
            ("day", "date"),
            ("ts", "timestamp"),
            ("ntz", "timestamp_ntz"),
            ("amount", "decimal(10,2)"),
            ("bin", "binary"),
            ("p", "string"),
        ],
        partitions=("p",),
    )
    struct = stats_type(metadata)
    assert struct is not None
    values = struct.field("minValues").type
    assert [(f.name, f.type) for f in values] == [
        ("i", pa.int64()),
        ("d", pa.float64()),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")),
        ("amount", pa.float64()),
    ]
    assert stats_type(_metadata([("bin", "binary")])) is None


def test_timestamps_follow_the_json_rules() -> None:
    struct = stats_type(_metadata([("ts", "timestamp"), ("ntz", "timestamp_ntz")]))
    assert struct is not None

    def typed(lo_ts: str, lo_ntz: str) -> Any:
        text = json.dumps(
            {"numRecords": 1, "minValues": {"ts": lo_ts, "ntz": lo_ntz}, "maxValues": {}}
        )
        row = typed_stats(pa.array([text]), struct).to_pylist()[0]
        return None if row is None else (row["minValues"]["ts"], row["minValues"]["ntz"])

    utc = dt.UTC
    # Offsets are applied; no offset means UTC (timestamp) or wall clock (timestamp_ntz).
    assert typed("2021-01-01T00:00:00.123+01:00", "2021-01-01T00:00:00.123") == (
        dt.datetime(2020, 12, 31, 23, 0, 0, 123000, tzinfo=utc),
        dt.datetime(2021, 1, 1, 0, 0, 0, 123000),
    )
    assert typed("2021-01-01T00:00:00.000", "2021-01-01 10:00:00") == (
        dt.datetime(2021, 1, 1, tzinfo=utc),
        dt.datetime(2021, 1, 1, 10),
    )
    # A wall-clock value written with an offset says nothing: unknown, as in the JSON path.
    assert typed("2021-01-01T00:00:00Z", "2021-01-01T00:00:00Z") == (
        dt.datetime(2021, 1, 1, tzinfo=utc),
        None,
    )
    # A form Arrow does not cast: the row is left to the JSON reader.
    assert typed("+10000-01-01T00:00:00Z", "2021-01-01T00:00:00") is None
    assert typed("not a time", "2021-01-01T00:00:00") is None


def test_rows_the_reader_cannot_type_are_null() -> None:
    struct = stats_type(_metadata([("x", "double"), ("n", "long")]))
    assert struct is not None
    good = '{"numRecords":2,"minValues":{"x":1.5,"n":1},"maxValues":{"x":2,"n":3}}'
    nan = '{"numRecords":2,"minValues":{"x":"NaN"},"maxValues":{"x":2.0}}'
    rows = pa.array([good, None, "", good])
    typed = typed_stats(rows, struct).to_pylist()
    assert typed[1] is None and typed[2] is None  # no statistics
    assert typed[0] == typed[3] and typed[0]["minValues"] == {"x": 1.5, "n": 1}
    assert typed[0]["nullCount"] is None  # absent in the JSON
    # A value of another JSON type: its group is left untyped (consumers read the JSON).
    assert typed_stats(pa.array([good, nan]), struct).to_pylist() == [None, None]
    assert len(typed_stats(pa.array([], pa.string()), struct)) == 0


def test_store_writes_typed_statistics_for_json_only_checkpoints(tmp_path: Path) -> None:
    root = tmp_path / "large"
    _write_large_table(root, 5_000)
    store = SnapshotStore(tmp_path / "store", typed_stats=True)
    built = DeltaTable(str(root), snapshot_store=store).snapshot()
    assert STATS_PARSED in built.files.column_names  # the builder maps what it wrote
    storage = CountingStorage()
    mapped = DeltaTable(str(root), storage, snapshot_store=store).snapshot()
    assert storage.opened == []  # mapped, not read from the checkpoint
    files = mapped.files
    typed = files.column(STATS_PARSED).to_pylist()
    stats = files.column("stats").to_pylist()
    # Every row with statistics typed (the checkpoint's and the commit's alike), each
    # equal to its JSON; rows without statistics stay null.
    with_stats = sum(1 for text in stats if text)
    assert with_stats > 4_000 and len(stats) == mapped.num_files
    assert _check_against_json(stats, typed) == with_stats
    assert all(row is None for text, row in zip(stats, typed, strict=True) if not text)
    assert typed[0]["minValues"]["id"] == json.loads(stats[0])["minValues"]["id"]


def test_store_without_checkpoint_types_statistics_too(tmp_path: Path) -> None:
    root = tmp_path / "t"
    h.write_commit(root, 0, [h.protocol(1, 2), h.metadata()])
    stats = '{"numRecords":3,"minValues":{"id":1},"maxValues":{"id":7},"nullCount":{"id":0}}'
    h.write_commit(root, 1, [h.add("a.parquet", stats=stats), h.add("b.parquet", stats=None)])
    store = SnapshotStore(tmp_path / "store", typed_stats=True)
    DeltaTable(str(root), snapshot_store=store).snapshot()
    mapped = DeltaTable(str(root), snapshot_store=store).snapshot()
    by_path = dict(
        zip(
            mapped.files.column("path").to_pylist(),
            mapped.files.column(STATS_PARSED).to_pylist(),
            strict=True,
        )
    )
    assert by_path["a.parquet"]["maxValues"]["id"] == 7
    assert by_path["b.parquet"] is None


def test_store_default_keeps_files_as_read(tmp_path: Path) -> None:
    root = tmp_path / "large"
    _write_large_table(root, 1_000)
    store = SnapshotStore(tmp_path / "store")
    assert (
        STATS_PARSED
        not in DeltaTable(str(root), snapshot_store=store).snapshot().files.column_names
    )
