"""The Spark job of a copy refresh: each task reads some source files (deletion vectors
applied, logical names, through deltalog) and writes one output file per source file.
Work on a few small files (`IN_PROCESS_BYTES`) runs in the refresher itself.

The job is a Python data source whose "rows" are the files its tasks wrote: a source the
driver reads with `collect()`, so it runs the same on local Spark, a cluster, or Spark
Connect (which has no RDD API). The plan travels in the source's options as JSON.
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from deltalog.file_groups import DEFAULT_OPEN_COST, pack_by_size
from deltalog.file_reads import DataFileRef, ReadLayout, read_file_ref
from deltalog.storage import resolve
from pipeline.copies import (
    CopySpec,
    OutputFile,
    RefreshPlan,
    copy_filesystem,
    output_key,
    output_name,
    partition_values_by_logical_name,
)
from pipeline.partition_paths import partition_folders
from pipeline.session import default_parallelism
from pipeline.stats import file_stats

NAME = "lakeshare_copy_job"
FAIL_OPTION = "failOnSourcePath"
"""Failure injection for tests: a task reaching this source path raises (after writing
the files before it)."""
SCHEMA = "path string, size long, partitionValues string, stats string, mtime long, rows long"
_COLUMNS = ("path", "size", "partitionValues", "stats", "mtime", "rows")
DEFAULT_GROUP_BYTES = 64 << 20
IN_PROCESS_BYTES = 8 << 20
"""Work on source files totalling at most this runs in the refresher's process."""


def run_copy_job(
    spark: Any,
    spec: CopySpec,
    plan: RefreshPlan,
    run: str,
    *,
    max_group_bytes: int | None = None,
    fail_on: str | None = None,
    in_process_bytes: int = IN_PROCESS_BYTES,
) -> list[OutputFile]:
    """Compute the output of `plan.todo`; the files written (not yet committed)."""
    if not plan.todo:
        return []
    spark.dataSource.register(CopyJobSource)
    document = {
        "spec": asdict(spec),
        "layout": asdict(ReadLayout.of(plan.source)),
        "files": [asdict(ref) for ref in plan.todo],
        "run": run,
        "maxGroupBytes": max_group_bytes or DEFAULT_GROUP_BYTES,
        "minGroups": default_parallelism(spark),
    }
    options = {"plan": json.dumps(document)}
    if fail_on is not None:
        options[FAIL_OPTION] = fail_on
    if sum(ref.size for ref in plan.todo) <= in_process_bytes:
        # Small work (typically one changed file) costs less than scheduling a Spark job
        # (about 0.3 s for a Python data source): the refresher runs the task itself.
        local = CopyJobReader(options)
        rows: list[Any] = [
            dict(zip(_COLUMNS, values, strict=True)) for values in local.read(CopyTask(local.files))
        ]
    else:
        reader = spark.read.format(NAME)
        for key, value in options.items():
            reader = reader.option(key, value)
        rows = reader.schema(SCHEMA).load().collect()
    return [
        OutputFile(
            path=r["path"],
            size=int(r["size"]),
            partition_values=json.loads(r["partitionValues"]),
            stats=r["stats"],
            modification_time=int(r["mtime"]),
            rows=int(r["rows"]),
        )
        for r in rows
    ]


class CopyTask(InputPartition):
    def __init__(self, files: list[DataFileRef]) -> None:
        super().__init__(len(files))
        self.files = files


class CopyJobSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return CopyJobReader(self.options)


class CopyJobReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        document = json.loads(options["plan"])
        self.spec = CopySpec(**document["spec"])
        self.layout = ReadLayout(
            schema_string=document["layout"]["schema_string"],
            partition_columns=tuple(document["layout"]["partition_columns"]),
            mode=document["layout"]["mode"],
        )
        self.files = [DataFileRef(**f) for f in document["files"]]
        self.run = document["run"]
        self.max_group_bytes = int(document["maxGroupBytes"])
        self.min_groups = int(document["minGroups"])
        self.fail_on = options.get(FAIL_OPTION)

    def partitions(self) -> list[InputPartition]:
        groups = pack_by_size(
            [f.size for f in self.files],
            max_group_bytes=self.max_group_bytes,
            open_cost=DEFAULT_OPEN_COST,
            min_groups=self.min_groups,
        )
        return [CopyTask([self.files[i] for i in g]) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, CopyTask)
        storage, source_root = resolve(self.spec.source, self.spec.source_options or None)
        fs, root = copy_filesystem(self.spec)
        partition_names = set(self.layout.partition_columns)
        for ref in partition.files:
            if self.fail_on is not None and ref.path == self.fail_on:
                raise RuntimeError(f"injected failure at source file {ref.path}")
            rows = read_file_ref(storage, source_root, self.layout, ref)
            data = rows.drop_columns([c for c in rows.column_names if c in partition_names])
            values = partition_values_by_logical_name(self.layout, ref)
            relative = posixpath.join(
                partition_folders(values.items()), output_name(output_key(ref), self.run)
            )
            full = posixpath.join(root, relative)
            fs.create_dir(posixpath.dirname(full), recursive=True)
            pq.write_table(data, full, filesystem=fs, compression="snappy")
            size = fs.get_file_info(full).size
            yield (
                relative,  # as on storage: delta-rs percent-encodes it in the log
                int(size),
                json.dumps(values),
                file_stats(data),
                int(time.time() * 1000),
                data.num_rows,
            )
