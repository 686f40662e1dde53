"""Partition-filtered tables through the project's PySpark source (`client/spark`): two
recipients with different `region` properties read the same table name — batch, time
travel, change data feed and a stream — and each gets exactly the rows delta-rs reads
with the same partition filter; a recipient without the property gets none."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as DeltaLakeTable
from deltalake import write_deltalake

from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

TOKENS = {"acme": "acme-spark-token-0123456789", "bolt": "bolt-spark-token-0123456789"}
TOKENS["zed"] = "zed-spark-token-0123456789"
REGION = {"acme": "eu", "bolt": "us", "zed": None}
FILTER = "region = current_recipient('region') OR region = 'global'"


def _rows(start: int, stop: int) -> pa.Table:
    ids = list(range(start, stop))
    regions = ["eu", "us", "global", "apac"]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": pa.array([regions[i % 4] for i in ids], pa.string()),
        }
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spark_slices") / "sales"
    write_deltalake(
        str(path),
        _rows(0, 12),
        partition_by=["region"],
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    write_deltalake(str(path), _rows(12, 20), mode="append")
    DeltaLakeTable(str(path)).delete("id = 0")  # an eu row: a cdc file in eu
    return path


@pytest.fixture(scope="module")
def server(table: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    entry = {
        "name": "sales",
        "location": str(table),
        "historyShared": True,
        "partitionFilter": FILTER,
    }
    recipients = [
        {
            "name": name,
            "shares": ["s"],
            "properties": {} if REGION[name] is None else {"region": REGION[name]},
            "credentials": [{"token": token}],
        }
        for name, token in TOKENS.items()
    ]
    config = make_config(
        {
            "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [entry]}]}],
            "recipients": recipients,
        }
    )
    with run_server(config, tmp_path_factory.mktemp("spark_slices_srv")) as running:
        yield running


def _url(server: RunningServer, recipient: str, tmp_path: Path) -> str:
    profile = tmp_path / f"{recipient}.share"
    profile.write_text(
        json.dumps(
            {
                "shareCredentialsVersion": 1,
                "endpoint": server.base_url + "/",
                "bearerToken": TOKENS[recipient],
            }
        )
    )
    return f"{profile}#s.d.sales"


def _regions(recipient: str) -> list[str]:
    mine = REGION[recipient]
    return ([mine] if mine else []) + ["global"]


def _expected(table: Path, recipient: str, version: int | None = None) -> list[int]:
    data = DeltaLakeTable(str(table), version=version).to_pyarrow_table(
        partitions=[("region", "in", _regions(recipient))]
    )
    return sorted(data.column("id").to_pylist())


@pytest.mark.parametrize("recipient", ["acme", "bolt", "zed"])
def test_batch_and_time_travel_read_the_slice(
    spark: Any, server: RunningServer, table: Path, tmp_path: Path, recipient: str
) -> None:
    url = _url(server, recipient, tmp_path)
    rows = spark.read.format("deltasharing").load(url).collect()
    assert sorted(r.id for r in rows) == _expected(table, recipient)
    assert {r.region for r in rows} <= set(_regions(recipient))
    old = spark.read.format("deltasharing").option("versionAsOf", "0").load(url).collect()
    assert sorted(r.id for r in old) == _expected(table, recipient, 0)


@pytest.mark.parametrize("recipient", ["acme", "bolt"])
def test_change_feed_reads_the_slice(
    spark: Any, server: RunningServer, table: Path, tmp_path: Path, recipient: str
) -> None:
    url = _url(server, recipient, tmp_path)
    changes = (
        spark.read.format("deltasharing")
        .option("readChangeFeed", "true")
        .option("startingVersion", "0")
        .load(url)
        .collect()
    )
    cdf = pa.table(DeltaLakeTable(str(table)).load_cdf(starting_version=0).read_all())
    expected = sorted(
        (row["id"], row["_change_type"])
        for row in cdf.to_pylist()
        if row["region"] in _regions(recipient)
    )
    assert sorted((r.id, r._change_type) for r in changes) == expected


def test_stream_from_the_start_reads_the_slice(
    spark: Any, server: RunningServer, table: Path, tmp_path: Path
) -> None:
    url = _url(server, "bolt", tmp_path)
    out = tmp_path / "out"
    query = (
        spark.readStream.format("deltasharing")
        .option("startingVersion", "0")
        .option("skipChangeCommits", "true")
        .load(url)
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    rows = spark.read.schema("id long, region string").parquet(str(out / "data")).collect()
    # Versions 0 and 1 appended; the delete (version 2, an eu file) is skipped.
    appended = DeltaLakeTable(str(table), version=1).to_pyarrow_table(
        partitions=[("region", "in", _regions("bolt"))]
    )
    assert sorted(r.id for r in rows) == sorted(appended.column("id").to_pylist())
