"""Benchmark: materializing a compatible copy on Spark, full and incremental.

    .venv/bin/python bench/views.py [--files 100] [--rows 20000] [--runs 3]

Writes a 100-file Delta table with delta-rs (one file per commit), then on one local Spark
session (`local[2]`: the machine is shared):

- full: `refresh_copy(..., full=True)` (pipeline.refresh: the copy job reading every file
  through deltalog and writing one parquet file per source file, plus the delta-rs
  commit), against the plain Spark job on the same files and session,
  `spark.read.parquet(files).where("id >= 0").write.parquet(out)` (a filter every row
  passes, as a copy keeps every row). Goal: at most 1.5x.
- incremental: after a commit that rewrites 1 of the 100 files (a delta-rs delete of one
  row), an incremental refresh against the full refresh. Goal: at most 10 %.

Runs are interleaved (baseline, full, then one incremental after a fresh one-file commit);
best and median are printed, with load averages before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable as DeltaRsTable
from deltalake import write_deltalake

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pipeline.copies import CopySpec  # noqa: E402
from pipeline.refresh import refresh_copy  # noqa: E402


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


def session() -> object:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def timed(action: object) -> float:
    started = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lakeshare-bench-views-"))
    try:
        print(f"load average before: {load()}")
        source = work / "source"
        make_table(source, args.files, args.rows)
        files = list(DeltaRsTable(str(source)).file_uris())
        print(f"source: {len(files)} files, {args.files * args.rows} rows")
        spark = session()
        spec = CopySpec("bench.views.copy", str(source), str(work / "copy"))
        refresh_copy(spark, spec)  # warm: the first job pays Python worker start-up

        def baseline() -> None:
            out = work / "baseline"
            shutil.rmtree(out, ignore_errors=True)
            spark.read.parquet(*files).where("id >= 0").write.parquet(str(out))  # type: ignore[attr-defined]

        baseline()
        base_times, full_times, incremental_times = [], [], []
        for run in range(args.runs):
            base_times.append(timed(baseline))
            full_times.append(timed(lambda: refresh_copy(spark, spec, full=True)))
            victim = run * args.rows + 7  # a row of file `run`: the delete rewrites that file
            DeltaRsTable(str(source)).delete(f"id = {victim}")
            result = None

            def incremental() -> None:
                nonlocal result
                result = refresh_copy(spark, spec)

            incremental_times.append(timed(incremental))
            assert result is not None and result.files_written == 1, result
        best_base, best_full, best_incremental = (
            min(base_times),
            min(full_times),
            min(incremental_times),
        )
        print(
            f"spark.read.parquet().where().write.parquet(): best {best_base:.2f}s, "
            f"median {statistics.median(base_times):.2f}s"
        )
        print(
            f"full copy refresh: best {best_full:.2f}s, median "
            f"{statistics.median(full_times):.2f}s -> {best_full / best_base:.2f}x the plain "
            "Spark job (goal <= 1.5x)"
        )
        print(
            f"incremental refresh (1 of {args.files} files changed): best "
            f"{best_incremental:.2f}s, median {statistics.median(incremental_times):.2f}s -> "
            f"{100 * best_incremental / best_full:.1f} % of the full refresh (goal <= 10 %)"
        )
        print(f"load average after: {load()}")
        spark.stop()  # type: ignore[attr-defined]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
