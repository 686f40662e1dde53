"""Read options (the Scala connector's names and checks), timestamps, filter hints and
partition packing: no Spark session needed."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    In,
    IsNotNull,
    IsNull,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)
from pyspark.sql.types import StructType

from client.actions import FileAction
from client.errors import OptionError
from client.files import ReadUnit
from client.spark.filters import HintBuilder
from client.spark.options import ReadOptions, parse_timestamp
from client.spark.planning import pack
from client.spark.schema import spark_schema


@pytest.fixture
def profile(tmp_path: Path) -> str:
    path = tmp_path / "p.share"
    path.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": "http://h/ds", "bearerToken": "t"})
    )
    return str(path)


def _parse(profile: str, **options: str) -> ReadOptions:
    return ReadOptions.parse({"path": f"{profile}#s.d.t", **options})


def test_defaults_and_names(profile: str) -> None:
    o = _parse(profile)
    assert str(o.table) == "s.d.t" and o.profile.bearer_token == "t"
    assert o.response_format is None and not o.read_change_feed
    assert o.version_interval_seconds == 30.0 and o.max_versions_per_rpc == 100
    o = _parse(
        profile,
        readChangeData="true",
        startingVersion="3",
        endingVersion="5",
        maxFilesPerTrigger="7",
        maxBytesPerTrigger="10m",
        queryTableVersionIntervalSeconds="2s",
        responseFormat="delta",
        ignoreChanges="TRUE",
    )
    assert o.read_change_feed and (o.starting_version, o.ending_version) == (3, 5)
    assert (o.max_files_per_trigger, o.max_bytes_per_trigger) == (7, 10 << 20)
    assert o.version_interval_seconds == 2.0 and o.ignore_changes
    assert _parse(profile, startingVersion="latest").starting_version_latest


def test_profile_options_instead_of_a_file() -> None:
    o = ReadOptions.parse({"path": "#s.d.t", "endpoint": "http://h/ds", "bearerToken": "x"})
    assert o.profile.endpoint == "http://h/ds"
    with pytest.raises(OptionError, match="no profile"):
        ReadOptions.parse({"path": "#s.d.t"})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"versionAsOf": "-1"}, "Invalid value '-1' for option 'versionAsOf'"),
        ({"maxFilesPerTrigger": "0"}, "must be a positive integer"),
        ({"maxBytesPerTrigger": "lots"}, "must be a size configuration such as '10g'"),
        ({"ignoreDeletes": "yes"}, "must be 'true' or 'false'"),
        ({"responseFormat": "csv"}, "must be one of"),
        ({"versionAsOf": "1", "timestampAsOf": "2024"}, "either provide 'versionAsOf'"),
        ({"startingVersion": "1", "startingTimestamp": "2024"}, "either provide 'startingVersion'"),
        ({"timestampAsOf": "yesterday"}, "cannot be converted to a valid timestamp"),
    ],
)
def test_invalid_options(profile: str, options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        _parse(profile, **options)


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2022", "2022-01-01T00:00:00Z"),
        ("2022-03-04", "2022-03-04T00:00:00Z"),
        ("2022-03-04 05:06:07", "2022-03-04T05:06:07Z"),
        ("2022-03-04T05:06:07.250-08:00", "2022-03-04T13:06:07.25Z"),
        ("2022-03-04T05:06:07Z", "2022-03-04T05:06:07Z"),
    ],
)
def test_timestamps(text: str, iso: str) -> None:
    assert parse_timestamp("t", text) == iso


SCHEMA = spark_schema(
    json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": n, "type": t, "nullable": True, "metadata": {}}
                for n, t in [
                    ("s", "string"),
                    ("i", "integer"),
                    ("l", "long"),
                    ("d", "date"),
                    ("ts", "timestamp"),
                    ("ntz", "timestamp_ntz"),
                    ("st", {"type": "struct", "fields": []}),
                ]
            ],
        }
    )
)


def _hint(*filters: object) -> object:
    text = HintBuilder(SCHEMA).hint(list(filters))  # type: ignore[arg-type]
    return json.loads(text) if text else None


def _col(name: str, value_type: str) -> dict[str, str]:
    return {"op": "column", "name": name, "valueType": value_type}


def _lit(value: str, value_type: str) -> dict[str, str]:
    return {"op": "literal", "value": value, "valueType": value_type}


def test_hints() -> None:
    assert _hint(EqualTo(("s",), "a")) == {
        "op": "equal",
        "children": [_col("s", "string"), _lit("a", "string")],
    }
    both = _hint(GreaterThan(("i",), 3), LessThanOrEqual(("d",), dt.date(2024, 1, 2)))
    assert both == {
        "op": "and",
        "children": [
            {"op": "greaterThan", "children": [_col("i", "int"), _lit("3", "int")]},
            {"op": "lessThanOrEqual", "children": [_col("d", "date"), _lit("2024-01-02", "date")]},
        ],
    }
    stamp = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert _hint(EqualTo(("ts",), stamp))["children"][1] == _lit(  # type: ignore[index]
        "2024-01-02T03:04:05.000000Z", "timestamp"
    )
    assert _hint(In(("l",), (1, 2))) == {
        "op": "or",
        "children": [
            {"op": "equal", "children": [_col("l", "long"), _lit("1", "long")]},
            {"op": "equal", "children": [_col("l", "long"), _lit("2", "long")]},
        ],
    }
    assert _hint(IsNotNull(("s",))) == {
        "op": "not",
        "children": [{"op": "isNull", "children": [_col("s", "string")]}],
    }
    assert _hint(EqualNullSafe(("s",), None)) == {"op": "isNull", "children": [_col("s", "string")]}
    assert _hint(Not(IsNull(("i",))))["op"] == "not"  # type: ignore[index]


def test_inexpressible_filters_are_left_out() -> None:
    assert _hint(StringStartsWith(("s",), "a")) is None
    assert _hint(EqualTo(("ntz",), dt.datetime(2024, 1, 1))) is None  # no ntz in the grammar
    assert _hint(EqualTo(("st", "x"), 1)) is None  # nested column
    assert _hint(EqualTo(("i",), "not a number")) is None
    assert _hint(In(("i",), tuple(range(21)))) is None
    assert _hint(Not(StringStartsWith(("s",), "a"))) is None
    kept = _hint(StringStartsWith(("s",), "a"), EqualTo(("i",), 1))
    assert kept == {"op": "equal", "children": [_col("i", "int"), _lit("1", "int")]}


def test_change_feed_schema_columns() -> None:
    schema = spark_schema(
        '{"type":"struct","fields":[{"name":"a","type":"integer","nullable":true,"metadata":{}},'
        '{"name":"v","type":"void","nullable":true,"metadata":{}}]}',
        change_feed=True,
    )
    assert schema.simpleString() == (
        "struct<a:int,_commit_version:bigint,_commit_timestamp:bigint,_change_type:string>"
    )
    assert isinstance(schema, StructType)


def test_packing_like_a_parquet_scan() -> None:
    units = [
        ReadUnit((FileAction("file", f"f{i}", "u", size, {}),))
        for i, size in enumerate([100, 10, 10, 10, 10, 60])
    ]
    parts = pack(None, units, max_partition_bytes=100, open_cost=5, min_partitions=1)  # type: ignore[arg-type]
    assert [[u.size for u in p.units] for p in parts] == [[100], [60, 10, 10], [10, 10]]
    many = pack(None, units, max_partition_bytes=1000, open_cost=5, min_partitions=6)  # type: ignore[arg-type]
    assert len(many) >= 3  # a small table is still spread over the cores
    assert sum(len(p.units) for p in many) == len(units)
    assert pack(None, [], max_partition_bytes=10, open_cost=1, min_partitions=1) == []  # type: ignore[arg-type]
