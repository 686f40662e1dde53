"""Structured Streaming through the `deltasharing` source against a running Lakeshare.

Tables are written with `deltalake` into a temporary folder the server shares, and grow
while the streams run. Streams write to a parquet sink with a checkpoint (an exactly-once
sink), so every check is on the rows that reached it: each exactly once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as DeltaLakeTable
from deltalake import write_deltalake

from deltalog import DeltaTable
from deltalog.change_data import read_changes_data
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

TABLE_NAMES = ["grows", "restarts", "splits", "changes", "feed"]
CDF_ON = {"delta.enableChangeDataFeed": "true"}
POLL = "0.5s"
SCHEMA = "id long, part long, value string"


def _rows(start: int, stop: int) -> pa.Table:
    ids = list(range(start, stop))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array([i % 3 for i in ids], pa.int64()),
            "value": pa.array([f"v{i}" for i in ids], pa.string()),
        }
    )


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stream_tables")
    made = {}
    for name in TABLE_NAMES:
        path = root / name
        write_deltalake(str(path), _rows(0, 6), partition_by=["part"], configuration=CDF_ON)
        made[name] = path
    return made


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, tables: dict[str, Path]
) -> Iterator[RunningServer]:
    entries = [
        {"name": name, "location": str(path), "historyShared": True}
        for name, path in tables.items()
    ]
    config = make_config(
        {"shares": [{"name": "s", "schemas": [{"name": "live", "tables": entries}]}]}
    )
    with run_server(config, tmp_path_factory.mktemp("spark_stream")) as running:
        yield running


def _stream(spark: Any, server: RunningServer, name: str, **options: Any) -> Any:
    reader = spark.readStream.format("deltasharing").option(
        "queryTableVersionIntervalSeconds", POLL
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(server.table_url("s", "live", name))


def _start(
    df: Any, out: Path, *, available_now: bool = False, interval: str = "500 milliseconds"
) -> Any:
    writer = (
        df.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=interval)
    )
    return writer.start()


def _sink_ids(spark: Any, out: Path) -> list[int]:
    if not (out / "data" / "_spark_metadata").exists():
        return []
    rows = spark.read.schema(SCHEMA).parquet(str(out / "data")).select("id").collect()
    return sorted(r.id for r in rows)


def _wait(condition: Callable[[], bool], query: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if query.exception() is not None:
            raise AssertionError(f"the stream failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError("the stream did not catch up in time")
        time.sleep(0.5)


def _data_batches(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_stream_reads_snapshot_then_appends_exactly_once(
    spark: Any, server: RunningServer, tables: dict[str, Path], tmp_path: Path
) -> None:
    query = _start(_stream(spark, server, "grows"), tmp_path)
    try:
        _wait(lambda: _sink_ids(spark, tmp_path) == list(range(6)), query)
        write_deltalake(str(tables["grows"]), _rows(6, 10), mode="append")
        write_deltalake(str(tables["grows"]), _rows(10, 13), mode="append")
        _wait(lambda: len(_sink_ids(spark, tmp_path)) >= 13, query)
        time.sleep(2)  # a late duplicate would show up here
    finally:
        query.stop()
    assert _sink_ids(spark, tmp_path) == list(range(13))


def test_restart_from_checkpoint_neither_loses_nor_repeats(
    spark: Any, server: RunningServer, tables: dict[str, Path], tmp_path: Path
) -> None:
    # First run: one file per micro-batch, stopped after the first batch. The first batch
    # runs at once, the next only a minute later: with a short interval a loaded machine
    # could finish all six before the sink is looked at and the query stopped.
    first = _start(
        _stream(spark, server, "restarts", maxFilesPerTrigger=1), tmp_path, interval="60 seconds"
    )
    try:
        _wait(lambda: len(_sink_ids(spark, tmp_path)) > 0, first)
    finally:
        first.stop()
    assert 0 < len(_sink_ids(spark, tmp_path)) < 6
    write_deltalake(str(tables["restarts"]), _rows(6, 9), mode="append")
    # Second run from the checkpoint: the rest of the snapshot and the new commit.
    second = _start(
        _stream(spark, server, "restarts", maxFilesPerTrigger=2), tmp_path, available_now=True
    )
    second.awaitTermination(120)
    assert second.exception() is None
    assert _sink_ids(spark, tmp_path) == list(range(9))
    # A third run finds nothing new.
    third = _start(_stream(spark, server, "restarts"), tmp_path, available_now=True)
    third.awaitTermination(120)
    assert _sink_ids(spark, tmp_path) == list(range(9))


def test_max_files_per_trigger_splits_a_commit(
    spark: Any, server: RunningServer, tables: dict[str, Path], tmp_path: Path
) -> None:
    files = len(DeltaLakeTable(str(tables["splits"])).file_uris())
    assert files == 3  # one per partition
    query = _start(
        _stream(spark, server, "splits", maxFilesPerTrigger=1), tmp_path, available_now=True
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert _data_batches(query) == [2, 2, 2]  # one file (two rows) per micro-batch
    assert _sink_ids(spark, tmp_path) == list(range(6))


def _run(spark: Any, df: Any, out: Path) -> tuple[Any, list[int]]:
    """Run an AvailableNow stream to its end; a failure is left in `query.exception()`."""
    from pyspark.errors import StreamingQueryException

    query = _start(df, out, available_now=True)
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(120)
    return query, _sink_ids(spark, out)


def test_change_commits_need_an_option(
    spark: Any, server: RunningServer, tables: dict[str, Path], tmp_path: Path
) -> None:
    path = str(tables["changes"])
    start = DeltaLakeTable(path).version() + 1
    write_deltalake(path, _rows(6, 8), mode="append")  # start: 6, 7
    DeltaLakeTable(path).delete("id = 1")  # start + 1: rewrites the file of ids 1 and 4
    DeltaLakeTable(path).delete("part = 2")  # start + 2: removes the files of part 2 only

    def stream(**options: Any) -> Any:
        return _stream(spark, server, "changes", startingVersion=start, **options)

    failed, _ = _run(spark, stream(), tmp_path / "plain")
    assert "Detected a data update in the source table at version" in str(failed.exception())
    assert "skipChangeCommits" in str(failed.exception())

    failed, _ = _run(spark, stream(ignoreDeletes="true"), tmp_path / "deletes")
    assert "Detected a data update" in str(failed.exception())

    query, ids = _run(spark, stream(skipChangeCommits="true"), tmp_path / "skip")
    assert query.exception() is None
    assert ids == [6, 7]  # the rewrite and the delete contribute nothing

    query, ids = _run(spark, stream(ignoreChanges="true"), tmp_path / "changes")
    assert query.exception() is None
    assert ids == [4, 6, 7]  # the rewritten file's remaining row (4) comes again

    only_delete = _stream(spark, server, "changes", startingVersion=start + 2)
    failed, _ = _run(spark, only_delete, tmp_path / "only_delete")
    assert "Detected deleted data from streaming source at version" in str(failed.exception())
    ignored = _stream(spark, server, "changes", startingVersion=start + 2, ignoreDeletes="true")
    query, ids = _run(spark, ignored, tmp_path / "ignored")
    assert query.exception() is None and ids == []


def test_change_feed_stream(
    spark: Any, server: RunningServer, tables: dict[str, Path], tmp_path: Path
) -> None:
    path = str(tables["feed"])
    write_deltalake(path, _rows(6, 8), mode="append")
    DeltaLakeTable(path).delete("id = 2")
    DeltaLakeTable(path).update(updates={"value": "'changed'"}, predicate="id = 3")
    last = DeltaLakeTable(path).version()
    df = _stream(spark, server, "feed", readChangeFeed="true", startingVersion=0)
    query = _start(df, tmp_path, available_now=True)
    query.awaitTermination(120)
    assert query.exception() is None
    got = spark.read.parquet(str(tmp_path / "data")).toArrow()
    expected = read_changes_data(DeltaTable(path), 0, last)
    columns = ["id", "part", "value", "_change_type", "_commit_version"]
    assert sorted(got.select(columns).to_pylist(), key=repr) == sorted(
        expected.select(columns).to_pylist(), key=repr
    )
