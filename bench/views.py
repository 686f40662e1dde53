"""Benchmark: materializing a per-row shared view and a compatible copy on Spark, full and
incremental.

    .venv/bin/python bench/views.py [--files 100] [--rows 20000] [--runs 3] [--only view|copy]

Writes a 100-file Delta table with delta-rs (one file per commit), then on one local Spark
session (`local[2]`: the machine is shared), for each of

- view: a per-row view (a filter and a column mask bound to `current_recipient`)
  materialized for one tuple by `refresh_view` (pipeline.views: the query over the
  `deltalog` source, one output file per source file written by the `deltalog` writer,
  one delta-rs commit), against the plain Spark job doing the same filter and mask on the
  same files, `spark.read.parquet(files).where("country = 'fr'").select(...).write.parquet(out)`;
- copy: a compatible copy (`refresh_copy`, pipeline.refresh), against
  `spark.read.parquet(files).where("id >= 0").write.parquet(out)` (a filter every row
  passes, as a copy keeps every row);

full: a full recompute after a one-file source commit (so that it commits), goal at most
1.5x the plain job; incremental: after a commit that rewrites 1 of the 100 files (a
delta-rs delete of one row), an incremental refresh, goal at most 10 % of the full one.
Runs are interleaved (plain job, full, incremental); best and median are printed, with
load averages before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
from deltalake import DeltaTable as DeltaRsTable
from deltalake import write_deltalake

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pipeline.copies import CopySpec  # noqa: E402
from pipeline.refresh import refresh_copy  # noqa: E402
from pipeline.views import SourceTable, ViewSpec, refresh_view  # noqa: E402
from sharing.views.materializations import view_tuple  # noqa: E402
from sharing.views.sql import SourceRef, parse_view  # noqa: E402

VIEW = """SELECT id, country,
       CASE WHEN current_recipient('tier') = 'gold' THEN amount END AS amount, note
FROM delta.`{source}`
WHERE country = current_recipient('country')"""
PROPERTIES = {"country": "fr", "tier": "silver"}
T = TypeVar("T")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def make_table(root: Path, files: int, rows: int) -> None:
    for i in range(files):
        ids = pa.array(range(i * rows, (i + 1) * rows), pa.int64())
        write_deltalake(
            str(root),
            pa.table(
                {
                    "id": ids,
                    "amount": pa.compute.multiply(ids, 3),
                    "country": pa.array(["fr", "de", "it", "es"] * (rows // 4), pa.string()),
                    "note": pa.array([f"order {j}" for j in range(rows)], pa.string()),
                }
            ),
            mode="append",
        )


def session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def timed(action: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def report(label: str, base: list[float], full: list[float], incremental: list[float]) -> None:
    best_base, best_full, best_incremental = min(base), min(full), min(incremental)
    print(f"{label}:")
    print(f"  plain Spark job: best {best_base:.2f}s, median {statistics.median(base):.2f}s")
    print(
        f"  full refresh: best {best_full:.2f}s, median {statistics.median(full):.2f}s -> "
        f"{best_full / best_base:.2f}x the plain Spark job (goal <= 1.5x)"
    )
    print(
        f"  incremental refresh (1 file changed): best {best_incremental:.2f}s, median "
        f"{statistics.median(incremental):.2f}s -> "
        f"{100 * best_incremental / best_full:.1f} % of the full refresh (goal <= 10 %)"
    )


class Source:
    """The source table, and one-row deletes that each rewrite one of its files."""

    def __init__(self, root: Path, rows: int) -> None:
        self.root, self.rows, self.next_file = root, rows, 0

    def touch_one_file(self) -> None:
        victim = self.next_file * self.rows + 7  # a row of that file: the delete rewrites it
        self.next_file += 1
        DeltaRsTable(str(self.root)).delete(f"id = {victim}")


def bench_view(spark: Any, work: Path, source: Source, files: list[str], runs: int) -> None:
    sql = VIEW.format(source=source.root)
    values = view_tuple(parse_view(sql), PROPERTIES)
    spec = ViewSpec(
        "bench.views.masked",
        sql,
        (SourceTable(SourceRef(uri=str(source.root)), str(source.root)),),
        (values,),
        str(work / "views"),
    )
    refresh_view(spark, spec, values)  # warm: the first job pays Python worker start-up

    def baseline() -> None:
        out = work / "baseline-view"
        shutil.rmtree(out, ignore_errors=True)
        (
            spark.read.parquet(*files)
            .where("country = 'fr'")
            .selectExpr(
                "id", "country", "CASE WHEN 'silver' = 'gold' THEN amount END AS amount", "note"
            )
            .write.parquet(str(out))
        )

    baseline()
    base, full, incremental = [], [], []
    for _ in range(runs):
        base.append(timed(baseline)[0])
        source.touch_one_file()  # so that the full recompute has a new version to commit
        seconds, result = timed(lambda: refresh_view(spark, spec, values, full=True))
        assert result.mode == "full" and result.version is not None, result
        full.append(seconds)
        source.touch_one_file()
        seconds, result = timed(lambda: refresh_view(spark, spec, values))
        assert result.mode == "incremental" and result.files_written == 1, result
        incremental.append(seconds)
    report("per-row view (filter + mask) materialization", base, full, incremental)


def bench_copy(spark: Any, work: Path, source: Source, files: list[str], runs: int) -> None:
    spec = CopySpec("bench.views.copy", str(source.root), str(work / "copy"))
    refresh_copy(spark, spec)  # warm

    def baseline() -> None:
        out = work / "baseline-copy"
        shutil.rmtree(out, ignore_errors=True)
        spark.read.parquet(*files).where("id >= 0").write.parquet(str(out))

    baseline()
    base, full, incremental = [], [], []
    for _ in range(runs):
        base.append(timed(baseline)[0])
        source.touch_one_file()
        full.append(timed(lambda: refresh_copy(spark, spec, full=True))[0])
        source.touch_one_file()
        seconds, copied = timed(lambda: refresh_copy(spark, spec))
        assert copied.files_written == 1, copied
        incremental.append(seconds)
    report("compatible copy", base, full, incremental)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["view", "copy"])
    args = parser.parse_args()
    cases = 2 if args.only is None else 1
    if 2 * args.runs * cases > args.files:
        parser.error("each run rewrites two source files: --files must be >= 4 x --runs")
    work = Path(tempfile.mkdtemp(prefix="lakeshare-bench-views-"))
    try:
        print(f"load average before: {load()}")
        root = work / "source"
        make_table(root, args.files, args.rows)
        files = list(DeltaRsTable(str(root)).file_uris())
        print(f"source: {len(files)} files, {args.files * args.rows} rows")
        spark = session()
        source = Source(root, args.rows)
        if args.only in (None, "view"):
            bench_view(spark, work, source, files, args.runs)
            print(f"load average: {load()}")
        if args.only in (None, "copy"):
            # the plain job reads the files as they were at the start (rewritten ones are
            # still on disk): the same bytes as the refreshes read, give or take one file
            bench_copy(spark, work, source, files, args.runs)
        print(f"load average after: {load()}")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
