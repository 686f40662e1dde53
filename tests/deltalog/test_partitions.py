"""Partition value deserialization, typed partition columns, and log path decoding."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pyarrow as pa
import pytest

from deltalog.partitions import (
    PartitionValueError,
    decode_path,
    parse_partition_value,
    partition_columns_as_arrow,
)
from deltalog.paths import is_absolute, resolve_key
from deltalog.schema import DecimalType, PrimitiveType, parse_schema
from deltalog.storage import LocalStorage

P = PrimitiveType


@pytest.mark.parametrize(
    ("value", "data_type", "expected"),
    [
        ("abc", P("string"), "abc"),
        ("", P("string"), None),
        (None, P("long"), None),
        ("", P("integer"), None),
        ("-12", P("byte"), -12),
        ("9223372036854775807", P("long"), 9223372036854775807),
        ("1.5", P("double"), 1.5),
        ("-Infinity", P("float"), float("-inf")),
        ("true", P("boolean"), True),
        ("FALSE", P("boolean"), False),
        ("2021-09-08", P("date"), dt.date(2021, 9, 8)),
        ("123.450", DecimalType(6, 3), Decimal("123.450")),
        ("\u0001\u0002", P("binary"), b"\x01\x02"),
        ("1970-01-01 00:00:00", P("timestamp"), 0),
        ("1970-01-01 00:00:01.123456", P("timestamp"), 1_123_456),
        ("1970-01-01 00:00:01.5", P("timestamp_ntz"), 1_500_000),
        ("2024-01-01T10:00:00.000000Z", P("timestamp"), 1_704_103_200_000_000),
        ("2024-01-01T12:00:00+02:00", P("timestamp"), 1_704_103_200_000_000),
        ("1900-01-01 00:00:00", P("timestamp_ntz"), -2_208_988_800_000_000),
    ],
)
def test_parse_partition_value(value, data_type, expected) -> None:
    assert parse_partition_value(value, data_type) == expected


def test_nan_partition_value() -> None:
    assert math.isnan(parse_partition_value("NaN", P("double")))


@pytest.mark.parametrize(
    ("value", "data_type"),
    [
        ("x", P("long")),
        ("maybe", P("boolean")),
        ("2021-13-01", P("date")),
        ("1.2.3", DecimalType(4, 1)),
    ],
)
def test_invalid_partition_values(value, data_type) -> None:
    with pytest.raises(PartitionValueError):
        parse_partition_value(value, data_type)


def test_partition_columns_as_arrow_with_column_mapping() -> None:
    schema = parse_schema(
        {
            "type": "struct",
            "fields": [
                {"name": "v", "type": "long", "nullable": True, "metadata": {}},
                {
                    "name": "d",
                    "type": "date",
                    "nullable": True,
                    "metadata": {"delta.columnMapping.physicalName": "col-d"},
                },
                {
                    "name": "ts",
                    "type": "timestamp",
                    "nullable": True,
                    "metadata": {"delta.columnMapping.physicalName": "col-ts"},
                },
            ],
        }
    )
    values = pa.array(
        [
            [("col-d", "2021-01-01"), ("col-ts", "2021-01-01 10:00:00")],
            [("col-d", None), ("col-ts", "2021-01-01 10:00:00")],
            [("col-d", "2021-01-01")],
        ],
        type=pa.map_(pa.string(), pa.string()),
    )
    table = partition_columns_as_arrow(values, schema, ["d", "ts"], column_mapping_mode="name")
    assert table.schema.names == ["d", "ts"]
    assert table.column("d").to_pylist() == [dt.date(2021, 1, 1), None, dt.date(2021, 1, 1)]
    assert table.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    stamp = dt.datetime(2021, 1, 1, 10, tzinfo=dt.UTC)
    assert table.column("ts").to_pylist() == [stamp, stamp, None]
    empty = partition_columns_as_arrow(
        values.slice(0, 0), schema, ["d"], column_mapping_mode="name"
    )
    assert empty.num_rows == 0 and empty.schema.field("d").type == pa.date32()


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        ("part-0.parquet", "part-0.parquet"),
        ("a=%2F%2520%25f/part%20x.parquet", "a=/%20%f/part x.parquet"),
        ("file:/some/unqualified/with%20space/p@%23h", "file:/some/unqualified/with space/p@#h"),
        ("s3://bucket/dir/x%3Dy.parquet", "s3://bucket/dir/x=y.parquet"),
    ],
)
def test_decode_path(raw: str, decoded: str) -> None:
    assert decode_path(raw) == decoded


def test_resolve_key() -> None:
    storage = LocalStorage()
    assert resolve_key(storage, "/t", "p=a%20b/f.parquet") == "/t/p=a b/f.parquet"
    assert resolve_key(storage, "/t", "file:/abs/p@%23h") == "/abs/p@#h"
    assert resolve_key(storage, "/t", "file:///abs/x") == "/abs/x"
    assert resolve_key(storage, "/t", "/abs/y%20z") == "/abs/y z"
    assert resolve_key(storage, "/t", "s3://bucket/k%20ey") == "bucket/k ey"
    assert is_absolute("s3://b/k") and is_absolute("/x") and not is_absolute("a:b=c/f")


def test_out_of_range_values_are_partition_errors() -> None:
    schema = parse_schema(
        {
            "type": "struct",
            "fields": [
                {"name": "b", "type": "byte", "nullable": True, "metadata": {}},
                {"name": "d", "type": "decimal(3,1)", "nullable": True, "metadata": {}},
            ],
        }
    )
    for key, value in (("b", "300"), ("d", "1.25")):
        values = pa.array([[(key, value)]], type=pa.map_(pa.string(), pa.string()))
        with pytest.raises(PartitionValueError):
            partition_columns_as_arrow(values, schema, [key])
