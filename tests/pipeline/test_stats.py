"""The statistics the pipeline's writers record never exclude a row a file holds."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa

from pipeline.stats import STRING_PREFIX, file_stats


def test_bounds_and_null_counts_per_leaf_column() -> None:
    table = pa.table(
        {
            "n": pa.array([3, None, -1], pa.int64()),
            "s": pa.array(["b", "a", None]),
            "d": pa.array([dt.date(2024, 1, 2), dt.date(2023, 5, 1), None]),
            "t": pa.array(
                [dt.datetime(2024, 1, 1, 0, 0, 0, 1500), None, dt.datetime(2023, 1, 1)],
                pa.timestamp("us", tz="UTC"),
            ),
            "nested": pa.array([{"x": 1.5}, {"x": None}, None]),
        }
    )
    stats = json.loads(file_stats(table))
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {
        "n": -1,
        "s": "a",
        "d": "2023-05-01",
        "t": "2023-01-01T00:00:00.000Z",
        "nested": {"x": 1.5},
    }
    # the maximum timestamp is rounded up to the millisecond: 00:00:00.0015 -> .002
    assert stats["maxValues"]["t"] == "2024-01-01T00:00:00.002Z"
    assert stats["maxValues"]["n"] == 3
    assert stats["nullCount"] == {"n": 1, "s": 1, "d": 1, "t": 1, "nested": {"x": 2}}


def test_long_strings_keep_a_prefix_minimum_and_no_maximum() -> None:
    long = "z" * (STRING_PREFIX + 5)
    stats = json.loads(file_stats(pa.table({"s": ["a" * 40, long]})))
    assert stats["minValues"]["s"] == "a" * STRING_PREFIX
    assert "s" not in stats["maxValues"]


def test_nan_and_decimals_get_null_counts_only() -> None:
    from decimal import Decimal

    table = pa.table(
        {"f": pa.array([1.0, float("nan")]), "d": pa.array([Decimal("1.10"), Decimal("2.00")])}
    )
    stats = json.loads(file_stats(table))
    assert stats["minValues"] == {} and stats["maxValues"] == {}
    assert stats["nullCount"] == {"f": 0, "d": 0}


def test_an_empty_file_has_no_bounds() -> None:
    stats = json.loads(file_stats(pa.table({"n": pa.array([], pa.int32())})))
    assert stats == {"numRecords": 0, "nullCount": {"n": 0}}
