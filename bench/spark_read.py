"""Spark reading a shared 2,000-file table through the `deltasharing` source, next to
`spark.read.parquet` on the same files, in the same run.

    .venv/bin/python bench/spark_read.py [--files 2000] [--rows 2000] [--runs 3]

Generates a table of `--files` parquet files (`--rows` rows each: a long, a double, a
string, a date) with a Delta log naming them, serves it with the real server
(`lakeshare serve`, its own process, files served through its signed URLs), and times a
full read in local Spark (`local[2]`) both ways: every row materialised through the
`noop` sink, so neither reader can answer from parquet footers. A third reader isolates
PySpark's Python Data Source API: a minimal source reading the same local files with
pyarrow (no HTTP, no Delta Sharing), the floor any Python source pays for handing Arrow
batches to the JVM.

After a warm-up of each (Python workers, file system cache, the server's snapshot), the
readers take turns `--runs` times; it prints the median and best wall time, the median
CPU seconds of Spark (the driver's JVM and its Python workers) and of the server (which
serves the files through its signed URLs on the same cores: with a cloud table the
object store would), the ratios to `spark.read.parquet` and the floor ratio
(deltasharing / python floor, goal at most 1.3x) with the CPU ratios to the floor (Spark and
server together, and Spark alone), each the median of the runs' ratios, and the load
average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.support.processes import cpu_seconds, free_port, stop, wait_http  # noqa: E402

TOKEN = "bench-bearer-token-0123456789"
SECRET = "bench-signing-secret-0123456789abcdef"
SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "double", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}},
        {"name": "day", "type": "date", "nullable": True, "metadata": {}},
    ],
}


def write_table(root: Path, files: int, rows: int) -> int:
    """`files` parquet files and one commit adding them; returns the total bytes."""
    (root / "_delta_log").mkdir(parents=True)
    now = int(time.time() * 1000)
    actions: list[dict] = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(SCHEMA),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": now,
            }
        },
    ]
    total = 0
    for i in range(files):
        start = i * rows
        ids = pa.array(range(start, start + rows), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "value": pa.compute.multiply(ids.cast(pa.float64()), 0.5),
                "name": pa.array([f"name-{j % 1000}" for j in range(start, start + rows)]),
                "day": pa.array([j % 3650 for j in range(rows)], pa.int32()).cast(pa.date32()),
            }
        )
        name = f"part-{i:05d}-{uuid.uuid4()}.snappy.parquet"
        pq.write_table(table, root / name)
        size = (root / name).stat().st_size
        total += size
        stats = {
            "numRecords": rows,
            "minValues": {"id": start},
            "maxValues": {"id": start + rows - 1},
        }
        actions.append(
            {
                "add": {
                    "path": name,
                    "partitionValues": {},
                    "size": size,
                    "modificationTime": now,
                    "dataChange": True,
                    "stats": json.dumps(stats),
                }
            }
        )
    commit = root / "_delta_log" / f"{0:020d}.json"
    commit.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return total


def start_server(workdir: Path, table: Path) -> tuple[Path, object]:
    import subprocess

    config = {
        "version": 1,
        "authorization": {"bearerToken": TOKEN},
        "signingSecret": SECRET,
        "logLevel": "WARNING",
        "shares": [
            {
                "name": "bench",
                "schemas": [{"name": "s", "tables": [{"name": "t", "location": str(table)}]}],
            }
        ],
    }
    config_path = workdir / "config.yaml"
    config_path.write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    lakeshare = Path(sys.executable).with_name("lakeshare")
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 (lives as long as the process)
    process = subprocess.Popen(
        [
            str(lakeshare),
            "serve",
            "--config",
            str(config_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/delta-sharing"
    wait_http(f"{base}/shares", process)
    profile = workdir / "bench.share"
    profile.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": base, "bearerToken": TOKEN})
    )
    return profile, process


def local_files_source(files: list[str]) -> type:
    """A minimal Python data source over local parquet files (the API's floor)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Files(InputPartition):
        def __init__(self, paths: list[str]) -> None:
            self.paths = paths

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            count = max(1, len(files) // 32)
            return [Files(files[i::count]) for i in range(count)]

        def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
            import pyarrow.parquet as pq

            for path in partition.paths:  # type: ignore[attr-defined]
                yield from pq.read_table(path).to_batches()

    class LocalFiles(DataSource):
        @classmethod
        def name(cls) -> str:
            return "benchlocalfiles"

        def schema(self) -> str:
            return "id long, value double, name string, day date"

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return Reader()

    return LocalFiles


@dataclass
class Timing:
    """Per run of one reader: wall seconds, CPU seconds of Spark (the driver's JVM and
    the Python workers) and of the server, both measured on their processes."""

    wall: list[float] = field(default_factory=list)
    spark_cpu: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)


def timed_turns(runs: int, actions: list[Callable[[], None]], server_pid: int) -> list[Timing]:
    """Each action `runs` times, the actions taking turns so that a busy machine slows
    them alike, after one untimed warm-up each (Python workers, JIT, file system cache,
    the server's snapshot)."""
    for action in actions:
        action()
    timings = [Timing() for _ in actions]
    for _ in range(runs):
        for timing, action in zip(timings, actions, strict=True):
            server0 = cpu_seconds(server_pid)
            total0 = cpu_seconds(os.getpid())
            start = time.perf_counter()
            action()
            timing.wall.append(time.perf_counter() - start)
            server = cpu_seconds(server_pid) - server0
            timing.server_cpu.append(server)
            timing.spark_cpu.append(cpu_seconds(os.getpid()) - total0 - server)
    return timings


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=2000, help="rows per file")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    print(f"load average before: {load_average()}")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from client.spark import register

    workdir = Path(tempfile.mkdtemp(prefix="lakeshare-spark-bench-"))
    table = workdir / "table"
    t0 = time.perf_counter()
    size = write_table(table, args.files, args.rows)
    rows = args.files * args.rows
    print(
        f"generated {args.files:,} files, {rows:,} rows, {size / 1e6:.1f} MB "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    profile, server = start_server(workdir, table)
    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        paths = [str(p) for p in sorted(table.glob("*.parquet"))]
        spark.dataSource.register(local_files_source(paths))
        shared = spark.read.format("deltasharing").load(f"{profile}#bench.s.t")
        direct = spark.read.parquet(*paths)
        floor = spark.read.format("benchlocalfiles").load()
        assert shared.count() == direct.count() == floor.count() == rows

        def read_all(df):  # type: ignore[no-untyped-def]
            return lambda: df.write.format("noop").mode("overwrite").save()

        ours, baseline, python_floor = timed_turns(
            args.runs,
            [read_all(shared), read_all(direct), read_all(floor)],
            server.pid,  # type: ignore[attr-defined]
        )
    finally:
        spark.stop()
        stop(server)  # type: ignore[arg-type]
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average after: {load_average()}")
    print(
        f"\n{'reader':<36} {'median s':>9} {'best s':>7} {'rows/s':>11} "
        f"{'Spark CPU s':>12} {'server CPU s':>13}"
    )
    for name, timing in (
        ("deltasharing (via Lakeshare)", ours),
        ("spark.read.parquet (baseline)", baseline),
        ("python source, local files (floor)", python_floor),
    ):
        wall = statistics.median(timing.wall)
        print(
            f"{name:<36} {wall:>9.2f} {min(timing.wall):>7.2f} {rows / wall:>11,.0f} "
            f"{statistics.median(timing.spark_cpu):>12.2f} "
            f"{statistics.median(timing.server_cpu):>13.2f}"
        )
    print()
    for name, timing in (("deltasharing", ours), ("python floor", python_floor)):
        ratios = [w / b for w, b in zip(timing.wall, baseline.wall, strict=True)]
        print(
            f"ratio {name} / parquet: {statistics.median(ratios):.2f}x "
            f"(runs: {', '.join(f'{r:.2f}' for r in ratios)})"
        )
    floor_ratios = [w / f for w, f in zip(ours.wall, python_floor.wall, strict=True)]
    print(
        f"ratio deltasharing / python floor: {statistics.median(floor_ratios):.2f}x "
        f"(runs: {', '.join(f'{r:.2f}' for r in floor_ratios)}; goal <= 1.3x)"
    )
    ours_cpu = [s + v for s, v in zip(ours.spark_cpu, ours.server_cpu, strict=True)]
    cpu_ratios = [c / f for c, f in zip(ours_cpu, python_floor.spark_cpu, strict=True)]
    print(
        f"CPU ratio deltasharing (Spark + server) / python floor: "
        f"{statistics.median(cpu_ratios):.2f}x "
        f"(runs: {', '.join(f'{r:.2f}' for r in cpu_ratios)})"
    )
    spark_ratios = [o / f for o, f in zip(ours.spark_cpu, python_floor.spark_cpu, strict=True)]
    print(
        f"CPU ratio deltasharing (Spark only, without the server) / python floor: "
        f"{statistics.median(spark_ratios):.2f}x "
        f"(runs: {', '.join(f'{r:.2f}' for r in spark_ratios)})"
    )


if __name__ == "__main__":
    main()
