"""Writing Delta tables with the `deltalog` source: delta-rs reads back what Spark wrote,
the log holds each file's statistics, an app transaction makes a retried write a no-op,
and a failing task leaves neither a commit nor a data file behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as DeltaRsTable

from tests.clients.spark.conftest import spark_rows
from tests.support.corpus import corpus_table
from tests.support.rows import sorted_rows

pytestmark = pytest.mark.slow

SOURCE = "delta-kernel-rs/golden_data/dv-with-columnmapping/delta"


def _adds(table: Path) -> list[dict[str, Any]]:
    adds = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                adds.append(action["add"])
    return adds


def _data_files(table: Path) -> list[Path]:
    return sorted(p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts)


def test_a_partitioned_write_reads_back_with_statistics(delta_spark: Any, tmp_path: Path) -> None:
    source = delta_spark.read.format("deltalog").load(str(corpus_table(SOURCE)))
    target = tmp_path / "copy"
    source.write.format("deltalog").option("partitionBy", "part").mode("append").save(str(target))
    written = DeltaRsTable(str(target))
    assert written.metadata().partition_columns == ["part"]
    assert sorted_rows(written.to_pyarrow_table().to_pandas()) == spark_rows(source)
    adds = _adds(target)
    assert {a["partitionValues"]["part"] for a in adds} == {
        str(r.part) for r in source.select("part").distinct().collect()
    }
    for add in adds:
        stats = json.loads(add["stats"])
        rows = pq.read_table(target / unquote(add["path"]))
        assert stats["numRecords"] == rows.num_rows
        assert stats["minValues"]["col1"] == pa.compute.min(rows.column("col1")).as_py()
        assert stats["maxValues"]["col1"] == pa.compute.max(rows.column("col1")).as_py()
        assert stats["nullCount"]["col2"] == rows.column("col2").null_count
        assert "part" not in stats["nullCount"]  # partition columns are not in the files
    # read back through the source itself
    again = delta_spark.read.format("deltalog").load(str(target))
    assert spark_rows(again) == spark_rows(source)


def test_an_app_transaction_makes_a_retried_write_a_no_op(delta_spark: Any, tmp_path: Path) -> None:
    target = str(tmp_path / "t")
    df = delta_spark.range(10).withColumnRenamed("id", "n")
    for _ in range(2):
        (
            df.write.format("deltalog")
            .option("txnAppId", "job-1")
            .option("txnVersion", 7)
            .mode("append")
            .save(target)
        )
    table = DeltaRsTable(target)
    assert table.version() == 0
    assert table.transaction_version("job-1") == 7
    assert table.to_pyarrow_table().num_rows == 10
    assert len(_data_files(Path(target))) == len(table.file_uris())  # the retry's are gone
    df.write.format("deltalog").option("txnAppId", "job-1").option("txnVersion", 8).mode(
        "append"
    ).save(target)
    assert DeltaRsTable(target).to_pyarrow_table().num_rows == 20


def test_overwrite_replaces_the_rows(delta_spark: Any, tmp_path: Path) -> None:
    target = str(tmp_path / "t")
    delta_spark.range(5).write.format("deltalog").mode("append").save(target)
    delta_spark.range(100, 103).write.format("deltalog").mode("overwrite").save(target)
    table = DeltaRsTable(target)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [100, 101, 102]


def test_a_failing_task_leaves_no_commit_and_no_files(delta_spark: Any, tmp_path: Path) -> None:
    from pyspark.sql.functions import udf

    target = tmp_path / "t"
    delta_spark.range(4).write.format("deltalog").mode("append").save(str(target))
    before = _data_files(target)

    @udf("long")
    def explode_on_seven(n):  # type: ignore[no-untyped-def]  (typed by the decorator)
        if n == 7:
            raise RuntimeError("injected task failure")
        return n

    failing = delta_spark.range(0, 10, 1, 2).select(explode_on_seven("id").alias("id"))
    with pytest.raises(Exception, match="injected task failure"):
        failing.write.format("deltalog").mode("append").save(str(target))
    assert DeltaRsTable(str(target)).version() == 0
    assert _data_files(target) == before


ESCAPED_VALUES = ["A B", "x%y", "ü", "a/b", "../../x", "..", "k=v", None]


def test_partition_values_that_need_escaping_land_in_the_table_and_read_back(
    delta_spark: Any, tmp_path: Path
) -> None:
    """Partition values with a space, `%`, `ü`, `/`, `..` and `=`: every file lands in one
    partition folder inside the table's folder (escaped as Spark does), the log names it
    percent-encoded once, and delta-rs and the `deltalog` source read the rows back (failed
    before: paths were encoded twice and a `/` or `..` nested or escaped the folders)."""
    target = tmp_path / "nested" / "t"
    rows = [(i, value) for i, value in enumerate(ESCAPED_VALUES)]
    frame = delta_spark.createDataFrame(rows, "id long, `Company Name` string")
    frame.write.format("deltalog").option("partitionBy", "Company Name").mode("append").save(
        str(target)
    )
    expected = sorted_rows(
        pa.table({"id": [r[0] for r in rows], "Company Name": ESCAPED_VALUES}).to_pandas()
    )
    written = DeltaRsTable(str(target))
    assert sorted_rows(written.to_pyarrow_table().to_pandas()[["id", "Company Name"]]) == expected
    assert spark_rows(delta_spark.read.format("deltalog").load(str(target))) == expected
    assert all(target in p.parents for p in tmp_path.rglob("*.parquet"))
    files = _data_files(target)
    assert len(files) == len(ESCAPED_VALUES)
    for path in files:
        folder = path.relative_to(target).parent
        assert len(folder.parts) == 1 and folder.name.startswith("Company Name=")
    assert {unquote(a["path"]) for a in _adds(target)} == {
        str(p.relative_to(target)) for p in files
    }
    assert "Company Name=a%2Fb" in {p.parent.name for p in files}
    assert "Company Name=__HIVE_DEFAULT_PARTITION__" in {p.parent.name for p in files}
