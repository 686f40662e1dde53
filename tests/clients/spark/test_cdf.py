"""Change data feed reads (`readChangeFeed`) through the `deltasharing` PySpark source.

The rows must equal `deltalake`'s `load_cdf` on the tables it reads, and the rows
`deltalog.change_data.read_changes_data` computes from the table itself for every range
(column mapping and deletion-vector tables included). The change columns are the Scala
connector's: `_commit_version` (long), `_commit_timestamp` (long, epoch milliseconds),
`_change_type` (string), after the table's columns.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from deltalog import DeltaTable, history
from deltalog.change_data import read_changes_data
from tests.support.corpus import CORPUS
from tests.support.rows import comparable_cell
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

KERNEL = "delta-kernel-rs/data"
TABLES = {
    "partitioned": "delta-rs/cdf-table",
    "non_partitioned": "delta-rs/cdf-table-non-partitioned",
    "cdc_and_dvs": "delta-rs/cdf-table-with-cdc-and-dvs",
    "inline_dvs": f"{KERNEL}/cdf-table-with-dv",
    "ict": "delta-rs/cdc_ict_table",
    "dbr_cdc": "delta-rs/simple_table_with_cdc",
    "k_update_ops": f"{KERNEL}/cdf-table-update-ops",
    "cm_id": f"{KERNEL}/cdf-column-mapping-id-mode",
    "cm_name": f"{KERNEL}/cdf-column-mapping-name-mode-3-7",
}
# Tables deltalake's load_cdf reads (it rejects column mapping).
DELTALAKE_READABLE = ["partitioned", "non_partitioned", "cdc_and_dvs", "inline_dvs", "ict"]
RANGES: list[tuple[str, int, int | None]] = [
    ("partitioned", 1, 2),
    ("cdc_and_dvs", 9, 13),
    ("inline_dvs", 3, 5),
    ("dbr_cdc", 0, 2),
    ("k_update_ops", 0, 2),
    ("cm_id", 1, 4),  # change data feed turned on at version 1
    ("cm_name", 3, 4),
]
CHANGE_COLUMNS = ["_commit_version", "_commit_timestamp", "_change_type"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tables = [
        {"name": name, "location": str(CORPUS / root), "historyShared": True}
        for name, root in TABLES.items()
    ]
    config = make_config(
        {"shares": [{"name": "s", "schemas": [{"name": "cdf", "tables": tables}]}]}
    )
    with run_server(config, tmp_path_factory.mktemp("spark_cdf")) as running:
        yield running


def _changes(spark: Any, server: RunningServer, name: str, **options: Any) -> pd.DataFrame:
    reader = spark.read.format("deltasharing").option("readChangeFeed", "true")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(server.table_url("s", "cdf", name)).toArrow().to_pandas()


def _epoch_ms(column: pd.Series) -> pd.Series:
    if pd.api.types.is_numeric_dtype(column):
        return column.astype("int64")
    stamps = pd.to_datetime(column, utc=True)
    return (stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[tuple[Any, ...]]:
    frame = frame.copy()
    if "_commit_timestamp" in columns:
        frame["_commit_timestamp"] = _epoch_ms(frame["_commit_timestamp"])
    rows = [tuple(comparable_cell(v) for v in r) for r in frame[columns].itertuples(index=False)]
    return sorted(rows, key=repr)


def _data_columns(name: str) -> list[str]:
    schema = DeltaTable(str(CORPUS / TABLES[name])).snapshot().metadata.schema_string
    return [f["name"] for f in json.loads(schema)["fields"]]


def _expected(name: str, start: int, end: int | None) -> pd.DataFrame:
    table = DeltaTable(str(CORPUS / TABLES[name]))
    last = table.snapshot().version if end is None else end
    return read_changes_data(table, start, last).to_pandas()


@pytest.mark.parametrize("name", DELTALAKE_READABLE)
def test_rows_equal_deltalake(spark: Any, server: RunningServer, name: str) -> None:
    import deltalake

    theirs = pa.table(
        deltalake.DeltaTable(str(CORPUS / TABLES[name])).load_cdf(starting_version=0).read_all()
    ).to_pandas()
    ours = _changes(spark, server, name, startingVersion=0)
    columns = [*_data_columns(name), "_change_type", "_commit_version"]
    assert len(ours) > 0
    assert _rows(ours, columns) == _rows(theirs, columns)


@pytest.mark.parametrize(
    ("name", "start", "end"), [pytest.param(*r, id=f"{r[0]}-{r[1]}-{r[2]}") for r in RANGES]
)
def test_ranges_equal_the_change_data(
    spark: Any, server: RunningServer, name: str, start: int, end: int | None
) -> None:
    options: dict[str, Any] = {"startingVersion": start}
    if end is not None:
        options["endingVersion"] = end
    ours = _changes(spark, server, name, **options)
    columns = [*_data_columns(name), *CHANGE_COLUMNS]
    assert list(ours.columns) == columns
    assert _rows(ours, columns) == _rows(_expected(name, start, end), columns)


def test_change_columns_are_the_scala_connectors(spark: Any, server: RunningServer) -> None:
    df = (
        spark.read.format("deltasharing")
        .option("readChangeFeed", "true")
        .option("startingVersion", "0")
        .load(server.table_url("s", "cdf", "partitioned"))
    )
    assert df.dtypes[-3:] == [
        ("_commit_version", "bigint"),
        ("_commit_timestamp", "bigint"),
        ("_change_type", "string"),
    ]


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def test_timestamp_range(spark: Any, server: RunningServer) -> None:
    times = history.commit_timestamps(DeltaTable(str(CORPUS / TABLES["partitioned"])), 0, 3)
    ours = _changes(
        spark,
        server,
        "partitioned",
        startingTimestamp=_iso(times[0] + 1),  # the next commit: version 1
        endingTimestamp=_iso(times[3] - 1),  # the commit before: version 2
    )
    columns = [*_data_columns("partitioned"), *CHANGE_COLUMNS]
    assert _rows(ours, columns) == _rows(_expected("partitioned", 1, 2), columns)


def test_parquet_response_format(spark: Any, server: RunningServer) -> None:
    ours = _changes(spark, server, "non_partitioned", startingVersion=0, responseFormat="parquet")
    columns = [*_data_columns("non_partitioned"), *CHANGE_COLUMNS]
    assert _rows(ours, columns) == _rows(_expected("non_partitioned", 0, None), columns)


def test_errors(spark: Any, server: RunningServer) -> None:
    with pytest.raises(Exception, match="needs 'startingVersion' or 'startingTimestamp'"):
        _changes(spark, server, "partitioned")
    with pytest.raises(Exception, match="Please use a timestamp greater"):
        _changes(spark, server, "partitioned", startingTimestamp="2000-01-01")
