"""Reading Delta tables with the `deltalog` PySpark source: at every version of the
corpus's deletion-vector and column-mapping tables, Spark returns exactly the rows
delta-rs (deltalake's query engine, which applies deletion vectors) returns."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as DeltaRsTable
from deltalake import QueryBuilder

from deltalog import DeltaTable
from tests.clients.spark.conftest import spark_rows
from tests.support.corpus import corpus_table
from tests.support.rows import sorted_rows

pytestmark = pytest.mark.slow

DV_AND_MAPPING = "delta-kernel-rs/golden_data/dv-with-columnmapping/delta"
DV_PARTITIONED = "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta"
MAPPING_ID = "delta/kernel-defaults/column-mapping-id"
CHECKPOINTED = "delta-rs/simple_table_with_checkpoint"


def delta_rs_rows(path: str, version: int | None = None) -> list[tuple[Any, ...]]:
    table = DeltaRsTable(path, version=version)
    result = QueryBuilder().register("t", table).execute("select * from t").read_all()
    return sorted_rows(pa.table(result).to_pandas())


def test_every_version_of_a_deletion_vector_column_mapping_table(delta_spark: Any) -> None:
    path = str(corpus_table(DV_AND_MAPPING))
    latest = DeltaTable(path).latest_version()
    assert latest >= 10  # the walk crosses the checkpoint
    for version in range(latest + 1):
        df = delta_spark.read.format("deltalog").option("versionAsOf", version).load(path)
        assert spark_rows(df) == delta_rs_rows(path, version), f"version {version}"


@pytest.mark.parametrize("relative", [DV_PARTITIONED, MAPPING_ID, CHECKPOINTED])
def test_latest_version_equals_delta_rs(delta_spark: Any, relative: str) -> None:
    path = str(corpus_table(relative))
    df = delta_spark.read.format("deltalog").load(path)
    assert df.columns == [f.name for f in DeltaRsTable(path).schema().fields]
    assert spark_rows(df) == delta_rs_rows(path)


def test_time_travel_by_timestamp(delta_spark: Any) -> None:
    path = str(corpus_table(DV_AND_MAPPING))
    stamp = DeltaTable(path).snapshot(4).timestamp
    instant = dt.datetime.fromtimestamp(stamp / 1000, dt.UTC).isoformat()
    df = delta_spark.read.format("deltalog").option("timestampAsOf", instant).load(path)
    assert spark_rows(df) == delta_rs_rows(path, 4)


def test_files_are_packed_into_tasks_by_size(delta_spark: Any) -> None:
    path = str(corpus_table(DV_PARTITIONED))
    files = DeltaTable(path).snapshot().num_files
    one_per_file = (
        delta_spark.read.format("deltalog")
        .option("maxPartitionBytes", 1)
        .option("openCostInBytes", 1)
        .load(path)
    )
    assert one_per_file.rdd.getNumPartitions() == files
    together = delta_spark.read.format("deltalog").option("minPartitions", 1).load(path)
    assert together.rdd.getNumPartitions() == 1
    assert spark_rows(one_per_file) == spark_rows(together) == delta_rs_rows(path)


def test_a_bad_option_is_a_clear_error(delta_spark: Any) -> None:
    path = str(corpus_table(DV_AND_MAPPING))
    reader = (
        delta_spark.read.format("deltalog")
        .option("versionAsOf", 1)
        .option("timestampAsOf", "2024-01-01T00:00:00Z")
    )
    with pytest.raises(Exception, match=r"versionAsOf.*timestampAsOf"):
        reader.load(path)
